"""Micro-batches on the testbed: the step rewritten to run its forward and backward once per
micro-batch, gradients accumulated, the updates once, as the simulator has them
(`moplace.simulator.microbatch`).

The traced step has static shapes, so the forward and backward are traced again at the
micro-batch size (`moplace.tf.modelfile.trace_model` at batch / m, whose node names are the
step's). Into the placed step:

- every forward and backward op of the graph (and every constant of the micro-batch trace
  outside the graph, such as folded shapes) is put m times, as ``moplace_mb<i>/<name>``, from
  the micro-batch trace, on its op's device; copy i reads copy i of the ops it reads, the
  variables of the step, and micro-batch i of each batch input (a ``Slice`` of the fed
  placeholder on its device);
- the original forward and backward nodes are removed; a node that stays (an update, an
  optimizer or statistics op) and read one of them reads the copies combined instead
  (``moplace_acc/<name>/<k>``): a tensor whose shape does not depend on the batch (a dense
  weight gradient, the loss) as the mean of its m copies (the first copy's value when it is
  not floating point); one whose shape does (the rows and indices of a sparse gradient, an
  activation) as its copies joined along the batch's axis, a backward op's floating-point
  values times 1/m. With a loss averaged over the batch, the mean of the micro-batches'
  gradients is the batch's gradient: the updates are the original step's, to float
  reassociation. A batch-statistics op (BatchNorm) normalises each micro-batch by its own
  statistics, as in GPipe;
- the fetched loss is the mean of the micro-batches' losses, under its own name.

Split ops are cut after the copies are made (`split_copies`): every copy of a split forward or
backward op into the op's parts, planned on the micro-batch trace (a batch split cuts the
micro-batch), and a split op run once (an update) into its parts of the whole batch's step;
a part reading a combined tensor reads it as the whole batch's. Hybrid pipelines (a stage
replicated over several devices) run this way.

Recomputed groups are cloned after (`moplace.tf.recompute`): each micro-batch's copy its own
clone. The micro-batches are equal: m must divide the batch size.
"""

from __future__ import annotations

import numpy as np

from ..core.graph import ROLES, OpGraph
from ..core.strategy import Strategy
from ._tf import tf
from .modelfile import trace_model
from .rewrite import SplitNode, plan_split_ops
from .splitrules import SplitRefused
from .trace import TracedStep

_COPIED = (ROLES.index("forward"), ROLES.index("backward"))
_MICRO_TRACES: dict[tuple, TracedStep] = {}


def copy_name(op_name: str, mb: int) -> str:
    """The node name of micro-batch ``mb``'s copy of an op."""
    return f"moplace_mb{mb}/{op_name}"


def copied_ops(graph: OpGraph) -> np.ndarray:
    """Per op of ``graph``: does it run once per micro-batch (a forward or backward op)?"""
    return np.isin(graph.arrays.role, _COPIED)


def micro_trace(traced: TracedStep, m: int) -> TracedStep:
    """The step traced again at batch / ``m`` (kept per model and size)."""
    model = traced.source.get("model")
    if model is None:
        raise SplitRefused("micro-batches: the traced step does not say which model it is, so "
                           "it cannot be traced again at the micro-batch size")
    if traced.batch_size % m:
        raise SplitRefused(f"micro-batches: the testbed cuts the batch into equal micro-batches, "
                           f"and a batch of {traced.batch_size} cannot be cut into {m}")
    key = (model, traced.batch_size // m)
    if key not in _MICRO_TRACES:
        _MICRO_TRACES[key] = trace_model(model, traced.batch_size // m)
    return _MICRO_TRACES[key]


def rewrite_micro_batches(graph_def, traced: TracedStep, graph: OpGraph,
                          strategy: Strategy) -> None:
    """Rewrite the placed ``graph_def`` (in place) to run ``strategy``'s micro-batches (see
    the module docstring)."""
    m = int(strategy.micro_batches)
    micro = micro_trace(traced, m)
    nodes = {n.name: n for n in graph_def.node}
    micro_nodes = {n.name: n for n in micro.graph_def.node}
    index = graph.index
    copied = copied_ops(graph)
    clone = {name for name, n in micro_nodes.items()
             if (name in index and copied[index[name]]) or (name not in index and n.op == "Const")}
    missing = [op.name for op, c in zip(graph.ops, copied) if c and op.name not in micro_nodes]
    if missing:
        raise SplitRefused(f"micro-batches: op {missing[0]!r} is not in the step traced at "
                           f"the micro-batch size")
    feeds = set(traced.feeds) & clone
    device = {name: n.device for name, n in nodes.items()}
    new = []
    for i in range(m):
        for name in feeds:
            new += _slice_feed(name, nodes[name], traced.feeds[name], i, m)
        for name in clone - feeds:
            node = type(graph_def.node[0])()
            node.CopyFrom(micro_nodes[name])
            node.name = copy_name(name, i)
            node.device = device.get(name, "")
            node.input[:] = [_renamed(x, clone, i) for x in node.input]
            new.append(node)
    removed = (clone - feeds) & set(nodes)  # the fed inputs stay: their slices read them
    kept = [n for n in graph_def.node if n.name not in removed]
    shapes = _Shapes(traced, micro)
    acc: dict[tuple[str, int], str] = {}

    def combined(base: str, k: int, dev: str) -> str:
        if (base, k) not in acc:
            backward = base in index and graph.ops[index[base]].role == "backward"
            acc[(base, k)], made = _combine(base, k, m, shapes, backward, dev)
            new.extend(made)
        return acc[(base, k)]

    for node in kept:
        inputs = []
        for x in node.input:
            base, k, control = _parse(x)
            if base not in removed:
                inputs.append(x)
            elif control:
                inputs += [f"^{copy_name(base, i)}" for i in range(m)]
            else:
                inputs.append(combined(base, k, node.device))
        node.input[:] = inputs
    for fetch in traced.fetches:  # the loss, under its own name
        base, k, _ = _parse(fetch)
        if base in removed:
            new.append(_node("Identity", base, [combined(base, k, "")], "",
                             T=shapes.dtype(base, k)))
    for target in traced.targets:
        if target in removed:
            new.append(_node("NoOp", target, [f"^{copy_name(target, i)}" for i in range(m)], ""))
    del graph_def.node[:]
    graph_def.node.extend(kept + new)
    _add_functions(graph_def, micro.graph_def)


def _add_functions(graph_def, other) -> None:
    """The functions (a ``While``'s condition and body, their gradients) that the copies from
    ``other`` call, added to ``graph_def``'s library where it lacks them by name."""
    have = {f.signature.name for f in graph_def.library.function}
    for f in other.library.function:
        if f.signature.name not in have:
            graph_def.library.function.add().CopyFrom(f)
    have = {g.function_name for g in graph_def.library.gradient}
    for g in other.library.gradient:
        if g.function_name not in have:
            graph_def.library.gradient.add().CopyFrom(g)


def split_copies(graph_def, traced: TracedStep, graph: OpGraph, strategy: Strategy,
                 devices: list[str]) -> tuple[dict, list[SplitNode]]:
    """What `moplace.tf.rewrite.rewrite_split_nodes` needs to cut the split ops of a
    micro-batched ``graph_def`` (rewritten by `rewrite_micro_batches`): per node name what
    has its outputs' shapes (copies: the micro-batch trace's op; combined tensors: the whole
    batch's), and the nodes to cut (see the module docstring). `SplitRefused` names an op
    that cannot be cut as asked."""
    m = int(strategy.micro_batches)
    micro = micro_trace(traced, m)
    copied = copied_ops(graph)
    ops = sorted(strategy.splits)
    whole = plan_split_ops(traced, graph, strategy, {i for i in ops if not copied[i]})
    small = plan_split_ops(micro, graph, strategy, {i for i in ops if copied[i]})
    info = {op.name: op for op in traced.func_graph.get_operations()}
    for op in micro.func_graph.get_operations():
        for i in range(m):
            info[copy_name(op.name, i)] = op
    for node in graph_def.node:  # the combined tensors: moplace_acc/<name>/<k>
        head, _, k = node.name.rpartition("/")
        base = head.removeprefix("moplace_acc/")
        if node.name.startswith("moplace_acc/") and k.isdigit() and base in info:
            info[node.name] = _Outputs([info[base].outputs[int(k)]])
    nodes = []
    for i in ops:
        devs = tuple(devices[d] for d in strategy.splits[i].devices)
        name = graph.ops[i].name
        if copied[i]:
            nodes += [SplitNode(copy_name(name, b), devs, small[i]) for b in range(m)]
        else:
            nodes.append(SplitNode(name, devs, whole[i]))
    return info, nodes


class _Outputs:
    """Stands for an operation where only its outputs (shape, dtype) are asked for."""

    def __init__(self, outputs):
        self.outputs = outputs


def _parse(x: str) -> tuple[str, int, bool]:
    control = x.startswith("^")
    name, _, k = x.lstrip("^").partition(":")
    return name, int(k) if k else 0, control


def _renamed(x: str, clone: set, i: int) -> str:
    base, k, control = _parse(x)
    if base not in clone:
        return x
    return ("^" if control else "") + copy_name(base, i) + (f":{k}" if k else "")


class _Shapes:
    """Each output's dtype, and along which axis its shape grows with the batch (None: it
    does not), from the step traced at the whole batch and at the micro-batch size."""

    def __init__(self, traced: TracedStep, micro: TracedStep):
        self._full = {op.name: op for op in traced.func_graph.get_operations()}
        self._micro = {op.name: op for op in micro.func_graph.get_operations()}

    def dtype(self, name: str, k: int):
        return self._micro[name].outputs[k].dtype

    def batch_axis(self, name: str, k: int) -> int | None:
        small = self._micro[name].outputs[k].shape
        whole = self._full[name].outputs[k].shape if name in self._full else small
        if small.rank is None or whole.rank is None or small.rank != whole.rank:
            return None
        for axis, (a, b) in enumerate(zip(small.as_list(), whole.as_list())):
            if a != b:
                return axis
        return None


def _node(op: str, name: str, inputs, device: str, **attrs):
    node = tf.compat.v1.NodeDef(name=name, op=op, device=device)
    node.input.extend(inputs)
    for key, value in attrs.items():
        if isinstance(value, tf.DType):
            node.attr[key].type = value.as_datatype_enum
        elif isinstance(value, int):
            node.attr[key].i = value
        else:
            node.attr[key].tensor.CopyFrom(value)
    return node


def _const(name: str, value, device: str):
    value = np.asarray(value)
    return _node("Const", name, [], device, dtype=tf.as_dtype(value.dtype),
                 value=tf.make_tensor_proto(value))


def _slice_feed(name: str, node, value: np.ndarray, i: int, m: int) -> list:
    """Micro-batch ``i`` of fed input ``name`` (rows along its first axis), on its device."""
    rows = value.shape[0] // m
    begin = np.zeros(value.ndim, np.int32)
    begin[0] = i * rows
    size = np.full(value.ndim, -1, np.int32)
    size[0] = rows
    out = copy_name(name, i)
    return [_const(f"{out}/moplace_begin", begin, node.device),
            _const(f"{out}/moplace_size", size, node.device),
            _node("Slice", out, [name, f"{out}/moplace_begin", f"{out}/moplace_size"],
                  node.device, T=tf.as_dtype(value.dtype), Index=tf.int32)]


def _combine(base: str, k: int, m: int, shapes: _Shapes, backward: bool,
             device: str) -> tuple[str, list]:
    """Output ``k`` of ``base``'s m copies combined as the module docstring says: its tensor
    name and the nodes that make it."""
    name = f"moplace_acc/{base}/{k}"
    dtype, axis = shapes.dtype(base, k), shapes.batch_axis(base, k)
    parts = [copy_name(base, i) + (f":{k}" if k else "") for i in range(m)]
    scaled = dtype.is_floating and (axis is None or backward)
    made = []
    if scaled:
        made.append(_const(f"{name}/scale", np.asarray(1.0 / m, dtype.as_numpy_dtype), device))
    if axis is not None:  # joined along the batch's axis
        made += [_const(f"{name}/axis", np.asarray(axis, np.int32), device),
                 _node("ConcatV2", f"{name}/join" if scaled else name,
                       parts + [f"{name}/axis"], device, N=m, T=dtype, Tidx=tf.int32)]
        joined = f"{name}/join"
    elif not dtype.is_floating:
        return name, [_node("Identity", name, parts[:1], device, T=dtype)]
    else:
        made.append(_node("AddN", f"{name}/sum", parts, device, N=m, T=dtype))
        joined = f"{name}/sum"
    if scaled:
        made.append(_node("Mul", name, [joined, f"{name}/scale"], device, T=dtype))
    return name, made
