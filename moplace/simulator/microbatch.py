"""Micro-batches as the simulator runs them: the graph with every forward and backward op once
per micro-batch.

A strategy with ``micro_batches`` m > 1 is simulated on the graph `microbatch_plan` makes
(on top of the graph with recomputed clones, when the strategy recomputes groups):

- every forward and backward op (clones included) has m **copies**, copy i running on
  micro-batch i, where the op is placed (its device, or its parts' devices when it is also
  split); each takes ``t / (n m) + split_overhead_s`` for an op split n ways (n = 1 unsplit),
  or the measured time of one of ``n m`` parts where the graph has one, and outputs 1/m of
  the op's activations. Ops of the other roles (updates, and ``other``: variables, inputs, an
  op the graph marks as running once on the whole batch) run **once**;
- an edge between two copied ops joins the copies of one micro-batch and carries 1/m of its
  bytes; an edge from an op run once reaches every copy whole (the weights, or the batch each
  micro-batch reads its slice of); an edge from a copied op to an op run once leaves every
  copy with 1/m of its bytes (it waits for all of them);
- **gradient accumulation**: an op whose output an update reads keeps its weight gradient
  (``grad_bytes``; or, without one, the largest edge to an update) in every copy's output, and
  copy i + 1 waits for copy i (an edge with no bytes, holding copy i's output until copy i + 1
  has added its gradient to it, as ``param.grad +=`` does); only the last copy's gradient goes
  to the update, or to its bucket's all-reduce (``partial`` marks the others). The
  accumulated gradient is resident from the first micro-batch's backward op to its reader;
  copy i's activation gradient stays with it until copy i + 1 has run;
- the weights (``param_bytes``) are the first copy's.

Copies of micro-batch 0 keep the ops' indices (op ``k < n_ops`` of the plan is op ``k`` of the
graph, as without micro-batches); then the copies of micro-batches 1..m-1 of the graph's
copied ops, micro-batch by micro-batch; then the clones of every micro-batch, so that the
recomputed tasks stay last.
"""

from __future__ import annotations

import numpy as np

from ..arrays import csr_ptr
from ..core.graph import ROLES, CompiledGraph, OpGraph, lexicographic_topo_order
from ..errors import StrategyError
from .plancache import PlanCache
from .recompute import recompute_plan

_FORWARD, _BACKWARD, _UPDATE = (ROLES.index(r) for r in ("forward", "backward", "update"))
#: what phase of the step a copy belongs to, for the schedules (`moplace.simulator.schedule`)
FORWARD, BACKWARD, ONCE = 0, 1, 2
#: plans kept per graph (the oldest go first)
MAX_PLANS = 16

_PLANS = PlanCache(MAX_PLANS)


class MicrobatchPlan:
    """The graph a strategy with ``m`` micro-batches (recomputing ``heads``' groups) runs on:
    ``arrays`` (a `CompiledGraph`), and per op of it ``orig`` (the graph's op it runs),
    ``mb`` (its micro-batch; 0 for ops run once), ``in_time`` (m for copies, 1 for ops run
    once: the batch's share it runs is 1/``in_time``), ``phase`` (`FORWARD`, `BACKWARD` for
    backward ops and clones, `ONCE`) and ``partial`` (a copy whose weight gradient the next
    copy accumulates); ``n_ops`` (the graph's ops) and ``n_clone_ops`` (the clones' copies,
    the plan's last ops)."""

    def __init__(self, graph: OpGraph, heads: tuple[int, ...], m: int):
        n = len(graph.ops)
        if heads:
            rp = recompute_plan(graph, heads)
            a, base_orig = rp.arrays, rp.orig
        else:
            a, base_orig = graph.arrays, np.arange(n)
        nb = base_orig.size
        copied = (a.role == _FORWARD) | (a.role == _BACKWARD)
        idx = _copy_index(n, nb, m, copied)
        nv = n + (m - 1) * int(copied[:n].sum()) + m * (nb - n)
        vbase = np.empty(nv, np.int64)
        vmb = np.zeros(nv, np.int64)
        for i in range(m):
            vbase[idx[:, i]] = np.arange(nb)
            vmb[idx[copied, i]] = i
        src, dst, nbytes, acc_ops, g = _edges(a, idx, copied, m)
        order = np.lexsort((dst, src))
        src, dst, nbytes = src[order], dst[order], nbytes[order]
        topo = lexicographic_topo_order(nv, src, dst)
        if topo.size < nv:  # not for any graph where backward ops never feed forward ones
            raise StrategyError(f"{m} micro-batches of graph {graph.name!r} would make a cycle")
        b = vbase
        out = a.output_bytes[b]
        accumulating = np.zeros(nb, bool)
        accumulating[acc_ops] = True
        per_copy = np.where(accumulating[b], (out - g[b]) / m + g[b], out / m)
        out_v = np.where(copied[b], per_copy, out)
        self.n_ops, self.m = n, m
        self.orig = base_orig[b]
        self.mb = vmb
        self.in_time = np.where(copied[b], m, 1).astype(np.int64)
        clone = b >= n
        self.phase = np.where(~copied[b], ONCE, np.where((a.role[b] == _BACKWARD) | clone,
                                                         BACKWARD, FORWARD)).astype(np.int64)
        self.partial = copied[b] & (a.grad_bytes[b] > 0) & (vmb < m - 1)
        self.n_clone_ops = int(clone.sum())
        self.arrays = CompiledGraph(
            src=src, dst=dst, edge_bytes=nbytes, out_ptr=csr_ptr(src, nv),
            out_edge=np.arange(src.size, dtype=np.int64), in_ptr=csr_ptr(dst, nv),
            in_edge=np.argsort(dst, kind="stable").astype(np.int64), output_bytes=out_v,
            param_bytes=np.where(vmb == 0, a.param_bytes[b], 0.0), grad_bytes=a.grad_bytes[b],
            role=a.role[b], split_mask=a.split_mask[b], group=a.group[b], n_groups=a.n_groups,
            topo=topo, inplace=a.inplace[b], partial_sums=a.partial_sums[b])


def microbatch_plan(graph: OpGraph, heads: tuple[int, ...], m: int) -> MicrobatchPlan:
    """The plan of ``m`` micro-batches of ``graph`` recomputing ``heads``' groups, kept per
    graph (the last `MAX_PLANS`)."""
    key = (tuple(heads), int(m))
    return _PLANS.get(graph, key, lambda: MicrobatchPlan(graph, *key))


def _copy_index(n: int, nb: int, m: int, copied: np.ndarray) -> np.ndarray:
    """``idx[b, i]``: the plan's op that runs op ``b`` of the base graph on micro-batch ``i``
    (the same op for every ``i`` when ``b`` runs once); see the module docstring's order."""
    idx = np.repeat(np.arange(nb)[:, None], m, axis=1)
    rb = np.flatnonzero(copied[:n])
    cb = np.arange(n, nb)  # clones: forward ops, always copied
    for i in range(1, m):
        idx[rb, i] = n + (i - 1) * rb.size + np.arange(rb.size)
    first_clone = n + (m - 1) * rb.size
    for i in range(m):
        idx[cb, i] = first_clone + i * cb.size + np.arange(cb.size)
    return idx


def _edges(a, idx, copied, m):
    """The plan's edges (unsorted), the base ops whose gradients accumulate, and per base op
    the bytes of gradient it keeps."""
    u, w, nbytes = a.src, a.dst, a.edge_bytes
    cu, cw = copied[u], copied[w]
    acc = cu & ~cw & (a.role[w] == _UPDATE)
    each = np.arange(m)
    parts = []

    def per_mb(sel, src_mb, dst_mb, scale):
        e = np.flatnonzero(sel)
        first = np.zeros(m, np.int64)
        parts.append((idx[u[e]][:, each if src_mb else first].ravel(),
                      idx[w[e]][:, each if dst_mb else first].ravel(),
                      np.repeat(nbytes[e] * scale, m)))

    per_mb(cu & cw, True, True, 1.0 / m)           # between copies: micro-batch by micro-batch
    per_mb(~cu & cw, False, True, 1.0)             # from an op run once: whole, to every copy
    per_mb(cu & ~cw & ~acc, True, False, 1.0 / m)  # to an op run once: from every copy
    once = ~cu & ~cw
    e = np.flatnonzero(once | acc)  # run once to run once; a gradient from the last copy
    parts.append((idx[u[e], np.where(acc[e], m - 1, 0)], idx[w[e], 0], nbytes[e]))
    acc_ops = np.unique(u[acc])
    if m > 1 and acc_ops.size:  # copy i + 1 adds its gradient to copy i's
        parts.append((idx[acc_ops, :-1].ravel(), idx[acc_ops, 1:].ravel(),
                      np.zeros(acc_ops.size * (m - 1))))
    to_update = np.zeros(copied.size)
    np.maximum.at(to_update, u[acc], nbytes[acc])
    g = np.minimum(np.where(a.grad_bytes > 0, a.grad_bytes, to_update), a.output_bytes)
    src, dst, b = (np.concatenate(x) for x in zip(*parts))
    return src.astype(np.int64), dst.astype(np.int64), b.astype(np.float64), acc_ops, g
