"""A search at scale's front as a file: ``front.json`` of regular plans on a pod
(`moplace.optimize.regularsearch`), read by ``show`` and ``export`` as any front.

    {"format": "moplace-front", "version": 6, "kind": "regular", "graph": ..., "cluster": ...,
     "searcher": "random|nsga2", "space": "megatron|torchtitan", "gbs": 2048, "seed": ...,
     "status": ..., "evaluations": ..., "seconds": ..., "plans_in_space": ..., "unfit": ..., "refused": [{"plan": ..., "why": ...}],
     "hypervolume": ..., "reference": [...], "objectives": [...], "feasible_found": true,
     "seeds": [{"label": ..., "plan": "tp=8,..."}], "layers": 126,
     "points": [{"runtime_s": ..., "peak_comm_bytes": ..., "peak_mem_bytes": ...,
                 "feasible": true, "violation_bytes": 0.0,
                 "regular": {"spec": "tp=8,...", "text": "TP8 PP16 DP128, ...",
                             "summary": "TP8 PP16 DP128, 400 TFLOP/s/GPU, 41% MFU",
                             "degrees": {"tp": 8, ...}},
                 "throughput": {"tokens_per_s_per_gpu": ..., "tflops_per_gpu": ..., "mfu": ...,
                                "flops_note": ...},
                 "losses": {"compute": ..., ...}, "how": "simulated ...; modelled ..."}, ...],
     "infeasible": [...]}

``micro_batch_graphs`` (a search with ``--micro-batch-graphs``: ``{"1": path, "2": path}``)
names the graph each micro-batch size's points were evaluated on (`graph_of_point`);
``regular.spec`` is the plan as ``evaluate --plan`` reads it; ``losses`` the step's seconds on
its slowest stage by cause; ``unfit`` the plans whose weights, gradients and optimizer state
alone exceed a GPU's memory (counted, never simulated). The hypervolume is normalized against
1.1 times the worst evaluated feasible value of each objective (`reference`).
"""

from __future__ import annotations

from objectives import json_key

from .strategies import FRONT_FORMAT, FRONT_VERSION


def regular_point_json(point) -> dict:
    """One evaluated regular plan (module docstring)."""
    ev = point.evaluation
    out = {json_key(name): float(v) for name, v in zip(ev.names, point.values.tolist())}
    p = point.plan
    rate = ({"tokens_per_s_per_gpu": ev.tokens_per_s_per_gpu, "tflops_per_gpu":
             ev.tflops_per_gpu, "mfu": ev.mfu, "flops_note": ev.flops_note}
            if ev.tokens_per_step else None)
    out.update(feasible=bool(point.feasible), violation_bytes=float(point.violation),
               regular={"spec": p.spec(), "text": p.text(), "summary": ev.summary(),
                        "degrees": {k: getattr(p, k) for k in ("tp", "cp", "pp", "v", "dp",
                                                               "ep", "mbs", "gbs")}},
               **({"throughput": rate} if rate else {}),
               losses={k: float(v) for k, v in ev.losses.items()}, how=ev.how())
    return out


def regular_front_json(result, graph, pod, sources: dict, notes: list[str]) -> dict:
    """The whole search at scale as a front.json's content (module docstring)."""
    pts = result.points
    return {"format": FRONT_FORMAT, "version": FRONT_VERSION, "kind": "regular",
            "graph": graph.name, "cluster": pod.name, "searcher": result.method,
            "space": result.space.framework, "gbs": result.space.gbs, "seed": result.seed,
            "status": result.status, "evaluations": len(pts), "seconds": result.seconds,
            "plans_in_space": result.n_plans, "unfit": result.unfit,
            "refused": [{"plan": p.spec(), "why": why} for p, why in result.refused],
            "hypervolume": float(result.hypervolume), "reference": result.reference,
            "objectives": list(result.objectives), "feasible_found": bool(result.front),
            "seeds": [{"label": label, "plan": p.spec()} for label, p in result.seeds],
            "layers": (graph.metadata.get("layers") or {}).get("count"),
            **sources,
            "points": [regular_point_json(pts[k]) for k in result.front],
            "infeasible": [regular_point_json(pts[k]) for k in result.infeasible_front],
            "notes": notes}


def graph_of_point(data: dict, mbs) -> str | None:
    """The graph a front.json's point of micro-batch ``mbs`` was evaluated on: its size's in
    ``micro_batch_graphs`` (a search with ``--micro-batch-graphs``), else ``graph_source``."""
    by = data.get("micro_batch_graphs")
    if isinstance(by, dict) and isinstance(by.get(str(mbs)), str):
        return by[str(mbs)]
    return data.get("graph_source")
