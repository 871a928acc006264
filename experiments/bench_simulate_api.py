"""`simulate()` through the public API only, so that the same file times any checkout.

    python3 experiments/bench_simulate_api.py [--sizes 1000 10000 100000] [--seconds 1.5]
                                              [--json FILE]
    PYTHONPATH=/path/to/old/checkout python3 experiments/bench_simulate_api.py ...

For synthetic layered graphs (width 16, fan-in 2) on 4xV100-NVLink and 8xV100-16GB-NVLink and
three kinds of strategy (random placement and priorities; round-robin; data parallelism, each
evaluation with new random priorities, as a search's would), prints evaluations per second of
`moplace.simulate` with the cost model built once (as a search does), and ns per op. Eight
strategies of each kind are cycled; each figure is the best of three rounds. `experiments/
bench_simulator.py` has the finer figures (the compiled loop alone, batches, memory) for the
current code; this one is for before/after across checkouts, run one right after the other.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np

CLUSTERS = {4: "4xV100-NVLink", 8: "8xV100-16GB-NVLink"}


def strategies(graph, n_dev: int, kind: str, count: int = 8):
    from moplace import Strategy, baseline

    rng = np.random.default_rng(0)
    n = len(graph.ops)
    if kind == "random":
        return [Strategy(rng.integers(0, n_dev, n), rng.random(n)) for _ in range(count)]
    if kind == "round-robin":
        return [baseline("round-robin", graph, n_dev)] * count
    dp = baseline("data-parallel", graph, n_dev)
    return [Strategy(dp.placement, rng.random(n), dict(dp.splits)) for _ in range(count)]


def best_rate(items, fn, seconds: float) -> float:
    for s in items:  # first calls: compile or cache loads, split tables, skeletons
        fn(s)
    best = 0.0
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 3:
            fn(items[n % len(items)])
            n += 1
        best = max(best, n / (time.perf_counter() - t0))
    return best


def main(argv=None) -> int:
    from moplace import CostModel, load_cluster, simulate
    from moplace.core.synthetic import layered_dag

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    import moplace
    here = Path(moplace.__file__).resolve().parent.parent
    rev = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "?"
    print(f"# moplace from {here} ({rev})")
    print(f"{'ops':>7} {'dev':>3} {'strategy':<14} {'evals/s':>9} {'ns/op':>8}")
    rows = []
    for size in args.sizes:
        graph = layered_dag(size, width=16, seed=0)
        for n_dev, preset in CLUSTERS.items():
            cluster = load_cluster(preset)
            costs = CostModel(graph, cluster)
            costs.compute  # noqa: B018 - built once, as a search does
            for kind in ("random", "round-robin", "data-parallel"):
                items = strategies(graph, n_dev, kind)
                rate = best_rate(items, lambda s: simulate(graph, cluster, s, costs=costs),
                                 args.seconds)
                rows.append({"ops": size, "devices": n_dev, "strategy": kind,
                             "evals_per_s": rate, "ns_per_op": 1e9 / rate / size})
                print(f"{size:>7} {n_dev:>3} {kind:<14} {rate:>9.1f} {1e9 / rate / size:>8.1f}",
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"revision": rev, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
