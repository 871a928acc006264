"""One strategy scored: objective values, feasibility, and the trace behind them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from objectives import DEFAULT, evaluate_trace, json_key, memory_violation

from ..core.graph import OpGraph
from ..core.strategy import Strategy
from ..costs.costmodel import CostModel
from .engine import Trace, simulate


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

    def objectives(self) -> dict[str, float]:
        """Objective values by objective name (``{"runtime": ..., ...}``)."""
        return dict(zip(self.names, self.values.tolist()))

    def as_dict(self) -> dict:
        """The evaluation as ``moplace evaluate --json`` prints it: objectives under the JSON
        names they were registered with (``runtime_s``, ``peak_comm_bytes``,
        ``peak_mem_bytes``...), ``feasible``, ``memory_excess_bytes`` and per-device figures."""
        t = self.trace
        out = {json_key(n): v for n, v in zip(self.names, self.values.tolist())}
        out.update(feasible=self.feasible, memory_excess_bytes=self.violation, devices=[
            {"name": name, "kind": kind, "busy_s": float(t.busy[i]),
             "sent_bytes": float(t.sent[i]), "received_bytes": float(t.received[i]),
             "peak_mem_bytes": float(t.peak_memory[i]), "capacity_bytes": float(t.capacity[i])}
            for i, (name, kind) in enumerate(zip(t.device_names, t.device_kinds))])
        return out


def evaluate(graph: OpGraph, cluster, strategy: Strategy, *, objectives=DEFAULT,
             costs: CostModel | None = None) -> Evaluation:
    """Simulate ``strategy`` and score it on ``objectives``."""
    trace = simulate(graph, cluster, strategy, costs=costs)
    return Evaluation(tuple(objectives), evaluate_trace(trace, objectives),
                      memory_violation(trace), trace)
