"""What a front is read against: the baselines' and the list schedulers' points, and the
front's knee (of values, or of a front.json's points).

The reference strategies are found by name through the searcher registry (the baselines and
HEFT/DPOS are registered searchers), so this module imports no searcher.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BASELINES = ("single", "data-parallel", "round-robin", "layer-split")
HEURISTICS = ("heft", "dpos")


@dataclass(frozen=True)
class Mark:
    """A reference point on a front's figures: a baseline's or a heuristic's strategy."""

    name: str
    kind: str  # "baseline" or "heuristic"
    values: np.ndarray
    feasible: bool
    strategy: object = None


def reference_marks(problem, names=BASELINES + HEURISTICS) -> list[Mark]:
    """The one strategy of each named one-shot searcher, evaluated on ``problem``. A name that
    is not registered, or whose searcher fails on this problem, is left out."""
    from ..errors import MoplaceError
    from ..optimize.plugins import make_searcher
    from ..optimize.searcher import unpack

    marks = []
    for name in names:
        try:
            searcher = make_searcher(name)
            searcher.setup(problem, np.random.default_rng(0))
            strategies = unpack(searcher.ask())[0]
        except MoplaceError:
            continue
        if not strategies:
            continue
        ev = problem.evaluate(strategies[0])
        marks.append(Mark(name, "baseline" if name in BASELINES else "heuristic",
                          np.asarray(ev.values, float), bool(ev.feasible), strategies[0]))
    return marks


def baselines_json(problem) -> dict:
    """The baselines' points on ``problem`` as front.json records them under ``baselines``:
    name -> objectives under their JSON names and feasibility. A baseline that cannot run on
    the problem is left out."""
    from objectives import json_key

    return {m.name: {**{json_key(o): float(v) for o, v in zip(problem.objectives, m.values)},
                     "feasible": m.feasible}
            for m in reference_marks(problem, BASELINES)}


def knee_index(values) -> int | None:
    """The front point closest to the ideal point once each objective is scaled to [0, 1]
    over the front (an objective equal on every point counts 0): the balanced compromise a
    reader looks for first. None for an empty front; ties go to the first point."""
    v = np.asarray(values, float)
    if v.ndim != 2 or not len(v):
        return None
    lo, hi = v.min(axis=0), v.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return int(np.argmin(np.linalg.norm((v - lo) / span, axis=1)))


def front_values(data: dict) -> np.ndarray:
    """The objective values of a front.json's points, one row per point."""
    from objectives import json_key

    keys = [json_key(name) for name in data["objectives"]]
    return np.array([[p[k] for k in keys] for p in data["points"]], float).reshape(-1, len(keys))


def front_knee(data: dict) -> int | None:
    """The knee (`knee_index`) of a front.json's points; None when it has none."""
    return knee_index(front_values(data))
