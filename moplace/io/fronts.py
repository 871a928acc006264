"""Search results as files: ``front.json`` holds every front point with its full strategy.

    {"format": "moplace-front", "version": 1, "graph": ..., "cluster": ..., "searcher": ...,
     "seed": ..., "evaluations": ..., "seconds": ..., "hypervolume": ..., "reference": [...],
     "objectives": ["runtime", ...], "feasible_found": true,
     "points": [{"runtime_s": ..., "peak_comm_bytes": ..., "peak_mem_bytes": ...,
                 "feasible": true, "violation_bytes": 0.0, "strategy": {strategy file}}, ...],
     "infeasible": [... the least-violating infeasible points, same shape ...],
     "history": {"evaluations": [...], "hypervolume": [...],
                 "best": {"runtime_s": [...], ...}}}

``graph_source`` and ``cluster_source`` (when the search came from the command line) say where
the graph and cluster came from. ``history`` has one entry per batch the searcher was told: evaluations so far, hypervolume and
the best feasible value of each objective (``null`` before a feasible point was found).

`moplace evaluate --strategy front.json --point K` evaluates point K again.
"""

from __future__ import annotations

from pathlib import Path

from objectives import json_key

from .. import strictjson
from .strategies import FRONT_FORMAT as FORMAT
from .strategies import strategy_to_json


def point_json(point, problem) -> dict:
    """One evaluated point: objectives under their JSON names, feasibility, the strategy."""
    values = dict(zip(problem.objectives, point.values.tolist()))
    out = {json_key(name): value for name, value in values.items()}
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
            "infeasible": [point_json(pt, p) for pt in result.infeasible],
            "history": history_json(result)}


def history_json(result) -> dict:
    """How the search went, batch by batch (see module docstring)."""
    names = [json_key(name) for name in result.problem.objectives]
    best = [values for _, values in result.best_history]
    return {"evaluations": [n for n, _ in result.hypervolume_history],
            "hypervolume": [hv for _, hv in result.hypervolume_history],
            "best": {name: [None if v[k] != v[k] else v[k] for v in best]
                     for k, name in enumerate(names)}}


def sources(graph_spec, cluster_spec) -> dict:
    """Where a search's graph and cluster came from, as front.json records them
    (``graph_source``, ``cluster_source``) so its figures can be drawn again later: a bundled
    or preset name as given, a file as an absolute path."""

    def one(spec):
        if spec is None:
            return None
        path = Path(spec)  # a bundled graph or a preset is no file: kept as given
        return str(path.resolve()) if path.is_file() else str(spec)

    return {"graph_source": one(graph_spec), "cluster_source": one(cluster_spec)}


def save_result(result, directory, extra: dict | None = None) -> Path:
    """Write ``front.json`` into ``directory`` (created if needed), with ``extra`` keys (such
    as `sources`); returns its path."""
    path = Path(directory) / "front.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(strictjson.dumps({**result_json(result), **(extra or {})}, indent=1) + "\n")
    return path
