"""Record every searcher's front on three bundled graphs, or check that a checkout still gives
them bit for bit: the yardstick of a refactoring that must not change behaviour (issue 31).

    python3 experiments/record_fronts.py --out experiments/results/fronts-COMMIT.json
    python3 experiments/record_fronts.py --check experiments/results/fronts-COMMIT.json

Each registered searcher runs with its default settings, seed 0 and ``--budget`` evaluations
(default 300) on pipedream:gnmt and pipedream:vgg16 (4xV100-NVLink) and
dnn:OperatorGraphs/bert_l-3_training (8xV100-16GB-NVLink). Recorded per run: the number of
evaluations, the hypervolume, and per front point its objective values (as float hex, so the
comparison is exact) and its strategy's simulation key. ``--check`` runs the same searches and
lists every run whose record differs; exit 1 if any does. ``--searchers`` picks some.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CASES = [("pipedream:gnmt", "4xV100-NVLink"), ("pipedream:vgg16", "4xV100-NVLink"),
         ("dnn:OperatorGraphs/bert_l-3_training", "8xV100-16GB-NVLink")]


def record(name: str, graph: str, cluster: str, budget: int) -> dict:
    from moplace import load_cluster, load_graph
    from moplace.optimize.driver import Budget, search
    from moplace.optimize.plugins import make_searcher
    from moplace.optimize.problem import Problem

    problem = Problem(load_graph(graph), load_cluster(cluster))
    result = search(problem, make_searcher(name), budget=Budget(evaluations=budget), seed=0)
    points = sorted(([float(v).hex() for v in p.values], p.strategy.simulation_key.hex())
                    for p in result.front)
    return {"searcher": name, "graph": graph, "cluster": cluster,
            "evaluations": result.n_evaluations, "hypervolume": float(result.hypervolume).hex(),
            "front": [{"values": v, "key": k} for v, k in points]}


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).parent)
    return out.stdout.strip() or "unknown"


def main(argv=None) -> int:
    from moplace.optimize.plugins import SEARCHERS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", metavar="FILE")
    p.add_argument("--check", metavar="FILE")
    p.add_argument("--budget", type=int, default=300)
    p.add_argument("--searchers", nargs="+")
    args = p.parse_args(argv)
    if bool(args.out) == bool(args.check):
        p.error("give one of --out FILE or --check FILE")
    recorded = json.loads(Path(args.check).read_text()) if args.check else None
    names = args.searchers or (sorted({r["searcher"] for r in recorded["runs"]}) if recorded
                               else list(SEARCHERS.names()))
    budget = recorded["budget"] if recorded else args.budget
    old = {(r["searcher"], r["graph"]): r for r in recorded["runs"]} if recorded else {}
    runs, differ = [], []
    for name in names:
        for graph, cluster in CASES:
            t0 = time.perf_counter()
            r = record(name, graph, cluster, budget)
            runs.append(r)
            same = "" if not recorded else (
                "same" if old.get((name, graph)) == r else "DIFFERS")
            if same == "DIFFERS":
                differ.append((name, graph))
            print(f"{name:14} {graph:40} {r['evaluations']:>5} evals, {len(r['front']):>4} "
                  f"points, HV {float.fromhex(r['hypervolume']):.6f}  "
                  f"{time.perf_counter() - t0:6.1f} s {same}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"commit": commit(), "budget": budget,
                                              "runs": runs}, indent=1))
        print(f"recorded {len(runs)} runs in {args.out}")
        return 0
    print(f"{len(runs) - len(differ)} of {len(runs)} runs as recorded at {recorded['commit']}"
          + ("" if not differ else "; differ: " + ", ".join(f"{n} on {g}" for n, g in differ)))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
