"""The ``moplace`` command line.

    moplace evaluate GRAPH --cluster PRESET_OR_FILE (--strategy FILE | --baseline NAME|all) [--json]
    moplace search GRAPH --cluster C --searcher NAME [--set K=V] [--budget N | --time 60s] [--checkpoint F] [--json]
    moplace compare GRAPH --cluster C --searchers a,b [--set NAME.K=V] [--budget N | --time 60s] [--json]
    moplace searchers
    moplace clusters
    moplace graphs
    moplace profile MODEL_OR_PY --batch N [--device-count K] -o graph.json   (TensorFlow)
    moplace apply GRAPH (--strategy FILE | --baseline NAME) --steps N [--json] (TensorFlow)
    moplace zoo

User errors print one line on stderr and exit 2; no tracebacks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .errors import MoplaceError


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        code = args.run(args)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return code
    except BrokenPipeError:  # the reader went away (`moplace graphs | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except MoplaceError as exc:
        print(f"moplace: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("moplace: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moplace", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command")
    ev = sub.add_parser("evaluate", help="simulate one strategy or baseline and print its objectives")
    ev.add_argument("graph", help="graph file (.txt PipeDream, .json) or bundled name, e.g. pipedream:resnet50")
    ev.add_argument("--cluster", required=True, help="preset name (see `moplace clusters`) or TOML file")
    how = ev.add_mutually_exclusive_group(required=True)
    how.add_argument("--strategy", help="strategy JSON file")
    how.add_argument("--baseline", help="single, data-parallel, round-robin, layer-split, or all")
    ev.add_argument("--point", type=int, help="which point of a front.json given as --strategy")
    ev.add_argument("--json", action="store_true", help="print exactly one JSON object")
    ev.set_defaults(run=_evaluate)
    cl = sub.add_parser("clusters", help="list the preset clusters")
    cl.set_defaults(run=_clusters)
    gr = sub.add_parser("graphs", help="list the bundled profiled graphs")
    gr.set_defaults(run=_graphs)
    from .cli_search import add_commands as add_search_commands
    from .cli_tf import add_commands
    add_search_commands(sub)
    add_commands(sub)
    return p


def _evaluate(args) -> int:
    from .baselines import BASELINES, baseline
    from .costmodel import CostModel
    from .evaluate import evaluate
    from .io import load_graph
    from .presets import load_cluster
    from .report import evaluation_json, evaluation_table, summary_table
    from .strategy_io import load_strategy

    graph, cluster = load_graph(args.graph), load_cluster(args.cluster)
    costs = CostModel(graph, cluster)
    if args.strategy:
        runs = {args.strategy: load_strategy(args.strategy, graph, cluster, point=args.point)}
    elif args.baseline == "all":
        runs = {name: baseline(name, graph, cluster.n_devices) for name in BASELINES}
    else:
        runs = {args.baseline: baseline(args.baseline, graph, cluster.n_devices)}
    results = {name: evaluate(graph, cluster, s, costs=costs) for name, s in runs.items()}
    if args.json:
        objs = {name: evaluation_json(ev, cluster) for name, ev in results.items()}
        out = ({"graph": graph.name, "cluster": cluster.name, "results": objs}
               if len(objs) > 1 else {"graph": graph.name, "cluster": cluster.name,
                                      "strategy": next(iter(objs)), **next(iter(objs.values()))})
        print(json.dumps(out))
        return 0
    print(f"graph {graph.name} ({len(graph.ops)} ops, {len(graph.edges)} edges) on "
          f"{cluster.name} ({cluster.n_devices} devices)")
    if len(results) > 1:
        print(summary_table(results))
    for name, ev in results.items():
        print(f"\n{name}:")
        print(evaluation_table(ev, cluster))
    return 0


def _clusters(args) -> int:
    from .presets import list_presets, load_cluster

    for name in list_presets():
        print(load_cluster(name).describe())
        print()
    return 0


def _graphs(args) -> int:
    from .io import list_bundled, load_graph

    print(f"{'graph':<42} {'ops':>6} {'edges':>6} {'profiled on':>11} {'compute ms':>11}")
    for name in list_bundled():
        g = load_graph(name)
        kind = g.metadata.get("profiled_on", "?")
        print(f"{name:<42} {len(g.ops):>6} {len(g.edges):>6} {kind:>11} "
              f"{g.total_compute(kind) * 1e3:>11.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
