"""The pipeline schedules: which micro-batch's task a device runs next.

With micro-batches (`moplace.simulator.microbatch`), each device runs its copies in the order
of its schedule, as a sequence of *slots*, each the forward or the backward of one
micro-batch; a task's priority is its slot (earlier first), then the strategy's priority of
its op (so searchers still order ops within a micro-batch). Ops run once come before every
slot (they are ready only when their inputs are: variables early, updates after the last
micro-batch). Recomputed clones belong to their micro-batch's backward.

- **GPipe**: F0 .. F(m-1), then B0 .. B(m-1).
- **1F1B** (PipeDream-Flush): the devices running forward copies are **stages**, ranked by
  where their forward tasks sit in the data flow (the mean depth, `OpGraph.depth`, of the
  ops they run, weighted by time); devices that run parts of one forward op are one stage
  (a replicated or tensor-parallel stage, whatever else its first device runs) and share
  their rank;
  stage k of S (k = 0 first) keeps L = S - k micro-batches in flight: F0 .. F(L-1), then
  B0, F(L), B1, F(L+1), ..., then the last backwards. Priorities alone cannot hold the limit
  (a ready task always runs), so 1F1B adds waits (`one_f_one_b_waits`): each forward copy of
  micro-batch i + L with no forward input from its own device and micro-batch waits for the
  last backward task of micro-batch i on that device (last in the topological order). The
  wait is an edge that carries no bytes; like every edge it holds its source's output until
  its reader has run.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..core.graph import ROLES
from .microbatch import FORWARD, ONCE, MicrobatchPlan

_BACKWARD_ROLE = ROLES.index("backward")


def stage_limits(dev, dur, task_op, phase, depth, n_dev: int) -> np.ndarray:
    """Per device, the micro-batches 1F1B keeps in flight on it (0: it runs no forward copy):
    the devices running forward tasks ranked by the mean ``depth`` (per op of the graph,
    `OpGraph.depth`) of their forward tasks' ops, weighted by the tasks' durations ``dur``."""
    return _stage_limits(dev, dur, task_op, phase, depth, n_dev)


def task_priorities(priority: np.ndarray, task_op: np.ndarray, phase: np.ndarray,
                    mb: np.ndarray, m: int, dev: np.ndarray, limit: np.ndarray | None,
                    n_tasks: int) -> np.ndarray:
    """Per task its priority: for a compute task (the first ``phase.size``), its slot in the
    schedule (see the module docstring; ``limit``, per device the micro-batches in flight on
    it under 1F1B; None for GPipe), then its op's priority (``priority``, per op of the
    graph); 0 for the collectives after them."""
    rank = np.unique(priority, return_inverse=True)[1].astype(np.float64)
    n = rank.max() + 1 if rank.size else 1.0
    gpipe = limit is None
    limit = np.zeros(1, np.int64) if gpipe else limit
    return _slot_priorities(rank, n, task_op, phase, mb, m, dev, limit, gpipe, n_tasks)


class ScheduleShape:
    """What ordering a micro-batched task graph needs that its placement does not change: per
    compute task its plan op (``vop``), the graph's op it runs (``orig``), ``phase``,
    micro-batch (``mb``) and place in the plan's topological order (``position``); the edges
    between forward tasks of one micro-batch (``fwd_src``, ``fwd_dst``); the backward tasks
    (``back``) and their places (``back_position``); per op of the graph, whether a
    recomputed run waits for it (``waited``: zero-bubble never defers it)."""

    def __init__(self, tg, plan: MicrobatchPlan):
        nc = tg.n_compute
        self.m = plan.m
        self.vop = np.repeat(np.arange(tg.op_ptr.size - 1), np.diff(tg.op_ptr))
        self.phase, self.mb = plan.phase[self.vop], plan.mb[self.vop]
        fwd = self.phase == FORWARD
        inner = np.flatnonzero((tg.e_src < nc) & (tg.e_dst < nc))
        s, d = tg.e_src[inner], tg.e_dst[inner]
        keep = fwd[s] & fwd[d] & (self.mb[s] == self.mb[d])
        self.fwd_src, self.fwd_dst = s[keep], d[keep]
        self.back = np.flatnonzero(plan.arrays.role[self.vop] == _BACKWARD_ROLE)
        position = np.empty(plan.arrays.topo.size, np.int64)
        position[plan.arrays.topo] = np.arange(position.size)
        self.position = position[self.vop]
        self.back_position = self.position[self.back]
        self.orig = plan.orig[self.vop]
        pa = plan.arrays  # the graph's ops a recomputed run waits for (clones come last)
        self.waited = np.zeros(plan.n_ops, bool)
        self.waited[plan.orig[pa.src[pa.dst >= pa.topo.size - plan.n_clone_ops]]] = True


def one_f_one_b_waits(dev, limit, shape: ScheduleShape, n_dev: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The (source, destination) compute tasks of 1F1B's waits (see the module docstring);
    ``dev``: each compute task's device; ``limit``: per device, from `stage_limits`."""
    nc, m, mb = dev.size, shape.m, shape.mb
    # entries: forward tasks without a forward input from their device and micro-batch
    fed = shape.fwd_dst[dev[shape.fwd_src] == dev[shape.fwd_dst]]
    entry = (shape.phase == FORWARD) & (np.bincount(fed, minlength=nc) == 0)
    # the last backward task of each (device, micro-batch), in topological order
    back = shape.back
    sink = last_of(dev[back] * m + mb[back], shape.back_position, back, n_dev * m)
    t = np.flatnonzero(entry)
    waits_for = mb[t] - limit[dev[t]]
    ok = (waits_for >= 0) & (limit[dev[t]] > 0)
    t, waits_for = t[ok], waits_for[ok]
    src = sink[dev[t] * m + waits_for]
    ok = src >= 0
    return src[ok], t[ok]


def with_waits(edges: dict, dev: np.ndarray, src: np.ndarray, dst: np.ndarray,
               n_tasks: int) -> dict:
    """``edges`` (the task edges as `moplace.simulator.taskgraph` makes them, sorted by source)
    with the waits ``src`` -> ``dst`` added: no bytes, on one device, after their source's
    other edges; the CSR indexes made again."""
    if src.size == 0:
        return edges
    order = np.argsort(src, kind="stable")
    src, dst = src[order].astype(np.int64), dst[order].astype(np.int64)
    merged = _merge_waits(edges["e_src"], edges["e_dst"], edges["e_bytes"], edges["e_srcdev"],
                          edges["e_local"], edges["moved_bytes"], src, dst, dev[src], n_tasks)
    return dict(zip(("e_src", "e_dst", "e_bytes", "e_srcdev", "e_local", "moved_bytes",
                     "out_ptr", "in_ptr", "in_edge"), merged))


@njit(cache=True)
def last_of(key, position, task, n_keys):
    """Per key (0..n_keys-1), the task of the greatest position among those of that key
    (-1: none)."""
    best = np.full(n_keys, -1, np.int64)
    where = np.full(n_keys, -1, np.int64)
    for i in range(key.shape[0]):
        if position[i] > best[key[i]]:
            best[key[i]], where[key[i]] = position[i], task[i]
    return where


@njit(cache=True, nogil=True)
def _stage_limits(dev, dur, task_op, phase, depth, n_dev):
    """What `stage_limits` returns, compiled: devices that run parts of one forward op are
    one stage (a data- or tensor-parallel stage's devices, whichever other ops its first
    device also runs), ranked by the mean depth of all their forward tasks."""
    parent = np.arange(n_dev)
    first = np.full(task_op.max() + 1 if task_op.size else 1, -1, np.int64)
    for t in range(dev.shape[0]):
        if phase[t] == FORWARD:
            op = task_op[t]
            if first[op] < 0:
                first[op] = dev[t]
            else:
                a, b = _root(parent, dev[t]), _root(parent, first[op])
                if a != b:
                    parent[max(a, b)] = min(a, b)
    wsum = np.zeros(n_dev)
    key = np.zeros(n_dev)
    for t in range(dev.shape[0]):
        if phase[t] == FORWARD:
            w = dur[t] + 1e-12
            g = _root(parent, dev[t])
            wsum[g] += w
            key[g] += w * depth[task_op[t]]
    limit = np.zeros(n_dev, np.int64)
    staged = np.flatnonzero(wsum > 0)
    if staged.size == 0:
        return limit
    k = key[staged] / wsum[staged]
    order = np.argsort(k, kind="mergesort")
    rank = np.empty(staged.size, np.int64)
    r = 0
    for i in range(order.size):
        if i > 0 and k[order[i]] != k[order[i - 1]]:
            r += 1
        rank[order[i]] = r
    for d in range(n_dev):
        g = _root(parent, d)
        for i in range(staged.size):
            if staged[i] == g:
                limit[d] = r + 1 - rank[i]
    return limit


@njit(cache=True, nogil=True)
def _root(parent, d):
    while parent[d] != d:
        parent[d] = parent[parent[d]]
        d = parent[d]
    return d


@njit(cache=True, nogil=True)
def _slot_priorities(rank, n_rank, task_op, phase, mb, m, dev, limit, gpipe, n_tasks):
    """Per task its priority (`task_priorities`; 0 for the
    collectives after the ``phase.size`` compute tasks): ``rank`` of each op's priority among
    ``n_rank`` values; ``limit`` per device (`_stage_limits`), unused under GPipe."""
    prio = np.zeros(n_tasks)
    for t in range(phase.shape[0]):
        if phase[t] == ONCE:
            slot = -1
        elif gpipe:
            slot = mb[t] if phase[t] == FORWARD else m + mb[t]
        else:
            L = max(limit[dev[t]], 1)
            if phase[t] == FORWARD:
                slot = mb[t] if mb[t] < L else L + 2 * (mb[t] - L) + 1
            else:
                slot = L + 2 * mb[t]
        prio[t] = (2 * m + 1 - slot) * n_rank + rank[task_op[t]]
    return prio


@njit(cache=True, nogil=True)
def _merge_waits(e_src, e_dst, e_bytes, e_srcdev, e_local, moved, w_src, w_dst, w_dev,
                 n_tasks):
    """The edges (sorted by source) and the waits (sorted by source: no bytes, local) merged,
    each wait after its source's edges, with the CSR indexes: ``out_ptr`` and each task's
    in-edges in edge order (``in_ptr``, ``in_edge``, a counting sort)."""
    n, k = e_src.shape[0], w_src.shape[0]
    src, dst = np.empty(n + k, np.int64), np.empty(n + k, np.int64)
    nbytes, srcdev = np.empty(n + k), np.empty(n + k, np.int64)
    local, mv = np.empty(n + k, np.bool_), np.empty(n + k)
    out_ptr = np.zeros(n_tasks + 1, np.int64)
    in_ptr = np.zeros(n_tasks + 1, np.int64)
    i = j = 0
    for q in range(n + k):
        if j < k and (i == n or w_src[j] < e_src[i]):
            src[q], dst[q], nbytes[q], srcdev[q] = w_src[j], w_dst[j], 0.0, w_dev[j]
            local[q], mv[q] = True, 0.0
            j += 1
        else:
            src[q], dst[q], nbytes[q], srcdev[q] = e_src[i], e_dst[i], e_bytes[i], e_srcdev[i]
            local[q], mv[q] = e_local[i], moved[i]
            i += 1
        out_ptr[src[q] + 1] += 1
        in_ptr[dst[q] + 1] += 1
    for t in range(n_tasks):
        out_ptr[t + 1] += out_ptr[t]
        in_ptr[t + 1] += in_ptr[t]
    fill = in_ptr[:-1].copy()
    in_edge = np.empty(n + k, np.int64)
    for q in range(n + k):
        in_edge[fill[dst[q]]] = q
        fill[dst[q]] += 1
    return src, dst, nbytes, srcdev, local, mv, out_ptr, in_ptr, in_edge
