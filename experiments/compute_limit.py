"""How close the best plan comes to the compute limit (issue 33), per graph and cluster.

    python3 experiments/compute_limit.py [--budget 3000] [--graphs NAME ...]
                                         [--clusters PRESET ...] [--searchers ...] [--json FILE]

The compute limit of a graph on D devices is the larger of its total compute divided by D
and its heaviest co-location group that cannot be split on batch (it runs whole on one
device), on the cluster's device 0 kind. For each (graph, cluster) it runs PipeDream's
partitioner (`pipedream`: every pipeline it proposes), OS-DPOS and NSGA-II (``--budget``
evaluations; both start from every seed, the partitioner's pipelines included), and prints
the best feasible runtime of each, the best of all and its ratio to the limit, with the
plan that reached it. On a graph where nothing can be split (the dnn-partitioning ones), where
pipelines are the only parallelism, it also prints what a balanced flushed pipeline would take
in the cost model (`balanced_pipeline`): S stages of equal time (no communication, every cut
where it is wanted, none lighter than the heaviest group), m micro-batches whose copies each
pay the documented per-copy overhead, ``(work at m) / S * (m + S - 1) / m`` at its best S and
m. It is an estimate of what the bubble and the overheads cost, not a bound: stages of unequal
time can do a little better. Deterministic for a seed. Without ``--graphs``: every bundled PipeDream
graph and the dnn-partitioning LayerGraphs and OperatorGraphs training graphs, on
8xV100-16GB-NVLink and 2x4xV100-IB100 (the dnn ones on 4 and 8 V100s: 4xV100-NVLink and
8xV100-16GB-NVLink). Hours at the default budget on 2 cores: pass fewer graphs or a smaller
budget for a quick look.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import moplace  # noqa: E402
from moplace.core.levers import plan_of  # noqa: E402
from moplace.review.units import plan_text  # noqa: E402

SEARCHERS = ("pipedream", "os-dpos", "nsga2")
#: (graph prefix, clusters) of the default runs
DEFAULTS = (("pipedream:", ("8xV100-16GB-NVLink", "2x4xV100-IB100")),
            ("dnn:LayerGraphs/", ("4xV100-NVLink", "8xV100-16GB-NVLink")),
            ("dnn:OperatorGraphs/", ("4xV100-NVLink", "8xV100-16GB-NVLink")))


def compute_limit(problem) -> tuple[float, float, float]:
    """(limit, total compute / devices, heaviest group that cannot be split) in seconds."""
    a = problem.graph.arrays
    t = problem.costs.compute[:, 0]
    work = np.bincount(a.group, weights=t, minlength=a.n_groups)
    whole = np.bincount(a.group, weights=(a.split_mask & 1) == 0, minlength=a.n_groups) > 0
    heavy = float(work[whole].max(initial=0.0))
    share = float(t.sum()) / problem.n_devices
    return max(share, heavy), share, heavy


def balanced_pipeline(problem) -> tuple[float, int, int] | None:
    """(seconds, stages, micro-batches) of the balanced flushed pipeline (see the module
    docstring) over m = 1, 2, 4, .. 1024 and S <= devices; None where some op can be split (a
    plan need not be a pipeline there)."""
    from searchers.pipeline.searcher import micro_batch_extra

    a = problem.graph.arrays
    if np.any(a.split_mask != 0):
        return None
    t = problem.costs.compute[:, 0]
    best = None
    for m in (2 ** k for k in range(11)):
        extra = micro_batch_extra(problem, m)
        heavy = np.bincount(a.group, weights=t + extra, minlength=a.n_groups).max()
        for S in range(1, problem.n_devices + 1):
            step = max(float((t + extra).sum()) / S, heavy) * (m + S - 1) / m
            if best is None or step < best[0]:
                best = (step, S, m)
    return best


def best_feasible(result, problem):
    k = problem.objectives.index("runtime")
    fits = [p for p in result.front if p.feasible]
    return min(fits, key=lambda p: p.values[k]) if fits else None


def best_plans(problem, searchers, budget: int, seed: int) -> tuple[dict, tuple | None]:
    """Each searcher's best feasible runtime on ``problem`` (NSGA-II at ``budget``
    evaluations, the one-shot searchers to their end), printed as it comes, and the best of
    all: (seconds, searcher, plan), None when nothing fits."""
    k = problem.objectives.index("runtime")
    entries, best = {}, None
    for name in searchers:
        t0 = time.perf_counter()
        result = moplace.search(problem, moplace.make_searcher(name),
                                budget=budget if name == "nsga2" else max(budget, 64),
                                seed=seed)
        point = best_feasible(result, problem)
        entry = {"seconds": time.perf_counter() - t0, "evaluations": result.n_evaluations}
        if point is not None:
            entry.update(runtime_ms=point.values[k] * 1e3,
                         plan=plan_of(point.strategy, problem.graph))
            if best is None or point.values[k] < best[0]:
                best = (point.values[k], name, entry["plan"])
        entries[name] = entry
        print(f"  {name:<10} {entry.get('runtime_ms', float('nan')):>10.2f} ms "
              f"({entry['evaluations']} evaluations, {entry['seconds']:.0f} s)", flush=True)
    return entries, best


def run(graph: str, cluster: str, budget: int, searchers, seed: int) -> dict:
    g, c = moplace.load_graph(graph), moplace.load_cluster(cluster)
    problem = moplace.Problem(g, c)
    limit, share, heavy = compute_limit(problem)
    entries, best = best_plans(problem, searchers, budget, seed)
    row = {"graph": graph, "cluster": cluster, "ops": len(g.ops), "limit_ms": limit * 1e3,
           "share_ms": share * 1e3, "heaviest_group_ms": heavy * 1e3, "searchers": entries}
    balanced = balanced_pipeline(problem)
    if balanced is not None:
        row.update(balanced_pipeline_ms=balanced[0] * 1e3, balanced_pipeline_stages=balanced[1],
                   balanced_pipeline_micro_batches=balanced[2])
    if best is not None:
        row.update(best_ms=best[0] * 1e3, ratio=best[0] / limit, best_searcher=best[1],
                   best_plan=best[2])
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=int, default=3000, help="NSGA-II's evaluations")
    p.add_argument("--graphs", nargs="+", help="graph names (default: see the docstring)")
    p.add_argument("--clusters", nargs="+", help="cluster presets (default: per graph family)")
    p.add_argument("--searchers", nargs="+", default=list(SEARCHERS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    args = p.parse_args(argv)
    runs = []
    if args.graphs:
        runs = [(g, c) for g in args.graphs for c in (args.clusters or ["8xV100-16GB-NVLink"])]
    else:
        for prefix, clusters in DEFAULTS:
            names = [n for n in moplace.list_bundled() if n.startswith(prefix)
                     and (prefix == "pipedream:" or n.endswith("_training"))]
            runs += [(g, c) for g in names for c in (args.clusters or clusters)]
    rows = []
    for graph, cluster in runs:
        print(f"{graph} on {cluster}", flush=True)
        rows.append(run(graph, cluster, args.budget, args.searchers, args.seed))
        r = rows[-1]
        if "ratio" in r:
            print(f"  limit {r['limit_ms']:.2f} ms (compute / devices {r['share_ms']:.2f}, "
                  f"heaviest whole group {r['heaviest_group_ms']:.2f}); best {r['best_ms']:.2f} "
                  f"ms = {r['ratio']:.2f}x the limit, by {r['best_searcher']}: "
                  f"{plan_text(r['best_plan'])}", flush=True)
        if "balanced_pipeline_ms" in r:
            print(f"  a balanced pipeline: {r['balanced_pipeline_ms']:.2f} ms = "
                  f"{r['balanced_pipeline_ms'] / r['limit_ms']:.2f}x the limit "
                  f"({r['balanced_pipeline_stages']} stages, "
                  f"{r['balanced_pipeline_micro_batches']} micro-batches)", flush=True)
    print_table(rows, [("graph", "<40", "", "graph"), ("cluster", "<20", "", "cluster"),
                       ("ops", ">6", "", "ops"), ("limit ms", ">9", ".2f", "limit_ms"),
                       ("best ms", ">9", ".2f", "best_ms"), ("x limit", ">8", ".2f", "ratio"),
                       ("balanced", ">8", ".2f",
                        lambda r: r.get("balanced_pipeline_ms", NAN) / r["limit_ms"]),
                       ("by", "", "", lambda r: r.get("best_searcher", "-"))], args.json)
    return 0


NAN = float("nan")


def print_table(rows: list[dict], columns: list[tuple], json_path: str | None = None) -> None:
    """Print ``rows`` as a table under a header line, and write them to ``json_path`` as JSON
    when given (also used by paper_pipelines.py). ``columns``: (title, alignment and width,
    number format, a row's key or a function of the row); a key a row lacks shows nan; the
    last column stands two spaces after the others."""
    def cell(r, width, number, value):
        return format(value(r) if callable(value) else r.get(value, NAN), width + number)

    print("\n" + " ".join(format(title, width) for title, width, _, _ in columns[:-1])
          + f"  {columns[-1][0]}")
    for r in rows:
        print(" ".join(cell(r, *c[1:]) for c in columns[:-1]) + "  " + cell(r, *columns[-1][1:]))
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
