"""Simulator speed, before and after, in one run: evaluations per second, ns per op, scaling.

    python3 experiments/bench_simulator.py [--sizes 1000 10000 100000] [--seconds 2]
                                           [--no-bundled] [--json FILE]

Part 1, on synthetic layered DAGs (width 16, fan-in 2) with 4 and 8 devices (presets
4xV100-NVLink and 8xV100-16GB-NVLink), for three strategies: random placement with random
priorities (many transfers), round-robin, and data parallelism (every op split n ways, with
all-reduces; each evaluation has new random priorities, as a search's would). Columns:

- ``before``: `simulate()` without what issue 19 added around the loop: validation, the task
  graph expanded in full for every strategy (by today's builder, itself faster than the
  earlier one: `experiments/bench_simulate_api.py` times earlier commits as they were), and
  the reference event loop (`moplace.simulator.reference`, which allocates its work arrays
  per call);
- ``full``: `simulate()` now: validation, the task graph from its split configuration's cached
  skeleton, the event loop with reused work buffers;
- ``core`` / ``core before``: the compiled event loop alone on a built task graph, now and
  before;
- ``batch``: `Problem.evaluate_batch` on all cores (threads), evaluations per second, and its
  ratio to `Problem.evaluate` one by one on the same strategies.

Each figure is the best of three timed rounds (machines are shared and noisy). Then the
scaling exponent of the core loop's time against the number of ops (1 = linear), and the
bytes per op of a task graph with the loop's work buffers.

Part 2 times, for each bundled graph: parsing the file, compiling it to arrays, building the
cost matrix for 8xV100-16GB-NVLink, and one simulation of data parallelism.

Part 3 times micro-batches (issue 33): `simulate()` of a synthetic training step of 10,002
ops (`training_chain`, 3,334 layers) on 4 devices, as data parallelism and as layer-split
model parallelism, with m = 1, 4 and 16 micro-batches under 1F1B and GPipe, and each time's
ratio to m = 1 (the target: at most m); then the time per task of layer-split pipelines of
7,000 to 110,000 tasks at several m (the cost per task follows the task graph's size, as its
working set leaves the caches, not m).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from moplace import CostModel, Strategy, baseline, list_bundled, load_cluster, load_graph
from moplace.core.synthetic import layered_dag, training_chain
from moplace.optimize.problem import Problem, batch_workers
from moplace.simulator.build import build_task_graph
from moplace.simulator.engine import run_task_graph, simulate, work_sizes
from moplace.simulator.reference import reference_trace
from moplace.simulator.taskgraph import build_split_task_graph, unsplit_task_graph

CLUSTERS = {4: "4xV100-NVLink", 8: "8xV100-16GB-NVLink"}
BATCH = 16  # strategies per batch


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


def strategy_sets(graph, n_dev: int, seed: int = 0) -> dict[str, list[Strategy]]:
    """BATCH strategies of each kind (the first is the one timed alone)."""
    rng = np.random.default_rng(seed)
    n = len(graph.ops)
    dp = baseline("data-parallel", graph, n_dev)
    return {
        "random": [Strategy(rng.integers(0, n_dev, n), rng.random(n)) for _ in range(BATCH)],
        "round-robin": [baseline("round-robin", graph, n_dev)] * BATCH,
        "data-parallel": [dp.derive(priority=rng.random(n)) for _ in range(BATCH)],
    }


def simulate_before(graph, cluster, strategy, costs):
    """`simulate()` as it was: validation, the task graph built in full, the reference loop."""
    strategy.validate(graph, cluster.n_devices)
    tg = (build_split_task_graph(graph, strategy, costs)[0]
          if strategy.splits or strategy.pipelined else unsplit_task_graph(graph, strategy, costs))
    return reference_trace(tg, cluster, len(graph.ops))


def _cycler(items):
    state = {"k": 0}

    def next_item():
        state["k"] = (state["k"] + 1) % len(items)
        return items[state["k"]]
    return next_item


def bench_synthetic(sizes, seconds: float) -> list[dict]:
    rows = []
    for size in sizes:
        graph = layered_dag(size, width=16, seed=0)
        for n_dev, preset in CLUSTERS.items():
            cluster = load_cluster(preset)
            costs = CostModel(graph, cluster)
            costs.compute  # noqa: B018 - built once per (graph, cluster), as a search does
            problem = Problem(graph, cluster, costs=costs)
            for name, batch in strategy_sets(graph, n_dev).items():
                pick = _cycler(batch)
                tg = build_task_graph(graph, batch[0], costs)
                before = best_rate(lambda: simulate_before(graph, cluster, pick(), costs), seconds)
                full = best_rate(lambda: simulate(graph, cluster, pick(), costs=costs), seconds)
                core = best_rate(lambda: run_task_graph(tg, cluster, size), seconds)
                core_before = best_rate(lambda: reference_trace(tg, cluster, size), seconds)
                one = best_rate(lambda: [problem.evaluate(s) for s in batch], seconds) * BATCH
                many = best_rate(lambda: problem.evaluate_batch(batch), seconds) * BATCH
                ni, nf = work_sizes(tg.n_tasks, tg.n_compute, tg.e_src.size, n_dev,
                                    cluster.n_resources, False)
                tg_bytes = sum(v.nbytes for v in vars(tg).values() if isinstance(v, np.ndarray))
                rows.append({"ops": size, "devices": n_dev, "strategy": name, "tasks": tg.n_tasks,
                             "task_edges": int(tg.e_src.size), "before_evals_per_s": before,
                             "evals_per_s": full, "ns_per_op": 1e9 / full / size,
                             "core_evals_per_s": core, "core_ns_per_op": 1e9 / core / size,
                             "core_before_evals_per_s": core_before,
                             "batch_evals_per_s": many, "serial_evals_per_s": one,
                             "batch_workers": problem.parallel_width(),
                             "bytes_per_op": (tg_bytes + 8 * (ni + nf)) / size})
                print(_row(rows[-1]), flush=True)
    return rows


HEADER = (f"{'ops':>7} {'dev':>3} {'strategy':<14} {'tasks':>7} {'before':>8} {'full':>8} "
          f"{'x':>5} {'ns/op':>7} {'core':>8} {'core bef':>8} {'x':>5} {'ns/op':>7} "
          f"{'batch':>8} {'/serial':>7} {'B/op':>6}")


def _row(r: dict) -> str:
    return (f"{r['ops']:>7} {r['devices']:>3} {r['strategy']:<14} {r['tasks']:>7} "
            f"{r['before_evals_per_s']:>8.1f} {r['evals_per_s']:>8.1f} "
            f"{r['evals_per_s'] / r['before_evals_per_s']:>5.2f} {r['ns_per_op']:>7.1f} "
            f"{r['core_evals_per_s']:>8.1f} {r['core_before_evals_per_s']:>8.1f} "
            f"{r['core_evals_per_s'] / r['core_before_evals_per_s']:>5.2f} "
            f"{r['core_ns_per_op']:>7.1f} {r['batch_evals_per_s']:>8.1f} "
            f"{r['batch_evals_per_s'] / r['serial_evals_per_s']:>7.2f} {r['bytes_per_op']:>6.0f}")


def scaling(rows) -> list[dict]:
    """Per (devices, strategy): the exponent b of core seconds ~ ops^b (least squares in logs)."""
    out = []
    keys = sorted({(r["devices"], r["strategy"]) for r in rows})
    for dev, name in keys:
        sel = [r for r in rows if (r["devices"], r["strategy"]) == (dev, name)]
        if len(sel) < 2:
            continue
        x = np.log([r["ops"] for r in sel])
        y = np.log([1.0 / r["core_evals_per_s"] for r in sel])
        m = np.log([r["bytes_per_op"] * r["ops"] for r in sel])
        out.append({"devices": dev, "strategy": name, "time_exponent": float(np.polyfit(x, y, 1)[0]),
                    "memory_exponent": float(np.polyfit(x, m, 1)[0])})
    return out


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


def bench_micro_batches(seconds: float) -> list[dict]:
    graph = training_chain(3334)
    cluster = load_cluster(CLUSTERS[4])
    costs = CostModel(graph, cluster)
    rows = []
    for name in ("data-parallel", "layer-split"):
        base = baseline(name, graph, 4)
        one = None
        for m in (1, 4, 16):
            for schedule in ("1f1b", "gpipe"):
                s = base.with_options(micro_batches=m, schedule=("1f1b", "gpipe").index(schedule))
                rate = best_rate(lambda: simulate(graph, cluster, s, costs=costs), seconds)
                one = rate if m == 1 and schedule == "1f1b" else one
                rows.append({"strategy": name, "micro_batches": m, "schedule": schedule,
                             "ms": 1e3 / rate, "ratio": one / rate})
                r = rows[-1]
                print(f"{name:<14} {m:>3} {schedule:<6} {r['ms']:>9.2f} {r['ratio']:>7.2f} "
                      f"{'ok' if r['ratio'] <= max(m, 1) else 'over':>5}", flush=True)
    return rows


def per_task_cost(seconds: float) -> list[dict]:
    """The simulator's time per task of layer-split GPipe pipelines of about 7,000, 30,000 and
    110,000 tasks, each size at several micro-batch counts: the cost per task depends on the
    task graph's size (its working set against the caches), not on m."""
    cluster = load_cluster(CLUSTERS[4])
    rows = []
    for n_layers, m in ((3334, 1), (834, 4), (209, 16), (3334, 4), (834, 16), (3334, 16)):
        graph = training_chain(n_layers)
        costs = CostModel(graph, cluster)
        s = baseline("layer-split", graph, 4).with_options(micro_batches=m, schedule=1)
        n_tasks = build_task_graph(graph, s, costs).n_tasks
        rate = best_rate(lambda: simulate(graph, cluster, s, costs=costs), seconds)
        rows.append({"layers": n_layers, "micro_batches": m, "tasks": n_tasks,
                     "ms": 1e3 / rate, "ns_per_task": 1e9 / rate / n_tasks})
        r = rows[-1]
        print(f"{3 * n_layers:>7} ops {m:>3} micro-batches {n_tasks:>8} tasks {r['ms']:>9.2f} ms "
              f"{r['ns_per_task']:>7.1f} ns per task", flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    p.add_argument("--no-bundled", action="store_true", help="skip part 2")
    p.add_argument("--json", metavar="FILE", help="also write all figures to FILE")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    graph, cluster, strategy = _tiny()
    simulate(graph, cluster, strategy)  # compile (or load the cached compilation) outside the timings
    simulate_before(graph, cluster, strategy, CostModel(graph, cluster))
    print(f"first simulate, now and before (numba compile or cache load): "
          f"{time.perf_counter() - t0:.2f} s; batch threads: {batch_workers()}\n")
    print("evaluations per second (before / full = simulate(), core = the compiled loop alone; "
          "x = after / before;\nbatch = Problem.evaluate_batch on all cores, /serial = its ratio "
          "to Problem.evaluate one by one; B/op = bytes of task graph and work buffers per op)")
    print(HEADER)
    out = {"synthetic": bench_synthetic(args.sizes, args.seconds)}
    out["scaling"] = scaling(out["synthetic"])
    if out["scaling"]:
        print(f"\nscaling of the core loop with ops ({', '.join(map(str, args.sizes))}): "
              "exponent of time and of memory (1 = linear)")
        for s in out["scaling"]:
            print(f"  {s['devices']} devices, {s['strategy']:<14} time {s['time_exponent']:.3f}"
                  f"  memory {s['memory_exponent']:.3f}")
    if not args.no_bundled:
        print(f"\n{'bundled graph (8xV100-16GB-NVLink)':<42} {'ops':>6} {'edges':>6} {'parse ms':>9} "
              f"{'arrays ms':>10} {'costs ms':>9} {'sim DP ms':>12}")
        out["bundled"] = bench_bundled()
    print(f"\nmicro-batches: simulate() of a 10,002-op training step on {CLUSTERS[4]}, and "
          "its ratio to one micro-batch (target: at most m)")
    print(f"{'strategy':<14} {'m':>3} {'sched':<6} {'ms':>9} {'ratio':>7}")
    out["micro_batches"] = bench_micro_batches(args.seconds)
    print("\nlayer-split GPipe: time per task by task graph size")
    out["per_task"] = per_task_cost(args.seconds)
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
