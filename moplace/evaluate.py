"""One strategy scored: objective values, feasibility, and the trace behind them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from objectives import DEFAULT, evaluate_trace, memory_violation

from .costmodel import CostModel
from .graph import OpGraph
from .simulator import Trace, simulate
from .strategy import Strategy


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Objective values (minimized, in ``names`` order), memory feasibility and the trace."""

    names: tuple[str, ...]
    values: np.ndarray
    violation: float
    trace: Trace

    @property
    def feasible(self) -> bool:
        return self.violation == 0.0

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.names, self.values.tolist()))


def evaluate(graph: OpGraph, cluster, strategy: Strategy, *, objectives=DEFAULT,
             costs: CostModel | None = None) -> Evaluation:
    """Simulate ``strategy`` and score it on ``objectives``."""
    trace = simulate(graph, cluster, strategy, costs=costs)
    return Evaluation(tuple(objectives), evaluate_trace(trace, objectives),
                      memory_violation(trace), trace)
