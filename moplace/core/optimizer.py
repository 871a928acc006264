"""Optimizer state apart from the weights: how many bytes each update op keeps all step.

An optimizer keeps state per weight: SGD none, SGD with momentum one copy of the weights (the
momentum), Adam two (first and second moments). In an `OpGraph` the weights are the
``param_bytes`` of the ops that hold them, and the optimizer state the ``param_bytes`` of the
update ops (role ``update``), each the size of the weights it updates: its largest input (the
weight or its gradient) times the optimizer's copies.

Importers record the optimizer the source names in ``metadata["optimizer"]`` (PipeDream's
profiles: SGD with momentum; the dnn-partitioning operator graphs name Adam's update ops);
`with_optimizer` sets the update ops' state for an optimizer, and ``load_graph(...,
optimizer=...)`` and ``--optimizer`` apply it where a graph is loaded.

Mixed precision (``NAME-mixed``, e.g. ``adam-mixed``): the graph's weights are FP16 (as it was
profiled), and the optimizer keeps its state in FP32 with an FP32 master copy of the weights,
so (copies + 1) x 2 x the FP16 weights: Adam's 12 bytes per parameter of the ZeRO paper,
momentum's 8, SGD's 4.

Left out: the update's compute time, which stays as the graph gives it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import GraphError
from .graph import ROLES, OpGraph

#: copies of the weights each optimizer keeps as state; ``-mixed``: under mixed precision
_COPIES = {"sgd": 0, "momentum": 1, "adam": 2}
OPTIMIZERS = {**_COPIES, **{f"{name}-mixed": n for name, n in _COPIES.items()}}
MIXED = "-mixed"
_UPDATE = ROLES.index("update")


def update_weights(graph: OpGraph) -> np.ndarray:
    """Per op: the bytes of weights it updates (its largest input), 0 for ops not updates."""
    a = graph.arrays
    out = np.zeros(len(graph.ops))
    upd = a.role[a.dst] == _UPDATE
    np.maximum.at(out, a.dst[upd], a.edge_bytes[upd])
    return out


def with_optimizer(graph: OpGraph, name: str) -> OpGraph:
    """``graph`` with each update op keeping ``name``'s state (`OPTIMIZERS`) for the weights it
    updates; ``metadata["optimizer"]`` says which. `GraphError` for an unknown name, or a graph
    without update ops (nothing says where its state would live)."""
    if name not in OPTIMIZERS:
        raise GraphError(f"unknown optimizer {name!r}; optimizers are: {', '.join(OPTIMIZERS)}")
    weights = update_weights(graph)
    updates = np.flatnonzero(graph.arrays.role == _UPDATE)
    if not updates.size:
        raise GraphError(f"graph {graph.name!r} has no update ops (role 'update'): moplace "
                         "cannot tell where its optimizer state would live")
    state = state_factor(name) * weights
    held = np.array([graph.ops[u].param_bytes for u in updates.tolist()], np.float64)
    if graph.metadata.get("optimizer") == name and np.array_equal(held, state[updates]):
        return graph  # already so (PipeDream's profiles and momentum): the same graph
    ops = list(graph.ops)
    for u in updates.tolist():
        ops[u] = dataclasses.replace(ops[u], param_bytes=int(state[u]))
    return OpGraph(ops, graph.edges, name=graph.name,
                   metadata={**graph.metadata, "optimizer": name})


def state_factor(name: str) -> int:
    """Bytes of state per byte of weights ``name`` keeps: its copies, and under mixed
    precision (copies + the master copy) in FP32 per FP16 weight."""
    copies = OPTIMIZERS[name]
    return 2 * (copies + 1) if name.endswith(MIXED) else copies


def applied(graph: OpGraph, optimizer: str | None) -> OpGraph:
    """``graph`` with the optimizer ``optimizer`` (`with_optimizer`); ``"auto"``: the one its
    source names (``metadata["optimizer"]``; none named: as given); None: as given."""
    if optimizer == "auto":
        optimizer = graph.metadata.get("optimizer")
        if optimizer not in OPTIMIZERS:
            return graph
    return graph if optimizer is None else with_optimizer(graph, optimizer)


def state_words(name: str) -> str:
    """The optimizer state ``name`` keeps, in words, for notes on results."""
    base = name.removesuffix(MIXED)
    what = {"sgd": "no state", "momentum": "a momentum buffer",
            "adam": "two moments (Adam)"}.get(base, base)
    if name.endswith(MIXED):
        return (f"{name}: {what} and a master copy of the weights, in FP32 beside 16-bit "
                f"weights (mixed precision; --optimizer {base}: the state in the weights' "
                f"dtype and no master copy, as torch's optimizers keep it for bf16 weights)")
    return f"{name}: {what} in the weights' dtype, no master copy"

