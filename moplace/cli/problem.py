"""The options that say what a command simulates, shared by search, compare and evaluate:
the graph with its optimizer state (``--optimizer``), the cluster under a per-device memory cap
(``--memory-limit``), and whether ops run in place (``--no-inplace``)."""

from __future__ import annotations

from .args import memory_size


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
                        "memory)")
    p.add_argument("--no-inplace", action="store_true",
                   help="run no op in place (by default an element-wise op writes its output "
                        "into an input no other op reads, as frameworks do): for comparison")


def graph_arg(args):
    """The graph of the ``graph`` argument, its update ops keeping ``--optimizer``'s state."""
    from ..io import load_graph

    return load_graph(args.graph, optimizer=args.optimizer or "auto")


def cluster_arg(args):
    """The cluster of ``--cluster``, each device's memory capped at ``--memory-limit``."""
    from ..core.presets import load_cluster

    cluster = load_cluster(args.cluster)
    return cluster.capped(args.memory_limit) if args.memory_limit else cluster
