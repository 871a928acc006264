"""The ``evaluate`` command: simulate one strategy (or the baselines) and print its objectives.

    moplace evaluate GRAPH --cluster PRESET_OR_FILE (--strategy FILE [--point K] | --baseline NAME|all) [--json]
"""

from __future__ import annotations

from .. import strictjson
from ..errors import MoplaceError
from .args import file_arg, integer


def add_commands(sub) -> None:
    """Register ``evaluate`` on the CLI's subparsers."""
    ev = sub.add_parser("evaluate", help="simulate one strategy or baseline and print its objectives")
    ev.add_argument("graph", type=file_arg, help="graph file (.txt PipeDream, .json) or bundled name, e.g. pipedream:resnet50")
    ev.add_argument("--cluster", type=file_arg, required=True, help="preset name (see `moplace clusters`) or TOML file")
    how = ev.add_mutually_exclusive_group(required=True)
    how.add_argument("--strategy", type=file_arg, help="strategy JSON file")
    how.add_argument("--baseline", help="single, data-parallel, round-robin, layer-split, or all")
    ev.add_argument("--point", type=integer(0, 10**6), help="which point of a front.json given as --strategy")
    ev.add_argument("--json", action="store_true", help="print exactly one JSON object")
    ev.set_defaults(run=_evaluate)


def strategy_label(path, point) -> str:
    """How output names a strategy from a file: the file, and the front point when one was
    chosen (a one-point front's only point is named too)."""
    if point is not None:
        return f"{path} point {point}"
    from ..io.native import read_json

    try:
        data = read_json(path)
    except MoplaceError:
        return str(path)  # load_strategy says what is wrong with it
    if isinstance(data, dict) and isinstance(data.get("points"), list) and len(data["points"]) == 1:
        return f"{path} point 0"
    return str(path)


def _evaluate(args) -> int:
    from ..core.baselines import BASELINES, baseline
    from ..core.presets import load_cluster
    from ..costs.costmodel import CostModel
    from ..io import load_graph
    from ..io.strategies import load_strategy
    from ..review.report import evaluation_table, summary_table
    from ..simulator.evaluation import evaluate

    graph, cluster = load_graph(args.graph), load_cluster(args.cluster)
    costs = CostModel(graph, cluster)
    if args.strategy:
        strategy = load_strategy(args.strategy, graph, cluster, point=args.point)
        runs = {strategy_label(args.strategy, args.point): strategy}
    elif args.baseline == "all":
        runs = {name: baseline(name, graph, cluster.n_devices) for name in BASELINES}
    else:
        runs = {args.baseline: baseline(args.baseline, graph, cluster.n_devices)}
    results = {name: evaluate(graph, cluster, s, costs=costs) for name, s in runs.items()}
    if args.json:
        objs = {name: ev.as_dict() for name, ev in results.items()}
        out = ({"graph": graph.name, "cluster": cluster.name, "results": objs}
               if len(objs) > 1 else {"graph": graph.name, "cluster": cluster.name,
                                      "strategy": next(iter(objs)),
                                      **({"point": args.point} if args.strategy else {}),
                                      **next(iter(objs.values()))})
        print(strictjson.dumps(out))
        return 0
    print(f"graph {graph.name} ({len(graph.ops)} ops, {len(graph.edges)} edges) on "
          f"{cluster.name} ({cluster.n_devices} devices)")
    if len(results) > 1:
        print(summary_table(results))
    for name, ev in results.items():
        print(f"\n{name}:")
        print(evaluation_table(ev, cluster))
    return 0
