"""What logging a search to MLflow costs: overhead in seconds and as a share of the search.

    python3 experiments/bench_logging.py [--graph pipedream:resnet50] [--cluster 4xV100-NVLink]
        [--searchers nsga2 random] [--budget 2000] [--repeats 3]

For each searcher the same search (same seed) runs with no tracking, with MLflow but no
figures, with figures drawn by the background process (the default: the search returns
first) and with figures drawn inline (the command waits for them). Printed per mode: the
median wall time of the search call, the time the callback itself spent logging (the store exists already, as it does from a
user's second search on; the first search on a new store pays for MLflow creating its schema,
printed apart), the
overhead against no tracking in seconds and % of the search, and for the background mode the
time until the figures were in the run (work done after the command returned). The issue's
target: logging at most 5% of the search time at the default budget on pipedream:resnet50
with 4 devices. Then each figure's drawing time on the largest bundled graph.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def one(problem, searcher_name, budget, mode, store):
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher
    from moplace.review.tracking import MLflowCallback

    callbacks = []
    tracker = None
    if mode != "none":
        figures = {"mlflow": "off", "background": "background", "inline": "inline"}[mode]
        tracker = MLflowCallback(store, "bench", figures=figures)
        callbacks.append(tracker)
    t0 = time.perf_counter()
    search(problem, make_searcher(searcher_name), budget=budget, seed=0, callbacks=callbacks)
    wall = time.perf_counter() - t0
    after = 0.0
    if mode == "background":
        t1 = time.perf_counter()
        tag = tracker.wait_figures(300)
        after = time.perf_counter() - t1
        assert tag.startswith("ready"), tag
    return wall, (tracker.log_seconds if tracker else 0.0), after


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default="pipedream:resnet50")
    p.add_argument("--cluster", default="4xV100-NVLink")
    p.add_argument("--searchers", nargs="+", default=["nsga2", "random"])
    p.add_argument("--budget", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--figure-graph", default="pipedream:nasnetamobile",
                   help="the graph whose figures are timed one by one (the largest bundled)")
    args = p.parse_args(argv)
    from moplace import load_cluster, load_graph
    from moplace.optimize.problem import Problem

    problem = Problem(load_graph(args.graph), load_cluster(args.cluster))
    folder = Path(tempfile.mkdtemp(prefix="bench-logging-"))
    store = f"sqlite:///{folder / 'mlflow.db'}"
    one(problem, "random", 50, "none", store)  # compile and warm up
    t0 = time.perf_counter()
    one(problem, "random", 50, "mlflow", store)  # a new store: MLflow creates its schema
    print(f"first search on a new store (schema created, mlflow imported): "
          f"{time.perf_counter() - t0:.2f} s for 50 evaluations")
    print(f"{args.graph} on {args.cluster}, budget {args.budget}, median of {args.repeats}")
    print(f"{'searcher':<9} {'mode':<11} {'search s':>9} {'logging s':>10} {'overhead s':>11} "
          f"{'% of search':>12} {'figures after return s':>23}")
    for name in args.searchers:
        base = None
        for mode in ("none", "mlflow", "background", "inline"):
            runs = []
            for _ in range(args.repeats):
                runs.append(one(problem, name, args.budget, mode, store))
            wall = statistics.median(r[0] for r in runs)
            logged = statistics.median(r[1] for r in runs)
            after = statistics.median(r[2] for r in runs)
            if mode == "none":
                base = wall
            over = wall - base
            print(f"{name:<9} {mode:<11} {wall:>9.2f} {logged:>10.2f} {over:>11.2f} "
                  f"{100 * over / base:>11.1f}% {after if mode == 'background' else 0:>23.2f}",
                  flush=True)
    figure_times(args.figure_graph, args.cluster)
    return 0


def figure_times(graph_name, cluster_name) -> None:
    from moplace import load_cluster, load_graph
    from moplace.io.fronts import result_json
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher
    from moplace.optimize.problem import Problem
    from moplace.review.figures import draw_search

    graph = load_graph(graph_name)
    problem = Problem(graph, load_cluster(cluster_name))
    data = result_json(search(problem, make_searcher("nsga2"), budget=400, seed=0))
    with tempfile.TemporaryDirectory() as tmp:
        draw_search(data, problem, tmp)  # matplotlib's first figure pays its imports
        drawn = draw_search(data, problem, tmp)
    print(f"\nfigures of {graph_name} ({len(graph.ops)} ops, {len(data['points'])} front "
          f"points) on {cluster_name}, seconds each (second drawing):")
    for name, (_, seconds) in drawn.items():
        print(f"  {name:<18} {seconds:6.2f}")
    print(f"  {'all':<18} {sum(s for _, s in drawn.values()):6.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
