"""Delta simulation (`moplace.simulator.delta`): how much faster MCMC's proposals are simulated.

    python3 experiments/bench_delta.py [--graphs NAME ...] [--devices 4 8] [--evaluations 2000]
                                       [--seed 0] [--json FILE]

Two measurements per bundled graph and preset of 4 / 8 V100s:

1. **Per evaluation.** From a strategy with splits (data parallelism) and from a random genome,
   200 random neighbours each (one unsplit group moved to another device, or two ops'
   priorities swapped, half and half) are evaluated twice: decoded and simulated in full, and
   derived from their parent and simulated on its patched task graph. The mean time of each,
   and their ratio. The objective values must be identical (the run stops otherwise).
2. **In the search.** MCMC at ``--evaluations`` with ``delta=True`` (the default) and
   ``delta=False``: search seconds, their ratio, the share of proposals simulated on a patched
   task graph, and whether the two fronts are identical (they must be: the patch is exact).

On graphs without split options (the NeurIPS'20 graphs) no strategy has a split, nothing is
patched (a task graph without splits is cheaper to build than to patch), and the "patched"
figures are those of a derived strategy whose task graph is built in full.

Machines are shared and noisy: compare the ratios, measured back to back.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from moplace import baseline, list_bundled, load_cluster, load_graph  # noqa: E402
from moplace.optimize.driver import Budget, search  # noqa: E402
from moplace.optimize.plugins import make_searcher  # noqa: E402
from moplace.optimize.problem import Problem  # noqa: E402

CLUSTERS = {4: "4xV100-NVLink", 8: "8xV100-16GB-NVLink"}


def neighbours(space, x: np.ndarray, n: int, rng) -> list[np.ndarray]:
    """``n`` neighbours of genome ``x`` that a patch can simulate: an unsplit group moved, or
    two priorities swapped."""
    G = space.n_groups
    unsplit = np.flatnonzero(x[G:2 * G] == 0)
    out = []
    while len(out) < n:
        y = x.copy()
        if unsplit.size and rng.random() < 0.5:
            g = int(rng.choice(unsplit))
            y[g] = (y[g] + 1 + rng.integers(space.n_devices - 1)) % space.n_devices
        else:
            i, j = rng.choice(space.n_ops, 2, replace=False)
            y[2 * G + i], y[2 * G + j] = y[2 * G + j], y[2 * G + i]
        out.append(y)
    return out


def per_evaluation(p: Problem, x: np.ndarray, rng, n: int = 200) -> tuple[float, float]:
    """Mean seconds per neighbour of ``x``: full, and patched from ``x``'s task graph."""
    space, group = p.genome, p.graph.arrays.group
    parent = space.decode(x)
    ys = neighbours(space, x, n, rng)
    t0 = time.perf_counter()
    full = [p.evaluate(space.decode(y)).values for y in ys]
    t1 = time.perf_counter()
    p.evaluate(parent)  # the problem's simulator now holds the parent's task graph
    t1 = time.perf_counter()
    delta = []
    for y in ys:
        s = parent.derive(placement=y[:space.n_groups].astype(np.int64)[group],
                          priority=y[space.priorities])
        delta.append(p.evaluate(s, parent).values)
    t2 = time.perf_counter()
    if not np.array_equal(np.array(full), np.array(delta)):
        raise SystemExit(f"{p}: a patched simulation differs from the full one")
    return (t1 - t0) / n, (t2 - t1) / n


def in_search(p: Problem, evaluations: int, seed: int) -> dict:
    out = {}
    for delta in (True, False):
        s = make_searcher("mcmc", delta=delta)
        before = p.simulator.patched
        r = search(p, s, budget=Budget(evaluations=evaluations), seed=seed)
        out[delta] = (r, p.simulator.patched - before)
    (on, patched), (off, _) = out[True], out[False]
    same = sorted(map(tuple, (q.values.tolist() for q in on.front))) == \
        sorted(map(tuple, (q.values.tolist() for q in off.front)))
    return {"seconds_delta": on.seconds, "seconds_full": off.seconds,
            "speedup": off.seconds / on.seconds, "patched_share": patched / on.n_evaluations,
            "hypervolume": on.hypervolume, "same_front": bool(same)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="*", default=None, help="bundled graph names (default: all)")
    ap.add_argument("--devices", nargs="*", type=int, default=[4, 8], choices=sorted(CLUSTERS))
    ap.add_argument("--evaluations", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the rows to this file")
    args = ap.parse_args(argv)
    graphs = args.graphs or list_bundled()
    rows = []
    print("| graph | GPUs | full, data-par. (ms) | patched (ms) | x | full, random (ms) | patched (ms) "
          "| x | MCMC full (s) | MCMC delta (s) | x | patched share | same front |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in graphs:
        graph = load_graph(name)
        for n in args.devices:
            p = Problem(graph, load_cluster(CLUSTERS[n]))
            rng = np.random.default_rng(args.seed)
            dp = p.genome.encode(baseline("data-parallel", graph, n))
            fd, pd = per_evaluation(p, dp, rng)
            fr, pr = per_evaluation(p, p.genome.sample(1, rng)[0], rng)
            row = {"graph": name, "devices": n, "full_dp_s": fd, "patched_dp_s": pd,
                   "full_random_s": fr, "patched_random_s": pr,
                   **in_search(p, args.evaluations, args.seed)}
            rows.append(row)
            print(f"| {name.split(':')[-1]} | {n} | {1e3 * fd:.3f} | {1e3 * pd:.3f} | {fd / pd:.1f} "
                  f"| {1e3 * fr:.3f} | {1e3 * pr:.3f} | {fr / pr:.1f} | {row['seconds_full']:.1f} "
                  f"| {row['seconds_delta']:.1f} | {row['speedup']:.2f} "
                  f"| {row['patched_share']:.0%} | {'yes' if row['same_front'] else 'NO'} |",
                  flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
