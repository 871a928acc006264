"""Convert a traced training step (GraphDef + shapes + measured times) into an `OpGraph`.

- Only nodes the step executes are kept: those the fetched loss and the update ops depend on.
- ``Const`` nodes are folded into their consumers (they cost nothing and move nothing worth
  modelling); the graph's metadata lists them per op so that `moplace apply` can place them.
- A variable (``VarHandleOp``) holds its bytes as ``param_bytes``; every node that takes its
  resource handle, and every node TensorFlow colocates with it (``_class = loc:@...``), forms
  its co-location group, because TensorFlow refuses to run them apart.
- Roles: nodes under ``gradient_tape/`` are backward; variables, writes to variables and nodes
  under the optimizer's name scope are update; the rest forward. A backward node feeding an
  update node produces a weight gradient: its ``grad_bytes`` is the bytes it passes on.
- Conv2D and MatMul families may be split on batch or channel.
"""

from __future__ import annotations

import re

import numpy as np

from ..core.graph import Edge, Op, OpGraph
from ._tf import tf
from .trace import TracedStep

FOLDED_TYPES = frozenset({"Const"})
SPLITTABLE_TYPES = frozenset({
    "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "DepthwiseConv2dNative",
    "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter",
    "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})
_WRITES = re.compile(r"^(Assign\w*VariableOp|ResourceApply\w+|ResourceSparseApply\w+|"
                     r"ResourceScatter\w+)$")


def to_op_graph(traced: TracedStep, node_seconds: dict[str, float], kind: str, *,
                extra_compute: dict[str, dict[str, float]] | None = None,
                part_seconds: dict[int, dict[str, float]] | None = None,
                metadata: dict | None = None) -> OpGraph:
    """The op graph of ``traced`` with ``node_seconds`` as compute on device kind ``kind``.

    ``extra_compute`` adds per-node times for other kinds (e.g. analytical estimates);
    ``part_seconds[n]`` are the times measured at batch / n, kept as the measured cost of one
    part of a splittable op split n ways on batch.
    """
    nodes = {n.name: n for n in traced.graph_def.node}
    live = _live_nodes(nodes, traced)
    folded = {name for name in live if nodes[name].op in FOLDED_TYPES}
    kept = [name for name in _in_graph_order(traced.graph_def, live) if name not in folded]
    shapes = _output_bytes(traced.func_graph)
    groups = _colocation_groups(nodes, kept, traced)
    edges = _edges(nodes, kept, folded, shapes)
    roles = {name: _role(nodes[name], traced.optimizer_scope) for name in kept}
    grads = _gradient_bytes(edges, roles)
    untimed = sorted(name for name in kept if name not in node_seconds)
    fed = sorted(set(untimed) & set(traced.feeds))
    ops = []
    for name in kept:
        compute = {kind: float(node_seconds.get(name, 0.0))}
        compute.update((extra_compute or {}).get(name, {}))
        info = traced.variables.get(name)
        splittable = nodes[name].op in SPLITTABLE_TYPES
        parts = {n: {kind: float(t[name])} for n, t in (part_seconds or {}).items()
                 if splittable and name in t}
        ops.append(Op(
            name, nodes[name].op, compute, output_bytes=int(sum(shapes.get(name, ()))),
            param_bytes=info.nbytes if info else 0, grad_bytes=grads.get(name, 0),
            colocation=groups.get(name), role=roles[name],
            splittable=("batch", "channel") if splittable else (), part_compute=parts))
    meta = {"format": "tensorflow", "profiled_on": kind, "tf_version": tf.__version__,
            "batch_size": traced.batch_size, "source": traced.source,
            "pruned_nodes": len(nodes) - len(live),
            "folded": {"types": sorted(FOLDED_TYPES), "count": len(folded),
                       "into": _folded_into(nodes, folded, kept)},
            "untimed": {"fed_inputs": fed, "not_run": sorted(set(untimed) - set(fed)),
                        "costed_as": "0 s: fed inputs are not computed by the step"},
            **(metadata or {})}
    return OpGraph(ops, edges, name=traced.name, metadata=meta)


def _live_nodes(nodes, traced: TracedStep) -> set[str]:
    """Nodes the fetch and the targets depend on (data or control), i.e. what TF runs."""
    stack = [t.split(":")[0] for t in traced.fetches] + list(traced.targets)
    live: set[str] = set()
    while stack:
        name = stack.pop()
        if name in live or name not in nodes:
            continue
        live.add(name)
        stack.extend(_source(i) for i in nodes[name].input)
    return live


def _in_graph_order(graph_def, names: set[str]) -> list[str]:
    return [n.name for n in graph_def.node if n.name in names]


def _source(inp: str) -> str:
    return inp.lstrip("^").split(":")[0]


def _output_bytes(func_graph) -> dict[str, list[int]]:
    out = {}
    for op in func_graph.get_operations():
        # resource handles move no data; integer index vectors of unknown length are tiny
        out[op.name] = [0 if t.dtype in (tf.resource, tf.variant) or not t.shape.is_fully_defined()
                        else int(np.prod(t.shape.as_list(), dtype=np.int64)) * t.dtype.size
                        for t in op.outputs]
    return out


def _edges(nodes, kept, folded, shapes) -> list[Edge]:
    index = {name: i for i, name in enumerate(kept)}
    nbytes: dict[tuple[int, int], int] = {}
    for name in kept:
        for inp in nodes[name].input:
            src = _source(inp)
            if src in folded or src not in index:
                continue
            key = (index[src], index[name])
            size = 0 if inp.startswith("^") else _tensor_bytes(shapes, inp)
            nbytes[key] = nbytes.get(key, 0) + size
    return [Edge(s, d, b) for (s, d), b in nbytes.items()]


def _tensor_bytes(shapes, inp: str) -> int:
    name, _, slot = inp.partition(":")
    sizes = shapes.get(name, [])
    k = int(slot) if slot else 0
    return sizes[k] if k < len(sizes) else 0


def _colocation_groups(nodes, kept, traced: TracedStep) -> dict[str, str]:
    parent = {name: name for name in kept}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(a, b):
        if a in parent and b in parent:
            ra, rb = find(a), find(b)
            if ra != rb:  # keep the variable as the root so groups are named after it
                ra, rb = (ra, rb) if ra in traced.variables else (rb, ra)
                parent[rb] = ra

    for name in kept:
        node = nodes[name]
        for inp in node.input:
            if not inp.startswith("^") and _source(inp) in traced.variables:
                union(_source(inp), name)
        for loc in node.attr["_class"].list.s if "_class" in node.attr else ():
            union(loc.decode().removeprefix("loc:@"), name)
    members: dict[str, list[str]] = {}
    for name in kept:
        members.setdefault(find(name), []).append(name)
    return {name: root for root, group in members.items() if len(group) > 1 for name in group}


def _role(node, optimizer_scope: str) -> str:
    if node.name.startswith("gradient_tape/"):
        return "backward"
    if node.op == "VarHandleOp" or _WRITES.match(node.op) or \
            node.name.split("/")[0].lower() == optimizer_scope:
        return "update"
    return "forward"


def _gradient_bytes(edges, roles) -> dict[str, int]:
    names = list(roles)
    grads: dict[str, int] = {}
    for e in edges:
        src, dst = names[e.src], names[e.dst]
        if roles[src] == "backward" and roles[dst] == "update" and e.bytes:
            grads[src] = max(grads.get(src, 0), e.bytes)
    return grads


def _folded_into(nodes, folded, kept) -> dict[str, list[str]]:
    """For each kept op, the folded nodes that follow it onto its device (first consumer)."""
    kept_set = set(kept)
    into: dict[str, list[str]] = {}
    for name in kept:
        for inp in nodes[name].input:
            src = _source(inp)
            if src in folded and src not in kept_set:
                into.setdefault(name, []).append(src)
                kept_set.add(src)  # each folded node follows its first consumer only
    return into
