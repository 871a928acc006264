"""A comparison of searchers on one problem as one front: the combined front.json."""

from __future__ import annotations


def comparison_json(results: dict) -> dict:
    """The combined front of several searches of one problem (name -> SearchResult) in the
    front.json format: the points no search's point dominates, each naming the ``searcher``
    that found it (the first to, on a tie), the least-violating infeasible points likewise,
    and ``histories``: each search's history, for the comparison's progress figure."""
    from ..io.fronts import history_json, point_json, recorded_problem
    from ..io.strategies import FRONT_FORMAT, FRONT_VERSION
    from ..optimize.archive import RTOL, ParetoArchive

    first = next(iter(results.values()))
    p = first.problem
    archive = ParetoArchive(len(p.objectives), rtol=RTOL)
    for name, r in results.items():
        for pt in r.front + r.infeasible:
            archive.add(pt.values, pt.evaluation.violation, (name, pt))
    front = [e.payload for e in archive.front]
    infeasible = [e.payload for e in archive.infeasible(10)]
    return {"format": FRONT_FORMAT, "version": FRONT_VERSION, "graph": p.graph.name,
            "cluster": p.cluster.name, **recorded_problem(p.graph, p.cluster),
            "searcher": "compare: " + ", ".join(results), "seed": first.seed,
            "status": "finished" if all(r.status == "finished" for r in results.values())
            else "interrupted",
            "evaluations": sum(r.n_evaluations for r in results.values()),
            "seconds": sum(r.seconds for r in results.values()),
            "hypervolume": archive.hypervolume(first.reference),
            "reference": first.reference.tolist(), "objectives": list(p.objectives),
            "feasible_found": bool(front),
            "points": [{**point_json(pt, p), "searcher": name} for name, pt in front],
            "infeasible": [{**point_json(pt, p), "searcher": name} for name, pt in infeasible],
            "histories": {name: history_json(r) for name, r in results.items()}}
