"""Delta simulation: a neighbouring strategy's task graph patched from the last one's.

FlexFlow (Jia et al., SysML 2019) re-simulates only what an MCMC move can change. moplace's
move changes the device of a few co-location groups or the priorities of a few ops; the task
graph of the new strategy then differs from the old one in a few entries only:

- the ``dev`` and ``dur`` of the moved ops' tasks,
- ``e_srcdev`` of their out-edges and ``e_local`` of every edge into or out of them,
- the ``prio`` of the re-prioritised ops' tasks,

while the tasks, edges, sizes and collectives stay as they are. `patched_task_graph` copies the
old arrays and rewrites those entries; the result is equal, array for array, to what
`build_task_graph` makes from the new strategy (the tests check this on random moves), so the
simulation of the new strategy is exactly the full one. It applies when both strategies have
the same splits, neither recomputes a group, and every moved op is unsplit and reads nothing
from a collective; otherwise
(a split changed, a split group moved: its parts and all-reduce ring change) the task graph is
built in full. The simulator patches only strategies with splits: without any,
`build_task_graph` takes the graph's own arrays and is cheaper than a patch.

A searcher asks for it by naming, with a proposal, the strategy it derived the proposal from
(its parent, `moplace.optimize.searcher.Proposal`); the evaluator keeps the task graphs of the
strategies it simulated last (`moplace.simulator.incremental`) and patches from the parent's
when it still holds it. Nothing of this is stored on a strategy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import segment_ranks
from ..core.strategy import Strategy
from .taskgraph import TaskGraph


@dataclass(frozen=True, eq=False)
class SimulationBase:
    """A strategy with the task graph it was simulated on (for one graph and cost model)."""

    strategy: Strategy
    task_graph: TaskGraph
    graph: object
    costs: object


def patched_task_graph(base: SimulationBase, strategy: Strategy, graph, costs) -> TaskGraph | None:
    """The task graph of ``strategy`` from ``base``'s by patching (see module docstring), or
    None when the two strategies differ in more than a patch can express."""
    old, tg = base.strategy, base.task_graph
    if base.graph is not graph or base.costs is not costs or not _same_splits(old, strategy):
        return None
    moved = np.flatnonzero(strategy.placement != old.placement)
    reprio = np.flatnonzero(strategy.priority != old.priority)
    ptr = tg.op_ptr
    if moved.size and np.any(ptr[moved + 1] - ptr[moved] != 1):  # a split op moved
        return None
    tasks = ptr[moved]  # one task each
    in_edges = tg.in_edge[_ranges(tg.in_ptr, tasks)]
    if np.any(tg.e_src[in_edges] >= tg.n_compute):  # reads a collective's reduced gradient
        return None
    dev, dur, e_srcdev, e_local = tg.dev, tg.dur, tg.e_srcdev, tg.e_local
    if moved.size:
        dev, dur, e_srcdev, e_local = dev.copy(), dur.copy(), e_srcdev.copy(), e_local.copy()
        dev[tasks] = strategy.placement[moved]
        dur[tasks] = costs.compute[moved, dev[tasks]]
        out_edges = _ranges(tg.out_ptr, tasks)
        e_srcdev[out_edges] = dev[tg.e_src[out_edges]]
        touched = np.concatenate([out_edges, in_edges])
        dst = tg.e_dst[touched]
        dst_dev = np.where(dst < tg.n_compute, dev[np.minimum(dst, tg.n_compute - 1)], -1)
        e_local[touched] = (dst >= tg.n_compute) | (e_srcdev[touched] == dst_dev) \
            | (tg.e_bytes[touched] <= 0)
    prio = tg.prio
    if reprio.size:
        prio = prio.copy()
        counts = ptr[reprio + 1] - ptr[reprio]
        prio[_ranges(ptr, reprio)] = np.repeat(strategy.priority[reprio], counts)
    return TaskGraph(
        n_compute=tg.n_compute, task_op=tg.task_op, dev=dev, dur=dur, prio=prio,
        out_bytes=tg.out_bytes, param_bytes=tg.param_bytes, e_src=tg.e_src, e_dst=tg.e_dst,
        e_bytes=tg.e_bytes, e_srcdev=e_srcdev, e_local=e_local, out_ptr=tg.out_ptr,
        in_ptr=tg.in_ptr, in_edge=tg.in_edge, coll_ptr=tg.coll_ptr, coll_dev=tg.coll_dev,
        coll_res_ptr=tg.coll_res_ptr, coll_res=tg.coll_res, coll_dur=tg.coll_dur,
        coll_bytes=tg.coll_bytes, op_ptr=tg.op_ptr, coll_kind=tg.coll_kind, ip_src=tg.ip_src,
        coll_mask=tg.coll_mask, scratch=tg.scratch, gate=tg.gate, opens=tg.opens)


def _same_splits(a: Strategy, b: Strategy) -> bool:
    # a recomputed op's clone moves with it: such task graphs are filled from their skeleton
    return (a.options == b.options and not a.recompute and not b.recompute and not a.pipelined
            and (a.splits is b.splits or dict(a.splits) == dict(b.splits)))


def _ranges(ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``ptr[r]:ptr[r + 1]`` for every r in ``rows``, concatenated."""
    counts = ptr[rows + 1] - ptr[rows]
    return np.repeat(ptr[rows], counts) + segment_ranks(counts)
