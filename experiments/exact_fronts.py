"""Searchers against exact Pareto fronts on random tiny instances (`moplace.optimize.tiny`).

    python3 experiments/exact_fronts.py [--searchers nsga2 mcmc optuna-nsga2 optuna-tpe]
                                        [--instances 20] [--instance-seed 0] [--seeds 0]
                                        [--evaluations 2000] [--json FILE]

For each searcher, search seed and instance: the hypervolume of the searcher's front as a share
of the exact front's (`moplace.optimize.tiny.hv_ratio`), and the search time. Then per searcher and seed
the lowest share, the median, and how many instances reach 95% and 99% (the issue's bars: 99%
for NSGA-II and MCMC, 95% for the Optuna samplers). The test suite checks the same bars
(`tests/test_front_quality.py`), TPE on its hardest instances only: 2000 TPE trials take 30-60
s per instance here.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from moplace.cli.progress import Display
from moplace.optimize.driver import Budget, search
from moplace.optimize.exact import exact_front
from moplace.optimize.plugins import make_searcher
from moplace.optimize.tiny import hv_ratio, tiny_instance


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--searchers", nargs="*", default=["nsga2", "mcmc", "optuna-nsga2", "optuna-tpe"])
    ap.add_argument("--instances", type=int, default=20)
    ap.add_argument("--instance-seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", type=int, default=None, help="instance indices to run")
    ap.add_argument("--seeds", nargs="*", type=int, default=[0])
    ap.add_argument("--evaluations", type=int, default=2000)
    ap.add_argument("--json", default=None, help="write the rows to this file")
    ap.add_argument("--quiet", action="store_true", help="no progress display on stderr")
    args = ap.parse_args(argv)
    which = args.only if args.only is not None else range(args.instances)
    with Display("quiet" if args.quiet else "auto") as display:
        bench = exact_fronts(which, args.instance_seed, display)
        run(args, which, bench, display)


def exact_fronts(which, instance_seed: int, display) -> dict:
    """The tiny instances ``which`` with their exact fronts, shown on ``display`` as one bar
    of 1,000 units per instance (each instance's share filled as its candidates are done)."""
    job, bench, n = display.job("exact fronts"), {}, len(which)

    for k, i in enumerate(which):
        def progress(stage, done, total, k=k, i=i):
            job(f"instance {i} ({k + 1}/{n}): {stage}", 1000 * k + 1000 * done // max(total, 1),
                1000 * n)

        problem = tiny_instance(instance_seed, i)
        bench[i] = problem, exact_front(problem, progress=progress)
    return bench


def run(args, which, bench: dict, display) -> None:
    rows = []
    for name in args.searchers:
        for seed in args.seeds:
            ratios = []
            for i in which:
                problem, exact = bench[i]
                t0 = time.perf_counter()
                result = search(problem, make_searcher(name), seed=seed,
                                budget=Budget(evaluations=args.evaluations),
                                callbacks=[display.search(f"{name} seed {seed} instance {i}")])
                seconds = time.perf_counter() - t0
                front = np.array([p.values for p in result.front]).reshape(-1, len(problem.objectives))
                ratio = hv_ratio(front, exact)
                ratios.append(ratio)
                rows.append({"searcher": name, "seed": seed, "instance": i, "ratio": ratio,
                             "seconds": seconds})
                print(f"{name} seed {seed} instance {i}: {ratio:.4f} ({seconds:.0f} s)", flush=True)
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(rows, f, indent=1)
            r = np.array(ratios)
            print(f"== {name} seed {seed}: lowest {r.min():.4f}, median {np.median(r):.4f}, "
                  f">= 95%: {np.sum(r >= 0.95)}/{r.size}, >= 99%: {np.sum(r >= 0.99)}/{r.size}",
                  flush=True)


if __name__ == "__main__":
    main()
