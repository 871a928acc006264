"""How fast searches evaluate: NSGA-II and MCMC on a real graph and a 10,000-op graph.

    python3 experiments/bench_search_speed.py [--evaluations 2000] [--json FILE]

For pipedream:resnet50 (461 ops) and a synthetic layered graph of 10,000 ops (width 16), both
on 4xV100-NVLink, NSGA-II and MCMC each run a search of ``--evaluations`` evaluations (seed
0); printed: the search's wall seconds, evaluations per second, and the hypervolume reached
(so that a faster search is seen to find the same front). The problem's baselines are built
before the clock starts. Uses the public API only, so the same file times an older checkout.
"""

from __future__ import annotations

import argparse
import json
import time


def main(argv=None) -> int:
    from moplace import load_cluster, load_graph, make_searcher, search
    from moplace.core.synthetic import layered_dag
    from moplace.optimize.problem import Problem

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--evaluations", type=int, default=2000)
    p.add_argument("--searchers", nargs="+", default=["nsga2", "mcmc"])
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    cluster = load_cluster("4xV100-NVLink")
    rows = []
    print(f"{'graph':26} {'ops':>6} {'searcher':9} {'evals':>6} {'seconds':>8} {'evals/s':>8} "
          f"{'hypervolume':>11}")
    for name, graph in (("pipedream:resnet50", load_graph("pipedream:resnet50")),
                        ("layered-10k", layered_dag(10000, width=16))):
        problem = Problem(graph, cluster)
        problem.baselines  # noqa: B018 - built once, outside the timings
        for searcher in args.searchers:
            t0 = time.perf_counter()
            result = search(problem, make_searcher(searcher), budget=args.evaluations, seed=0)
            seconds = time.perf_counter() - t0
            rows.append({"graph": name, "ops": len(graph.ops), "searcher": searcher,
                         "evaluations": result.n_evaluations, "seconds": seconds,
                         "evals_per_s": result.n_evaluations / seconds,
                         "hypervolume": result.hypervolume})
            r = rows[-1]
            print(f"{name:26} {r['ops']:>6} {searcher:9} {r['evaluations']:>6} {seconds:>8.1f} "
                  f"{r['evals_per_s']:>8.1f} {r['hypervolume']:>11.4f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
