"""Benchmark of the list schedulers (HEFT, DPOS) in `searchers.listsched`.

1. Wall time on synthetic layered DAGs (1k, 10k, 100k ops) on 8xV100-16GB-NVLink; the first
   call (numba compile, or cache load) is timed separately on a tiny graph.
2. Each bundled real graph on 4 and 8 V100 presets: simulated runtime of HEFT and DPOS relative
   to data parallelism and to the best of the four baselines, plus the scheduler's own makespan
   relative to the simulator's; and OS-DPOS relative to data parallelism, with FastT's rule
   (stop at the first critical-path op whose split does not help) and trying every
   critical-path op (``patience`` unbounded, at most 3,000 evaluations).

    python experiments/bench_listsched.py [--cold] [--sizes 1000,10000] [--graphs a,b] [--repeat 3]

``--cold`` points numba at an empty cache directory so the first call really compiles.
"""

from __future__ import annotations

import argparse
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
    from moplace.core.baselines import baseline
    from moplace.core.presets import load_cluster
    from moplace.core.strategy import Strategy
    from moplace.costs.costmodel import CostModel
    from moplace.io import load_graph
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher
    from moplace.optimize.problem import Problem
    from moplace.simulator.engine import simulate
    from searchers.listsched import ListSchedInput, dpos, heft

    def os_dpos(g, cl, costs, patience):
        result = search(Problem(g, cl, costs=costs), make_searcher("os-dpos", patience=patience),
                        budget=3000)
        return min(p.values[0] for p in result.front) if result.front else float("nan")

    print(f"\n{'graph':38} {'cluster':19} {'ops':>5} {'DP ms':>9} {'best baseline':>22}"
          f" {'HEFT/DP':>8} {'HEFT/best':>9} {'DPOS/DP':>8} {'DPOS/best':>9}"
          f" {'HEFT sim/est':>12} {'DPOS sim/est':>12} {'OS/DP':>7} {'OS-all/DP':>9}")
    for name in names:
        g = load_graph(name)
        for preset in PRESETS:
            cl = load_cluster(preset)
            costs = CostModel(g, cl)
            base = {b: simulate(g, cl, baseline(b, g, cl.n_devices), costs=costs).makespan
                    for b in BASELINE_NAMES}
            best = min(base, key=base.get)
            inp = ListSchedInput.from_problem(g, cl, costs)
            cols = {}
            for sched in (heft, dpos):
                r = sched(inp)
                tr = simulate(g, cl, Strategy(r.placement, r.priority()), costs=costs)
                mark = "" if (r.feasible and tr.feasible) else "*"  # * = over memory
                cols[sched.__name__] = (tr.makespan, r.makespan, mark)
            dp = base["data-parallel"]
            (hs, he, hm), (ds, de, dm) = cols["heft"], cols["dpos"]
            os1, osall = os_dpos(g, cl, costs, 1), os_dpos(g, cl, costs, 10**9)
            print(f"{name:38} {preset:19} {len(g.ops):>5} {dp * 1e3:>9.2f}"
                  f" {best:>13} {base[best] * 1e3:>8.2f}"
                  f" {hs / dp:>7.3f}{hm or ' '} {hs / base[best]:>9.3f}"
                  f" {ds / dp:>7.3f}{dm or ' '} {ds / base[best]:>9.3f}"
                  f" {hs / he:>12.3f} {ds / de:>12.3f} {os1 / dp:>7.3f} {osall / dp:>9.3f}", flush=True)
    print("\nratios < 1: faster than the reference; * = infeasible (static or simulated memory);"
          "\nsim/est = simulated makespan / the scheduler's own estimate; OS = OS-DPOS (FastT's"
          " stopping rule), OS-all = OS-DPOS trying every critical-path op")


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
