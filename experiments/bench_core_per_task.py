"""The event loop's cost per task on data parallelism (one bucket per gradient, nothing in
place), for comparing checkouts: the same task graphs on a checkout from before issue 32 and
after (run it with each checkout on PYTHONPATH; a checkout without strategy options or in-place
ops simulates the same model).

    PYTHONPATH=/path/to/checkout python3 experiments/bench_core_per_task.py [--rounds 5]

Prints, per (graph, cluster): tasks, the best of ``--rounds`` rounds of 100 runs of the loop
(microseconds per run) and nanoseconds per task. Machines are shared and noisy: alternate the
checkouts and compare the best figures.
"""

from __future__ import annotations

import argparse
import time

import moplace
from moplace.core.baselines import baseline
from moplace.costs.costmodel import CostModel
from moplace.simulator.build import build_task_graph
from moplace.simulator.engine import run_task_graph

CASES = [("pipedream:resnet50", "8xV100-16GB-NVLink"), ("pipedream:gnmt", "2x4xV100-IB100"),
         ("pipedream:vgg16", "4xV100-NVLink")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    for gname, cname in CASES:
        g, c = moplace.load_graph(gname), moplace.load_cluster(cname)
        s = baseline("data-parallel", g, c.n_devices)
        if hasattr(s, "with_options"):  # after issue 32: the model before it
            s, costs = s.with_options(bucket_bytes=0), CostModel(g, c, inplace=False)
        else:
            costs = CostModel(g, c)
        tg = build_task_graph(g, s, costs)
        run_task_graph(tg, c, len(g.ops))  # compiled
        best = float("inf")
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for _ in range(100):
                run_task_graph(tg, c, len(g.ops))
            best = min(best, (time.perf_counter() - t0) / 100)
        print(f"{gname:<20} {cname:<20} {tg.n_tasks:>6} tasks {best * 1e6:>8.0f} us "
              f"{best / tg.n_tasks * 1e9:>6.0f} ns/task")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
