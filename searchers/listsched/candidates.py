"""Each list scheduler's candidate schedules, judged by the simulator.

A list scheduler's own model is coarse in two ways that cost speed:

- **Memory.** It counts every op's parameters and output as resident on its device for the
  whole step (`group_memory`), while the simulator frees an output once its last consumer
  ran. vgg16's static total is 29.0 GiB; its liveness peak on one V100 is 15.4 GiB, so it
  fits the 16 GB GPU, but the static model refuses it and HEFT returns 724.8 ms instead of
  the single GPU's 693.6 ms.
- **Co-location groups.** They tie ops (a layer's forward and backward) to one device, and
  the first op of a group decides for all of them. DPOS pins its critical path to one
  device; in a training graph the critical path passes through the groups holding 91-100% of
  the compute (resnet50_training, bert24_training, gnmt_training, vgg16), so grouped DPOS puts
  nearly everything on one device (bert24_training: 217.8 ms, its total compute, where HEFT
  finds 134.2 ms). Scheduling ops freely and then regrouping them (each group to the device
  that ran most of its compute) can be faster: OperatorGraphs/resnet50_training 684.9 ->
  616.9 ms.

So each scheduler runs under three memory budgets, each with the groups kept and with the
groups regrouped after a free schedule:

- ``static``: parameters + outputs pinned (the scheduler's classic model);
- ``liveness``: parameters + a share of each output, the share being what the simulator's
  liveness peak of the ``single`` baseline (every op on device 0, in topological order) keeps
  of all outputs; the bound of a device holding everything, calibrated by the simulator;
- ``unbounded``: no memory limit in the scheduler at all.

The simulator judges every distinct candidate (its liveness peak decides feasibility), and the
fastest feasible one is kept (`best_candidate`). The schedulers' results are unchanged; this
is how the searchers use them.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import numpy as np

from moplace.core.strategy import Strategy

from .schedule import ListSchedInput, ListSchedResult

MEMORY_BUDGETS = ("static", "liveness", "unbounded")
GROUPINGS = ("grouped", "regrouped")


class Candidate(NamedTuple):
    """One candidate schedule: its ``label`` ("static, grouped"), the strategy, the
    scheduler's own makespan estimate (seconds) and the simulator's evaluation (or None)."""

    label: str
    strategy: Strategy
    estimate: float
    evaluation: object = None


def schedule_candidates(problem, schedule: Callable[[ListSchedInput], ListSchedResult]
                        ) -> list[Candidate]:
    """The distinct strategies ``schedule`` gives under every memory budget and grouping."""
    graph = problem.graph
    if not len(graph.ops):  # nothing to schedule: the empty strategy
        empty = Strategy(np.zeros(0, np.int64))
        return [Candidate(f"{MEMORY_BUDGETS[0]} memory, {GROUPINGS[0]}", empty, 0.0)]
    base = ListSchedInput.from_problem(graph, problem.cluster, problem.costs)
    weight = base.compute.mean(axis=1)
    out, seen = [], set()
    for budget in MEMORY_BUDGETS:
        inp = dataclasses.replace(base, op_memory=op_memory(problem, budget), topo=base.topo)
        for grouping in GROUPINGS:
            if grouping == "regrouped":
                if graph.arrays.n_groups == len(graph.ops):
                    continue  # no co-location groups: the same schedule
                free = dataclasses.replace(inp, group=np.arange(base.group.size), topo=base.topo)
                result = schedule(free)
                placement = regroup(base.group, result.placement, weight, problem.n_devices)
            else:
                result = schedule(inp)
                placement = result.placement
            strategy = Strategy(placement, result.priority())
            key = strategy.placement.tobytes() + strategy.priority.tobytes()
            if key not in seen:
                seen.add(key)
                out.append(Candidate(f"{budget} memory, {grouping}", strategy, result.makespan))
    return out


def best_candidate(problem, schedule) -> Candidate:
    """The fastest feasible candidate by the simulator (ties: the earlier in the list, the
    scheduler's classic schedule first), or the least violating when none is feasible."""
    cands = schedule_candidates(problem, schedule)
    evs = problem.evaluate_batch([c.strategy for c in cands])
    cands = [c._replace(evaluation=ev) for c, ev in zip(cands, evs)]
    feasible = [c for c in cands if c.evaluation.feasible]
    if feasible:
        return min(feasible, key=lambda c: c.evaluation.values[0])
    return min(cands, key=lambda c: c.evaluation.violation)


def op_memory(problem, budget: str) -> np.ndarray:
    """Bytes each op pins on its device under ``budget`` (see the module docstring)."""
    a = problem.graph.arrays
    params, outputs = a.param_bytes.astype(np.float64), a.output_bytes.astype(np.float64)
    if budget == "static":
        return params + outputs
    if budget == "unbounded":
        return np.zeros_like(params)
    if budget != "liveness":
        raise ValueError(f"budget must be one of {MEMORY_BUDGETS}, got {budget!r}")
    return params + liveness_share(problem) * outputs


def liveness_share(problem) -> float:
    """The share of all outputs the simulator's liveness peak holds when every op runs on one
    device in topological order (the ``single`` baseline), between 0 and 1."""
    a = problem.graph.arrays
    total = float(a.output_bytes.sum())
    if total <= 0:
        return 0.0
    trace = problem.baselines["single"].trace
    live = float(trace.peak_memory.max()) - float(a.param_bytes.sum())
    return min(max(live / total, 0.0), 1.0)


def regroup(group: np.ndarray, placement: np.ndarray, weight: np.ndarray, n_devices: int
            ) -> np.ndarray:
    """Each co-location group on the device that ran most of its ``weight`` (compute) in
    ``placement`` (ties: the lower device), as a placement of every op."""
    n_groups = int(group.max()) + 1
    score = np.zeros((n_groups, n_devices))
    np.add.at(score, (group, placement), weight + 1e-12)  # an op of zero cost still votes
    return score.argmax(axis=1)[group].astype(np.int64)
