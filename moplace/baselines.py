"""Baseline strategies every searcher is compared with, registered by name in `BASELINES`.

- ``single``: everything on device 0.
- ``data-parallel``: every co-location group whose ops can all be split on batch is split
  across all devices; the rest run on device 0.
- ``round-robin``: co-location groups, in topological order, dealt to devices in turn.
- ``layer-split``: "expert" model parallelism: groups in topological order cut into contiguous
  runs of nearly equal compute, one run per device.

All use the topological order as priority (`topological_priority`).
"""

from __future__ import annotations

import numpy as np

from .graph import OpGraph
from .registry import Registry
from .strategy import Split, Strategy, spread_groups

BASELINES: Registry = Registry("baseline")


def topological_priority(graph: OpGraph) -> np.ndarray:
    """Priorities that run ops in the graph's (lexicographic) topological order."""
    prio = np.empty(len(graph.ops))
    prio[graph.arrays.topo] = -np.arange(len(graph.ops), dtype=np.float64)
    return prio


def group_order(graph: OpGraph) -> np.ndarray:
    """Co-location groups sorted by the topological position of their first op."""
    first = np.full(graph.arrays.n_groups, len(graph.ops))
    np.minimum.at(first, graph.arrays.group[graph.arrays.topo], np.arange(len(graph.ops)))
    return np.argsort(first, kind="stable")


@BASELINES.register("single")
def single(graph: OpGraph, n_devices: int) -> Strategy:
    """All ops on device 0."""
    return Strategy(np.zeros(len(graph.ops), np.int64), topological_priority(graph))


@BASELINES.register("data-parallel")
def data_parallel(graph: OpGraph, n_devices: int) -> Strategy:
    """Split every batch-splittable group n ways on batch, part k on device k."""
    if n_devices < 2:
        return single(graph, n_devices)
    split = Split("batch", tuple(range(n_devices)))
    batch_ok = [all("batch" in graph.ops[i].splittable for i in members) for members in graph.groups]
    splits = {g: split for g, ok in enumerate(batch_ok) if ok}
    return spread_groups(graph, np.zeros(len(graph.groups), np.int64), splits,
                         topological_priority(graph))


@BASELINES.register("round-robin")
def round_robin(graph: OpGraph, n_devices: int) -> Strategy:
    """Group i (in topological order) on device i mod n."""
    device = np.empty(graph.arrays.n_groups, np.int64)
    device[group_order(graph)] = np.arange(graph.arrays.n_groups) % n_devices
    return spread_groups(graph, device, None, topological_priority(graph))


@BASELINES.register("layer-split")
def layer_split(graph: OpGraph, n_devices: int, weights: np.ndarray | None = None) -> Strategy:
    """Contiguous runs of groups with nearly equal compute, one run per device.

    ``weights`` is the compute per op (default: its time on the graph's profiled device kind,
    else the fastest time it has).
    """
    if weights is None:
        weights = np.array([_reference_time(op, graph.metadata.get("profiled_on")) for op in graph.ops])
    per_group = np.bincount(graph.arrays.group, weights=weights, minlength=graph.arrays.n_groups)
    order = group_order(graph)
    w = per_group[order]
    total = w.sum()
    if total <= 0:
        mid = np.arange(len(w)) / max(len(w), 1)
    else:  # a group goes to the device whose share of the total holds its midpoint
        mid = (np.cumsum(w) - w / 2) / total
    device = np.empty(graph.arrays.n_groups, np.int64)
    device[order] = np.minimum((mid * n_devices).astype(np.int64), n_devices - 1)
    return spread_groups(graph, device, None, topological_priority(graph))


def _reference_time(op, kind) -> float:
    if kind in op.compute:
        return float(op.compute[kind])
    return float(min(op.compute.values())) if op.compute else 0.0


def baseline(name: str, graph: OpGraph, n_devices: int) -> Strategy:
    """The baseline strategy ``name`` for ``graph`` on ``n_devices`` devices."""
    return BASELINES[name](graph, n_devices)
