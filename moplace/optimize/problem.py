"""A search problem: a graph, a cluster, the objectives, and optional user limits.

`Problem.evaluate` scores one strategy through the shared simulator; every searcher is
compared on the same problem, so on the same numbers. A strategy's *violation* is the number
of bytes by which it breaks the constraints, summed: device memory over capacity, plus peak
communication over the user's limit, plus peak memory over the user's limit (Trinity's C^
and M^). Zero means feasible.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from objectives import (
    DEFAULT,
    OBJECTIVES,
    evaluate_trace,
    memory_violation,
    peak_communication,
    peak_memory,
)

from ..core.baselines import BASELINES, baseline
from ..core.genome import GenomeSpace
from ..core.graph import OpGraph
from ..core.strategy import Strategy
from ..costs.costmodel import CostModel
from ..errors import MoplaceError
from ..simulator.engine import simulate
from ..simulator.evaluation import Evaluation


@dataclass(frozen=True)
class Limits:
    """User limits in bytes (None: no limit): peak communication and peak memory per device."""

    peak_comm_bytes: float | None = None
    peak_mem_bytes: float | None = None

    def __post_init__(self):
        for name in ("peak_comm_bytes", "peak_mem_bytes"):
            value = getattr(self, name)
            if value is not None and not (np.isfinite(value) and value > 0):
                raise MoplaceError(f"limit {name} must be a positive number of bytes, got {value!r}")


class Problem:
    """Graph + cluster + objectives (+ limits): evaluates strategies."""

    def __init__(self, graph: OpGraph, cluster, *, objectives=DEFAULT, limits: Limits = Limits(),
                 costs: CostModel | None = None):
        for name in objectives:
            OBJECTIVES[name]  # noqa: B018 - unknown names fail here, listing the known ones
        self.graph, self.cluster = graph, cluster
        self.objectives = tuple(objectives)
        self.limits = limits
        self.costs = costs if costs is not None else CostModel(graph, cluster)
        self.costs_given = costs is not None  # else they follow from graph and cluster

    def __repr__(self) -> str:
        return f"Problem({self.graph.name!r} on {self.cluster.name!r}, {self.objectives})"

    @property
    def n_devices(self) -> int:
        return self.cluster.n_devices

    @cached_property
    def genome(self) -> GenomeSpace:
        """The flat encoding of strategies for this graph and cluster."""
        return GenomeSpace(self.graph, self.cluster.n_devices)

    def evaluate(self, strategy: Strategy) -> Evaluation:
        """Simulate ``strategy`` and score it: objective values and violation."""
        trace = simulate(self.graph, self.cluster, strategy, costs=self.costs)
        return Evaluation(self.objectives, evaluate_trace(trace, self.objectives),
                          self.violation(trace), trace)

    def violation(self, trace) -> float:
        """Bytes by which ``trace`` breaks capacity and the user's limits (0: feasible)."""
        over = memory_violation(trace)
        if self.limits.peak_comm_bytes is not None:
            over += max(peak_communication(trace) - self.limits.peak_comm_bytes, 0.0)
        if self.limits.peak_mem_bytes is not None:
            over += max(peak_memory(trace) - self.limits.peak_mem_bytes, 0.0)
        return float(over)

    @cached_property
    def baselines(self) -> dict[str, Evaluation]:
        """The four baseline strategies, evaluated (they fix the hypervolume reference)."""
        return {name: self.evaluate(baseline(name, self.graph, self.n_devices)) for name in BASELINES}

    @cached_property
    def reference(self) -> np.ndarray:
        """Hypervolume reference point from the baselines (see `moplace.optimize.hypervolume`)."""
        from .hypervolume import reference_point

        return reference_point(np.array([ev.values for ev in self.baselines.values()]))
