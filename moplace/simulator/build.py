"""How a strategy becomes a task graph: `build_task_graph`, with shapes built once per split
configuration and filled in per strategy.

A strategy's splits (which ops are cut, how many ways, on which dimension, onto which devices)
decide the task graph's shape: its tasks, edges and their sizes, and the all-reduces. Its
placement and priorities decide only

- the device and duration of each task of an unsplit op,
- every task's priority,
- where each edge's data leaves from and whether it moves at all (``e_srcdev``, ``e_local``),
- and, for an edge from an all-reduce to an update op, whether the update runs on one of the
  ring's devices and reads the reduced gradient locally (``e_bytes`` 0) or receives it.

`Skeleton` holds a task graph built in full for one strategy and the indices of those
entries; `Skeleton.instance` fills them in for another strategy with the same splits. The
result is equal, array for array, to what a full build gives (tests/test_skeleton.py).
`skeleton_for` keeps the last skeletons of each cost model (so of each graph and cluster), up
to `MAX_SKELETONS` of them and `MAX_BYTES` in all.

`build` is the one place that chooses how a task graph is made: the graph's own arrays for a
strategy without splits, a patch of a parent's task graph when one is given and the patch
applies (`moplace.simulator.delta`), else the filled skeleton.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import replace

import numpy as np

from ..core.strategy import Strategy
from ..core.graph import OpGraph
from ..costs.costmodel import CostModel
from ..costs.fp8 import fp8_costs, fp8_weight_bytes
from ._fill import fill_instance
from .delta import SimulationBase, patched_task_graph
from .microbatch import microbatch_plan
from .schedule import ScheduleShape
from .ordering import pipeline_order
from .taskgraph import TaskGraph, build_split_task_graph, unsplit_task_graph
from .devsets import membership

#: skeletons kept per cost model, and their arrays' bytes in all (the oldest go first)
MAX_SKELETONS = 16
MAX_BYTES = 256 * 2**20

_CACHE: "weakref.WeakKeyDictionary[object, OrderedDict]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


#: how `build` made a task graph
UNSPLIT, PATCHED, FILLED = "unsplit", "patched", "filled"


def build(graph: OpGraph, strategy: Strategy, costs: CostModel,
          parent: SimulationBase | None = None) -> tuple[TaskGraph, str]:
    """The task graph of ``strategy`` on ``graph`` (the strategy must be validated), and how it
    was made: `UNSPLIT`, `PATCHED` or `FILLED`.

    Without splits or recomputation, tasks are ops and the graph's own arrays serve (cheaper
    than any patch). Otherwise ``parent``'s task graph patched when ``parent`` (the simulated
    strategy this one was derived from) is given and differs from it in what a patch can
    express, else the cached skeleton of the split configuration (`skeleton_for`) filled in
    for this strategy's placement and priorities (and, with micro-batches, ordered by its
    schedule: `pipeline_order`). Every path gives the same arrays. A strategy with FP8
    matmuls is built on ``costs`` timing them in FP8 (`moplace.costs.fp8`), its weights'
    FP8 copies added to what they keep (`with_fp8_weights`)."""
    if strategy.fp8:
        costs = fp8_costs(costs, strategy.fp8_mode)
        tg, how = build(graph, strategy.with_options(fp8=0), costs, parent)
        return with_fp8_weights(tg, graph, strategy.fp8_mode), how
    if not strategy.splits and not strategy.recompute and not strategy.pipelined:
        return unsplit_task_graph(graph, strategy, costs), UNSPLIT
    if parent is not None and not strategy.pipelined:
        tg = patched_task_graph(parent, strategy, graph, costs)
        if tg is not None:
            return tg, PATCHED
    return skeleton_for(graph, strategy, costs).instance(strategy, costs), FILLED


def with_fp8_weights(tg: TaskGraph, graph: OpGraph, mode: str) -> TaskGraph:
    """``tg`` with each weight's FP8 copy (`moplace.costs.fp8.fp8_weight_bytes`) kept where
    the weight is, in the share its task keeps of the weight (split or sharded alike)."""
    extra = fp8_weight_bytes(graph, mode)
    nc = tg.n_compute
    op = tg.task_op[:nc]
    whole = graph.arrays.param_bytes[op]
    share = np.divide(tg.param_bytes[:nc], whole, out=np.zeros(nc), where=whole > 0)
    param = np.array(tg.param_bytes, np.float64)
    param[:nc] += extra[op] * share
    return replace(tg, param_bytes=param)


def build_task_graph(graph: OpGraph, strategy: Strategy, costs: CostModel) -> TaskGraph:
    """The task graph of ``strategy`` on ``graph``, built without a parent (see `build`)."""
    return build(graph, strategy, costs)[0]


def split_key(strategy: Strategy) -> bytes:
    """What a task graph's shape depends on: the split ops, their parts, dimensions and the
    devices of the parts, the gradient bucket size, the ZeRO stage, the recomputed groups and
    the micro-batches (not their schedule, applied to each instance)."""
    t = strategy.split_table
    return b"|".join([np.ascontiguousarray(a, np.int64).tobytes()
                      for a in (t.ops, t.parts, t.dims, t.devices,
                                np.asarray(strategy.recompute, np.int64))]
                     + [repr(strategy.bucket_bytes).encode(),
                        repr(strategy.zero_stage).encode(),
                        repr(strategy.micro_batches).encode()])


def skeleton_for(graph, strategy: Strategy, costs) -> "Skeleton":
    """The skeleton of ``strategy``'s splits on ``graph`` under ``costs``, from the cache or
    built (and kept). Safe from several threads (`Problem.evaluate_batch`)."""
    key = split_key(strategy)
    with _LOCK:
        sk = _lookup(graph, costs, key)
    if sk is None:
        sk = Skeleton(graph, strategy, costs)  # outside the lock: other threads go on
        with _LOCK:
            _keep(costs, key, sk)
    return sk


def _lookup(graph, costs, key: bytes) -> "Skeleton | None":
    kept = _CACHE.get(costs)
    sk = None if kept is None else kept.get(key)
    if sk is None or sk.graph is not graph:
        return None
    kept.move_to_end(key)
    return sk


def _keep(costs, key: bytes, sk: "Skeleton") -> None:
    kept = _CACHE.get(costs)
    if kept is None:
        kept = _CACHE[costs] = OrderedDict()
    kept[key] = sk
    total = sum(s.nbytes for s in kept.values())
    while len(kept) > 1 and (len(kept) > MAX_SKELETONS or total > MAX_BYTES):
        total -= kept.popitem(last=False)[1].nbytes


class Skeleton:
    """A task graph built for one strategy, with what changes with placement and order."""

    def __init__(self, graph, strategy: Strategy, costs):
        tg, moved_bytes = build_split_task_graph(graph, strategy, costs, ordered=False)
        for value in vars(tg).values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        self.graph, self.tg = graph, tg
        nc = tg.n_compute
        #: tasks of unsplit ops: the placement decides their device and duration
        self.free = np.flatnonzero(np.diff(tg.op_ptr)[tg.task_op[:nc]] == 1)
        self.free_op = tg.task_op[self.free]
        #: each free task's row of its compute table: a micro-batch copy's after the ops'
        self.m = int(strategy.micro_batches)
        copy = np.zeros(self.free.size, bool)
        if strategy.pipelined:
            vop = np.repeat(np.arange(tg.op_ptr.size - 1), np.diff(tg.op_ptr))[self.free]
            copy = microbatch_plan(graph, strategy.recompute, self.m).in_time[vop] > 1
        self.free_row = self.free_op + np.where(copy, len(graph.ops), 0)
        self.moved_bytes = moved_bytes
        self.shape = None  # made by the first micro-batched instance
        #: edges from an all-reduce to an update op
        self.gated = np.flatnonzero((tg.e_src >= nc) & (tg.e_dst < nc))
        self.gated_c = tg.e_src[self.gated] - nc
        self.gated_dst = tg.e_dst[self.gated]
        self.gated_bytes = moved_bytes[self.gated]
        n_coll = tg.n_tasks - nc
        self.first = tg.coll_dev[tg.coll_ptr[:-1]]  # each ring's first device
        #: member[c, d]: device d reads collective c's result locally (is on its bucket's ring)
        n_dev = costs.cluster.n_devices
        self.member = np.zeros((n_coll, n_dev), bool)
        self.member[np.repeat(np.arange(n_coll), np.diff(tg.coll_ptr)), tg.coll_dev] = True
        self.member |= membership(tg.coll_mask, n_dev)
        self.nbytes = sum(v.nbytes for v in (*vars(tg).values(), *vars(self).values())
                          if isinstance(v, np.ndarray))

    def instance(self, strategy: Strategy, costs) -> TaskGraph:
        """The task graph of ``strategy``, which has this skeleton's splits."""
        tg = self.tg
        dev, dur, prio = np.empty_like(tg.dev), np.empty_like(tg.dur), np.empty(tg.n_tasks)
        e_bytes, e_srcdev = np.empty_like(tg.e_bytes), np.empty_like(tg.e_srcdev)
        e_local = np.empty(tg.e_src.size, bool)
        table = costs.with_parts(self.m) if self.m > 1 else costs.compute
        fill_instance(tg.dev, tg.dur, self.free, self.free_op, self.free_row, strategy.placement,
                      table, strategy.priority, tg.task_op, tg.n_compute, tg.e_src, tg.e_dst,
                      tg.e_bytes, self.gated, self.gated_c, self.gated_dst, self.gated_bytes,
                      self.member, self.first, dev, dur, prio, e_bytes, e_srcdev, e_local)
        nc = tg.n_compute
        out = TaskGraph(
            n_compute=nc, task_op=tg.task_op, dev=dev, dur=dur, prio=prio,
            out_bytes=tg.out_bytes, param_bytes=tg.param_bytes, e_src=tg.e_src, e_dst=tg.e_dst,
            e_bytes=e_bytes, e_srcdev=e_srcdev, e_local=e_local, out_ptr=tg.out_ptr,
            in_ptr=tg.in_ptr, in_edge=tg.in_edge, coll_ptr=tg.coll_ptr, coll_dev=tg.coll_dev,
            coll_res_ptr=tg.coll_res_ptr, coll_res=tg.coll_res, coll_dur=tg.coll_dur,
            coll_bytes=tg.coll_bytes, op_ptr=tg.op_ptr, coll_kind=tg.coll_kind, scratch=tg.scratch,
            ip_src=tg.ip_src, coll_mask=tg.coll_mask, task_mb=tg.task_mb,
            n_recomputed=tg.n_recomputed, gate=tg.gate, opens=tg.opens)
        if self.m > 1:
            if self.shape is None:
                plan = microbatch_plan(self.graph, strategy.recompute, self.m)
                self.shape = ScheduleShape(self.tg, plan)
            out = pipeline_order(out, self.moved_bytes, self.graph, strategy, costs,
                                 self.shape)[0]
        return out
