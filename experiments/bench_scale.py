"""Scale-out figures: evaluations per second on a Dask cluster, Dask's cost per batch, sweep
trials per minute.

    python3 experiments/bench_scale.py [--graphs pipedream:resnet50 pipedream:nasnetamobile]
        [--cluster 4xV100-NVLink] [--budget 3000] [--repeats 3] [--sweep-trials 8]

1. NSGA-II (default settings: a generation of 100 per batch) on each graph, same seed, three
   ways: serial in this process; ``local:2`` (a LocalCluster of two one-thread worker
   processes); two ``dask worker`` processes and a ``dask scheduler`` started from the
   command line, as on separate machines. Evaluations per second of the search call (the
   cluster already up and the problem sent, as in a long search), median of the repeats;
   every Dask run's front is checked equal to the serial one.
2. Dask's cost per batch: a batch of one strategy of the smallest bundled graph through the
   local cluster, minus evaluating it here: the round trip (submit, schedule, pickle,
   result) a batch pays however small it is, median of 200.
3. Sweep trials per minute: ``moplace sweep`` of ``--sweep-trials`` trials (random search of
   500 evaluations of resnet50 on 2, 4 and 8 generated devices) with ``--workers 1`` and
   ``--workers 2``, MLflow and figures on as by default, whole command timed.

Results are printed and written to experiments/results/bench_scale-<commit>.txt. The
machine has 2 cores: the driver process, the scheduler and the workers share them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def _front(result):
    return [p.values.tolist() for p in result.front], result.hypervolume_history


def searches(graph, cluster, budget, repeats, lines):
    from daskprocs import DaskProcesses

    from moplace.core.presets import load_cluster
    from moplace.io import load_graph
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher
    from moplace.optimize.problem import Problem
    from moplace.scale.dask import DaskEvaluator

    problem = Problem(load_graph(graph), load_cluster(cluster))
    problem.reference  # noqa: B018 - baselines evaluated before timing
    search(problem, make_searcher("nsga2"), budget=200, seed=0)  # compile
    rates, fronts = {}, {}

    def timed(name, evaluator=None):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            r = search(problem, make_searcher("nsga2"), budget=budget, seed=0, evaluator=evaluator)
            times.append(time.perf_counter() - t0)
        rates[name] = budget / statistics.median(times)
        fronts[name] = _front(r)
        spread = f"{budget / max(times):.0f}-{budget / min(times):.0f}"
        lines.append(f"  {name:<28} {rates[name]:8.0f} evaluations/s  (runs: {spread})")
        print(lines[-1], flush=True)

    lines.append(f"{graph} ({len(problem.graph.ops)} ops) on {cluster}, NSGA-II, {budget} "
                 f"evaluations, median of {repeats}")
    print(lines[-1], flush=True)
    timed("serial")
    with DaskEvaluator("local:2") as ev:
        ev.bind(problem)
        timed("--dask local:2", ev)
    with tempfile.TemporaryDirectory() as tmp:
        procs = DaskProcesses(tmp, n_workers=2)
        try:
            with DaskEvaluator(procs.address) as ev:
                ev.bind(problem)
                timed("2 dask worker processes", ev)
        finally:
            procs.stop()
    same = all(fronts[k] == fronts["serial"] for k in fronts)
    lines.append(f"  fronts and hypervolume histories equal to serial: {same}; speed-up "
                 + ", ".join(f"{k}: {rates[k] / rates['serial']:.2f}x" for k in rates if k != "serial"))
    print(lines[-1], flush=True)


def batch_cost(lines, n=200):
    from moplace.core.baselines import baseline
    from moplace.core.presets import load_cluster
    from moplace.io import load_graph
    from moplace.optimize.problem import Problem
    from moplace.scale.dask import DaskEvaluator

    problem = Problem(load_graph("pipedream:alexnet"), load_cluster("4xV100-NVLink"))
    s = baseline("round-robin", problem.graph, problem.n_devices)
    problem.evaluate(s)
    here = []
    for _ in range(n):
        t0 = time.perf_counter()
        problem.evaluate(s)
        here.append(time.perf_counter() - t0)
    there = []
    with DaskEvaluator("local:2") as ev:
        ev.bind(problem)
        for _ in range(n):
            t0 = time.perf_counter()
            list(ev.stream(problem, [s]))
            there.append(time.perf_counter() - t0)
    q = statistics.quantiles(there, n=10)
    lines.append(f"Dask's cost per batch (alexnet, 1 strategy, local:2, {n} batches): "
                 f"{(statistics.median(there) - statistics.median(here)) * 1e3:.2f} ms median "
                 f"(round trip {statistics.median(there) * 1e3:.2f} ms, p10-p90 {q[0] * 1e3:.2f}-"
                 f"{q[-1] * 1e3:.2f} ms; evaluating here {statistics.median(here) * 1e3:.3f} ms)")
    print(lines[-1], flush=True)


SWEEP = """
[sweep]
name = "bench-{workers}"
sampler = "grid"
returns = ["best_runtime"]
trials = {trials}

[fixed]
graph = "pipedream:resnet50"
searcher = "random"
budget = 500

[space]
devices = [2, 4, 8]
"""


def sweeps(trials, lines):
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.toml"
            path.write_text(SWEEP.format(workers=workers, trials=trials))
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "moplace", "sweep", str(path), "--workers",
                                   str(workers), "--json", "--tracking-uri",
                                   f"sqlite:///{tmp}/mlflow.db"], capture_output=True, text=True,
                                  cwd=tmp)
            seconds = time.perf_counter() - t0
            data = json.loads(done.stdout)
            lines.append(f"sweep of {trials} trials, --workers {workers}: {seconds:.1f} s, "
                         f"{trials / seconds * 60:.1f} trials/min ({data['trials']['complete']} "
                         f"complete)")
            print(lines[-1], flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="+", default=["pipedream:resnet50", "pipedream:nasnetamobile"])
    ap.add_argument("--cluster", default="4xV100-NVLink")
    ap.add_argument("--budget", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sweep-trials", type=int, default=8)
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip() or "unknown"
    lines = [f"bench_scale at {commit}, {time.strftime('%Y-%m-%d %H:%M')}"]
    for graph in args.graphs:
        searches(graph, args.cluster, args.budget, args.repeats, lines)
    batch_cost(lines)
    sweeps(args.sweep_trials, lines)
    out = HERE / "results" / f"bench_scale-{commit}.txt"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
