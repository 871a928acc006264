"""The objectives moplace minimizes, each a plain function of a `moplace.simulator.engine.Trace`.

Registered by name in `OBJECTIVES`, each with what a person and a file read of it (an
`Objective`): its unit, its name in JSON, its label and its short name for narrow columns. The
review code (tables, ``--json``, front files, MLflow metrics, figures) reads these, so an
objective registered at run time is shown like the built-in ones::

    @OBJECTIVES.register("energy", unit="J", json_key="energy_j", label="energy per step",
                         short="energy")
    def energy(trace) -> float:
        return 300.0 * float(trace.busy.sum())

`DEFAULT` is the triple every search optimizes. Device memory capacity is not an objective but
a constraint: see `memory_violation`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from moplace.registry import Registry

#: the unit names that mean seconds and bytes; any other unit (``"J"``) is shown with SI
#: prefixes (kJ, MJ), and ``""`` as a plain number
UNIT_ALIASES = {"s": "s", "seconds": "s", "B": "B", "bytes": "B"}
#: JSON keys a front point or an evaluation already has besides its objectives
RESERVED_KEYS = frozenset({"feasible", "violation_bytes", "strategy", "searcher",
                           "memory_excess_bytes", "devices"})


@dataclass(frozen=True)
class Objective:
    """An objective (minimized) and how it is shown: ``unit`` (``"s"``, ``"B"``, another unit
    such as ``"J"``, or ``""`` for a plain number), ``json_key`` (its name in JSON: front files,
    ``--json``, evaluations), ``label`` (axes, column titles), ``short`` (narrow columns and
    progress lines) and ``column`` (the title of its column in `moplace evaluate`'s table).
    Calling it scores a trace."""

    name: str
    function: Callable
    unit: str
    json_key: str
    label: str
    short: str
    column: str

    def __call__(self, trace) -> float:
        return self.function(trace)


class ObjectiveRegistry(Registry):
    """The objectives by name; registering one gives its metadata (see `Objective`)."""

    def add(self, name: str, function: Callable, *, unit: str = "", json_key: str | None = None,
            label: str | None = None, short: str | None = None,
            column: str | None = None) -> Objective:
        """Register ``function`` as objective ``name``; ``json_key`` defaults to the name,
        ``label`` to the name with spaces, ``short`` and ``column`` to the label."""
        if name in self:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        if not callable(function):
            raise TypeError(f"objective {name!r}: {function!r} is not a function of a trace")
        key = json_key or name
        taken = {o.json_key: o.name for o in self.objectives()}
        if key in taken or key in RESERVED_KEYS:
            raise ValueError(f"objective {name!r}: JSON key {key!r} is already "
                             + (f"objective {taken[key]!r}'s" if key in taken else "taken"))
        label = label or name.replace("_", " ")
        objective = Objective(name, function, UNIT_ALIASES.get(unit, unit), key, label,
                              short or label, column or label)
        return super().add(name, objective)

    def register(self, name: str, **metadata) -> Callable[[Callable], Callable]:
        """Decorator form of `add`; the function itself stays as it was."""

        def decorate(function):
            self.add(name, function, **metadata)
            return function

        return decorate

    def unregister(self, name: str) -> Objective:
        """Remove objective ``name`` registered at run time (the built-in ones stay)."""
        if name in BUILT_IN:
            raise ValueError(f"objective {name!r} is built in and cannot be removed")
        return self.remove(name)

    @contextlib.contextmanager
    def registered(self, name: str, function: Callable, **metadata) -> Iterator[Objective]:
        """``with OBJECTIVES.registered(...) as objective:``: registered within the block."""
        objective = self.add(name, function, **metadata)
        try:
            yield objective
        finally:
            self.unregister(name)

    def objectives(self) -> list[Objective]:
        return [self[name] for name in self]

    def view(self, field: str) -> Mapping[str, str]:
        """A read-only mapping from each objective's name to its ``field``, always current."""
        return _FieldView(self, field)


class _FieldView(Mapping):
    def __init__(self, registry: ObjectiveRegistry, field: str):
        self.registry, self.field = registry, field

    def __getitem__(self, name: str) -> str:
        if name not in self.registry:
            raise KeyError(name)
        return getattr(self.registry[name], self.field)

    def __iter__(self):
        return iter(self.registry)

    def __len__(self) -> int:
        return len(self.registry.names())

    def __repr__(self) -> str:
        return repr(dict(self))


OBJECTIVES = ObjectiveRegistry("objective")


@OBJECTIVES.register("runtime", unit="s", json_key="runtime_s", label="runtime",
                     short="runtime")
def runtime(trace) -> float:
    """Seconds of one training iteration (the simulated makespan)."""
    return float(trace.makespan)


@OBJECTIVES.register("peak_communication", unit="B", json_key="peak_comm_bytes",
                     label="peak communication", short="comm", column="peak comm")
def peak_communication(trace) -> float:
    """Bytes sent plus received by the busiest device in one iteration."""
    traffic = trace.sent + trace.received
    return float(traffic.max()) if traffic.size else 0.0


@OBJECTIVES.register("peak_memory", unit="B", json_key="peak_mem_bytes", label="peak memory",
                     short="mem", column="peak mem")
def peak_memory(trace) -> float:
    """Bytes resident at the worst moment on the fullest device."""
    return float(trace.peak_memory.max()) if trace.peak_memory.size else 0.0


#: the objectives this package registers: every process knows them (a figure-drawing process,
#: a Dask worker), while one registered at run time is known in its own process only
BUILT_IN = frozenset(OBJECTIVES)


def memory_violation(trace) -> float:
    """Bytes by which device peaks exceed capacities, summed over devices (0 = feasible)."""
    return float(np.maximum(trace.peak_memory - trace.capacity, 0.0).sum())


DEFAULT = ("runtime", "peak_communication", "peak_memory")

#: The name of each objective in JSON (`Evaluation.as_dict`, ``--json``, front files), from
#: its registration: the unit is part of the name. A name that is no objective keeps itself.
JSON_KEYS = OBJECTIVES.view("json_key")


def json_key(name: str) -> str:
    """The JSON name of objective ``name``."""
    return JSON_KEYS.get(name, name)


def evaluate_trace(trace, names=DEFAULT) -> np.ndarray:
    """The objective vector of ``trace`` for the objectives ``names``, all minimized."""
    return np.array([OBJECTIVES[name].function(trace) for name in names], dtype=np.float64)
