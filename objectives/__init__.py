"""The objectives moplace minimizes, each a plain function of a `moplace.simulator.engine.Trace`.

Registered by name in `OBJECTIVES`; `DEFAULT` is the triple every search optimizes.
Device memory capacity is not an objective but a constraint: see `memory_violation`.
"""

from __future__ import annotations

import numpy as np

from moplace.registry import Registry

OBJECTIVES: Registry = Registry("objective")


@OBJECTIVES.register("runtime")
def runtime(trace) -> float:
    """Seconds of one training iteration (the simulated makespan)."""
    return float(trace.makespan)


@OBJECTIVES.register("peak_communication")
def peak_communication(trace) -> float:
    """Bytes sent plus received by the busiest device in one iteration."""
    traffic = trace.sent + trace.received
    return float(traffic.max()) if traffic.size else 0.0


@OBJECTIVES.register("peak_memory")
def peak_memory(trace) -> float:
    """Bytes resident at the worst moment on the fullest device."""
    return float(trace.peak_memory.max()) if trace.peak_memory.size else 0.0


def memory_violation(trace) -> float:
    """Bytes by which device peaks exceed capacities, summed over devices (0 = feasible)."""
    return float(np.maximum(trace.peak_memory - trace.capacity, 0.0).sum())


DEFAULT = ("runtime", "peak_communication", "peak_memory")

#: The name of each objective in JSON (`Evaluation.as_dict`, ``--json``, front files): the
#: unit is part of the name. An objective not listed keeps its own name.
JSON_KEYS = {"runtime": "runtime_s", "peak_communication": "peak_comm_bytes",
             "peak_memory": "peak_mem_bytes"}


def json_key(name: str) -> str:
    """The JSON name of objective ``name``."""
    return JSON_KEYS.get(name, name)


def evaluate_trace(trace, names=DEFAULT) -> np.ndarray:
    """The objective vector of ``trace`` for the objectives ``names``, all minimized."""
    return np.array([OBJECTIVES[name](trace) for name in names], dtype=np.float64)
