"""The RL searchers (hierarchical, trinity) against DPOS, NSGA-II, MCMC and random search.

    python3 experiments/bench_rl.py [--graphs a b] [--clusters 4xV100-NVLink ...]
        [--runs hierarchical-warm trinity-full ...] [--evaluations 2000] [--seeds 0 1 2]
        [--json FILE]
    python3 experiments/bench_rl.py --floor [--graphs ...] [--clusters ...] [--json FILE]
    python3 experiments/bench_rl.py --transfer [--transfer-evaluations 400] [--json FILE]
    python3 experiments/bench_rl.py --summarize FILE.json [FILE.json ...]

Default graphs: every bundled PipeDream graph and two NeurIPS'20 graphs; clusters: 4 and 8
V100s. Each run has the same evaluation budget. Runs (``--runs``):

- ``hierarchical-warm`` / ``hierarchical-cold``: the Hierarchical planner (REINFORCE, placement
  only), with and without imitating DPOS first;
- ``trinity-full`` / ``trinity-cold``: Trinity (PPO, weight-conditioned) choosing placement,
  split degree and priority, warm and cold; ``trinity-placement``: the same, placement only
  (the ablation);
- ``dpos``, ``nsga2``, ``mcmc``, ``random``: the others at the same budget.

Printed per run: evaluations, seconds, hypervolume, best runtime / peak communication / peak
memory of the front, and for the RL runs what the *policy itself* drew (the archive also holds
the heuristics the searchers start from, so its best runtime is never worse than DPOS's): the
best runtime of a feasible policy draw relative to DPOS, the evaluations until a policy draw
came within 5% of DPOS's runtime ("-" if none did), and seconds per policy update (sampling
and learning, not simulating).

``--floor``: random search is the floor every searcher must beat. For each graph and cluster,
random search, hierarchical-warm and trinity-full (the RL searchers' defaults) run with seeds
0, 1 and 2 (``--seeds``), and a line says whether each RL searcher's mean hypervolume is at
least random's. Random runs first; where its hypervolume is 0 on every seed (on the large
graphs no random plan fits in memory, or none beats the baselines' reference point) the floor
holds for any front, and the RL runs are skipped unless ``--no-skip`` is given.

``--transfer``: the bundled PipeDream graphs are split in two halves; a policy (hierarchical,
full genome, 80 groups) is trained on one half in turn (``--transfer-evaluations`` each, the
policy file carried from graph to graph), then placed on each graph of the other half
zero-shot (``learn=false``, 200 draws, no heuristics) and fine-tuned from it (the full budget),
against the same searcher trained from scratch with the same budget.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

GIB = 2.0 ** 30
PIPEDREAM = ["alexnet", "gnmt", "inception_v3", "nasnetamobile", "resnet101", "resnet18",
             "resnet50", "resnext101", "resnext50", "squeezenet1_0", "vgg16"]
DEFAULT_GRAPHS = [f"pipedream:{g}" for g in PIPEDREAM] + [
    "dnn:LayerGraphs/gnmt_training", "dnn:OperatorGraphs/bert_l-6_training"]
RUNS = {
    "hierarchical-warm": ("hierarchical", {}),
    "hierarchical-cold": ("hierarchical", {"warm_start": False}),
    "trinity-full": ("trinity", {}),
    "trinity-placement": ("trinity", {"genome": "placement"}),
    "trinity-cold": ("trinity", {"warm_start": False}),
    "dpos": ("dpos", {}), "nsga2": ("nsga2", {}), "mcmc": ("mcmc", {}), "random": ("random", {}),
}


class PolicyDraws:
    """Wraps a policy searcher's `tell` to record what the policy drew (not the heuristics)
    and time its asks and tells."""

    def __init__(self, searcher):
        self.searcher, self.draws, self.policy_seconds, self.seen = searcher, [], 0.0, 0
        ask, tell = searcher.ask, searcher.tell

        def timed_ask():
            t0 = time.perf_counter()
            out = ask()
            self.policy_seconds += time.perf_counter() - t0
            return out

        def recording_tell(strategies, evaluations):
            if getattr(searcher, "_last", None) is not None:
                for k, ev in enumerate(evaluations):
                    self.draws.append((self.seen + k + 1, ev))
            self.seen += len(evaluations)
            t0 = time.perf_counter()
            tell(strategies, evaluations)
            self.policy_seconds += time.perf_counter() - t0

        searcher.ask, searcher.tell = timed_ask, recording_tell


def run_one(problem, run, budget, dpos_runtime, seed=0, **extra) -> dict:
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher

    name, settings = RUNS[run]
    searcher = make_searcher(name, **{**settings, **extra})
    draws = PolicyDraws(searcher) if name in ("hierarchical", "trinity") else None
    t0 = time.perf_counter()
    result = search(problem, searcher, budget=budget, seed=seed)
    seconds = time.perf_counter() - t0
    front = [p.values for p in result.front]
    best = [min(v[k] for v in front) if front else float("nan") for k in range(3)]
    row = {"run": run, "evaluations": result.n_evaluations, "seconds": seconds,
           "hypervolume": result.hypervolume, "front_size": len(front),
           "best_runtime_s": best[0], "best_comm_bytes": best[1], "best_mem_bytes": best[2],
           "runtime_vs_dpos": best[0] / dpos_runtime}
    if draws is not None:
        feasible = [(i, ev.values[0]) for i, ev in draws.draws if ev.feasible]
        own = min((v for _, v in feasible), default=float("nan"))
        reach = next((i for i, v in feasible if v <= 1.05 * dpos_runtime), None)
        updates = max(int(searcher.updates), 1)
        row.update(policy_best_vs_dpos=own / dpos_runtime, evals_to_dpos_5pct=reach,
                   seconds_per_update=draws.policy_seconds / updates, updates=updates)
    return row


def print_row(graph, cluster, r) -> None:
    own, reach, per = "", "", ""
    if "updates" in r:
        own = f"{r['policy_best_vs_dpos']:.3f}"
        reach = str(r["evals_to_dpos_5pct"] or "-")
        per = f"{r['seconds_per_update']:.3f}"
    print(f"{graph:36} {cluster:19} {r['run']:18} {r['evaluations']:>6} {r['seconds']:>7.1f} "
          f"{r['hypervolume']:>7.4f} {r['best_runtime_s'] * 1e3:>9.2f} "
          f"{r['runtime_vs_dpos']:>6.3f} {r['best_comm_bytes'] / GIB:>8.3f} "
          f"{r['best_mem_bytes'] / GIB:>8.3f} {own:>7} {reach:>7} {per:>7}", flush=True)


HEADER = (f"{'graph':36} {'cluster':19} {'run':18} {'evals':>6} {'time s':>7} {'HV':>7} "
          f"{'runtime ms':>9} {'/ DPOS':>6} {'comm GiB':>8} {'mem GiB':>8} {'policy':>7} "
          f"{'to DPOS':>7} {'s/upd':>7}")


def save(rows, path) -> None:
    if path:
        Path(path).write_text(json.dumps(rows, indent=1))


def problem_and_dpos(graph_name, cluster_name):
    from moplace import load_cluster, load_graph
    from moplace.optimize.problem import Problem
    from searchers.listsched import heuristic_strategies

    problem = Problem(load_graph(graph_name), load_cluster(cluster_name))
    return problem, problem.evaluate(heuristic_strategies(problem)[0]).values[0]


def transfer(args, rows) -> None:
    from moplace.optimize.driver import Budget

    graphs = [f"pipedream:{g}" for g in PIPEDREAM]
    halves = [graphs[0::2], graphs[1::2]]
    cluster = args.clusters[0]
    common = {"genome": "full", "groups": 80}
    with tempfile.TemporaryDirectory() as tmp:
        for k, (train, test) in enumerate([(halves[0], halves[1]), (halves[1], halves[0])]):
            policy = Path(tmp) / f"policy{k}.npz"
            t0 = time.perf_counter()
            for i, g in enumerate(train):
                problem, dpos = problem_and_dpos(g, cluster)
                extra = {**common, "save_policy": str(policy)}
                if i:
                    extra.update(policy=str(policy), warm_start=False)
                run_one(problem, "hierarchical-warm", Budget(evaluations=args.transfer_evaluations),
                        dpos, **extra)
            print(f"\ntransfer: trained on {', '.join(x.split(':')[1] for x in train)} "
                  f"({args.transfer_evaluations} evaluations each) in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            for g in test:
                problem, dpos = problem_and_dpos(g, cluster)
                for label, budget, extra in [
                        ("zero-shot", 200, {"policy": str(policy), "learn": False,
                                            "warm_start": False, "seed_heuristics": False}),
                        ("fine-tuned", args.evaluations, {"policy": str(policy),
                                                          "warm_start": False}),
                        ("from scratch", args.evaluations, {"warm_start": False})]:
                    r = run_one(problem, "hierarchical-cold", Budget(evaluations=budget), dpos,
                                **{**common, **extra})
                    r.update(graph=g, cluster=cluster, transfer=label, trained_on=train)
                    rows.append(r)
                    print(f"  {g:28} {label:12} {r['evaluations']:>5} evals: policy best "
                          f"{r['policy_best_vs_dpos']:.3f} x DPOS, to DPOS+5% "
                          f"{r['evals_to_dpos_5pct'] or '-'}, HV {r['hypervolume']:.4f}",
                          flush=True)
                    save(rows, args.json)


def floor(args, rows) -> None:
    """The random-search floor (see the module docstring)."""
    from moplace.optimize.driver import Budget

    rl = [r for r in args.runs if RUNS[r][0] in ("hierarchical", "trinity")]
    print(HEADER)
    for gname in args.graphs:
        for cname in args.clusters:
            problem, dpos = problem_and_dpos(gname, cname)
            mean = {}
            for run in ["random"] + rl:
                if run != "random" and mean["random"] == 0 and not args.no_skip:
                    continue
                hvs = []
                for seed in args.seeds:
                    r = run_one(problem, run, Budget(evaluations=args.evaluations), dpos, seed)
                    r.update(graph=gname, cluster=cname, seed=seed)
                    rows.append(r)
                    hvs.append(r["hypervolume"])
                    print_row(gname, cname, r)
                    save(rows, args.json)
                mean[run] = sum(hvs) / len(hvs)
            print(floor_line(gname, cname, mean, rl), flush=True)


def floor_line(graph, cluster, mean: dict, rl) -> str:
    """One line: each RL run's mean hypervolume against random's, and whether it holds."""
    base = mean["random"]
    cells = [f"{r} {mean[r]:.4f} ({'holds' if mean[r] >= base else 'BELOW'})" if r in mean
             else f"{r} skipped (holds: random's hypervolume is 0)" for r in rl]
    return f"floor {graph} {cluster}: random {base:.4f}; " + "; ".join(cells)


def summarize(paths) -> int:
    """Markdown tables from the JSON of earlier runs (later files' rows replace earlier ones)."""
    by: dict = {}
    transfer_rows = []
    seeded: dict = {}  # (graph, cluster) -> run -> seed -> hypervolume
    for path in paths:
        for r in json.loads(Path(path).read_text()):
            if "transfer" in r:
                transfer_rows.append(r)
                continue
            seeded.setdefault((r["graph"], r["cluster"]), {}).setdefault(
                r["run"], {})[r.get("seed", 0)] = r["hypervolume"]
            if r.get("seed", 0) == 0:
                by.setdefault((r["graph"], r["cluster"]), {})[r["run"]] = r
    runs = [r for r in RUNS if any(r in d for d in by.values())]
    policy_runs = [r for r in runs if RUNS[r][0] in ("hierarchical", "trinity")]

    def table(title, columns, cell):
        print(f"\n{title}\n\n| graph | cluster | " + " | ".join(columns) + " |\n|---|---|"
              + "---:|" * len(columns))
        for (graph, cluster), d in by.items():
            cells = [cell(d[c], c) if c in d else "–" for c in columns]
            print(f"| {graph.split(':')[-1]} | {cluster.split('-')[0]} | " + " | ".join(cells)
                  + " |")

    table("Hypervolume at equal evaluations", runs, lambda r, c: f"{r['hypervolume']:.4f}")
    table("The policy's own draws: best runtime / DPOS's, evaluations until a draw is within 5% "
          "of DPOS ('-': none), seconds per policy update", policy_runs,
          lambda r, c: f"{r['policy_best_vs_dpos']:.3f} / {r['evals_to_dpos_5pct'] or '-'} / "
                       f"{r['seconds_per_update']:.2f}")
    table("Best runtime (ms) and best peak memory (GiB) of the front; wall seconds",
          [c for c in ("nsga2", "mcmc", "random", "hierarchical-warm", "trinity-full",
                       "trinity-cold") if c in runs],
          lambda r, c: f"{r['best_runtime_s'] * 1e3:.1f} / {r['best_mem_bytes'] / GIB:.2f} / "
                       f"{r['seconds']:.0f}")
    if any(len(s) > 1 for d in seeded.values() for s in d.values()):
        rl = [r for r in ("hierarchical-warm", "trinity-full")
              if any(r in d for d in seeded.values())]
        print("\nThe random-search floor: mean hypervolume over the seeds (their number)\n\n"
              "| graph | cluster | random | " + " | ".join(rl) + " | holds |\n|---|---|---:|"
              + "---:|" * len(rl) + "---|")
        for (graph, cluster), d in seeded.items():
            if "random" not in d:
                continue
            base = sum(d["random"].values()) / len(d["random"])
            cells, ok = [], True
            for r in rl:
                if r in d:
                    m = sum(d[r].values()) / len(d[r])
                    ok &= m >= base
                    cells.append(f"{m:.4f} ({len(d[r])})")
                else:
                    ok &= base == 0
                    cells.append("skipped" if base == 0 else "–")
            print(f"| {graph.split(':')[-1]} | {cluster.split('-')[0]} | {base:.4f} "
                  f"({len(d['random'])}) | " + " | ".join(cells) + f" | {'yes' if ok else 'NO'} |")
    if transfer_rows:
        print("\nTransfer (hierarchical, full genome): policy best / DPOS, evaluations to DPOS "
              "+ 5%, hypervolume\n\n| graph | zero-shot | fine-tuned | from scratch |\n"
              "|---|---:|---:|---:|")
        cases: dict = {}
        for r in transfer_rows:
            cases.setdefault(r["graph"], {})[r["transfer"]] = r
        for graph, d in cases.items():
            cells = [f"{d[k]['policy_best_vs_dpos']:.3f} / {d[k]['evals_to_dpos_5pct'] or '-'} / "
                     f"{d[k]['hypervolume']:.4f}" if k in d else "–"
                     for k in ("zero-shot", "fine-tuned", "from scratch")]
            print(f"| {graph.split(':')[-1]} | " + " | ".join(cells) + " |")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", nargs="+", default=DEFAULT_GRAPHS)
    p.add_argument("--clusters", nargs="+", default=["4xV100-NVLink", "8xV100-16GB-NVLink"])
    p.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    p.add_argument("--evaluations", type=int, default=2000)
    p.add_argument("--seeds", nargs="+", type=int, default=None,
                   help="seeds of each run (default 0; with --floor 0 1 2)")
    p.add_argument("--floor", action="store_true",
                   help="random search against the RL searchers' defaults, 3 seeds")
    p.add_argument("--no-skip", action="store_true",
                   help="with --floor: run the RL searchers also where random's hypervolume is 0")
    p.add_argument("--transfer", action="store_true")
    p.add_argument("--transfer-evaluations", type=int, default=400)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--summarize", nargs="+", metavar="FILE")
    args = p.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize)
    from moplace.optimize.driver import Budget

    rows: list = []
    if args.transfer:
        transfer(args, rows)
        return 0
    if args.floor:
        args.seeds = args.seeds or [0, 1, 2]
        if args.runs == list(RUNS):
            args.runs = ["hierarchical-warm", "trinity-full"]
        floor(args, rows)
        return 0
    print(HEADER)
    for gname in args.graphs:
        for cname in args.clusters:
            problem, dpos = problem_and_dpos(gname, cname)
            for run in args.runs:
                for seed in args.seeds or [0]:
                    r = run_one(problem, run, Budget(evaluations=args.evaluations), dpos, seed)
                    r.update(graph=gname, cluster=cname, seed=seed)
                    rows.append(r)
                    print_row(gname, cname, r)
                    save(rows, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
