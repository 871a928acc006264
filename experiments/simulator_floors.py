"""How fast the compiled event loop can get on this machine: the loop with parts of its work
taken away (the results are then wrong; only the rates count).

    python3 experiments/simulator_floors.py [--ops 10000] [--seconds 3]

On a synthetic layered graph (width 16, fan-in 2), 4xV100-NVLink, random placement, prints
evaluations per second and ns per op of the compiled loop (`run_task_graph`: work buffers
reused, the trace made from its outputs, as `bench_simulator.py`'s "core" column) for:

- ``as is``: random priorities, the transfers the placement needs;
- ``no transfers``: every edge marked local, so no transfer is issued or arrives: what is left
  is each task's ready-heap push and pop, its finish event, and the walks over its edges;
- ``no transfers, topological priorities``: the same with priorities that follow the op
  order, so the ready heaps hardly sift;

and the time numpy takes to sort the priorities once (what ranking them per evaluation, for a
heap-free ready queue, would cost). Issue 19's target was 2,000 evaluations per second of the
loop (50 ns per op) with transfers.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from moplace import CostModel, Strategy, load_cluster
from moplace.core.synthetic import layered_dag
from moplace.simulator.build import build_task_graph
from moplace.simulator.engine import run_task_graph


def loop_rate(tg, cluster, n_ops: int, seconds: float) -> float:
    """Best evaluations per second of the compiled loop on ``tg`` (with the trace it returns,
    as bench_simulator's "core" column)."""
    run_task_graph(tg, cluster, n_ops)
    best = 0.0
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 3:
            run_task_graph(tg, cluster, n_ops)
            n += 1
        best = max(best, n / (time.perf_counter() - t0))
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=10000)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args(argv)
    n = args.ops
    graph, cluster = layered_dag(n, width=16, seed=0), load_cluster("4xV100-NVLink")
    costs = CostModel(graph, cluster)
    rng = np.random.default_rng(0)
    placement = rng.integers(0, cluster.n_devices, n)
    cases = (("as is", rng.random(n), False),
             ("no transfers", rng.random(n), True),
             ("no transfers, topological priorities", -np.arange(n, dtype=np.float64), True))
    print(f"{n} ops, 4xV100-NVLink, random placement; the compiled loop (run_task_graph)")
    for name, priority, no_transfers in cases:
        tg = build_task_graph(graph, Strategy(placement, priority), costs)
        if no_transfers:
            tg = dataclasses.replace(tg, e_local=np.ones_like(tg.e_local))
        rate = loop_rate(tg, cluster, n, args.seconds)
        moved = int(np.count_nonzero(~tg.e_local))
        print(f"  {name:<38} {rate:>8.0f} evaluations/s {1e9 / rate / n:>7.1f} ns/op"
              f"  ({moved} edges between devices)")
    priority = rng.random(n)
    t0 = time.perf_counter()
    for _ in range(100):
        np.argsort(priority)
    print(f"  numpy argsort of {n} priorities: {(time.perf_counter() - t0) * 10:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
