"""``moplace search GRAPH --cluster pod:H100:16384 --space megatron --gbs 2048``: a search at
scale over a framework's regular plans (`moplace.optimize.regularsearch`), each evaluated at
scale (one replica simulated, what crosses replicas modelled), its front printed and written
as front.json (`moplace.io.regularfronts`), which ``show`` and ``export`` read.

Everything the command line gets wrong is refused in one line before any work: a searcher
that places ops one by one (only ``random``, ``nsga2``, ``mcmc`` and Optuna's samplers take
regular plans), ``--space any``, no ``--gbs``, a ``--precision`` other than bf16 and fp16, a
graph whose batch is no micro-batch of it, ``--checkpoint``, or an unwritable ``--out``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..errors import MoplaceError

#: the searchers that take regular plans (`moplace.optimize.regularsearch.METHODS`, kept
#: here so that checking an argument imports no searcher)
SCALE_SEARCHERS = ("random", "nsga2", "mcmc", "optuna-tpe", "optuna-random", "optuna-nsga2")


def targets_pod(args) -> bool:
    """Is ``--cluster`` a pod (``pod:KIND:N`` or a cluster file with a ``[pod]`` table)?"""
    from ..core.pod import Pod, is_pod_name, load_target

    spec = args.cluster
    if is_pod_name(spec):
        return True
    if not str(spec).endswith(".toml") or not Path(str(spec)).is_file():
        return False
    try:
        return isinstance(load_target(spec), Pod)
    except MoplaceError:
        return False  # the ordinary path names what is wrong with the file


def check_scale_args(args) -> None:
    """Refuse, in one line, what a search at scale cannot take (module docstring)."""
    if args.searcher not in SCALE_SEARCHERS:
        raise MoplaceError(f"--searcher {args.searcher}: on a pod the search walks regular "
                           f"plans (TP x CP x PP x DP x EP), which {' and '.join(SCALE_SEARCHERS)} "
                           f"search; {args.searcher} places ops one by one (on at most 256 "
                           f"listed devices)")
    if getattr(args, "space", "any") == "any":
        raise MoplaceError("--space: on a pod give the framework whose plans are searched, "
                           "--space megatron or --space torchtitan (--space any places ops one "
                           "by one)")
    if not args.gbs:
        raise MoplaceError("--gbs: a search on a pod is at a fixed global batch: give the "
                           "sequences per step, e.g. --gbs 2048")
    if getattr(args, "checkpoint", None):
        raise MoplaceError("--checkpoint: not with a search on a pod")
    if getattr(args, "dask", None):
        raise MoplaceError("--dask: a search on a pod takes --workers N (processes here)")
    precisions(args)


#: the precisions a search on a pod takes as a gene (FP8's are the graph's own: `fp8_modes`)
SEARCHED_PRECISIONS = ("bf16", "fp16")


def precisions(args) -> tuple[str, ...]:
    """``--precision``'s precisions (bf16 without it); refused in one line when one is not
    `SEARCHED_PRECISIONS`' or none is given."""
    given = getattr(args, "precision", None)
    if given is None:
        return ("bf16",)
    out = tuple(dict.fromkeys(p.strip().lower() for p in str(given).split(",") if p.strip()))
    bad = [p for p in out if p not in SEARCHED_PRECISIONS]
    if bad or not out:
        raise MoplaceError(f"--precision {given}: give {' and/or '.join(SEARCHED_PRECISIONS)}, "
                           f"comma separated" + (f" ({bad[0]!r} is neither)" if bad else ""))
    return out


def refuse_pod_options(args) -> None:
    """Refuse, in one line, the options only a search on a pod takes, given with a listed
    cluster."""
    pod_only = [f for f, on in (("gbs", args.gbs), ("workers", args.workers > 1),
                                ("micro-batch-graphs", args.micro_batch_graphs),
                                ("precision", getattr(args, "precision", None))) if on]
    if pod_only:
        raise MoplaceError(f"--{pod_only[0]}: for a search on a pod "
                           f"(--cluster pod:H100:N); --cluster {args.cluster} lists its devices")


def run_scale_search(args, budget, settings: dict) -> int:
    from .. import strictjson
    from ..core.pod import load_target
    from ..io.fronts import sources, write_front
    from ..io.regularfronts import regular_front_json
    from ..optimize.regularsearch import search_regular
    from ..review.table import front_text
    from ..review.units import fmt, fmt_duration
    from .output import check_output
    from .problem import graph_arg

    check_scale_args(args)
    unknown = set(settings) - {"pop_size"}
    if unknown:
        raise MoplaceError(f"--set {sorted(unknown)[0]}: a search on a pod takes pop_size only")
    check_output(Path(args.out) / "front.json", force=args.force, flag="--out")
    pod = load_target(args.cluster)
    graph = graph_arg(args)
    batch = graph.metadata.get("batch_size")
    if not isinstance(batch, int) or args.gbs % batch:
        raise MoplaceError(f"--gbs {args.gbs}: the graph {graph.name!r} is one micro-batch of "
                           f"{batch} sequences; the global batch must be a multiple of it")
    more = _micro_batch_graphs(args, graph)
    chosen = precisions(args)
    sizes = sorted({batch} | {g.metadata["batch_size"] for g, _ in more})
    quiet = args.json or args.quiet
    last = [0.0]

    def progress(done, unfit, plans, seconds, best):
        if quiet or (seconds - last[0] < 5 and done + unfit < plans):
            return
        last[0] = seconds
        print(f"  {done:,} evaluated, {unfit:,} cannot hold their weights, of {plans:,} plans; "
              f"{fmt_duration(seconds)}; fastest that fits: "
              f"{fmt(best, 'time') if best is not None else '-'}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    result = search_regular(
        graph, pod, args.gbs, graph_spec=str(args.graph), pod_spec=str(args.cluster),
        framework=args.space, method=args.searcher, budget=budget.evaluations or 10**9,
        seconds=budget.seconds, seed=args.seed, memory_limit=args.memory_limit,
        workers=args.workers, pop_size=int(settings.get("pop_size", 16)), progress=progress,
        more_graphs=more, precisions=chosen,
        **({"objectives": args.objectives} if args.objectives else {}))
    notes = [f"searched the {args.space} space's regular plans on {pod.name} at {args.gbs:,} "
             f"sequences a step"
             + (f" (micro-batches of {', '.join(map(str, sizes))} sequences)" if more else "")
             + (f" in {' and '.join(p.upper() for p in chosen)}" if chosen != ("bf16",) else "")
             + f": {len(result.points):,} evaluated of {result.n_plans:,} "
             f"({result.unfit:,} cannot hold their weights, gradients and optimizer state"
             + (f"; {len(result.refused):,} refused: {result.refused[0][1].split(': ', 1)[-1]}"
                if result.refused else "") + "), "
             f"{args.searcher}, seeded with {len(result.seeds)} recommended configuration"
             f"{'s' if len(result.seeds) != 1 else ''}, "
             f"in {fmt_duration(time.perf_counter() - t0)}"]
    where = sources(args.graph, args.cluster)
    if more:  # each micro-batch size's graph, so a point's commands name its own
        where["micro_batch_graphs"] = {str(batch): where["graph_source"], **{
            str(g.metadata["batch_size"]): sources(spec, None)["graph_source"]
            for g, spec in more}}
    data = regular_front_json(result, graph, pod, where, notes)
    path = write_front(data, args.out)
    if args.json:
        print(strictjson.dumps(data))
    else:
        print(front_text(data, every=args.all))
        for note in notes:
            print(f"note: {note}")
        print(f"wrote {path}")
        print(f"next: moplace show {path} --best runtime, moplace export {path} --point K")
    return 0 if result.front else 3


def _micro_batch_graphs(args, graph) -> tuple:
    """``(graph, spec)`` of each ``--micro-batch-graphs`` file; refused in one line naming the
    file unless it is ``graph``'s model (the same parameters and layers) traced at another
    micro-batch size, one the global batch divides."""
    from ..io import load_graph

    def model(g):
        return g.metadata.get("parameters"), (g.metadata.get("layers") or {}).get("count")

    seen, out = {graph.metadata.get("batch_size")}, []
    for spec in [x.strip() for x in (args.micro_batch_graphs or "").split(",") if x.strip()]:
        where = f"--micro-batch-graphs {spec}"
        if not Path(spec).is_file():
            raise MoplaceError(f"{where}: no such file")
        try:
            g = load_graph(spec)
        except MoplaceError as exc:
            raise MoplaceError(f"{where}: {exc}") from None
        batch = g.metadata.get("batch_size")
        if not isinstance(batch, int) or batch < 1 or args.gbs % batch:
            raise MoplaceError(f"{where}: one micro-batch of {batch} sequences, which the "
                               f"global batch {args.gbs:,} is no multiple of")
        if batch in seen:
            raise MoplaceError(f"{where}: a second graph of micro-batch {batch}; give each "
                               f"size once")
        if model(g) != model(graph):
            (p, n), (p0, n0) = model(g), model(graph)
            raise MoplaceError(f"{where}: {p} parameters in {n} layers, not the searched "
                               f"graph's {p0} in {n0}: not the same model")
        seen.add(batch)
        out.append((g, spec))
    return tuple(out)
