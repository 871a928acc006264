"""Benchmark of the list schedulers (HEFT, DPOS) in `searchers.listsched`.

1. Wall time on synthetic layered DAGs (1k, 10k, 100k ops) on 8xV100-16GB-NVLink; the first
   call (numba compile, or cache load) is timed separately on a tiny graph.
2. Each bundled real graph on 4 and 8 V100 presets: every heuristic's simulated runtime against
   the best of them all: HEFT, DPOS and m-ETF as the schedulers give them (static memory,
   groups kept), the same as searchers (the best of their candidate schedules, see
   `searchers.listsched.candidates`, or the fastest no-split baseline), OS-DPOS (FastT's rule,
   from the best list schedule) and the best baseline.

    python experiments/bench_listsched.py [--cold] [--sizes 1000,10000] [--graphs a,b] [--repeat 3]

``--cold`` points numba at an empty cache directory so the first call really compiles.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # searchers/ from a checkout

BASELINE_NAMES = ("single", "data-parallel", "round-robin", "layer-split")
PRESETS = ("4xV100-NVLink", "8xV100-16GB-NVLink")


def _best_of(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def bench_synthetic(sizes, repeat, sim_up_to=10_000):
    from moplace.core.presets import load_cluster
    from moplace.core.strategy import Strategy
    from moplace.core.synthetic import layered_dag
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher
    from moplace.optimize.problem import Problem
    from moplace.simulator.engine import simulate
    from searchers.listsched import ListSchedInput, dpos, heft

    def os_dpos(g, cl, costs, patience):
        result = search(Problem(g, cl, costs=costs), make_searcher("os-dpos", patience=patience),
                        budget=3000)
        return min(p.values[0] for p in result.front) if result.front else float("nan")

    cluster = load_cluster("8xV100-16GB-NVLink")
    tiny = ListSchedInput.from_problem(layered_dag(32), cluster)
    t = time.perf_counter()
    heft(tiny), dpos(tiny)
    first = time.perf_counter() - t
    print(f"first call (numba compile or cache load, both schedulers): {first:.2f} s\n")
    print(f"{'ops':>7} {'edges':>7} {'build input':>11} {'HEFT':>9} {'DPOS':>9}"
          f" {'HEFT est':>9} {'DPOS est':>9} {'sim/est (HEFT, DPOS)':>21}  feasible (HEFT/DPOS)")
    for n in sizes:
        g = layered_dag(n)
        t_in, inp = _best_of(lambda: ListSchedInput.from_problem(g, cluster), 1)
        t_h, rh = _best_of(lambda: heft(inp), repeat)
        t_d, rd = _best_of(lambda: dpos(inp), repeat)
        ratios = "-"
        if n <= sim_up_to:  # the simulator's view of the same strategies
            sims = [simulate(g, cluster, Strategy(r.placement, r.priority())).makespan
                    for r in (rh, rd)]
            ratios = f"{sims[0] / rh.makespan:.3f}, {sims[1] / rd.makespan:.3f}"
        print(f"{n:>7} {len(g.edges):>7} {t_in:>10.3f}s {t_h * 1e3:>7.1f}ms {t_d * 1e3:>7.1f}ms"
              f" {rh.makespan:>8.3f}s {rd.makespan:>8.3f}s {ratios:>21}"
              f"  {rh.feasible}/{rd.feasible}")


def bench_real(names):
    """Per graph and cluster: each heuristic's simulated runtime against the best of them all."""
    from moplace.core.presets import load_cluster
    from moplace.core.strategy import Strategy
    from moplace.io import load_graph
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher
    from moplace.optimize.problem import Problem
    from searchers.listsched import ListSchedInput, dpos, heft, metf

    classic = {"heft": heft, "dpos": dpos, "m-etf": metf}
    cols = ["HEFT", "DPOS", "m-ETF", "HEFT+", "DPOS+", "m-ETF+", "OS-DPOS", "baseline"]
    print("\nsimulated runtime / the best of all columns (1.000 = the best; * = over memory)")
    print("classic: the scheduler's own schedule (static memory, groups kept); +: the searcher,"
          " the best of its candidate schedules (3 memory budgets x grouped/regrouped) or the"
          " fastest no-split baseline; OS-DPOS: FastT's rule, from the best list schedule;"
          " baseline: the best of the four\n")
    print(f"{'graph':38} {'cluster':19} {'ops':>5} {'best ms':>9} "
          + " ".join(f"{c:>8}" for c in cols) + "  winning candidate (HEFT+, DPOS+, m-ETF+)")
    worst = {c: 0.0 for c in cols}
    logs = {c: [] for c in cols}
    for name in names:
        g = load_graph(name)
        for preset in PRESETS:
            cl = load_cluster(preset)
            problem = Problem(g, cl)
            inp = ListSchedInput.from_problem(g, cl, problem.costs)
            row, marks, labels = {}, {}, []
            for label, fn in classic.items():
                r = fn(inp)
                ev = problem.evaluate(Strategy(r.placement, r.priority()))
                row[cols[list(classic).index(label)]] = ev.values[0]
                marks[cols[list(classic).index(label)]] = "" if ev.feasible else "*"
            for k, label in enumerate(classic):
                searcher = make_searcher(label)
                result = search(problem, searcher, budget=1)
                point = (result.front or result.infeasible)[0]
                row[cols[3 + k]] = point.values[0]
                marks[cols[3 + k]] = "" if point.evaluation.feasible else "*"
                labels.append(searcher.fell_back or searcher.candidate)
            os_result = search(problem, make_searcher("os-dpos"), budget=3000)
            pts = os_result.front or os_result.infeasible
            row["OS-DPOS"] = min(p.values[0] for p in pts)
            marks["OS-DPOS"] = "" if os_result.front else "*"
            feasible = [ev.values[0] for ev in problem.baselines.values() if ev.feasible]
            row["baseline"] = min(feasible) if feasible else float("nan")
            marks["baseline"] = ""
            best = min(v for c, v in row.items() if not marks[c] and v == v) if any(
                not marks[c] for c in row) else min(row.values())
            for c in cols:
                if not marks[c] and row[c] == row[c]:
                    worst[c] = max(worst[c], row[c] / best)
                    logs[c].append(math.log(row[c] / best))
            print(f"{name:38} {preset:19} {len(g.ops):>5} {best * 1e3:>9.2f} "
                  + " ".join(f"{row[c] / best:>7.3f}{marks[c] or ' '}" for c in cols)
                  + "  " + "; ".join(labels), flush=True)
    print(f"{'worst ratio over all graphs (feasible only)':76} "
          + " ".join(f"{worst[c]:>7.3f} " for c in cols))
    print(f"{'geometric mean ratio (feasible only)':76} "
          + " ".join(f"{math.exp(sum(v) / len(v)) if v else float('nan'):>7.3f} "
                     for v in logs.values()))
    print("OS-DPOS is the only heuristic here that splits ops: where data parallelism wins (the"
          " PipeDream CNNs) no placement-and-order schedule comes near it")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cold", action="store_true", help="compile numba kernels from scratch")
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--graphs", default=None, help="comma-separated bundled names (default: all)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip-real", action="store_true")
    args = p.parse_args(argv)
    if args.cold:  # before numba is imported anywhere
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")
    bench_synthetic([int(s) for s in args.sizes.split(",") if s], args.repeat)
    if not args.skip_real:
        from moplace.io import list_bundled
        bench_real(args.graphs.split(",") if args.graphs else list_bundled())


if __name__ == "__main__":
    main()
