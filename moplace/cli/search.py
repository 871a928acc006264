"""The ``search`` and ``compare`` commands of the CLI.

    moplace search GRAPH --cluster C --searcher NAME [--budget 2000 | --time 60s] [--seed K]
                   [--out DIR] [--json] [--no-mlflow] [--tracking-uri URI] [--checkpoint FILE]
    moplace search GRAPH --cluster pod:H100:N --space megatron|torchtitan --gbs SEQUENCES
                   --searcher random|nsga2 [--workers N]   (regular plans at scale:
                   `moplace.cli.scalesearch`)
    moplace compare GRAPH --cluster C --searchers a,b,c [--budget N | --time T] [--seed K]
                    [--out DIR] [--json]   (writes the combined front.json)

``--set KEY=VALUE`` (``--set NAME.KEY=VALUE`` in compare) passes a setting to a searcher, e.g.
``--set pop_size=50`` for nsga2; a setting the searcher does not have is refused with its list.
``--objectives a,b,...`` picks the objectives by their registered names (default: runtime,
peak_communication, peak_memory).

``--checkpoint FILE`` writes the search's state to FILE while it runs (every 500 evaluations
or 30 s, whichever comes first, and at the end, Ctrl-C included); when FILE exists the search
continues from it (same graph, cluster, searcher and seed; the budget counts every run's
evaluations and seconds together), so running the same command again after Ctrl-C finishes
the search exactly as if it had never stopped, and after a crash or SIGKILL loses at most
the evaluations since the last write.

Exit status (`EXIT_STATUS`): 3 when no strategy found fits.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .. import strictjson
from ..errors import MoplaceError
from ..optimize.driver import Budget
from ..review.table import ROW_LIMIT
from .args import file_arg, integer, logged_run_options
from .space import space_option, space_record, space_searcher
from .problem import (EXIT_STATUS, NOTHING_FEASIBLE, cluster_arg, graph_arg, model_options,
                      objective_names, objectives_arg)


def add_commands(sub) -> None:
    """Register ``search`` and ``compare`` on the CLI's subparsers."""
    s = sub.add_parser("search", help="search the trade-off front of strategies",
                       epilog=EXIT_STATUS)
    _problem_and_budget(s, per="")
    s.add_argument("--searcher", required=True, help="searcher name (see `moplace searchers`)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a searcher setting, e.g. --set pop_size=50 (repeatable; VALUE is JSON "
                        "or a plain word; `moplace searchers` lists the settings)")
    s.add_argument("--all", action="store_true",
                   help=f"list every front point (default: at most {ROW_LIMIT} rows)")
    space_option(s)
    s.add_argument("--gbs", type=integer(1, 1 << 30), metavar="SEQUENCES",
                   help="on a pod (--cluster pod:H100:N): the global batch, sequences a step, "
                        "the regular plans are searched at (the graph is one micro-batch)")
    s.add_argument("--micro-batch-graphs", metavar="G2,G4", help="on a pod: the model "
                   "traced at other micro-batch sizes (profile --batch B), comma separated: "
                   "a gene, each plan evaluated on its size's graph")
    s.add_argument("--precision", metavar="P[,P]", help="on a pod: the training precisions "
                   "searched, bf16 and/or fp16, comma separated: a gene (default bf16; "
                   "Megatron keeps FP16's gradients in FP16, BF16's in FP32)")
    s.add_argument("--workers", type=integer(1, 256), default=1,
                   help="on a pod: evaluate plans in N processes here (default 1)")
    s.add_argument("--checkpoint", type=file_arg, metavar="FILE",
                   help="continue from FILE if it exists; write the search's state to it every "
                        "500 evaluations or 30 s and at the end (Ctrl-C included)")
    s.set_defaults(run=_search)
    c = sub.add_parser("compare", help="run several searchers on the same budget, one table",
                       epilog=EXIT_STATUS)
    _problem_and_budget(c, per=" per searcher")
    c.add_argument("--searchers", required=True, help="comma-separated names, e.g. heft,dpos,random")
    c.add_argument("--set", action="append", default=[], metavar="NAME.KEY=VALUE",
                   help="a setting of searcher NAME, e.g. --set nsga2.pop_size=50 (repeatable)")
    c.set_defaults(run=_compare)


def _problem_and_budget(p, per: str) -> None:
    """The options `search` and `compare` share: problem, budget, seed, output, MLflow."""
    p.add_argument("graph", type=file_arg, help="graph file or bundled name (see `moplace graphs`)")
    p.add_argument("--cluster", type=file_arg, required=True, help="preset name or TOML file")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--budget", type=integer(1, 10**12), help=f"evaluations{per} (default 2000)")
    how.add_argument("--time", help=f"wall time{per}, e.g. 60s, 5m")
    p.add_argument("--seed", type=integer(0, 2**63 - 1), default=0,
                   help="random seed (default 0): the same seed gives the same result")
    p.add_argument("--objectives", type=objective_names, metavar="A,B,...",
                   help="the objectives to minimize, registered names (default: runtime,"
                        "peak_communication,peak_memory)")
    model_options(p)
    p.add_argument("--out", type=file_arg, default=".",
                   help="directory for front.json (default: here)" if not per else
                   "directory for the combined front.json, each point naming its searcher "
                   "(default: here)")
    p.add_argument("--force", action="store_true", help="replace an existing front.json")
    logged_run_options(p, "MLflow experiment (default: moplace; filter a graph's runs by its "
                       "tag in the UI)")
    p.add_argument("--dask", type=file_arg, metavar="ADDRESS",
                   help="evaluate batches on a Dask cluster: a scheduler address "
                        "(tcp://host:8786), a scheduler file, or local:N for N worker "
                        "processes here; the result is the serial one")
    p.add_argument("--figures", choices=("background", "inline", "off"), default="background",
                   help="the run's figures: drawn by a separate process once the search ends "
                        "(default; the command returns at once), inline (there when the "
                        "command returns), or off")


def _search(args) -> int:
    from ..io.fronts import point_json, result_json, write_front
    from ..optimize.driver import search
    from ..optimize.plugins import make_searcher
    from ..optimize.problem import Problem
    from .output import check_output
    from .progress import Display

    budget = _budget(args)
    from .scalesearch import refuse_pod_options, run_scale_search, targets_pod

    if targets_pod(args):
        return run_scale_search(args, budget, parse_settings(args.set))
    refuse_pod_options(args)
    resuming = bool(args.checkpoint) and Path(args.checkpoint).is_file()
    check_output(Path(args.out) / "front.json", force=args.force, flag="--out",
                 replaceable=resuming)  # before any work: nothing found is lost
    settings = parse_settings(args.set)
    searcher = space_searcher(args, settings) or make_searcher(args.searcher, **settings)
    graph = graph_arg(args)
    problem = Problem(graph, cluster_arg(args, graph), **objectives_arg(args),
                      inplace=not args.no_inplace)
    extras = _front_extras(args, problem)
    evaluator = _evaluator(args)
    display = Display("quiet" if args.json or args.quiet else "auto")
    callbacks = [display.search(f"{args.searcher}")]
    tracker = None
    if not args.no_mlflow:
        from ..review.tracking import MLflowCallback

        tracker = MLflowCallback(args.tracking_uri, args.experiment,
                                 **tracking_options(args, extras))
        callbacks.append(tracker)
    if args.checkpoint and not args.json:
        resumed = _resuming(args.checkpoint, problem, searcher, args.seed, budget)
        if resumed:
            print(resumed, flush=True)
    with display, _closing(evaluator):
        result = search(problem, searcher, budget=budget, seed=args.seed, callbacks=callbacks,
                        checkpoint=args.checkpoint, evaluator=evaluator)
    notes = searcher.notes()
    data = {**result_json(result), **extras, **space_record(args),
            "notes": [*notes, *extras["notes"]]}
    path = write_front(data, args.out)
    if args.checkpoint and result.status == "interrupted":
        from ..optimize.checkpoint import read_meta

        n = read_meta(args.checkpoint)["n_evaluations"]
        print(f"checkpoint {args.checkpoint} holds {n} evaluations; run the same command again "
              f"(same graph, cluster, searcher, seed and --checkpoint {args.checkpoint}) to "
              f"continue", file=sys.stderr)
    if args.json:
        extra = {"checkpoint": args.checkpoint, "resumed_from": result.resumed_from} \
            if args.checkpoint else {}
        print(strictjson.dumps({"graph": problem.graph.name, "cluster": problem.cluster.name,
                          "searcher": result.searcher, "settings": searcher.settings(),
                          "seed": result.seed, "status": result.status, **extra,
                          "evaluations": result.n_evaluations, "seconds": result.seconds,
                          "hypervolume": result.hypervolume, "feasible_found": result.feasible_found,
                          "notes": data["notes"],
                          "front": [{k: v for k, v in point_json(pt, problem).items() if k != "strategy"}
                                    for pt in result.front], "front_file": str(path),
                          **tracking_json(tracker)}))
        return 0 if result.front else NOTHING_FEASIBLE
    _print_result(problem, searcher, result, data, path, args.all)
    if tracker is not None:
        drawing = {"background": "being drawn", "inline": "drawn", "off": "off"}[args.figures]
        drawing = "drawn" if drawing == "being drawn" and tracker.figure_job is None else drawing
        print(f"logged to MLflow run {tracker.run_id} at {tracker.where} (figures "
              f"{drawing}; `moplace show {tracker.run_id[:8]}` lists them)")
    return 0 if result.front else NOTHING_FEASIBLE


def _print_result(problem, searcher, result, data, path, every) -> None:
    """A search's result for a person: its figures, its front, where it was written, the
    searcher's notes and its own estimates beside the simulated values."""
    from ..review.table import front_text

    print(f"{result.searcher} on {problem.graph.name} / {problem.cluster.name}: "
          f"{result.n_evaluations} evaluations in {result.seconds:.1f} s ({result.status}), "
          f"hypervolume {result.hypervolume:.4f}")
    if not result.front:
        print("no feasible strategy found; the least-violating ones:")
    print(front_text(data, every=every))
    print(f"wrote {path}")
    print(f"next: moplace show {path} --point K (a point's plan), moplace evaluate {path} "
          f"--point K (its devices), moplace export {path} --point K (its launch flags)")
    for note in data["notes"]:
        print(f"note: {note}")
    estimate = searcher.own_estimates().get("runtime")
    if estimate and result.front + result.infeasible and "runtime" in problem.objectives:
        point = (result.front + result.infeasible)[0]
        simulated = point.values[problem.objectives.index("runtime")]
        flag = "" if abs(simulated / estimate - 1) <= 0.05 else "  (they disagree by more than 5%)"
        print(f"the scheduler's own makespan estimate: {estimate * 1e3:.3f} ms, simulated: "
              f"{simulated * 1e3:.3f} ms{flag}")


def tracking_options(args, extras: dict) -> dict:
    """The options of the MLflow run(s) the command line asks for (`MLflowCallback`,
    `ComparisonRun`): the logged front.json records ``extras`` (`_front_extras`) as the one
    written here does."""
    return {"figures": args.figures, "command": " ".join(["moplace"] + sys.argv[1:]),
            "sources": extras}


def tracking_json(tracker) -> dict:
    """What --json says about the MLflow run (nulls with --no-mlflow)."""
    return {"mlflow_run_id": tracker.run_id if tracker else None,
            "tracking_uri": tracker.tracking_uri if tracker else None}


def _resuming(path, problem, searcher, seed, budget) -> str | None:
    """The line saying the search continues from checkpoint ``path`` (None: a new search);
    checks that the checkpoint belongs to this search first."""
    from ..optimize.checkpoint import check, read_meta, run_key

    if not Path(path).is_file():
        return None
    meta = read_meta(path)
    check(meta, run_key(problem, searcher, seed), path)
    n, elapsed = int(meta["n_evaluations"]), float(meta["elapsed"])
    spent = (budget.evaluations is not None and n >= budget.evaluations) or \
        (budget.seconds is not None and elapsed >= budget.seconds)
    return (f"resumed from {path}: {n} evaluations in {elapsed:.1f} s done"
            + ("; the budget is spent, nothing left to do" if spent else ""))


def _front_extras(args, problem) -> dict:
    """What a front.json written by `search` or `compare` records besides the result: the
    command line's sources and levers, the baselines' points (to name a front point equal to
    one), and notes on where the costs came from (a search adds its searcher's first)."""
    from ..costs.origin import estimated_notes
    from ..io.fronts import sources
    from ..review.marks import baselines_json

    return {**sources(args.graph, args.cluster), "memory_limit_bytes": args.memory_limit,
            "inplace": not args.no_inplace,
            "optimizer": problem.graph.metadata.get("optimizer"),
            "baselines": baselines_json(problem),
            "notes": estimated_notes(problem.graph, problem.cluster)}


def _compare(args) -> int:
    from ..io.fronts import write_front
    from ..optimize.driver import search
    from ..optimize.plugins import make_searcher
    from ..optimize.problem import Problem
    from .progress import Display

    names = [n.strip() for n in args.searchers.split(",") if n.strip()]
    if not names:
        raise MoplaceError("--searchers needs at least one name")
    per_searcher = parse_settings(args.set, names)
    searchers = [make_searcher(n, **per_searcher.get(n, {})) for n in names]  # fail before work
    from .output import check_output

    check_output(Path(args.out) / "front.json", force=args.force, flag="--out")
    budget = _budget(args)
    graph = graph_arg(args)
    problem = Problem(graph, cluster_arg(args, graph), **objectives_arg(args),
                      inplace=not args.no_inplace)
    extras = _front_extras(args, problem)
    evaluator = _evaluator(args)
    comparison = None
    if not args.no_mlflow:
        from ..review.tracking import ComparisonRun

        comparison = ComparisonRun(args.tracking_uri, args.experiment,
                                   **tracking_options(args, extras))
        comparison.start(problem, names, budget, args.seed)
    rows, results, children = [], {}, {}
    try:
        with Display("quiet" if args.json or args.quiet else "auto") as display, _closing(evaluator):
            for name, searcher in zip(names, searchers):
                callbacks = [display.search(name)]
                if comparison is not None:
                    children[name] = comparison.child()
                    callbacks.append(children[name])
                r = search(problem, searcher, budget=budget, seed=args.seed, callbacks=callbacks,
                           evaluator=evaluator)
                results[name] = r
                best = [min(p.values[k] for p in r.front) if r.front else None
                        for k in range(len(problem.objectives))]
                rows.append({"searcher": name, "evaluations": r.n_evaluations,
                             "seconds": r.seconds, "front_size": len(r.front),
                             "hypervolume": r.hypervolume, "status": r.status,
                             **{f"best_{o}": b for o, b in zip(problem.objectives, best)},
                             "mlflow_run_id": children[name].run_id if name in children
                             else None})
                if r.status == "interrupted":
                    break
    except BaseException:
        if comparison is not None:
            comparison.fail()
        raise
    if comparison is not None:
        combined = comparison.end(results)
    else:
        from ..review.comparison import comparison_json

        combined = comparison_json(results)
    path = write_front({**combined, **extras}, args.out)
    if args.json:
        print(strictjson.dumps({"graph": problem.graph.name, "cluster": problem.cluster.name,
                          "budget_evaluations": budget.evaluations, "budget_seconds": budget.seconds,
                          "seed": args.seed, "results": rows,
                          "combined_hypervolume": combined["hypervolume"],
                          "front_file": str(path), **tracking_json(comparison)}))
        return 0 if combined["points"] else NOTHING_FEASIBLE
    _compare_table(problem, budget, args.seed, rows)
    print(f"combined front: {len(combined['points'])} points, hypervolume "
          f"{combined['hypervolume']:.4f}; wrote {path} (each point names its searcher; "
          f"`moplace show {path} --best knee` picks one)")
    if comparison is not None:
        print(f"logged to MLflow run {comparison.run_id} (one child run per searcher) at "
              f"{comparison.where}")
    for note in extras["notes"]:
        print(f"note: {note}")
    return 0 if combined["points"] else NOTHING_FEASIBLE


def _compare_table(problem, budget, seed, rows) -> None:
    from ..review.table import aligned
    from ..review.units import column_unit, fmt_duration, kind_of, number, short

    print(f"{problem.graph.name} on {problem.cluster.name}, budget "
          f"{budget.evaluations or f'{budget.seconds:g} s'} per searcher, seed {seed}")
    units = {o: column_unit(o, [r[f"best_{o}"] for r in rows if r[f"best_{o}"] is not None])
             for o in problem.objectives}
    heads = ["searcher", "evaluations", "front", "hypervolume"] + [
        f"best {short(o)} ({units[o][0]})" if units[o][0] else f"best {short(o)}"
        for o in problem.objectives] + ["time"]
    table = [[r["searcher"], str(r["evaluations"]), str(r["front_size"]),
              f"{r['hypervolume']:.4f}"]
             + [number(r[f"best_{o}"], kind_of(o), units[o]) if r[f"best_{o}"] is not None
                else "-" for o in problem.objectives]
             + [fmt_duration(r["seconds"]) if r["seconds"] >= 60 else f"{r['seconds']:.2f} s"]
             for r in rows]
    print("\n".join(aligned(heads, table, words={"searcher"})))


def _evaluator(args):
    """``--dask``: the cluster's evaluator, connected now (before any work); None without."""
    from ..scale import make_evaluator

    return make_evaluator(getattr(args, "dask", None))


def _closing(evaluator):
    from contextlib import nullcontext

    return evaluator if evaluator is not None else nullcontext()


def _budget(args) -> Budget:
    if args.time is not None:  # --time '' is an error, not the default budget
        return Budget(evaluations=None, seconds=parse_seconds(args.time))
    return Budget(evaluations=2000 if args.budget is None else args.budget)


def parse_settings(items, names=None) -> dict:
    """``--set`` values -> settings. ``KEY=VALUE`` -> {KEY: VALUE} for `search`; with ``names``
    (`compare`) ``NAME.KEY=VALUE`` -> {NAME: {KEY: VALUE}}, NAME one of ``names``. VALUE is
    read as JSON (``50``, ``0.1``, ``true``, ``[0.4, 0.3, 0.3]``, ``null``), else kept as text."""
    out: dict = {}
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise MoplaceError(f"--set wants KEY=VALUE, got {item!r}")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if names is None:
            out[key] = value
            continue
        name, dot, key = key.rpartition(".")
        if not dot or name not in names:
            raise MoplaceError(f"--set in compare wants NAME.KEY=VALUE with NAME one of "
                               f"{', '.join(names)}, got {item!r}")
        out.setdefault(name, {})[key] = value
    return out


def parse_seconds(text: str) -> float:
    """``"90"``, ``"90s"``, ``"5m"``, ``"1h"`` -> seconds; anything else is an error."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|m|h)?\s*", text or "")
    if not m:
        raise MoplaceError(f"--time must look like 60s, 5m or 1h, got {text!r}")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
