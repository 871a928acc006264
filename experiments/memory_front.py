"""The time each GiB costs (issue 32): NSGA-II's front of pipedream:resnet50 on 4xV100-NVLink,
read as "the fastest plan that fits in C GiB per device" for C from 2 to 16 GiB, and a search
under a 3 GiB cap (``--memory-limit 3GiB``), which must find feasible points.

    python3 experiments/memory_front.py [--budget 3000] [--seed 0] [--json]

Deterministic for a seed; about a minute on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import moplace  # noqa: E402
from moplace.core.levers import plan_of  # noqa: E402

GIB = 2**30
CAPS = [2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 8, 12, 16]

def run(graph: str, cluster: str, budget: int, seed: int, cap_gib: float | None) -> dict:
    g, c = moplace.load_graph(graph), moplace.load_cluster(cluster)
    if cap_gib is not None:
        c = c.capped(cap_gib * GIB)
    problem = moplace.Problem(g, c)
    t0 = time.perf_counter()
    result = moplace.search(problem, moplace.make_searcher("nsga2"), budget=budget, seed=seed)
    k_rt, k_mem = problem.objectives.index("runtime"), problem.objectives.index("peak_memory")
    points = [{"runtime_ms": p.values[k_rt] * 1e3, "peak_memory_gib": p.values[k_mem] / GIB,
               **plan_of(p.strategy, g)} for p in result.front]
    return {"seconds": time.perf_counter() - t0, "points": points,
            "hypervolume": result.hypervolume}

def table(points: list[dict]) -> list[dict]:
    rows = []
    for cap in CAPS:
        fits = [p for p in points if p["peak_memory_gib"] <= cap]
        best = min(fits, key=lambda p: p["runtime_ms"]) if fits else None
        rows.append({"cap_gib": cap, **({"runtime_ms": best["runtime_ms"],
                                          "peak_memory_gib": best["peak_memory_gib"],
                                          "recomputed_groups": best["recomputed_groups"],
                                          "zero_stage": best["zero_stage"],
                                          "devices": best["devices"]} if best else {})})
    return rows

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", default="pipedream:resnet50")
    p.add_argument("--cluster", default="4xV100-NVLink")
    p.add_argument("--budget", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    free = run(args.graph, args.cluster, args.budget, args.seed, None)
    capped = run(args.graph, args.cluster, args.budget, args.seed, 3.0)
    rows = table(free["points"])
    out = {"graph": args.graph, "cluster": args.cluster, "budget": args.budget,
           "seed": args.seed, "uncapped": free, "capped_3gib": capped, "table": rows}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"nsga2, {args.budget} evaluations, seed {args.seed}: {args.graph} on {args.cluster}")
    print(f"uncapped front: {len(free['points'])} points in {free['seconds']:.0f} s; least "
          f"memory {min(p['peak_memory_gib'] for p in free['points']):.2f} GiB per device")
    feas = capped["points"]
    print(f"under a 3 GiB cap: {len(feas)} feasible points" + (
        f", fastest {min(p['runtime_ms'] for p in feas):.1f} ms, least memory "
        f"{min(p['peak_memory_gib'] for p in feas):.2f} GiB" if feas else ""))
    print(f"{'cap (GiB)':>9} {'fastest (ms)':>12} {'its peak (GiB)':>14} {'recomputed':>10} "
          f"{'ZeRO':>4} {'devices':>7} {'ms a GiB saves':>16}")
    prev = None  # (cap, fastest) of the row before: the time a GiB more saves
    for r in rows:
        if "runtime_ms" not in r:
            print(f"{r['cap_gib']:>9} {'none fits':>12}")
            continue
        step = "" if prev is None else \
            f"{(prev[1] - r['runtime_ms']) / (r['cap_gib'] - prev[0]):16.1f}"
        print(f"{r['cap_gib']:>9} {r['runtime_ms']:12.1f} {r['peak_memory_gib']:14.2f} "
              f"{r['recomputed_groups']:>10} {r['zero_stage']:>4} {r['devices']:>7} {step}")
        prev = (r["cap_gib"], r["runtime_ms"])
    return 0 if feas else 1

if __name__ == "__main__":
    sys.exit(main())
