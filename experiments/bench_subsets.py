"""Issue 30's subset invariant: every searcher's best runtime against data parallelism on the
best subset of the cluster's devices, and against the best seed.

    python3 experiments/bench_subsets.py [--graphs a,b] [--clusters c,d] [--searchers s,t]
        [--budget 2000] [--seeds 0,1] [--out FILE.json]

Per graph x cluster (default: the 11 bundled PipeDream graphs x 4xV100-NVLink,
8xV100-16GB-NVLink, 2x4xV100-IB100):

1. **best subset DP**: data parallelism (`moplace.core.baselines.on_devices`) on EVERY
   non-empty subset of the cluster's devices (all 2^n - 1, devices in increasing order), the
   fastest feasible one and its subset; not only the subsets the seeds use
   (`moplace.core.subsets.device_subsets`), so the check does not take the seeds' word for
   which subsets matter;
2. **best seed**: the fastest feasible strategy of `moplace.optimize.seeds.seed_strategies`
   (what every seeded searcher and os-dpos start from), and its label;
3. each searcher of ``--searchers`` (default os-dpos, nsga2, mcmc, optuna-nsga2; hierarchical
   and trinity only when named: they need TensorFlow and are slow), ``--budget`` evaluations,
   each seed of ``--seeds``: the best feasible runtime of its front (the worst over seeds in
   the table, every run in the JSON).

Columns: ``holds`` = every searcher's best <= best subset DP (relative tolerance 1e-9), for
every seed; ``<=seed`` = the same against the best seed (section 1 of the issue). A searcher
with no feasible point counts as infinitely slow. Summary: rows that hold, and each
searcher's mean ratio to the best subset DP.

Progress goes to stderr; the table to stdout. Rows are written to ``--out`` (default
experiments/results/bench_subsets-<commit>.json), rewritten after every row so a stopped run
keeps its rows; the printed table is also written next to it as ``.txt`` at the end.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # searchers/ from a checkout

PIPEDREAM = ["alexnet", "vgg16", "gnmt", "squeezenet1_0", "resnet18", "resnet50", "resnext50",
             "resnet101", "resnext101", "inception_v3", "nasnetamobile"]
DEFAULT_GRAPHS = [f"pipedream:{g}" for g in PIPEDREAM]
DEFAULT_CLUSTERS = ["4xV100-NVLink", "8xV100-16GB-NVLink", "2x4xV100-IB100"]
DEFAULT_SEARCHERS = ["os-dpos", "nsga2", "mcmc", "optuna-nsga2"]
RTOL = 1e-9


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=HERE).stdout.strip()
    return out or "unknown"


def dirty() -> bool:
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                         capture_output=True, text=True, cwd=HERE).stdout
    return bool(out.strip())


def best_feasible(evaluations, labels):
    """(runtime, label) of the fastest feasible evaluation, or (inf, None)."""
    best, label = math.inf, None
    for ev, lab in zip(evaluations, labels):
        if ev.feasible and ev.values[0] < best:
            best, label = float(ev.values[0]), lab
    return best, label


def best_subset_dp(problem):
    """Data parallelism on every non-empty subset of the devices: (runtime, subset, count)."""
    from moplace.core.baselines import on_devices

    n = problem.n_devices
    subsets = [c for k in range(1, n + 1) for c in combinations(range(n), k)]
    strategies = [on_devices("data-parallel", problem.graph, s) for s in subsets]
    runtime, subset = best_feasible(problem.evaluate_batch(strategies), subsets)
    return runtime, subset, len(subsets)


def best_seed(problem):
    from moplace.optimize.seeds import seed_strategies

    seeds = seed_strategies(problem)
    runtime, label = best_feasible(problem.evaluate_batch([s.strategy for s in seeds]),
                                   [s.label for s in seeds])
    return runtime, label, len(seeds)


def run_searcher(problem, name, budget, seed):
    from moplace import make_searcher, search

    t0 = time.perf_counter()
    result = search(problem, make_searcher(name), budget=budget, seed=seed)
    seconds = time.perf_counter() - t0
    best = min((float(p.values[0]) for p in result.front), default=math.inf)
    return {"seed": seed, "best_runtime": best, "feasible": bool(result.front),
            "n_evaluations": result.n_evaluations, "seconds": seconds}


def le(a: float, b: float) -> bool:
    """a <= b within the relative tolerance (anything is <= an infinite b)."""
    return a <= b * (1 + RTOL) if math.isfinite(b) else True


def bench_row(graph_name, cluster_name, searchers, budget, seeds):
    from moplace import Problem, load_cluster, load_graph

    problem = Problem(load_graph(graph_name), load_cluster(cluster_name))
    t0 = time.perf_counter()
    dp, subset, n_subsets = best_subset_dp(problem)
    log(f"{graph_name} on {cluster_name}: best DP over {n_subsets} subsets {dp * 1e3:.3f} ms on "
        f"{subset} ({time.perf_counter() - t0:.1f} s)")
    seed_rt, seed_label, n_seeds = best_seed(problem)
    log(f"  best of {n_seeds} seeds {seed_rt * 1e3:.3f} ms ({seed_label})")
    row = {"graph": graph_name, "cluster": cluster_name, "ops": len(problem.graph.ops),
           "devices": problem.n_devices, "n_subsets": n_subsets,
           "best_subset_dp": dp, "best_subset": list(subset) if subset else None,
           "n_seeds": n_seeds, "best_seed": seed_rt, "best_seed_label": seed_label,
           "searchers": {}}
    for name in searchers:
        runs = []
        for s in seeds:
            r = run_searcher(problem, name, budget, s)
            runs.append(r)
            log(f"  {name} seed {s}: {r['best_runtime'] * 1e3:.3f} ms, {r['n_evaluations']} "
                f"evaluations, {r['seconds']:.1f} s")
        worst = max(r["best_runtime"] for r in runs)
        row["searchers"][name] = {"runs": runs, "worst_best_runtime": worst,
                                  "ratio_to_subset_dp": worst / dp if math.isfinite(dp) else None,
                                  "holds": all(le(r["best_runtime"], dp) for r in runs),
                                  "holds_seed": all(le(r["best_runtime"], seed_rt) for r in runs)}
    row["holds"] = all(v["holds"] for v in row["searchers"].values())
    row["holds_seed"] = all(v["holds_seed"] for v in row["searchers"].values())
    row["failing"] = [n for n, v in row["searchers"].items() if not v["holds"]]
    return row


def ms(v) -> str:
    return f"{v * 1e3:.2f}" if v is not None and math.isfinite(v) else "-"


def header(searchers) -> str:
    return (f"{'graph':24} {'cluster':19} {'subset DP ms':>12} {'subset':18} {'seed ms':>9} "
            f"{'best seed':34} " + " ".join(f"{s:>12}" for s in searchers)
            + f" {'holds':>5} {'<=seed':>6}")


def format_row(row, searchers) -> str:
    subset = ",".join(map(str, row["best_subset"])) if row["best_subset"] else "-"
    cells = []
    for s in searchers:
        v = row["searchers"][s]
        cells.append(f"{ms(v['worst_best_runtime']) + ('' if v['holds'] else '!'):>12}")
    label = (row["best_seed_label"] or "-")[:34]
    return (f"{row['graph']:24} {row['cluster']:19} {ms(row['best_subset_dp']):>12} "
            f"{'(' + subset + ')':18} {ms(row['best_seed']):>9} {label:34} " + " ".join(cells)
            + f" {'yes' if row['holds'] else 'NO':>5} {'yes' if row['holds_seed'] else 'NO':>6}")


def summary(rows, searchers) -> list[str]:
    lines = [f"rows holding (every searcher's best <= best subset DP): "
             f"{sum(r['holds'] for r in rows)} / {len(rows)}; against the best seed: "
             f"{sum(r['holds_seed'] for r in rows)} / {len(rows)}"]
    ratios = []
    for s in searchers:
        vals = [r["searchers"][s]["ratio_to_subset_dp"] for r in rows
                if r["searchers"][s]["ratio_to_subset_dp"] is not None]
        mean = sum(vals) / len(vals) if vals else math.nan
        ratios.append(f"{s} {mean:.4f}")
    lines.append("mean ratio of each searcher's best to the best subset DP: " + ", ".join(ratios))
    for r in rows:
        for s in r["failing"]:
            v = r["searchers"][s]
            lines.append(f"DOES NOT HOLD: {r['graph']} on {r['cluster']}, {s}: "
                         f"{ms(v['worst_best_runtime'])} ms > subset DP "
                         f"{ms(r['best_subset_dp'])} ms on {tuple(r['best_subset'])}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--graphs", default=",".join(DEFAULT_GRAPHS),
                    help="comma-separated bundled graph names (default: the 11 PipeDream graphs)")
    ap.add_argument("--clusters", default=",".join(DEFAULT_CLUSTERS),
                    help="comma-separated cluster presets (default: %(default)s)")
    ap.add_argument("--searchers", default=",".join(DEFAULT_SEARCHERS),
                    help="comma-separated searchers (default: %(default)s)")
    ap.add_argument("--budget", type=int, default=2000, help="evaluations per search (default 2000)")
    ap.add_argument("--seeds", default="0", help="comma-separated search seeds (default 0)")
    ap.add_argument("--out", default=None,
                    help="JSON file (default experiments/results/bench_subsets-<commit>.json)")
    args = ap.parse_args(argv)

    from moplace.strictjson import dumps

    graphs = [g for g in args.graphs.split(",") if g]
    clusters = [c for c in args.clusters.split(",") if c]
    searchers = [s for s in args.searchers.split(",") if s]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    rev = commit()
    out = Path(args.out) if args.out else HERE / "results" / f"bench_subsets-{rev}.json"
    meta = {"commit": rev, "dirty": dirty(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "graphs": graphs, "clusters": clusters, "searchers": searchers,
            "budget": args.budget, "seeds": seeds, "rtol": RTOL}
    rows, lines = [], []
    title = (f"bench_subsets at {rev}{' (uncommitted changes)' if meta['dirty'] else ''}, "
             f"{meta['started']}: budget {args.budget}, seeds {seeds}; runtimes in ms; a searcher's "
             f"column is its worst best-runtime over seeds ('!' = above the best subset DP)")
    lines += [title, header(searchers)]
    print("\n".join(lines), flush=True)
    for graph in graphs:
        for cluster in clusters:
            row = bench_row(graph, cluster, searchers, args.budget, seeds)
            rows.append(row)
            lines.append(format_row(row, searchers))
            print(lines[-1], flush=True)
            out.write_text(dumps({**meta, "rows": rows}, indent=1) + "\n")
    tail = summary(rows, searchers)
    lines += tail
    print("\n".join(tail), flush=True)
    out.write_text(dumps({**meta, "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows,
                          "summary": tail}, indent=1) + "\n")
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    log(f"wrote {out} and {out.with_suffix('.txt')}")
    return 0 if all(r["holds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
