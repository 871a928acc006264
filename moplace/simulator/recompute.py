"""Recomputation as the simulator runs it: a graph with the recomputed forward ops cloned.

A strategy that recomputes co-location groups (`Strategy.recompute`) is simulated on the graph
`recompute_plan` makes, in which

- every forward op of a recomputed group that can run again (has inputs, reads no state, draws
  no random numbers: `can_run_again`) and whose output a backward op needs, directly or
  through another such op, has a **clone**: the same op run again, on the same
  device and split, with no parameters of its own (the weights are the original's);
- every edge from such an op to a non-forward op leaves from its clone instead, so the
  original's output is freed once its forward readers are done;
- a clone reads its inputs from the clones of its recomputed inputs and from the original
  outputs of the others: a **run** of recomputed ops (connected by their forward edges) keeps
  only the inputs it has from outside resident, as ``torch.utils.checkpoint`` keeps a
  segment's input;
- the clones of a run start when the backward reaches it: each clone without recomputed
  inputs waits (an edge with no bytes) for every non-forward op that feeds the run's backward
  readers and comes before all of them in the graph's topological order. A run whose backward
  readers have no such op (the last layers, whose gradient starts from the loss) is recomputed
  as soon as its inputs are there, which saves nothing, as checkpointing the last segment does.

The waiting edge holds its source's output until the clone has run; when the two are on one
device the backward reader holds it longer anyway.

Clones come after the graph's ops (op ``n + k`` is a clone of ``orig[n + k]``), so the task
graph built on the plan's arrays has the recomputed tasks after all others' compute tasks.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import numpy as np
from numba import njit

from ..core.graph import ROLES, CompiledGraph, OpGraph, lexicographic_topo_order
from ..core.recompute import can_run_again
from ..errors import StrategyError

_FORWARD = ROLES.index("forward")
#: plans kept per graph (the oldest go first)
MAX_PLANS = 64

_CACHE: "weakref.WeakKeyDictionary[OpGraph, OrderedDict]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class RecomputePlan:
    """The graph a strategy recomputing ``heads``' groups is simulated on: ``arrays`` (a
    `CompiledGraph` of the ops and their clones), ``orig`` (per op of it, the graph's op it
    runs) and ``n_ops`` (the graph's ops; the clones are ops ``n_ops`` onwards)."""

    def __init__(self, graph: OpGraph, heads: tuple[int, ...]):
        a = graph.arrays
        n = len(graph.ops)
        chosen = np.zeros(n, bool)
        chosen[np.isin(graph.group_head, np.asarray(heads, np.int64))] = True
        forward = a.role == _FORWARD
        position = np.empty(n, np.int64)
        position[a.topo] = np.arange(n)
        clone_of, src, dst, nbytes = _clone_edges(
            n, a.src, a.dst, a.edge_bytes, a.out_ptr, a.out_edge, a.in_ptr, a.in_edge,
            forward, chosen & can_run_again(graph), a.topo, position)
        self.n_ops = n
        self.orig = np.concatenate([np.arange(n), np.flatnonzero(clone_of >= 0)])
        nv = self.orig.size
        order = np.lexsort((dst, src))
        src, dst, nbytes = src[order], dst[order], nbytes[order]
        topo = lexicographic_topo_order(nv, src, dst)
        if topo.size < nv:  # not for any graph where backward ops never feed forward ones
            raise StrategyError(f"recomputing the groups of ops {list(heads)} of graph "
                                f"{graph.name!r} would make a cycle")
        o = self.orig
        clone = np.arange(nv) >= n
        self.arrays = CompiledGraph(
            src=src, dst=dst, edge_bytes=nbytes, out_ptr=_ptr(src, nv),
            out_edge=np.arange(src.size, dtype=np.int64), in_ptr=_ptr(dst, nv),
            in_edge=np.argsort(dst, kind="stable").astype(np.int64),
            output_bytes=a.output_bytes[o], param_bytes=np.where(clone, 0.0, a.param_bytes[o]),
            grad_bytes=np.where(clone, 0.0, a.grad_bytes[o]), role=a.role[o],
            split_mask=a.split_mask[o], group=a.group[o], n_groups=a.n_groups, topo=topo,
            inplace=a.inplace[o])
        self.nbytes = src.nbytes * 3 + o.nbytes * 8

    @property
    def n_clones(self) -> int:
        return self.orig.size - self.n_ops


def recompute_plan(graph: OpGraph, heads: tuple[int, ...]) -> RecomputePlan:
    """The plan of recomputing ``heads``' groups of ``graph`` (validated), kept per graph (the
    last `MAX_PLANS`) since a search meets the same sets again."""
    key = tuple(heads)
    with _LOCK:
        kept = _CACHE.get(graph)
        plan = None if kept is None else kept.get(key)
        if plan is not None:
            kept.move_to_end(key)
            return plan
    plan = RecomputePlan(graph, key)
    with _LOCK:
        kept = _CACHE.setdefault(graph, OrderedDict())
        kept[key] = plan
        while len(kept) > MAX_PLANS:
            kept.popitem(last=False)
    return plan


def _ptr(keys: np.ndarray, n: int) -> np.ndarray:
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr


@njit(cache=True)
def _find(parent, i):
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


@njit(cache=True)
def _clone_edges(n, src, dst, nbytes, out_ptr, out_edge, in_ptr, in_edge, forward, candidate,
                 topo, position):
    """Per op its clone's index (-1: none), and the edges of the graph with the clones, in no
    particular order (see the module docstring)."""
    needed = np.zeros(n, np.bool_)
    for i in range(n - 1, -1, -1):  # reverse topological: readers are decided first
        f = topo[i]
        if not candidate[f]:
            continue
        for q in range(out_ptr[f], out_ptr[f + 1]):
            c = dst[out_edge[q]]
            if not forward[c] or needed[c]:
                needed[f] = True
                break
    clone_of = np.full(n, -1, np.int64)
    k = n
    for f in range(n):
        if needed[f]:
            clone_of[f] = k
            k += 1
    parent = np.arange(n)  # runs: needed ops joined by their edges
    for e in range(src.shape[0]):
        if needed[src[e]] and needed[dst[e]]:
            a, b = _find(parent, src[e]), _find(parent, dst[e])
            if a != b:
                parent[max(a, b)] = min(a, b)
    run = np.full(n, -1, np.int64)
    for f in range(n):
        if needed[f]:
            run[f] = _find(parent, f)
    # each run's first backward reader, in topological order
    first = np.full(n, n, np.int64)
    for e in range(src.shape[0]):
        u, v = src[e], dst[e]
        if needed[u] and not forward[v]:
            first[run[u]] = min(first[run[u]], position[v])
    m = src.shape[0]
    cap = m + 2 * m + 1
    o_src = np.empty(cap, np.int64)
    o_dst = np.empty(cap, np.int64)
    o_b = np.empty(cap)
    j = 0
    for e in range(m):  # the graph's edges, backward readers moved to the clones
        u, v = src[e], dst[e]
        o_src[j] = clone_of[u] if needed[u] and not forward[v] else u
        o_dst[j], o_b[j] = v, nbytes[e]
        j += 1
    for f in range(n):  # the clones' inputs
        if not needed[f]:
            continue
        for q in range(in_ptr[f], in_ptr[f + 1]):
            e = in_edge[q]
            p = src[e]
            o_src[j] = clone_of[p] if needed[p] else p
            o_dst[j], o_b[j] = clone_of[f], nbytes[e]
            j += 1
    # triggers: every run's roots wait for the non-forward feeders of its backward readers
    # that come before the first of them
    trig_src = np.empty(m, np.int64)
    trig_run = np.empty(m, np.int64)
    t = 0
    for e in range(m):
        u, v = src[e], dst[e]
        if not needed[u] or forward[v]:
            continue
        r = run[u]
        for q in range(in_ptr[v], in_ptr[v + 1]):
            p = src[in_edge[q]]
            if not forward[p] and position[p] < first[r]:
                trig_src[t], trig_run[t] = p, r
                t += 1
    roots = np.zeros(n, np.bool_)
    for f in range(n):
        if needed[f]:
            roots[f] = True
            for q in range(in_ptr[f], in_ptr[f + 1]):
                if needed[src[in_edge[q]]]:
                    roots[f] = False
                    break
    if t > 0:
        key = trig_run[:t] * n + trig_src[:t]
        key = np.unique(key)
        for f in range(n):
            if not roots[f]:
                continue
            lo = np.searchsorted(key, run[f] * n)
            hi = np.searchsorted(key, run[f] * n + n)
            for w in range(lo, hi):
                p = key[w] - run[f] * n
                dup = False
                for q in range(in_ptr[f], in_ptr[f + 1]):
                    if src[in_edge[q]] == p:
                        dup = True
                        break
                if dup:
                    continue
                if j == o_src.shape[0]:
                    o_src = np.concatenate((o_src, np.empty(cap, np.int64)))
                    o_dst = np.concatenate((o_dst, np.empty(cap, np.int64)))
                    o_b = np.concatenate((o_b, np.empty(cap)))
                o_src[j], o_dst[j], o_b[j] = p, clone_of[f], 0.0
                j += 1
    return clone_of, o_src[:j], o_dst[:j], o_b[:j]
