"""Questions asked of a front: constraints on its objectives and a goal among what is left.

"The fastest plan that fits in 16 GB", "the least traffic within 5% of the fastest":

    front = Front.load("front.json")              # or Front(data) for a front.json's content
    front.select(where=["peak_memory<=16GB"], best="runtime")
    front.select(where=["runtime<=1.05x"], best="peak_communication")

A constraint is ``OBJECTIVE OP VALUE`` with OP one of ``<=``, ``<``, ``>=``, ``>``, and VALUE
either absolute, in the objective's unit (``16GiB``, ``16GB``, ``12.5ms``, ``3e9``; GB = 10⁹ B,
GiB = 2³⁰ B, a bare number is in base units: seconds, bytes), or relative to the objective's best
feasible value on the whole front, before any constraint (``1.05x``). The goal is an objective
to minimise among the points left (ties: the lesser other objectives, in order, then the first
point) or ``knee`` (the knee of what is left: `moplace.review.marks.knee_index`).

``runs=RUNNER`` keeps the points the runner can run (`moplace.core.runners.RUNNERS`:
``torchtitan``, ``megatron``, ``moplace-apply``), as the front records them per point.

Constraints filter a front after the search; ``--memory-limit`` (`moplace search`) bounds the
search itself, so its front holds only plans that fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import MoplaceError, did_you_mean, shown
from .marks import knee_index
from .units import fmt, kind_of, label

_OPS = ("<=", ">=", "<", ">")
_RUNS = re.compile(r"\s*runs\s*=\s*(\S*)\s*")
_PATTERN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|<|>)\s*(\S+)\s*")


@dataclass(frozen=True)
class Constraint:
    """``objective op value``; ``relative``: value times the front's best feasible value."""

    objective: str
    op: str
    value: float
    relative: bool
    text: str

    def bound(self, best: float) -> float:
        """The absolute bound, given the front's best feasible value of the objective."""
        return self.value * best if self.relative else self.value

    def holds(self, values: np.ndarray, best: float) -> np.ndarray:
        b = self.bound(best)
        return {"<=": values <= b, "<": values < b, ">=": values >= b, ">": values > b}[self.op]


def parse_constraint(text: str, objectives) -> Constraint:
    """``text`` (``"peak_memory<=16GiB"``) as a `Constraint` on one of ``objectives``; a
    `MoplaceError` naming the text and what is wrong with it otherwise."""
    found = _PATTERN.fullmatch(text) if isinstance(text, str) else None
    if not found:
        raise MoplaceError(f"--where {shown(text)}: write OBJECTIVE OP VALUE, e.g. "
                           f"\"peak_memory<=16GiB\" or \"runtime<=1.05x\" (OP: "
                           f"{', '.join(_OPS)})")
    name, op, value = found.groups()
    if name not in objectives:
        raise MoplaceError(f"--where {shown(text)}: {shown(name)} is not an objective of this "
                           f"front{did_you_mean(name, objectives)} ({', '.join(objectives)})")
    relative = value.lower().endswith("x")
    number = _quantity(value[:-1] if relative else value, None if relative else kind_of(name))
    if number is None or not np.isfinite(number) or number < 0:
        unit = {"time": "a time such as 12.5ms", "bytes": "a size such as 16GiB or 16GB"}.get(
            kind_of(name), "a number")
        raise MoplaceError(f"--where {shown(text)}: cannot read {shown(value)} as {unit} or as "
                           f"a multiple of the front's best, such as 1.05x")
    return Constraint(name, op, number, relative, text.strip())


def _quantity(text: str, kind: str | None) -> float | None:
    """A number with a unit suiting ``kind`` as cluster files write them (sizes, times; None:
    a bare number)."""
    from ..core.presets import parse_size, parse_time

    if kind in ("bytes", "time"):
        return (parse_size if kind == "bytes" else parse_time)(text)
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class RunsConstraint:
    """``runs=RUNNER``: the points whose runners include ``runner``."""

    runner: str
    text: str

    def holds(self, runs) -> np.ndarray:
        return np.array([self.runner in (r or ()) for r in runs], bool)


def parse_runs(text: str) -> RunsConstraint | None:
    """``text`` as a `RunsConstraint` when it is ``runs=RUNNER`` (None when it is not of
    that form); a `MoplaceError` naming the runners when RUNNER is not one."""
    from ..core.runners import RUNNERS

    found = _RUNS.fullmatch(text) if isinstance(text, str) else None
    if not found:
        return None
    name = found.group(1)
    if name not in RUNNERS:
        raise MoplaceError(f"--where {shown(text)}: {shown(name)} is not a runner"
                           f"{did_you_mean(name, RUNNERS)} ({', '.join(RUNNERS)})")
    return RunsConstraint(name, text.strip())


@dataclass(frozen=True)
class Selection:
    """The answer: ``index`` (the chosen point's number on the front; None when no point is
    left), the points left (``left``, their numbers), each constraint's absolute ``bounds``
    and the ``goal``."""

    index: int | None
    left: tuple[int, ...]
    bounds: tuple[tuple[Constraint, float], ...]
    goal: str
    runs: tuple[str, ...] = ()


def select(values: np.ndarray, feasible: np.ndarray, objectives, where=(), best="knee",
           runs=None) -> Selection:
    """The point of ``values`` (one row per front point, one column per objective) that
    meets every constraint of ``where`` (strings, `Constraint` or `RunsConstraint`) and is
    best by ``best`` (an objective or ``"knee"``); ``runs``: each point's runners (None: the
    front records none, and a ``runs=`` constraint is refused); see the module docstring."""
    objectives = list(objectives)
    values = np.asarray(values, float).reshape(-1, len(objectives))
    feasible = np.asarray(feasible, bool)
    if best != "knee" and best not in objectives:
        raise MoplaceError(f"--best {shown(best)}: not an objective of this front"
                           f"{did_you_mean(best, [*objectives, 'knee'])}; choose one of "
                           f"{', '.join(objectives)} or knee")
    constraints = [c if isinstance(c, (Constraint, RunsConstraint)) else
                   parse_runs(c) or parse_constraint(c, objectives) for c in where]
    keep = feasible.copy()
    bounds = []
    for c in constraints:
        if isinstance(c, RunsConstraint):
            if runs is None:
                raise MoplaceError(f"--where {shown(c.text)}: this front records no runners "
                                   f"(written before moplace recorded them): search again")
            keep &= c.holds(runs)
            continue
        col = values[:, objectives.index(c.objective)]
        if c.relative and not feasible.any():
            raise MoplaceError(f"--where {shown(c.text)}: no point of the front fits in "
                               "memory, so there is no best feasible value to be relative to")
        ref = float(col[feasible].min()) if feasible.any() else float("nan")
        bounds.append((c, c.bound(ref)))
        keep &= c.holds(col, ref)
    left = np.flatnonzero(keep)
    asked = tuple(c.text for c in constraints if isinstance(c, RunsConstraint))
    if not left.size:
        return Selection(None, (), tuple(bounds), best, asked)
    if best == "knee":
        chosen = int(left[knee_index(values[left])])
    else:
        k = objectives.index(best)
        order = [k] + [j for j in range(len(objectives)) if j != k]
        keys = tuple(values[left, j] for j in reversed(order))
        chosen = int(left[np.lexsort(keys)[0]])
    return Selection(chosen, tuple(int(i) for i in left), tuple(bounds), best, asked)


class Front:
    """A front.json's content with questions to ask it (`select`)."""

    def __init__(self, data: dict, source: str = "front"):
        from objectives import json_key

        from ..io.strategies import front_points

        self.data, self.source = data, source
        self.objectives = list(data.get("objectives") or [])
        keys = [json_key(o) for o in self.objectives]
        #: the points ``--point K`` numbers: the front, or the least-violating when none fits
        self.points = front_points(data, source)[0]
        try:
            self.values = np.array([[float(p[k]) for k in keys] for p in self.points],
                                   float).reshape(-1, len(keys))
        except (KeyError, TypeError, ValueError) as exc:
            raise MoplaceError(f"{source}: a point lacks an objective value ({exc})") from None
        self.feasible = np.array([p.get("feasible") is True for p in self.points], bool)

    @classmethod
    def load(cls, path) -> "Front":
        """The front in the front.json at ``path``."""
        from ..io.fronts import read_front

        return cls(read_front(path), str(path))

    @classmethod
    def of_result(cls, result) -> "Front":
        """The front of a search's result (`moplace.search`), as its front.json has it."""
        from ..io.fronts import result_json

        return cls(result_json(result), "search result")

    def select(self, where=(), best="knee") -> Selection:
        """The point meeting ``where`` that is best by ``best`` (see the module docstring)."""
        runs = [p.get("runs") for p in self.points]
        return select(self.values, self.feasible, self.objectives, where, best,
                      runs if all(isinstance(r, list) for r in runs) else None)

    def describe(self, selection: Selection) -> str:
        """The answer in a line a person reads: the point, its values, what it was chosen by."""
        if selection.index is None:
            told = "; ".join([f"{c.text} (bound {fmt(b, kind_of(c.objective))})"
                              for c, b in selection.bounds] + list(selection.runs))
            return f"no point of the {len(self.points)} meets {told}"
        row = self.values[selection.index]
        vals = ", ".join(f"{label(o)} {fmt(v, kind_of(o))}" for o, v in zip(self.objectives, row))
        goal = "the knee" if selection.goal == "knee" else f"least {label(selection.goal)}"
        by = self.points[selection.index].get("searcher")
        return (f"point {selection.index}{f', found by {by}' if by else ''}: {vals} ({goal} of "
                f"{len(selection.left)} of {len(self.points)} points)")


def json_answer(front: Front, selection: Selection) -> dict:
    """The selection as strict-JSON-ready data."""
    out = {"index": selection.index, "left": list(selection.left), "goal": selection.goal,
           "constraints": [{"text": c.text, "objective": c.objective, "op": c.op,
                            "bound": b} for c, b in selection.bounds]}
    if selection.index is not None:
        p = front.points[selection.index]
        out["point"] = {k: v for k, v in p.items() if k != "strategy"}
    return out
