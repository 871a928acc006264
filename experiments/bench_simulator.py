"""Simulator speed: evaluations per second and ns per op, and the cost of loading real graphs.

    python3 experiments/bench_simulator.py [--sizes 1000 10000 100000] [--seconds 2] [--json]

Part 1 times `simulate()` end to end (validation, task-graph build, compiled event loop) and the
compiled loop alone, on synthetic layered DAGs (width 16, fan-in 2) with 4 and 8 devices
(presets 4xV100-NVLink and 8xV100-16GB-NVLink), for three strategies: random placement with
random priorities (many transfers), round-robin, and data parallelism (every op split n ways,
with all-reduces). One thread: the simulator is sequential code.

Part 2 times, for each bundled graph: parsing the file, compiling it to arrays, building the
cost matrix for 8xV100-16GB-NVLink, and one simulation of data parallelism.

Machines are shared and noisy: each figure is the best of several timed rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from moplace import CostModel, Strategy, baseline, list_bundled, load_cluster, load_graph  # noqa: E402
from moplace.core.synthetic import layered_dag  # noqa: E402
from moplace.simulator.engine import run_task_graph, simulate  # noqa: E402
from moplace.simulator.build import build_task_graph  # noqa: E402

CLUSTERS = {4: "4xV100-NVLink", 8: "8xV100-16GB-NVLink"}


def best_rate(fn, seconds: float, rounds: int = 3) -> float:
    """Best calls per second of ``fn`` over ``rounds`` rounds of about ``seconds`` / rounds."""
    fn()
    best = 0.0
    for _ in range(rounds):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds / rounds:
                break
        best = max(best, n / elapsed)
    return best


def strategies(graph, n_dev: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    n = len(graph.ops)
    return {
        "random": Strategy(rng.integers(0, n_dev, n), rng.random(n)),
        "round-robin": baseline("round-robin", graph, n_dev),
        "data-parallel": baseline("data-parallel", graph, n_dev),
    }


def bench_synthetic(sizes, seconds: float) -> list[dict]:
    rows = []
    for size in sizes:
        graph = layered_dag(size, width=16, seed=0)
        for n_dev, preset in CLUSTERS.items():
            cluster = load_cluster(preset)
            costs = CostModel(graph, cluster)
            costs.compute  # noqa: B018 - built once per (graph, cluster), as a search does
            for name, s in strategies(graph, n_dev).items():
                tg = build_task_graph(graph, s, costs)
                full = best_rate(lambda: simulate(graph, cluster, s, costs=costs), seconds)
                core = best_rate(lambda: run_task_graph(tg, cluster, size), seconds)
                rows.append({"ops": size, "devices": n_dev, "strategy": name, "tasks": tg.n_tasks,
                             "task_edges": int(tg.e_src.size), "evals_per_s": full,
                             "ns_per_op": 1e9 / full / size, "core_evals_per_s": core,
                             "core_ns_per_op": 1e9 / core / size})
                print(_row(rows[-1]), flush=True)
    return rows


def _row(r: dict) -> str:
    return (f"{r['ops']:>7} {r['devices']:>3} {r['strategy']:<14} {r['tasks']:>7} "
            f"{r['evals_per_s']:>10.1f} {r['ns_per_op']:>9.1f} {r['core_evals_per_s']:>10.1f} "
            f"{r['core_ns_per_op']:>9.1f}")


def bench_bundled() -> list[dict]:
    cluster = load_cluster(CLUSTERS[8])
    rows = []
    for name in list_bundled():
        t0 = time.perf_counter()
        graph = load_graph(name)
        t1 = time.perf_counter()
        graph.arrays  # noqa: B018
        graph.groups  # noqa: B018
        t2 = time.perf_counter()
        costs = CostModel(graph, cluster)
        costs.compute  # noqa: B018
        t3 = time.perf_counter()
        simulate(graph, cluster, baseline("data-parallel", graph, cluster.n_devices), costs=costs)
        t4 = time.perf_counter()
        rows.append({"graph": name, "ops": len(graph.ops), "edges": len(graph.edges),
                     "parse_ms": (t1 - t0) * 1e3, "compile_ms": (t2 - t1) * 1e3,
                     "costs_ms": (t3 - t2) * 1e3, "simulate_ms": (t4 - t3) * 1e3})
        r = rows[-1]
        print(f"{name:<42} {r['ops']:>6} {r['edges']:>6} {r['parse_ms']:>9.2f} "
              f"{r['compile_ms']:>10.2f} {r['costs_ms']:>9.2f} {r['simulate_ms']:>12.2f}", flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    p.add_argument("--no-bundled", action="store_true", help="skip part 2")
    p.add_argument("--json", metavar="FILE", help="also write all figures to FILE")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    simulate(*_tiny())  # compile (or load the cached compilation) outside the timings
    print(f"first simulate (numba compile or cache load): {time.perf_counter() - t0:.2f} s\n")
    print(f"{'ops':>7} {'dev':>3} {'strategy':<14} {'tasks':>7} {'evals/s':>10} {'ns/op':>9} "
          f"{'core ev/s':>10} {'core ns/op':>9}")
    out = {"synthetic": bench_synthetic(args.sizes, args.seconds)}
    if not args.no_bundled:
        print(f"\n{'bundled graph (8xV100-16GB-NVLink)':<42} {'ops':>6} {'edges':>6} {'parse ms':>9} "
              f"{'arrays ms':>10} {'costs ms':>9} {'sim DP ms':>12}")
        out["bundled"] = bench_bundled()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def _tiny():
    graph = layered_dag(32, width=4)
    cluster = load_cluster(CLUSTERS[4])
    return graph, cluster, baseline("data-parallel", graph, 4)


if __name__ == "__main__":
    raise SystemExit(main())
