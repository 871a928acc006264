"""A regular plan's replica stepped through ``m`` micro-batches from one simulated op by op
(what `moplace.simulator.atscale` runs): the one micro-batch's trace, recorded, cut into
blocks and composed (`moplace.simulator.pipecompose`), and what of it runs once a step.

The optimizer's step runs once, after the last micro-batch's backward (Megatron-LM's
``optimizer.step()``, after the gradients' reduce-scatter): the one micro-batch is simulated
with its updates at no cost (`deferred_updates`; else each update, ready as its gradient is
made, would run in the gaps of the backward and lengthen every micro-batch's backward
blocks), and their seconds (`update_seconds`) are run after each rank's last backward.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np

from ..core.graph import ROLES
from .build import build_task_graph
from .engine import run_task_graph
from .pipecompose import blocks_of, compose

_BACKWARD, _UPDATE = ROLES.index("backward"), ROLES.index("update")


@lru_cache(maxsize=4)
def deferred_updates(graph):
    """``graph`` with its updates at no compute (`composed_step` runs them after the last
    micro-batch's backward, `update_seconds` long)."""
    from ..core.derived import derived, rescaled

    a = graph.arrays
    ops = [rescaled(op, compute={k: 0.0 for k in op.compute}) if a.role[i] == _UPDATE else op
           for i, op in enumerate(graph.ops)]
    return derived(graph, ops)


def deferred_costs(costs, later):
    """``costs`` (of the graph ``later`` was made of by `deferred_updates`) for ``later``:
    the same seconds, the updates' none."""
    from ..costs.costmodel import CostModel

    out = CostModel(later, costs.cluster, split_overhead_s=costs.split_overhead_s,
                    inplace=costs.inplace)
    compute = np.array(costs.compute)
    compute[later.arrays.role == _UPDATE] = 0.0
    compute.flags.writeable = False
    out.__dict__["compute"] = compute  # CostModel.compute's cached value
    return out


def update_seconds(graph, strategy, costs, n_dev: int) -> np.ndarray:
    """Per device the seconds of the updates it runs under ``strategy`` (as the simulator
    times its tasks: a part of a split update ``1 / n`` of it plus the split overhead, a
    replica of a weight split on batch, unsharded, the whole of it)."""
    a = graph.arrays
    out = np.zeros(n_dev)
    dev = np.asarray(strategy.placement)
    for u in np.flatnonzero(a.role == _UPDATE).tolist():
        split = strategy.splits.get(u)
        t = float(costs.compute[u, int(dev[u])])
        if split is None or len(split.devices) == 1:
            out[int(dev[u])] += t
            continue
        n = len(split.devices)
        whole = split.dim == "batch" and not strategy.zero_stage
        out[list(split.devices)] += t if whole else t / n + costs.split_overhead_s
    return out


def composed_step(graph, cluster, strategy, costs, stage_of_op, p: int, v: int, w: int,
                  schedule: str, m: int):
    """The step of ``m`` micro-batches of a replica (``graph``, one micro-batch, under
    ``strategy`` on ``cluster`` with ``costs``: ``p`` ranks of ``w`` devices, ``v`` chunks
    each, ``stage_of_op`` per op) run as ``schedule``, composed from the one micro-batch
    simulated op by op with its updates deferred (module docstring): the one micro-batch's
    trace, per rank its end, the step's makespan, and per device its peak memory, the bytes
    it sends and receives and its compute seconds over the step, and per rank its actions
    timeline (`moplace.simulator.pipecompose.Composed.timeline`)."""
    later = deferred_updates(graph)
    updates = update_seconds(graph, strategy, costs, cluster.n_devices)
    strategy.validate(later, cluster.n_devices)
    tg = build_task_graph(later, strategy, deferred_costs(costs, later))
    trace = run_task_graph(tg, cluster, len(later.ops), record=True)
    a = later.arrays
    blocks = blocks_of(trace, a.role, stage_of_op, p, v, w, _task_gradients(tg, trace, a))
    blocks = dataclasses.replace(blocks, tail=blocks.tail + updates.reshape(p, w).max(axis=1))
    comp = compose(blocks, schedule, m)
    sent, received, busy = _once(tg, trace, a, cluster.n_devices)
    # what runs per micro-batch m times, what runs once once; the updates' seconds once
    # (the deferred updates' parts keep their split overhead in the simulated micro-batch)
    return (trace, comp.end, comp.makespan, comp.peak, (trace.sent - sent) * m + sent,
            (trace.received - received) * m + received,
            (trace.busy - busy) * m + busy + updates, comp.timeline)


def _task_gradients(tg, trace, a) -> np.ndarray:
    """Per compute task the weight-gradient bytes it makes: its op's ``grad_bytes`` over its
    op's parts, at most its output (a backward op's; recomputed runs make none)."""
    comp = trace.task_device >= 0
    op = trace.task_op[comp]
    parts = np.diff(tg.op_ptr)[np.minimum(op, tg.op_ptr.size - 2)]
    g = np.where(a.role[op] == _BACKWARD, a.grad_bytes[op] / np.maximum(parts, 1), 0.0)
    g = np.minimum(g, tg.out_bytes[:comp.sum()])
    g[trace.recomputed[comp]] = 0.0
    return g


def _once(tg, trace, a, n_dev: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per device the bytes sent and received, and the compute seconds, of what runs once a
    step (not per micro-batch): the updates (deferred: their split parts' overhead alone),
    and the collectives of the gradients (a collective whose op has weight gradients: a
    bucket's)."""
    comp = trace.task_device >= 0
    upd = comp & (a.role[trace.task_op] == _UPDATE)
    busy = np.bincount(trace.task_device[upd], weights=(trace.task_end - trace.task_start)[upd],
                       minlength=n_dev)
    moved = np.zeros(n_dev)
    n_c = tg.coll_ptr.size - 1
    if n_c:
        ops = trace.task_op[~comp][:n_c]
        grads = np.flatnonzero((a.grad_bytes[ops] > 0) & ~a.partial_sums[ops])
        for c in grads.tolist():
            moved[tg.coll_dev[tg.coll_ptr[c]:tg.coll_ptr[c + 1]]] += tg.coll_bytes[c]
    x = trace.transfers
    sent, received = moved.copy(), moved.copy()
    if x.size:
        task = x[:, 0].astype(np.int64)
        once = (trace.task_device[task] >= 0) & (a.role[trace.task_op[task]] == _UPDATE)
        np.add.at(sent, x[once, 1].astype(np.int64), x[once, 3])
        np.add.at(received, x[once, 2].astype(np.int64), x[once, 3])
    return sent, received, busy
