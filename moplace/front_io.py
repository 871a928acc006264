"""Search results as files: ``front.json`` holds every front point with its full strategy.

    {"format": "moplace-front", "version": 1, "graph": ..., "cluster": ..., "searcher": ...,
     "seed": ..., "evaluations": ..., "seconds": ..., "hypervolume": ..., "reference": [...],
     "objectives": ["runtime", ...], "feasible_found": true,
     "points": [{"runtime_s": ..., "peak_comm_bytes": ..., "peak_mem_bytes": ...,
                 "feasible": true, "violation_bytes": 0.0, "strategy": {strategy file}}, ...],
     "infeasible": [... the least-violating infeasible points, same shape ...]}

`moplace evaluate --strategy front.json --point K` evaluates point K again.
"""

from __future__ import annotations

import json
from pathlib import Path

from .strategy_io import strategy_to_json

FORMAT = "moplace-front"
_KEYS = {"runtime": "runtime_s", "peak_communication": "peak_comm_bytes", "peak_memory": "peak_mem_bytes"}


def point_json(point, problem) -> dict:
    """One evaluated point: objectives under their JSON names, feasibility, the strategy."""
    values = dict(zip(problem.objectives, point.values.tolist()))
    out = {_KEYS.get(name, name): value for name, value in values.items()}
    out.update(feasible=point.feasible, violation_bytes=point.evaluation.violation,
               strategy=strategy_to_json(problem.graph, point.strategy, problem.cluster))
    return out


def result_json(result) -> dict:
    """The whole search result as a JSON-ready dict (see module docstring)."""
    p = result.problem
    return {"format": FORMAT, "version": 1, "graph": p.graph.name, "cluster": p.cluster.name,
            "searcher": result.searcher, "seed": result.seed, "status": result.status,
            "evaluations": result.n_evaluations, "seconds": result.seconds,
            "hypervolume": result.hypervolume, "reference": result.reference.tolist(),
            "objectives": list(p.objectives), "feasible_found": result.feasible_found,
            "points": [point_json(pt, p) for pt in result.front],
            "infeasible": [point_json(pt, p) for pt in result.infeasible]}


def save_result(result, directory) -> Path:
    """Write ``front.json`` into ``directory`` (created if needed); returns its path."""
    path = Path(directory) / "front.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result_json(result), indent=1) + "\n")
    return path


def front_strategy(data: dict, point: int | None, path) -> dict:
    """The strategy dict of point ``point`` of a front file's dict."""
    from .errors import FormatError

    points = data.get("points") or []
    if not points:
        raise FormatError(path, "the front holds no feasible point (see its 'infeasible' list)")
    if point is None and len(points) > 1:
        raise FormatError(path, f"the front holds {len(points)} points; choose one with --point "
                                f"(0..{len(points) - 1})")
    k = 0 if point is None else point
    if not 0 <= k < len(points):
        raise FormatError(path, f"--point {k} is out of range 0..{len(points) - 1}")
    return points[k]["strategy"]
