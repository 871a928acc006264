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
  inputs waits (an edge with no bytes) for every non-forward op that carries the gradient
  (depends on the loss), feeds the run's backward readers and comes before all of them in the
  graph's topological order; in a PyTorch trace, a backward reader that only makes forward
  values again (no gradient: the decomposed SiLU or norm backward) counts where the gradient
  first needs it (other graphs: every non-forward op counts where it is). A run whose backward
  readers have no such op (the last layers, whose gradient starts from the loss) is recomputed
  as soon as its inputs are there, which saves nothing, as checkpointing the last segment does.

The waiting edge holds its source's output until the clone has run; when the two are on one
device the backward reader holds it longer anyway.

Clones come after the graph's ops (op ``n + k`` is a clone of ``orig[n + k]``), so the task
graph built on the plan's arrays has the recomputed tasks after all others' compute tasks.
"""

from __future__ import annotations

import weakref

import numpy as np
from numba import njit

from ..arrays import csr_ptr, segment_ranks
from ..core.graph import ROLES, CompiledGraph, OpGraph, lexicographic_topo_order
from ..core.derived import structure_of
from ..core.recompute import can_run_again
from ..errors import StrategyError
from .plancache import PlanCache

_FORWARD = ROLES.index("forward")
#: plans kept per graph (the oldest go first)
MAX_PLANS = 64

_PLANS = PlanCache(MAX_PLANS)
_TIMING: "weakref.WeakKeyDictionary[OpGraph, tuple]" = weakref.WeakKeyDictionary()


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
        clone_of, src, dst, nbytes = _clone_edges(n, a, forward, chosen & can_run_again(graph),
                                                  position, *_gradient_timing(graph))
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
            src=src, dst=dst, edge_bytes=nbytes, out_ptr=csr_ptr(src, nv),
            out_edge=np.arange(src.size, dtype=np.int64), in_ptr=csr_ptr(dst, nv),
            in_edge=np.argsort(dst, kind="stable").astype(np.int64),
            output_bytes=a.output_bytes[o], param_bytes=np.where(clone, 0.0, a.param_bytes[o]),
            grad_bytes=np.where(clone, 0.0, a.grad_bytes[o]), role=a.role[o],
            split_mask=a.split_mask[o], group=a.group[o], n_groups=a.n_groups, topo=topo,
            inplace=a.inplace[o], partial_sums=a.partial_sums[o])
        self.nbytes = src.nbytes * 3 + o.nbytes * 8

    @property
    def n_clones(self) -> int:
        return self.orig.size - self.n_ops


def recompute_plan(graph: OpGraph, heads: tuple[int, ...]) -> RecomputePlan:
    """The plan of recomputing ``heads``' groups of ``graph`` (validated), kept per graph (the
    last `MAX_PLANS`) since a search meets the same sets again."""
    key = tuple(heads)
    return _PLANS.get(graph, key, lambda: RecomputePlan(graph, key))


@njit(cache=True)
def _needed_and_runs(n, src, dst, out_ptr, out_edge, forward, candidate, topo):
    """Per op: does it get a clone (a candidate whose output a non-forward op or another
    clone reads), and its run (the smallest op of the clones joined to it by edges; -1)."""
    needed = np.zeros(n, np.bool_)
    for i in range(n - 1, -1, -1):  # reverse topological: readers are decided first
        f = topo[i]
        if candidate[f]:
            for q in range(out_ptr[f], out_ptr[f + 1]):
                c = dst[out_edge[q]]
                if not forward[c] or needed[c]:
                    needed[f] = True
                    break
    parent = np.arange(n)  # union-find over the edges between needed ops
    for e in range(src.shape[0]):
        if needed[src[e]] and needed[dst[e]]:
            a, b = src[e], dst[e]
            while parent[a] != a:
                a = parent[a]
            while parent[b] != b:
                b = parent[b]
            if a != b:
                parent[max(a, b)] = min(a, b)
    run = np.full(n, -1, np.int64)
    for f in range(n):
        if needed[f]:
            r = f
            while parent[r] != r:
                r = parent[r]
            run[f] = r
    return needed, run


def _gradient_timing(graph: OpGraph) -> tuple[np.ndarray, np.ndarray]:
    """Per op of ``graph``: does it carry the gradient (`_carries_gradient`), and the
    topological position where the gradient needs it (`_needed_at`); computed once per graph.
    PyTorch's joint graphs decompose backward ops into some that only remake forward values;
    in other graphs every non-forward op carries the gradient where it is, the rule their
    figures were measured with."""
    graph = structure_of(graph)  # the same for a graph derived from it
    timing = _TIMING.get(graph)
    if timing is None:
        a, n = graph.arrays, len(graph.ops)
        forward = a.role == _FORWARD
        position = np.empty(n, np.int64)
        position[a.topo] = np.arange(n)
        if graph.metadata.get("format") == "pytorch":
            carries = _carries_gradient(n, a, forward)
            timing = carries, _needed_at(n, a, forward, carries, position)
        else:
            timing = ~forward, position
        _TIMING[graph] = timing
    return timing


def _carries_gradient(n, a, forward) -> np.ndarray:
    """Per op: a non-forward op that depends on the loss: one that reads the last forward op
    in topological order (the loss), or a non-forward op that does. A backward op that reads
    only forward values (PyTorch's decomposed backward of SiLU or of a norm makes the
    sigmoid or the statistics again from the saved input) can run as soon as the forward is
    done: it must not decide when a run's recomputation starts."""
    out = np.zeros(n, bool)
    if n == 0:
        return out
    fwd_order = a.topo[forward[a.topo]]
    loss = int(fwd_order[-1]) if fwd_order.size else -1
    for v in a.topo.tolist():
        if forward[v]:
            continue
        ins = a.src[a.in_edge[a.in_ptr[v]:a.in_ptr[v + 1]]]
        out[v] = bool(np.any(ins == loss) or np.any(out[ins]))
    return out


def _needed_at(n, a, forward, carries, position) -> np.ndarray:
    """Per non-forward op, the topological position where the gradient needs it: its own
    when it carries the gradient, else the earliest of its non-forward readers' (n: never)."""
    when = np.where(carries, position, n)
    for v in a.topo[::-1].tolist():
        if forward[v] or carries[v]:
            continue
        readers = a.dst[a.out_edge[a.out_ptr[v]:a.out_ptr[v + 1]]]
        readers = readers[~forward[readers]]
        if readers.size:
            when[v] = min(int(when[readers].min()), n)
    return when


def _clone_edges(n, a, forward, candidate, position, carries, when):
    """Per op its clone's index (-1: none), and the edges of the graph with the clones, in no
    particular order (see the module docstring); ``carries`` and ``when``: `_gradient_timing`."""
    src, dst, nbytes = a.src, a.dst, a.edge_bytes
    needed, run = _needed_and_runs(n, src, dst, a.out_ptr, a.out_edge, forward, candidate,
                                   a.topo)
    clone_of = np.full(n, -1, np.int64)
    clone_of[needed] = n + np.arange(int(needed.sum()))
    back = needed[src] & ~forward[dst]  # read backward: from the clone now
    edges = [(np.where(back, clone_of[src], src), dst, nbytes)]
    into = np.flatnonzero(needed[dst])  # the clones' inputs
    s = src[into]
    edges.append((np.where(needed[s], clone_of[s], s), clone_of[dst[into]], nbytes[into]))
    # each run's first backward reader, in topological order; a reader that only makes
    # forward values again counts where the gradient first needs it
    first = np.full(n, n, np.int64)
    np.minimum.at(first, run[src[back]], when[dst[back]])
    # the ops a run waits for: non-forward feeders of its backward readers before the first
    pairs = np.unique(np.stack([run[src[back]], dst[back]], 1), axis=0)
    r, v = pairs[:, 0], pairs[:, 1]
    count = a.in_ptr[v + 1] - a.in_ptr[v]
    k = np.repeat(a.in_ptr[v], count) + segment_ranks(count)
    r, p = np.repeat(r, count), src[a.in_edge[k]]
    keep = ~forward[p] & carries[p] & (position[p] < first[r])
    waits = np.unique(np.stack([r[keep], p[keep]], 1), axis=0)  # sorted by run
    # the roots (clones without cloned inputs) of every run wait for all of its ops
    inner = needed[src] & needed[dst]
    roots = np.flatnonzero(needed & (np.bincount(dst[inner], minlength=n) == 0))
    lo = np.searchsorted(waits[:, 0], run[roots], side="left")
    hi = np.searchsorted(waits[:, 0], run[roots], side="right")
    count = hi - lo
    k = np.repeat(lo, count) + segment_ranks(count)
    edges.append((waits[k, 1], clone_of[np.repeat(roots, count)], np.zeros(k.size)))
    e_src, e_dst, e_b = (np.concatenate(x) for x in zip(*edges))
    # a wait on an op the clone reads anyway is that read: keep the edge with its bytes
    order = np.lexsort((-e_b, e_dst, e_src))
    e_src, e_dst, e_b = e_src[order], e_dst[order], e_b[order]
    first_of = np.ones(e_src.size, bool)
    first_of[1:] = (e_src[1:] != e_src[:-1]) | (e_dst[1:] != e_dst[:-1])
    return clone_of, e_src[first_of], e_dst[first_of], e_b[first_of]
