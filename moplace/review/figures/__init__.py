"""Figures of a search, headless (matplotlib's Agg; the interactive 3-D front a small page of
its own, `page3d`).

`draw_search` draws every figure of one search from its ``front.json`` content, so a live
search, an MLflow run and a file on disk give the same pictures:

- ``front_pairs.png``: the front on each pair of objectives (each pair's own front a step
  line), baselines and heuristics marked, the knee point labelled, the devices' memory on a
  peak-memory axis;
- ``front_3d.png`` and ``front_3d.html``: the front in 3-D (the HTML, a few tens of KB with no
  library and nothing from a network, rotates and tells a point's values on hover);
- ``progress.png``: hypervolume and best of each objective that changed over evaluations;
- ``gantt.png`` and ``memory.png``: the chosen point's step (the knee unless told), devices by
  time, and the memory each device holds against its capacity.

`moplace.review.figures.fronts` and `.timeline` hold the single figures.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..marks import front_values

FILES = ("front_pairs.png", "front_3d.png", "front_3d.html", "progress.png", "gantt.png",
         "memory.png")


def draw_search(data: dict, problem, out_dir, *, point: int | None = None,
                html: bool = True) -> dict[str, tuple[Path, float]]:
    """Draw every figure of the search in ``data`` (a front.json's content) for ``problem``
    into ``out_dir``; returns name -> (path, seconds it took). ``point`` picks the front point
    of the Gantt and memory figures (default: the knee; the least-violating infeasible point
    when nothing fits); ``html`` the interactive 3-D front too. The baselines, HEFT and DPOS
    are marked; a comparison's front.json (`moplace.review.comparison`) colours points by
    searcher and draws one progress line per searcher."""
    from ...core.graph import ROLES
    from ...io.strategies import strategy_from_json
    from ...simulator.engine import simulate
    from ..units import SCHEDULE_NAMES
    from ..marks import front_knee, reference_marks
    from . import fronts, timeline

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    drawn: dict[str, tuple[Path, float]] = {}

    def timed(name, fn, *args, **kw):
        t0 = time.perf_counter()
        fn(*args, out / name, **kw)
        drawn[name] = (out / name, time.perf_counter() - t0)

    objectives = list(data["objectives"])
    values = front_values(data)
    knee = front_knee(data)
    chosen, label = _chosen(data, point, knee)  # a wrong --point fails before any drawing
    marks = reference_marks(problem)
    title = f"{data.get('searcher', '')} on {data['graph']} / {data['cluster']}"
    common = dict(marks=marks, knee=knee, title=title)
    labels = [p.get("searcher") for p in data["points"]] if data.get("histories") else None
    capacity = min(d.memory_bytes for d in problem.cluster.devices)
    timed("front_pairs.png", fronts.front_pairs, values, objectives, labels=labels,
          capacity=capacity, **common)
    if len(objectives) >= 3:
        timed("front_3d.png", fronts.front_3d, values, objectives, **common)
        if html:
            timed("front_3d.html", fronts.front_3d_html, values, objectives, **common)
    hist = data.get("histories") or (
        {data.get("searcher", "search"): data["history"]} if data.get("history") else {})
    if hist:
        timed("progress.png", fronts.progress, hist, objectives, title=title)
    if chosen is not None:
        strategy = strategy_from_json(chosen["strategy"], problem.graph, problem.cluster)
        trace = simulate(problem.graph, problem.cluster, strategy, costs=problem.costs,
                         record=True)
        backward = problem.graph.arrays.role == ROLES.index("backward")
        timed("gantt.png", timeline.gantt, trace, title=f"{title}: {label}", backward=backward)
        without = {}
        plain, levers = _without_levers(strategy)
        if strategy.pipelined:  # the stash under each schedule: the other one dotted
            plain = strategy.with_options(schedule=1 - strategy.schedule)
            levers = SCHEDULE_NAMES[strategy.schedule_name]
            without = dict(other=SCHEDULE_NAMES[plain.schedule_name])
        if levers:  # what recomputation and sharding free: the same strategy without them
            without.update(lever=levers, without=simulate(
                problem.graph, problem.cluster, plain, costs=problem.costs, record=True))
        timed("memory.png", timeline.memory_over_time, trace, title=f"{title}: {label}",
              **without)
    return drawn


def _without_levers(strategy):
    """``strategy`` without recomputation and ZeRO, and the levers taken off, named ("" when
    it pulls none)."""
    levers = []
    if strategy.recompute:
        strategy = strategy.with_recompute(())
        levers.append("recomputation")
    if strategy.zero_stage:
        levers.append(f"ZeRO-{strategy.zero_stage:g}")
        strategy = strategy.with_options(zero_stage=0)
    return strategy, " and ".join(levers)


def _chosen(data: dict, point: int | None, knee: int | None):
    """The point the step figures show, and how to name it."""
    points = data.get("points") or []
    if point is not None:
        if not 0 <= point < len(points):
            from ...errors import MoplaceError

            raise MoplaceError(f"--point {point}: the front has {len(points)} points "
                               f"(0..{len(points) - 1})")
        return points[point], f"point {point}"
    if knee is not None:
        return points[knee], f"knee, point {knee}"
    infeasible = data.get("infeasible") or []
    if infeasible:
        return infeasible[0], "least-violating infeasible point"
    return None, ""
