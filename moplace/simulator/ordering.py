"""A micro-batched task graph put in its schedule's order (`pipeline_order`): its compute
tasks' priorities by slot and the waits that hold the schedule (1F1B's in-flight limit,
`moplace.simulator.schedule`; the fixed per-rank actions of interleaved 1F1B and zero-bubble,
`moplace.simulator.pipeorder`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.graph import OpGraph, inplace_sources
from ..core.options import VIRTUAL_SCHEDULES
from ..core.strategy import Strategy
from ..costs.costmodel import CostModel
from .microbatch import microbatch_plan
from .pipeorder import ordered_priorities, pipeline_layout, slot_waits
from .schedule import (ScheduleShape, one_f_one_b_waits, stage_limits, task_priorities,
                       with_waits)


def pipeline_order(tg, moved_bytes: np.ndarray, graph: OpGraph, strategy: Strategy,
                   costs: CostModel, shape: ScheduleShape | None = None
                   ) -> tuple:
    """A micro-batched task graph (``tg``, filled in for ``strategy``'s placement) ordered by
    its schedule (`moplace.simulator.schedule`): its compute tasks' priorities by slot and,
    under 1F1B, the waits (the in-place sources made again where a wait leaves a buffer
    another task writes into); and the bytes each edge moves (``moved_bytes``, as
    `build_split_task_graph` gives them) with the waits'. ``shape``: `ScheduleShape` of
    ``tg``'s skeleton, when kept."""
    plan = microbatch_plan(graph, strategy.recompute, int(strategy.micro_batches))
    shape = ScheduleShape(tg, plan) if shape is None else shape
    nc, n_dev = tg.n_compute, costs.cluster.n_devices
    task_op, dev = tg.task_op[:nc], tg.dev[:nc]
    if strategy.schedule_name in VIRTUAL_SCHEDULES:
        return _ordered(tg, moved_bytes, graph, strategy, costs, plan, shape)
    gpipe = strategy.schedule_name == "gpipe"
    limit = stage_limits(dev, tg.dur[:nc], task_op, shape.phase, graph.depth, n_dev)
    prio = task_priorities(strategy.priority, task_op, shape.phase, shape.mb, plan.m, dev,
                           None if gpipe else limit, tg.n_tasks)
    changes = {"prio": prio, "stage": np.where(limit > 0, limit.max() + 1 - limit, 0)}
    if not gpipe:
        src, dst = one_f_one_b_waits(dev, limit, shape, n_dev)
        moved_bytes = _add_waits(tg, moved_bytes, changes, src, dst, plan, shape, costs)
    return replace(tg, **changes), moved_bytes


def _ordered(tg, moved_bytes: np.ndarray, graph: OpGraph, strategy: Strategy,
             costs: CostModel, plan, shape: ScheduleShape) -> tuple:
    """`pipeline_order` under a schedule of fixed per-rank actions
    (`moplace.simulator.pipeorder`: interleaved 1F1B, zero-bubble)."""
    nc, n_dev = tg.n_compute, costs.cluster.n_devices
    name = strategy.schedule_name
    layout = pipeline_layout(graph, strategy.placement, n_dev, name, shape.waited)
    orig, dev = shape.orig, tg.dev[:nc]
    slot, prio = ordered_priorities(layout, name, plan.m, orig, dev, shape.phase, shape.mb,
                                    strategy.placement[orig], strategy.priority, tg.n_tasks)
    device_rank = np.full(n_dev, -1, np.int64)
    staged = slot >= 0
    np.maximum.at(device_rank, dev[staged], layout.rank[strategy.placement[orig[staged]]])
    changes = {"prio": prio, "stage": np.where(device_rank >= 0, device_rank + 1, 0)}
    src, dst = slot_waits(slot, dev, shape.position, tg.e_src, tg.e_dst)
    moved_bytes = _add_waits(tg, moved_bytes, changes, src, dst, plan, shape, costs)
    return replace(tg, **changes), moved_bytes


def _add_waits(tg, moved_bytes: np.ndarray, changes: dict, src: np.ndarray,
               dst: np.ndarray, plan, shape: ScheduleShape, costs: CostModel) -> np.ndarray:
    """The waits ``src -> dst`` added to ``changes`` (edges, and the in-place sources made
    again where a wait leaves a buffer another task writes into); the bytes each edge moves
    with the waits'."""
    if not src.size:
        return moved_bytes
    nc = tg.n_compute
    edges = with_waits({name: getattr(tg, name) for name in _EDGE_FIELDS} |
                       {"moved_bytes": moved_bytes}, tg.dev, src, dst, tg.n_tasks)
    moved_bytes = edges.pop("moved_bytes")
    changes.update(edges)
    if np.isin(src, tg.ip_src).any():  # a buffer written into gains a reader
        capable = np.concatenate([plan.arrays.inplace[shape.vop] & costs.inplace,
                                  np.zeros(tg.n_tasks - nc, bool)])
        changes["ip_src"] = inplace_sources(
            edges["e_src"], edges["e_dst"], edges["e_bytes"], edges["out_ptr"],
            edges["in_edge"], capable, nc)
    return moved_bytes


_EDGE_FIELDS = ("e_src", "e_dst", "e_bytes", "e_srcdev", "e_local", "out_ptr", "in_ptr",
                "in_edge")
