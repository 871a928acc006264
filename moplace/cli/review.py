"""The review commands: the searches logged to MLflow, one run's front and figures, the
figures drawn again, and MLflow's UI.

    moplace runs [--graph G] [--experiment E] [--limit 50] [--json]
    moplace show RUN_ID|FRONT_JSON [--point K] [--where "OBJ<=VALUE" ...] [--best OBJ|knee]
                 [--json]
    moplace plot RUN_ID_OR_FRONT_JSON [--out DIR] [--point K] [--graph G --cluster C] [--force]
    moplace ui [--port 5000] [--host 127.0.0.1]

Each takes ``--tracking-uri`` (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here).
A run id may be shortened to its first 6 or more characters.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import strictjson
from ..errors import MoplaceError, shown
from ..review.table import ROW_LIMIT
from .args import file_arg, integer, tracking_uri_option


def add_commands(sub) -> None:
    """Register ``runs``, ``show``, ``plot`` and ``ui`` on the CLI's subparsers."""
    r = sub.add_parser("runs", help="list the searches logged to MLflow, with their key figures")
    r.add_argument("--graph", help="only this graph's searches (its name, e.g. resnet50)")
    r.add_argument("--experiment", help="only this MLflow experiment's")
    r.add_argument("--limit", type=integer(1, 50_000), default=50, help="newest N (default 50)")
    r.add_argument("--json", action="store_true", help="print exactly one JSON object")
    r.set_defaults(run=_runs)
    s = sub.add_parser("show", help="one search's front and where its figures are, or the "
                       "point that answers a question (--where, --best)")
    s.add_argument("run_id", type=file_arg, metavar="RUN_OR_FRONT",
                   help="MLflow run id (or its first 6+ characters), or a front.json")
    s.add_argument("--point", type=integer(0, 10**6), help="details of front point K")
    s.add_argument("--where", action="append", default=[], metavar="CONSTRAINT",
                   help="keep the points meeting OBJECTIVE OP VALUE, e.g. \"peak_memory<=16GiB\" "
                   "(GB = 1e9 B, GiB = 2**30 B) or \"runtime<=1.05x\" (times the best feasible "
                   "value on the whole front), or \"runs=RUNNER\" (the points torchtitan, megatron "
                   "or moplace-apply runs); repeatable. It filters the front after the search: "
                   "`moplace search --memory-limit` bounds the search itself")
    s.add_argument("--against", type=file_arg, metavar="FRONT_JSON",
                   help="what the front in FRONT_JSON buys over this one: its best feasible "
                   "value of each objective against this front's, in percent (after a "
                   "`search --space torchtitan`, give the unconstrained search's front)")
    s.add_argument("--best", metavar="OBJECTIVE|knee",
                   help="among the points left, the one with the least of this objective, or "
                   "the knee (default with --where: knee)")
    s.add_argument("--all", action="store_true",
                   help=f"list every front point (default: at most {ROW_LIMIT} rows)")
    s.add_argument("--save", type=file_arg, metavar="FRONT_JSON",
                   help="write the run's front as a front.json that evaluate, apply and plot "
                   "take (refuses to replace a file unless --force)")
    s.add_argument("--force", action="store_true", help="replace the --save file")
    s.add_argument("--json", action="store_true", help="print exactly one JSON object")
    s.set_defaults(run=_show)
    p = sub.add_parser("plot", help="draw a search's figures (from an MLflow run or a front.json)")
    p.add_argument("source", type=file_arg, help="MLflow run id, or a front.json written by `moplace search`")
    p.add_argument("--out", type=file_arg, help="folder for the figures (default: figures-<run or file name>)")
    p.add_argument("--point", type=integer(0, 10**6), help="front point of the Gantt and memory figures "
                   "(default: the knee)")
    p.add_argument("--graph", help="graph, when the front.json does not say where it came from")
    p.add_argument("--cluster", type=file_arg, help="cluster, when the front.json does not say")
    p.add_argument("--force", action="store_true", help="replace existing figure files")
    p.set_defaults(run=_plot)
    u = sub.add_parser("ui", help="start MLflow's UI on the store and print its address")
    u.add_argument("--port", type=integer(1, 65535), default=5000,
                   help="port of the UI (default 5000)")
    u.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 "
                   "for every interface)")
    u.set_defaults(run=_ui)
    for cmd in (r, s, p, u):
        tracking_uri_option(cmd)


def _uri(args) -> str:
    from ..review.tracking import resolve_uri

    return resolve_uri(args.tracking_uri)


def _runs(args) -> int:
    from ..review.runs import list_runs
    from ..review.table import aligned
    from ..review.units import column_unit, kind_of, number, short

    if args.limit < 1:
        raise MoplaceError(f"--limit must be at least 1, got {args.limit}")
    uri = _uri(args)
    runs = list_runs(uri, graph=args.graph, experiment=args.experiment, limit=args.limit)
    if args.json:
        print(strictjson.dumps({"tracking_uri": uri, "runs": runs}))
        return 0
    if not runs:
        print(f"no searches logged in {uri}" + (f" for graph {args.graph}" if args.graph else ""))
        return 0
    objs = list(dict.fromkeys(o for r in runs for o in r["best"]))  # every run's objectives
    units = {o: column_unit(o, [r["best"][o] for r in runs if r["best"].get(o) is not None])
             for o in objs}
    heads = ["run", "started", "searcher", "graph", "cluster", "evaluations", "hypervolume",
             *(f"best {short(o)} ({units[o][0]})" if units[o][0] else f"best {short(o)}"
               for o in objs), "status", "figures", "details"]
    rows = []
    for r in runs:
        name = ("  " if r["parent_run_id"] else "") + (r["searcher"] or "?")  # a child: indented
        details = ""
        if r.get("sweep"):  # a sweep's parent: its name, trials and best; its trials' problem
            s = r["sweep"]
            name = f"sweep {s['name']}"
            details = (f"{s['trials'] or '?'} trials over {', '.join(s['swept']) or '-'}"
                       + (f"; best: trial {s['best_trial']}" if s["best_trial"] is not None
                          else ""))
        elif r.get("trial"):  # a sweep's trial: its number and swept values
            swept = ", ".join(f"{k}={v}" for k, v in r["trial"]["swept"].items())
            details = f"trial {r['trial']['number']}" + (f": {swept}" if swept else "")
        rows.append([r["run_id"][:8], _when(r["started"]), name, r["graph"] or "-",
                     r["cluster"] or "-",
                     str(r["evaluations"]) if r["evaluations"] is not None else "-",
                     f"{r['hypervolume']:.4f}" if r["hypervolume"] is not None else "-",
                     *(number(r["best"][o], kind_of(o), units[o])
                       if r["best"].get(o) is not None else "-" for o in objs),
                     r["status"], (r["figures"] or "-").split(":")[0], details])
    if not any(row[-1] for row in rows):  # no sweep here: no details column
        heads, rows = heads[:-1], [row[:-1] for row in rows]
    words = {"run", "started", "searcher", "graph", "cluster", "status", "figures", "details"}
    print("\n".join(aligned(heads, rows, words=words)))
    print(f"({len(runs)} runs in {uri}; `moplace show RUN` for one of them)")
    return 0


def _when(ms) -> str:
    import datetime

    if not ms:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M")


def _show(args) -> int:
    from ..review.marks import front_knee

    if args.save:
        from .output import check_output

        check_output(args.save, force=args.force, flag="--save")
    uri, info, data, figures = _show_source(args)
    _known_objectives(data, info["what"])
    if args.save:
        Path(args.save).write_text(strictjson.dumps(data, indent=1))
        info = {**info, "front_file": str(args.save)}
        if not args.json:
            print(f"wrote {args.save}")
    points = data["points"]
    knee = front_knee(data)
    if args.point is not None and not 0 <= args.point < len(points):
        raise MoplaceError(f"--point {args.point}: the front has {len(points)} points "
                           f"(0..{len(points) - 1})" if points else "the front is empty")
    if args.where or args.best:
        return _answer(args, info, data)
    if args.against:  # what another front (an unconstrained search's) buys over this one
        from ..io.fronts import read_front
        from .space import against

        lines = against(data, read_front(args.against), info["what"], args.against)
        print(strictjson.dumps({"against": args.against, "lines": lines}) if args.json
              else "\n".join(lines))
        return 0
    if args.json:
        out = {**{k: v for k, v in info.items() if k != "what"}, "tracking_uri": uri,
               "knee": knee, "figure_files": figures,
               "front": [{k: v for k, v in p.items() if k != "strategy"} for p in points]}
        if args.point is not None:
            out["point"] = {"index": args.point, **points[args.point]}
        print(strictjson.dumps(out))
        return 0
    evaluations, hv = data.get("evaluations"), data.get("hypervolume")  # a file may lack them
    print(f"{info['what']}: {data.get('status', 'done')}, "
          f"{evaluations if evaluations is not None else '?'} evaluations, hypervolume "
          f"{f'{hv:.4f}' if hv is not None else '?'}")
    if args.point is not None:
        _print_point(points[args.point], args.point, data, knee)
    else:
        from ..review.table import front_text

        print(front_text(data, every=args.all))
        for note in data.get("notes") or []:
            print(f"note: {note}")
    if info.get("run_id"):
        print("figures:" if figures else f"figures: {info['figures'] or 'none'}")
        for f in figures:
            print(f"  {f}")
    if points:
        which = args.point if args.point is not None else knee
        _print_commands(_commands(info, data, which), which)
    return 0


def _show_source(args):
    """(tracking URI or None, what it is, the front.json content, figure files) of
    ``args.run_id``: a front.json file, or an MLflow run (a sweep's: its best trial's)."""
    data, client, run = _front_of(args.run_id, args)
    if run is None:
        return None, {"what": args.run_id, "front_file": args.run_id}, data, []
    from ..review.runs import figure_paths, find_run, summary

    info = summary(run)
    info["what"] = f"run {info['run_id']} ({info['run_name']})"
    if not run.info.run_id.startswith(args.run_id.strip().lower()):  # a sweep's best trial
        from ..review.runs import sweep_best

        info["what"] = sweep_best(client, find_run(_uri(args), args.run_id)[1])[1]
    return _uri(args), info, data, figure_paths(client, run)


def _front_of(spec: str, args):
    """(the front.json content, MLflow client, run) of ``spec``: a front.json file (client
    and run None), or an MLflow run id (a sweep's parent run: its best trial's run)."""
    path = Path(spec)
    if path.suffix == ".json" or path.is_file():
        from ..io.fronts import read_front

        return read_front(path), None, None
    from ..review.runs import find_run, run_front, sweep_best

    client, run = find_run(_uri(args), spec)
    run = sweep_best(client, run)[0]
    return run_front(client, run), client, run


def _commands(info: dict, data: dict, k: int) -> dict[str, str]:
    """The commands that draw, evaluate and apply point ``k`` (and save a run's front): on a
    front.json that records its graph and cluster, the file alone says what they run on."""
    source = info.get("front_file") or info["run_id"][:8]
    front = info.get("front_file") or "front.json"
    graph, cluster = data.get("graph_source"), data.get("cluster_source")
    out = {}
    if not info.get("front_file"):
        out["save"] = f"moplace show {source} --save {front}"
    if data.get("kind") == "regular":  # a search at scale: a plan by its degrees
        points = data.get("points") or data.get("infeasible") or []
        regular = points[k].get("regular") if 0 <= k < len(points) and isinstance(
            points[k], dict) else None
        spec = regular.get("spec") if isinstance(regular, dict) else "..."
        from ..io.regularfronts import graph_of_point

        degrees = regular.get("degrees") if isinstance(regular, dict) else None
        graph = graph_of_point(data, degrees.get("mbs") if isinstance(degrees, dict) else None)
        out["evaluate"] = (f"moplace evaluate {graph or 'GRAPH'} --cluster "
                           f"{cluster or 'POD'} --plan \"{spec}\"")
        out["export"] = f"moplace export {front} --point {k}"
        return out
    out["draw"] = f"moplace plot {source} --point {k}"
    if graph and cluster:
        out["evaluate"] = f"moplace evaluate {front} --point {k}"
    else:
        out["evaluate"] = (f"moplace evaluate {graph or 'GRAPH'} --cluster {cluster or 'CLUSTER'}"
                           f" --strategy {front} --point {k}")
    points = data.get("points")
    point = points[k] if isinstance(points, list) and 0 <= k < len(points) else {}
    runs = point.get("runs") if isinstance(point, dict) else None
    # a graph profiled from a model runs for real, unless the point says apply cannot run it
    # (FP8, expert parallelism on the PyTorch testbed)
    if str(graph).endswith(".json") and not (isinstance(runs, list)
                                            and "moplace-apply" not in runs):
        out["apply"] = f"moplace apply {front} --point {k} --steps 10"
    return out


def _print_commands(commands: dict[str, str], k: int) -> None:
    words = {"save": "save the run's front", "draw": f"draw point {k}",
             "evaluate": f"evaluate point {k}", "apply": f"apply point {k}",
             "export": f"export point {k}"}
    width = max(len(words[w]) for w in commands) + 1
    for what, command in commands.items():
        print(f"{words[what] + ':':<{width}} {command}")


def _answer(args, info: dict, data: dict) -> int:
    """The point answering ``--where``/``--best`` (see `moplace.review.select`)."""
    from ..review.select import Front, json_answer

    front = Front(data, info["what"])
    selection = front.select(args.where, args.best or "knee")
    if selection.index is None:  # no answer: a clean error naming the bounds
        raise MoplaceError(f"{info['what']}: {front.describe(selection)}")
    if args.json:
        out = json_answer(front, selection)
        out["commands"] = _commands(info, data, selection.index)
        print(strictjson.dumps(out))
        return 0
    print(f"{info['what']}: {front.describe(selection)}")
    from ..review.units import fmt, kind_of, label

    for c, bound in selection.bounds:  # each bound as the columns show it (16GB: 14.90 GiB)
        print(f"  {c.text}: {label(c.objective)} {c.op} {fmt(bound, kind_of(c.objective))}")
    p = front.points[selection.index]
    if isinstance(p.get("plan"), dict):
        from ..review.units import plan_text

        print(f"  plan: {plan_text(p['plan'])}")
    _print_commands(_commands(info, data, selection.index), selection.index)
    return 0


def _known_objectives(data: dict, what: str) -> None:
    """Refuse a front whose objectives this process has not registered (their JSON keys and
    units are unknown here)."""
    from objectives import OBJECTIVES

    unknown = [o for o in data.get("objectives", []) if o not in OBJECTIVES]
    if unknown:
        raise MoplaceError(f"{what} has objectives registered where it ran, not here: "
                           f"{', '.join(unknown)} (known: {', '.join(OBJECTIVES)})")


def _print_point(p: dict, k: int, data: dict, knee) -> None:
    import numpy as np

    from objectives import json_key

    from ..review.units import fmt, kind_of, label

    which = " (the knee)" if k == knee else ""
    print(f"point {k}{which}, found by {p.get('searcher', data.get('searcher'))}: "
          + ", ".join(f"{label(o)} {fmt(p[json_key(o)], kind_of(o))}"
                      for o in data["objectives"])
          + ("" if p["feasible"] else f"; over memory by {fmt(p['violation_bytes'], 'bytes')}"))
    s = p["strategy"]
    placement = s.get("placement", {})
    if isinstance(placement, dict):
        per_device = {}
        for dev in placement.values():
            per_device[dev] = per_device.get(dev, 0) + 1
        print("  ops per device: " + ", ".join(f"{d} {n}" for d, n in sorted(per_device.items())))
    splits = s.get("splits") or {}
    if splits:
        degrees = [len(v.get("devices", [])) if isinstance(v, dict) else 0 for v in splits.values()]
        print(f"  {len(splits)} ops split (parts: median {int(np.median(degrees))}, "
              f"most {max(degrees)})")
    else:
        print("  no op is split")


def _plot(args) -> int:
    from ..review.figures import FILES, draw_search
    from .output import check_folder

    data, problem, name = _plot_source(args)
    out = Path(args.out) if args.out else Path(f"figures-{name}")
    clash = [f for f in FILES if (out / f).exists()]
    if clash and not args.force:
        raise MoplaceError(f"--out {out}: {', '.join(clash)} exist; pass --force to replace them")
    check_folder(out, flag="--out")
    drawn = draw_search(data, problem, out, point=args.point)
    for f, (path, seconds) in drawn.items():
        print(f"  {path}  ({seconds:.2f} s)")
    print(f"drew {len(drawn)} figures of {data.get('searcher')} on {data['graph']} / "
          f"{data['cluster']} in {out}/")
    return 0


def _plot_source(args):
    """(front.json content, the Problem it belongs to, a short name) of ``args.source``."""
    from ..core.presets import load_cluster
    from ..io import load_graph
    from ..optimize.problem import Problem

    data, _, run = _front_of(args.source, args)
    path = Path(args.source)
    name = (run.info.run_id[:8] if run is not None
            else path.stem if path.stem != "front" else path.resolve().parent.name)
    if not isinstance(data, dict) or "points" not in data or "objectives" not in data:
        raise MoplaceError(f"{args.source}: not a front written by moplace (no points)")
    graph_spec = args.graph or data.get("graph_source")
    cluster_spec = args.cluster or data.get("cluster_source")
    if not graph_spec or not cluster_spec:
        raise MoplaceError(f"{args.source} does not say where its graph and cluster came from: "
                           f"pass --graph and --cluster")
    cluster = load_cluster(cluster_spec)
    cap = data.get("memory_limit_bytes")
    if not args.cluster and cap is not None:  # the cap the search ran under
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap <= 2**50:
            raise MoplaceError(f"{args.source}, field 'memory_limit_bytes': a memory cap in "
                               f"bytes from 1 to 2**50, or null, got {shown(cap)}")
        cluster = cluster.capped(float(cap))
    optimizer = data.get("optimizer") if isinstance(data.get("optimizer"), str) else None
    problem = Problem(load_graph(graph_spec, optimizer=optimizer if not args.graph else "auto"),
                      cluster, objectives=tuple(data["objectives"]),
                      inplace=data.get("inplace", False) is True)  # older files: none
    return data, problem, name


def _ui(args) -> int:
    from ..review.ui import serve

    return serve(_uri(args), args.host, args.port, out=sys.stdout)
