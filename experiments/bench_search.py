"""Searchers compared on real graphs: equal evaluations, and equal wall time.

    python3 experiments/bench_search.py [--graphs a b] [--clusters 4xV100-NVLink ...]
        [--searchers nsga2 mcmc ...] [--evaluations 2000] [--seconds 30] [--modes evals time]
        [--json FILE] [--scale]
    python3 experiments/bench_search.py --summarize FILE.json [FILE.json ...]

For each bundled graph (default: all) and preset cluster (default: 4 and 8 V100), each searcher
runs once with an evaluation budget and once with a time budget (``--modes`` picks one of
them, for searchers too slow per evaluation to run the other). Printed per run: hypervolume
(normalized against 1.1 x the worst baseline, so comparable across searchers), best runtime,
best peak communication and peak memory over the feasible front, search time, evaluations,
and the best runtime relative to data parallelism.

``--summarize`` reads the JSON of earlier runs (later files' rows replace earlier ones of the
same graph, cluster, mode and searcher) and prints one markdown row per graph and cluster:
hypervolume at equal evaluations for random search, the best list scheduler (HEFT, DPOS,
OS-DPOS, m-ETF) and each search; at equal time with the evaluations done; NSGA-II's best
runtime relative to data parallelism and its search time; then how often each search beats
the best list scheduler and random search.

``--scale`` adds the targets of the multi-objective issue: a full front (NSGA-II) for the largest
bundled graph (nasnetamobile) and for synthetic layered graphs of 1,000 and 10,000 ops, with the
time each took.
"""

from __future__ import annotations

import argparse
import json
import time

DEFAULT_SEARCHERS = ["random", "heft", "dpos", "os-dpos", "m-etf", "nsga2", "mcmc",
                     "optuna-nsga2", "optuna-tpe"]
GIB = 2.0 ** 30


def run_one(problem, name, budget, seed=0) -> dict:
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher

    t0 = time.perf_counter()
    result = search(problem, make_searcher(name), budget=budget, seed=seed)
    front = [p.values for p in result.front]
    dp = problem.baselines["data-parallel"].values[0]
    best = [min(v[k] for v in front) if front else float("nan") for k in range(3)]
    return {"searcher": name, "evaluations": result.n_evaluations,
            "seconds": time.perf_counter() - t0, "hypervolume": result.hypervolume,
            "front_size": len(front), "best_runtime_s": best[0], "best_comm_bytes": best[1],
            "best_mem_bytes": best[2], "runtime_vs_dp": best[0] / dp}


def print_row(graph, cluster, mode, r) -> None:
    print(f"{graph:32} {cluster:19} {mode:5} {r['searcher']:13} {r['evaluations']:>6} "
          f"{r['seconds']:>7.1f} {r['hypervolume']:>7.4f} {r['front_size']:>5} "
          f"{r['best_runtime_s'] * 1e3:>10.2f} {r['runtime_vs_dp']:>6.3f} "
          f"{r['best_comm_bytes'] / GIB:>8.3f} {r['best_mem_bytes'] / GIB:>8.3f}", flush=True)


def scale(rows: list) -> None:
    from moplace import load_cluster, load_graph
    from moplace.core.synthetic import layered_dag
    from moplace.optimize.driver import Budget
    from moplace.optimize.problem import Problem

    cases = [("pipedream:nasnetamobile", load_graph("pipedream:nasnetamobile")),
             ("layered-1k", layered_dag(1000, width=16)), ("layered-10k", layered_dag(10000, width=16))]
    print("\nscale: NSGA-II, 2000 evaluations or 300 s, 4xV100-NVLink")
    for name, graph in cases:
        problem = Problem(graph, load_cluster("4xV100-NVLink"))
        t0 = time.perf_counter()
        problem.baselines  # noqa: B018 - part of the cost of a search
        r = run_one(problem, "nsga2", Budget(evaluations=2000, seconds=300))
        r.update(graph=name, ops=len(graph.ops), setup_s=time.perf_counter() - t0 - r["seconds"])
        rows.append(r)
        print(f"  {name:26} {len(graph.ops):>6} ops: {r['evaluations']} evaluations in "
              f"{r['seconds']:.1f} s (+{r['setup_s']:.1f} s baselines), front {r['front_size']}, "
              f"hypervolume {r['hypervolume']:.4f}", flush=True)


def problems(graphs, clusters):
    """(graph name, cluster name, `Problem`) for each of ``graphs`` (default: every bundled
    graph) on each of ``clusters``, each graph loaded once (also used by front_dominance.py)."""
    from moplace import list_bundled, load_cluster, load_graph
    from moplace.optimize.problem import Problem

    for gname in graphs or list_bundled():
        graph = load_graph(gname)
        for cname in clusters:
            yield gname, cname, Problem(graph, load_cluster(cname))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", nargs="+")
    p.add_argument("--clusters", nargs="+", default=["4xV100-NVLink", "8xV100-16GB-NVLink"])
    p.add_argument("--searchers", nargs="+", default=DEFAULT_SEARCHERS)
    p.add_argument("--evaluations", type=int, default=2000)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--modes", nargs="+", choices=["evals", "time"], default=["evals", "time"])
    p.add_argument("--scale", action="store_true")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--summarize", nargs="+", metavar="FILE")
    args = p.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize)
    from moplace.optimize.driver import Budget

    rows = []
    print(f"{'graph':32} {'cluster':19} {'mode':5} {'searcher':13} {'evals':>6} {'time s':>7} "
          f"{'HV':>7} {'front':>5} {'runtime ms':>10} {'vs DP':>6} {'comm GiB':>8} {'mem GiB':>8}")
    for gname, cname, problem in problems(args.graphs, args.clusters):
        budgets = {"evals": Budget(evaluations=args.evaluations),
                   "time": Budget(evaluations=None, seconds=args.seconds)}
        for mode in args.modes:
            for name in args.searchers:
                r = run_one(problem, name, budgets[mode])
                r.update(graph=gname, cluster=cname, mode=mode)
                rows.append(r)
                print_row(gname, cname, mode, r)
                save(rows, args.json)
    if args.scale:
        scale(rows)
        save(rows, args.json)
    return 0


HEURISTICS = ("heft", "dpos", "os-dpos", "m-etf")
SEARCHES = ("nsga2", "mcmc", "optuna-nsga2", "optuna-tpe")


def summarize(paths: list) -> int:
    by: dict = {}
    for path in paths:
        with open(path) as f:
            for r in json.load(f):
                if "mode" in r:  # --scale rows have none
                    by.setdefault((r["graph"], r["cluster"]), {})[(r["mode"], r["searcher"])] = r
    searches = [s for s in SEARCHES if any(("evals", s) in d or ("time", s) in d
                                           for d in by.values())]
    head = ["graph", "cluster", "random", "best list scheduler"] + searches + \
        [f"{s} time (evals)" for s in searches] + ["nsga2 runtime / DP", "nsga2 s"]
    print("| " + " | ".join(head) + " |\n|---|---|" + "---:|" * (len(head) - 2))
    # per (mode, search): beats the best list scheduler, beats random search (at equal
    # evaluations), cases
    wins = {(m, s): [0, 0, 0] for m in ("evals", "time") for s in searches}

    def cell(r, evals=False):
        if r is None:
            return "–"
        return f"{r['hypervolume']:.4f}" + (f" ({r['evaluations']})" if evals else "")

    for (graph, cluster), d in by.items():
        heur = [d[("evals", h)]["hypervolume"] for h in HEURISTICS if ("evals", h) in d]
        baseline = max(heur) if heur else None
        rand = d.get(("evals", "random"))
        for (mode, s), w in wins.items():
            r = d.get((mode, s))
            if r is not None and baseline is not None and rand is not None:
                w[0] += r["hypervolume"] > baseline
                w[1] += r["hypervolume"] > rand["hypervolume"]
                w[2] += 1
        ns = d.get(("evals", "nsga2"))
        row = [graph.split(":")[-1], cluster, cell(rand),
               "–" if baseline is None else f"{baseline:.4f}"] + \
            [cell(d.get(("evals", s))) for s in searches] + \
            [cell(d.get(("time", s)), True) for s in searches] + \
            (["–", "–"] if ns is None else [f"{ns['runtime_vs_dp']:.3f}", f"{ns['seconds']:.1f}"])
        print("| " + " | ".join(row) + " |")
    print()
    for (mode, s), (h, r, n) in wins.items():
        if n:
            print(f"{s}, equal {'evaluations' if mode == 'evals' else 'time'}: beats the best "
                  f"list scheduler in {h} of {n} cases, random search (equal evaluations) in "
                  f"{r} of {n}")
    return 0


def save(rows: list, path) -> None:
    """Rewrite the JSON after every run, so a stopped benchmark keeps what it measured."""
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    raise SystemExit(main())
