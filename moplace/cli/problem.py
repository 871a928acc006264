"""The options that say what a command simulates, shared by search, compare and evaluate:
the graph with its optimizer state (``--optimizer``), the cluster under a per-device memory cap
(``--memory-limit``), and whether ops run in place (``--no-inplace``)."""

from __future__ import annotations

from .args import memory_size

#: the exit status of a search or comparison whose front holds no feasible point (its
#: least-violating points are still printed and written to front.json)
NOTHING_FEASIBLE = 3
#: what `search --help` and `compare --help` end with
EXIT_STATUS = ("exit status: 0 when a feasible strategy was found; 3 when none fits (front.json "
               "then holds the least-violating ones); 2 for a bad input (one line, before any "
               "work)")


def model_options(p) -> None:
    """``--memory-limit SIZE``: a per-device memory cap (see `cluster_arg`); ``--no-inplace``:
    no op runs in place; ``--optimizer NAME``: the optimizer state the update ops keep."""
    from ..core.optimizer import OPTIMIZERS

    p.add_argument("--optimizer", choices=tuple(OPTIMIZERS),
                   help="the optimizer whose state the update ops keep (sgd: none, momentum: "
                        "one copy of the weights, adam: two; NAME-mixed: under mixed "
                        "precision, the state and an FP32 master copy in FP32 for FP16 "
                        "weights); default: the one the graph's source names (the "
                        "dnn-partitioning operator graphs: adam; PipeDream's: momentum), else "
                        "the bytes as the graph gives them")
    p.add_argument("--memory-limit", type=memory_size, metavar="SIZE",
                   help="a per-device memory cap, e.g. 8GiB: no device may hold more (a "
                        "strategy is feasible when it fits under the cap and the devices' "
                        "memory). It bounds the search itself: `moplace show --where` "
                        "filters a front after the search. A cap below what any plan holds "
                        "per device (the weights and optimizer state over all devices) is "
                        "refused; one above every device's memory is taken with a warning")
    p.add_argument("--no-inplace", action="store_true",
                   help="run no op in place (by default an element-wise op writes its output "
                        "into an input no other op reads, as frameworks do): for comparison")


def graph_arg(args):
    """The graph of the ``graph`` argument, its update ops keeping ``--optimizer``'s state."""
    from ..io import load_graph

    return load_graph(args.graph, optimizer=args.optimizer or "auto")


def cluster_arg(args, graph=None):
    """The cluster of ``--cluster``, each device's memory capped at ``--memory-limit``; with
    ``graph``, a cap no plan of it can fit under is refused first (`memory_floor`), and a cap
    above every device's memory is said to change nothing (a warning)."""
    from ..core.presets import load_cluster

    cluster = load_cluster(args.cluster)
    limit = args.memory_limit
    if not limit:
        return cluster
    if graph is not None:
        _check_cap(limit, graph, cluster)
    return cluster.capped(limit)


def memory_floor(graph, n_devices: int) -> tuple[float, str]:
    """(bytes, why): what the fullest device holds under every plan of ``graph`` on
    ``n_devices`` devices, at least. Every op's parameters (weights and optimizer state,
    resident the whole step) are held somewhere: whole, or in parts that add up to them
    (splits, ZeRO's shards), so their sum over the devices is the graph's total and the
    fullest device holds at least total / ``n_devices``; an op that cannot be split holds its
    own whole on one device. Activations, gradients and scratch are left out: recomputation,
    micro-batches and in-place ops shrink them in ways no bound here follows."""
    total = float(graph.arrays.param_bytes.sum())
    whole = [(op.param_bytes, op.name) for op in graph.ops if not op.splittable]
    largest, name = max(whole, default=(0, ""))
    from ..review.units import fmt

    if largest > total / n_devices:
        return float(largest), (f"op {name}'s weights and optimizer state, which no plan can "
                                f"split")
    return total / n_devices, (f"its {fmt(total, 'bytes')} of weights and optimizer state "
                               f"sharded over all {n_devices} devices")


def _check_cap(limit: float, graph, cluster) -> None:
    import sys

    from ..errors import MoplaceError
    from ..review.units import fmt

    floor, why = memory_floor(graph, cluster.n_devices)
    given = getattr(limit, "text", None) or fmt(limit, "bytes")  # as the user wrote it
    if limit < floor:
        raise MoplaceError(f"--memory-limit {given} is below the least any plan "
                           f"of {graph.name} can hold on {cluster.name}: {fmt(floor, 'bytes')} "
                           f"per device ({why})")
    largest = max(d.memory_bytes for d in cluster.devices)
    if limit >= largest:
        print(f"moplace: warning: --memory-limit {given} is above the memory of "
              f"every device of {cluster.name} (at most {fmt(largest, 'bytes')}): it changes "
              f"nothing, the devices' own memory bounds the plans", file=sys.stderr)


def from_front(args, *, needs_cluster: bool) -> None:
    """Fill in what a front.json records when the command line leaves it out: a front given
    as the ``graph`` argument is the strategy file (``moplace evaluate front.json --point
    3``); the graph and cluster it was searched on (``graph_source``, ``cluster_source``),
    and, where the command has them and they are not given, its memory cap, optimizer and
    in-place setting. ``needs_cluster``: the command cannot run without a cluster (evaluate;
    apply has the measured one). A clear error when neither the command line nor the file
    says."""
    from ..errors import MoplaceError
    from ..io.native import read_json
    from ..io.strategies import FRONT_FORMAT

    def front(path):
        if path is None or not str(path).endswith(".json"):
            return None
        data = read_json(path)
        if not (isinstance(data, dict) and data.get("format") == FRONT_FORMAT):
            return None
        from ..io.frontcheck import check_front

        return check_front(data, path)

    if args.graph is not None and getattr(args, "strategy", None) is None \
            and getattr(args, "baseline", None) is None and front(args.graph) is not None:
        args.strategy, args.graph = args.graph, None
    if args.graph is not None and (args.cluster is not None or not needs_cluster):
        return
    data = front(args.strategy) if getattr(args, "strategy", None) else None
    if data is None:
        raise MoplaceError("give the graph and --cluster, or a front.json (--strategy), which "
                           "records them" if args.graph is None else "--cluster is required "
                           "(a front.json given as --strategy records it)")
    missing = [what for what, key in (("graph", "graph_source"), ("cluster", "cluster_source"))
               if data.get(key) is None and getattr(args, what) is None]
    if missing:
        raise MoplaceError(f"{args.strategy} does not record its {' and '.join(missing)} "
                           f"(written from Python or by an older moplace): give "
                           + " and ".join("GRAPH" if m == "graph" else "--cluster"
                                          for m in missing))
    args.graph = args.graph if args.graph is not None else data["graph_source"]
    args.cluster = args.cluster if args.cluster is not None else data["cluster_source"]
    if hasattr(args, "memory_limit"):  # evaluate: the search's model options
        if args.memory_limit is None and data.get("memory_limit_bytes"):
            args.memory_limit = float(data["memory_limit_bytes"])
        if args.optimizer is None and isinstance(data.get("optimizer"), str):
            args.optimizer = data["optimizer"]
        if data.get("inplace") is False:
            args.no_inplace = True


def objective_names(text: str) -> tuple[str, ...]:
    """An argparse ``type``: ``--objectives a,b,c``, each a registered objective, none twice."""
    import argparse

    from objectives import OBJECTIVES

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"wants distinct objective names separated by commas, "
                                         f"got {text!r}")
    for name in names:
        if name not in OBJECTIVES:
            raise argparse.ArgumentTypeError(f"unknown objective {name!r}; known: "
                                             f"{', '.join(OBJECTIVES)}")
    return names


def objectives_arg(args) -> dict:
    """The `Problem` keyword ``--objectives`` asks for (none: the default objectives)."""
    return {"objectives": args.objectives} if args.objectives else {}
