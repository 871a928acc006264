"""Does the NSGA-II front beat what it starts from, on every bundled graph?

    python3 experiments/front_dominance.py [--graphs a b] [--clusters 4xV100-NVLink ...]
        [--evaluations 2000] [--seed 0] [--json FILE]

For each bundled graph (default: all 26) and cluster (default: 4 and 8 V100s) it runs NSGA-II
and random search on the same evaluation budget, and every heuristic once (HEFT, DPOS,
OS-DPOS, m-ETF and the four baselines), and checks the multi-objective issue's claims:

- **dominates**: the NSGA-II front weakly dominates every strategy it was seeded with (HEFT,
  DPOS and the baselines; each feasible one is equalled or beaten in all three objectives by a
  front point);
- **HV > random**, **HV > every heuristic**: its hypervolume (normalized at 1.1 x the worst
  baseline) is higher than random search's and than each heuristic's single point.

One line per case, then a summary; exits 1 when a claim fails anywhere.
"""

from __future__ import annotations

import argparse
import json
import time

HEURISTICS = ["heft", "dpos", "os-dpos", "m-etf", "single", "data-parallel", "round-robin",
              "layer-split"]


def check(problem, evaluations: int, seed: int) -> dict:
    import numpy as np

    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher

    t0 = time.perf_counter()
    nsga2 = make_searcher("nsga2")
    front = search(problem, nsga2, budget=evaluations, seed=seed)
    seconds = time.perf_counter() - t0
    values = np.array([p.values for p in front.front]).reshape(-1, len(problem.objectives))
    seeds = [problem.evaluate(s) for s in nsga2.seed_strategies()]
    undominated = sum(1 for ev in seeds if ev.feasible
                      and not np.any(np.all(values <= ev.values, axis=1)))
    rand = search(problem, make_searcher("random"), budget=evaluations, seed=seed)
    heuristic_hv = {h: search(problem, make_searcher(h), budget=1, seed=seed).hypervolume
                    for h in HEURISTICS}
    best_h = max(heuristic_hv, key=heuristic_hv.get)
    return {"ops": len(problem.graph.ops), "hv": front.hypervolume, "seconds": seconds,
            "front": len(front.front), "seeds": len(seeds), "seeds_undominated": undominated,
            "hv_random": rand.hypervolume, "best_heuristic": best_h,
            "hv_best_heuristic": heuristic_hv[best_h],
            "dominates": undominated == 0, "beats_random": front.hypervolume > rand.hypervolume,
            "beats_heuristics": front.hypervolume > heuristic_hv[best_h]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", nargs="+")
    p.add_argument("--clusters", nargs="+", default=["4xV100-NVLink", "8xV100-16GB-NVLink"])
    p.add_argument("--evaluations", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    from bench_search import problems  # beside this file

    rows = []
    print(f"{'graph':40} {'cluster':19} {'ops':>5} {'HV':>7} {'random':>7} {'best heuristic':>22} "
          f"{'front':>5} {'time s':>6}  claims")
    for gname, cname, problem in problems(args.graphs, args.clusters):
        r = check(problem, args.evaluations, args.seed)
        r.update(graph=gname, cluster=cname)
        rows.append(r)
        failed = [k for k in ("dominates", "beats_random", "beats_heuristics") if not r[k]]
        print(f"{gname:40} {cname:19} {r['ops']:>5} {r['hv']:>7.4f} {r['hv_random']:>7.4f} "
              f"{r['best_heuristic']:>14} {r['hv_best_heuristic']:>7.4f} {r['front']:>5} "
              f"{r['seconds']:>6.1f}  {'ok' if not failed else 'FAILED: ' + ', '.join(failed)}"
              + (f" ({r['seeds_undominated']} of {r['seeds']} seeds undominated)"
                 if not r["dominates"] else ""), flush=True)
    for k in ("dominates", "beats_random", "beats_heuristics"):
        print(f"{k}: {sum(r[k] for r in rows)} of {len(rows)} cases")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r[k] for r in rows for k in ("dominates", "beats_random", "beats_heuristics")) else 1


if __name__ == "__main__":
    raise SystemExit(main())
