"""The ``evaluate`` command: simulate one strategy (or the baselines) and print its objectives.

    moplace evaluate GRAPH --cluster PRESET_OR_FILE (--strategy FILE [--point K] | --baseline NAME|all)
                     [--memory-limit SIZE] [--no-inplace] [--optimizer NAME] [--json]
    moplace evaluate FRONT_JSON --point K      # the graph, cluster and options it records
    moplace evaluate GRAPH --cluster pod:H100:N --plan "tp=8,pp=16,dp=128,mbs=1,gbs=2048"

``--point K`` counts a front.json's points as `moplace search` printed them: the front, or the
least-violating points when nothing fitted (evaluated and reported infeasible). A strategy or
front made for another cluster (or another graph of the same name) is evaluated with a note on
stderr (and ``searched_on_cluster``, ``cluster_differs``, ``graph_differs`` and ``notes`` under
``--json``); where its devices do not exist on ``--cluster``, the error names the devices of
both clusters.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import strictjson
from ..errors import MoplaceError
from ..core.strategy import FP8_MODES, MAX_MICRO_BATCHES, SCHEDULE_LABELS, SCHEDULES
from .args import file_arg, integer
from .problem import cluster_arg, from_front, graph_arg, model_options


def add_commands(sub) -> None:
    """Register ``evaluate`` on the CLI's subparsers."""
    ev = sub.add_parser("evaluate", help="simulate one strategy or baseline and print its objectives")
    ev.add_argument("graph", type=file_arg, nargs="?",
                    help="graph file (.txt PipeDream, .json) or bundled name, e.g. "
                         "pipedream:resnet50; or a front.json (then --point K picks the point "
                         "and the graph and cluster are those it records)")
    ev.add_argument("--cluster", type=file_arg,
                    help="preset name (see `moplace clusters`) or TOML file (default: the "
                         "one a front.json given as --strategy records)")
    how = ev.add_mutually_exclusive_group()
    how.add_argument("--strategy", type=file_arg, help="strategy JSON file")
    how.add_argument("--baseline", help="single, data-parallel, round-robin, layer-split, or all")
    how.add_argument("--plan", metavar="DEGREES",
                     help="a regular plan by its degrees, e.g. \"tp=8,pp=16,v=1,dp=128,ep=1,"
                          "mbs=1,gbs=2048\" (and recompute=, zero=, precision=, schedule=, "
                          "cp=, cp_comm=, overlap=), evaluated at any scale: one replica "
                          "simulated, the collectives across replicas modelled; the graph is "
                          "one micro-batch (traced at --batch mbs), --cluster a pod "
                          "(pod:H100:16384) or a cluster file")
    ev.add_argument("--point", type=integer(0, 10**6), help="which point of a front.json given as --strategy")
    ev.add_argument("--micro-batches", type=integer(1, MAX_MICRO_BATCHES), metavar="M",
                    help="run the strategy (or baselines) as M micro-batches (a pipeline; "
                         "on one stage, gradient accumulation)")
    ev.add_argument("--schedule", choices=SCHEDULES,
                    help="the micro-batches' schedule: 1f1b (PipeDream-Flush), gpipe, interleaved "
                         "(Megatron's virtual stages: the stages laid round-robin) or "
                         "zero-bubble (PyTorch's ScheduleInterleavedZeroBubble)")
    ev.add_argument("--fp8", choices=FP8_MODES,
                    help="run the matmuls of the model's layers in FP8 (all), or all but the "
                         "first and last layers' (inner), on kinds with FP8 (H100, H200, B200; "
                         "timed at the datasheet FP8 peak with the BF16 efficiency: no FP8 "
                         "kernel measured), or not (none)")
    ev.add_argument("--expert-parallel", type=integer(2, 1024), metavar="EP",
                    help="a mixture of experts' experts split over EP devices (each its E/EP "
                         "experts, tokens sent by all-to-all) where the strategy splits them "
                         "on batch over EP devices: the data-parallel baseline on EP devices")
    ev.add_argument("--context-parallel", type=integer(2, 1024), metavar="C",
                    help="every group the strategy splits on batch over C devices split on "
                         "sequence instead (each device its slice of every sequence's "
                         "tokens): the data-parallel baseline on C devices; needs a graph "
                         "traced with fused attention (PyTorch, hf:)")
    ev.add_argument("--cp-comm", choices=("ring", "a2a"),
                    help="with --context-parallel: ring attention (ring, the default) or "
                         "all-to-all between tokens and heads around each attention (a2a, "
                         "Ulysses: the heads must divide by C)")
    model_options(ev)
    ev.add_argument("--json", action="store_true", help="print exactly one JSON object")
    ev.set_defaults(run=_evaluate)


def strategy_label(path, point, data=None) -> str:
    """How output names a strategy from a file: the file, and the front point when one was
    chosen (a one-point front's only point is named too). ``data``: the file's content, when
    already read."""
    if point is not None:
        return f"{path} point {point}"
    from ..io.native import read_json
    from ..io.strategies import FRONT_FORMAT, front_points

    try:
        data = read_json(path) if data is None else data
        if isinstance(data, dict) and data.get("format") == FRONT_FORMAT \
                and len(front_points(data, path)[0]) == 1:
            return f"{path} point 0"
    except MoplaceError:
        pass  # load_strategy says what is wrong with it
    return str(path)


def read_strategy(args, graph, cluster):
    """The strategy of ``--strategy`` (and ``--point``) on ``graph`` and ``cluster``, what its
    file says it was made for (`moplace.io.fronts.searched_on`, its notes including one
    when the point is one of a front's infeasible points), and its label (`strategy_label`).
    An error reading it on a cluster other than the file's says which cluster and devices the
    file was made for."""
    from ..io.fronts import searched_on, searched_on_devices
    from ..io.native import read_json
    from ..io.strategies import FRONT_FORMAT, front_points, strategy_from_file

    data = read_json(args.strategy)
    origin = searched_on(data, args.strategy, graph, cluster, args.cluster)
    front = isinstance(data, dict) and data.get("format") == FRONT_FORMAT
    try:
        strategy = strategy_from_file(data, args.strategy, graph, cluster, point=args.point)
    except MoplaceError as exc:
        other_graph = isinstance(data, dict) and data.get("graph") not in (None, graph.name)
        if not origin["cluster_differs"] or other_graph:  # the error says all there is
            raise
        name, devices = origin["searched_on_cluster"], searched_on_devices(data)
        made_for = (f"cluster {name!r}" if name is not None else "another cluster") + \
            (f" ({_devices(devices)})" if devices else "")
        verb = "was searched on" if front else "was saved for"
        raise MoplaceError(f"{exc}; {args.strategy} {verb} {made_for}, not on --cluster "
                           f"{args.cluster} ({_devices(cluster.device_names)})") from None
    if front:
        points, feasible = front_points(data, args.strategy)
        if not feasible:
            origin["notes"].append(f"{args.strategy} holds no feasible point: point "
                                   f"{args.point or 0} is one of the {len(points)} "
                                   f"least-violating ones the search listed")
    return strategy, origin, strategy_label(args.strategy, args.point, data)


def _pipeline_text(strategy) -> str:
    m = int(strategy.micro_batches)
    return (f"{m} micro-batches {SCHEDULE_LABELS[strategy.schedule_name]}"
            if m > 1 else "1 micro-batch")


def _devices(names) -> str:
    names = list(names)
    shown = ", ".join(names) if len(names) <= 4 else f"{names[0]} .. {names[-1]}"
    return f"{len(names)} device{'s' if len(names) != 1 else ''}: {shown}"


def _recut(runs: dict, make, label: str) -> dict:
    """``runs`` made over by ``make`` (`with_expert_parallel`, `with_context_parallel`: the
    groups a run splits on batch over that many devices cut another way; with ``--baseline
    all``, the data-parallel baseline on that many devices; the others as they are),
    ``label`` added to their names; refused when none can be."""
    from ..errors import StrategyError

    out, why = {}, None
    for name, s in runs.items():
        try:
            out[f"{name}, {label}"] = make(s)
        except StrategyError as e:
            out[name], why = s, why or e
    if len(out) == len(runs) and why is not None and all(o in runs for o in out):
        raise why
    return out


def _context_parallel(args, graph, cluster, runs: dict) -> dict:
    """``runs`` in context parallelism (``--context-parallel C [--cp-comm ring|a2a]``),
    refused by name before anything is simulated."""
    from ..core.baselines import with_context_parallel
    from ..errors import StrategyError

    c, comm = args.context_parallel, args.cp_comm or "ring"
    if c is None:
        if args.cp_comm:
            raise MoplaceError("--cp-comm: it says how context parallelism runs; give "
                               "--context-parallel C too")
        return runs
    if c > cluster.n_devices:
        raise MoplaceError(f"--context-parallel {c}: the cluster has {cluster.n_devices} "
                           f"devices")
    way = {"ring": "p2p", "a2a": "a2a"}[comm]
    try:
        return _recut(runs, lambda s: with_context_parallel(graph, s, c, way),
                      f"context parallel ×{c}" + (" (all-to-all)" if way == "a2a" else ""))
    except StrategyError as e:
        raise MoplaceError(f"--context-parallel {c}: {e}") from None


def _evaluate(args) -> int:
    from ..core.baselines import BASELINES, baseline
    from ..costs.costmodel import CostModel
    from ..review.report import evaluation_table, report_units, summary_table
    from ..simulator.evaluation import evaluate

    if args.plan is not None:
        from .planeval import evaluate_plan
        return evaluate_plan(args)
    from_front(args, needs_cluster=True)
    if not (args.strategy or args.baseline):
        raise MoplaceError("say what to evaluate: --strategy FILE or --baseline NAME")
    graph = graph_arg(args)
    cluster = cluster_arg(args, graph)
    costs = CostModel(graph, cluster, inplace=not args.no_inplace)
    origin = {}
    if args.strategy:
        strategy, origin, label = read_strategy(args, graph, cluster)
        runs = {label: strategy}
    elif args.baseline == "all":
        runs = {name: baseline(name, graph, cluster.n_devices) for name in BASELINES}
    else:
        runs = {args.baseline: baseline(args.baseline, graph, cluster.n_devices)}
    wide = {**({"micro_batches": args.micro_batches} if args.micro_batches else {}),
            **({"schedule": SCHEDULES.index(args.schedule)} if args.schedule else {})}
    if wide:  # the options asked for, on every strategy evaluated
        runs = {f"{name}, {_pipeline_text(s.with_options(**wide))}": s.with_options(**wide)
                for name, s in runs.items()}
    if args.fp8:
        mode = float(FP8_MODES.index(args.fp8))
        runs = {name + ("" if args.fp8 == "none" else f", FP8 {args.fp8}"):
                s.with_options(fp8=mode) for name, s in runs.items()}
    if args.expert_parallel:
        from ..core.baselines import with_expert_parallel
        ep = args.expert_parallel
        runs = _recut(runs, lambda s: with_expert_parallel(graph, s, ep),
                      f"expert parallel ×{ep}")
    runs = _context_parallel(args, graph, cluster, runs)
    results = {name: evaluate(graph, cluster, s, costs=costs) for name, s in runs.items()}
    for note in origin.get("notes", ()):
        print(f"moplace: note: {note}", file=sys.stderr)
    from ..costs.origin import estimated_notes

    costs_notes = estimated_notes(graph, cluster)
    if any(s.fp8 for s in runs.values()):
        from ..costs.fp8 import FP8_NOTE
        costs_notes.append(FP8_NOTE)
    same = _same_plans(runs, graph)
    if args.json:
        from ..core.levers import plan_of
        objs = {name: {**ev.as_dict(), "plan": plan_of(runs[name], graph),
                       **({"same_plan_as": same[name][0], "same_plan_why": same[name][1]}
                          if name in same else {})}
                for name, ev in results.items()}
        out = ({"graph": graph.name, "cluster": cluster.name, "results": objs,
                "cost_notes": costs_notes}
               if len(objs) > 1 else {"graph": graph.name, "cluster": cluster.name,
                                      "cost_notes": costs_notes,
                                      "strategy": next(iter(objs)),
                                      **({"point": args.point} if args.strategy else {}),
                                      **origin, **next(iter(objs.values()))})
        print(strictjson.dumps(out))
        return 0
    batch = graph.metadata.get("batch_size")
    batch = f", batch {batch}" if isinstance(batch, int) and not isinstance(batch, bool) else ""
    print(f"graph {graph.name} ({len(graph.ops)} ops, {len(graph.edges)} edges{batch}) on "
          f"{cluster.name} ({_devices(cluster.device_names).split(':')[0]})")
    for note in costs_notes:
        print(f"note: {note}")
    units = report_units(results, cluster)
    if len(results) > 1:
        print(summary_table(results, units, {name: f"= {other}: {why}"
                                             for name, (other, why) in same.items()}))
    for name, ev in results.items():
        if name in same:
            print(f"\n{name}: the same plan as {same[name][0]} ({same[name][1]}), above")
            continue
        print(f"\n{name}:")
        print(evaluation_table(ev, cluster, units))
    hint = _next_hint(args)
    if hint:
        print(f"\nnext: {hint}")
    return 0


def _same_plans(runs: dict, graph) -> dict:
    """name -> (the earlier name whose strategy it is, why) for each strategy of ``runs``
    that repeats an earlier one: a baseline that falls back to another on this graph or
    cluster says so instead of standing as a second, silent copy."""
    first: dict = {}
    out = {}
    for name, strategy in runs.items():
        key = strategy.simulation_key
        if key not in first:
            first[key] = name
            continue
        tensor = any(all("tensor" in graph.ops[i].splittable for i in members)
                     for members in graph.groups)
        if len(strategy.used_devices) == 1:
            why = "every op on one device"
        elif name.startswith("tensor-parallel") and not tensor:
            why = f"no op of {graph.name} can be split on tensor, so its groups split on batch"
        else:
            why = "the same placement, splits and order"
        out[name] = (first[key], why)
    return out


def _next_hint(args) -> str:
    """The command a user runs next: from the baselines, a search of the front beyond them;
    from a front's point, its launch flags."""
    import shlex

    if args.baseline:
        out = Path(str(args.graph)).name.split(":")[-1].replace("/", "-") or "front"
        return (f"moplace search {shlex.quote(str(args.graph))} --cluster "
                f"{shlex.quote(str(args.cluster))} --searcher nsga2 --out {shlex.quote(out)}  "
                f"(the trade-off front beyond the baselines; then `moplace show "
                f"{shlex.quote(out)}/front.json`)")
    if args.strategy and args.point is not None:
        return (f"moplace export {shlex.quote(str(args.strategy))} --point {args.point}  "
                f"(the plan as Megatron-LM flags, a torchtitan TOML or per-op JSON)")
    return ""
