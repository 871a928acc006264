"""How a split op of a traced step is cut into parts: what each part reads, what it produces.

The simulator's model (`moplace.simulator.taskgraph`): part k of an op split n ways on
``batch`` computes the k-th slice of the batch, part k of a ``channel`` split the k-th slice
of the output channels. Here that becomes, for each part, a request per data input (the whole
tensor, a `Region` of it, or a shape vector to use instead) and the `Region` of the output it
holds; an output with no batch axis (a weight gradient computed from a batch slice) is a
partial sum, ``output=None``, and the parts' outputs are added.

Which axis of a tensor is its batch axis is found by tracing the step a second time at twice
the batch size (`batch_axes`): the one axis whose length doubles. A flattened axis (the
``(batch * seq, d)`` matrices of a Dense layer applied to a sequence) has ``scale`` elements per
sample, and a batch slice is ``[lo * scale, hi * scale)`` along it.

Channel splits follow each op type's algebra (`_CHANNEL`): Conv2D cuts the filter's output
channels, its input gradient cuts the filter's input channels, its filter gradient the output
gradient's channels; depthwise convolutions cut the input channels (``multiplier`` output
channels each); MatMul and BatchMatMul cut the columns of the second operand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import MoplaceError
from ._tf import tf

AMBIGUOUS = "ambiguous"


class SplitRefused(MoplaceError):
    """An op cannot be cut as asked; the message names the op and says why."""


@dataclass(frozen=True)
class Axis:
    """A tensor's batch axis, with ``scale`` elements per sample along it."""

    axis: int
    scale: int


@dataclass(frozen=True)
class Region:
    """Elements ``[lo, hi)`` of a tensor along ``axis``."""

    axis: int
    lo: int
    hi: int


@dataclass(frozen=True)
class PartPlan:
    """One part: per data input ``None`` (the whole tensor), a `Region`, or a shape vector
    (np.ndarray) replacing that input; the `Region` of the output it holds (None: a partial
    sum of the whole output); and the part's output shape."""

    inputs: tuple
    output: Region | None
    shape: tuple[int, ...]


def batch_axes(traced) -> dict[str, list]:
    """Per node of ``traced``, per output: its batch `Axis`, None, or `AMBIGUOUS`.

    The step's ``tf.function`` is traced once more at twice the batch size; the node names of
    both traces are the same (the same model and optimizer objects build them)."""
    B = traced.batch_size
    args, _ = traced.func_graph.structured_input_signature
    doubled = tf.nest.map_structure(
        lambda s: tf.TensorSpec((2 * s.shape[0],) + tuple(s.shape[1:]), s.dtype), args)
    twin_graph = traced.function.get_concrete_function(*doubled).graph
    other = {op.name: op for op in twin_graph.get_operations()}
    out: dict[str, list] = {}
    for op in traced.func_graph.get_operations():
        twin = other.get(op.name)
        if twin is None or len(twin.outputs) != len(op.outputs):
            out[op.name] = [AMBIGUOUS] * len(op.outputs)
        else:
            out[op.name] = [_axis(t, u, B) for t, u in zip(op.outputs, twin.outputs)]
    return out


def _axis(t, u, B: int):
    a, b = t.shape, u.shape
    if a.rank is None or b.rank is None or a.rank != b.rank or not a.is_fully_defined() \
            or not b.is_fully_defined():
        return AMBIGUOUS if t.dtype.is_floating else None
    changed = [i for i, (p, q) in enumerate(zip(a.as_list(), b.as_list())) if p != q]
    if not changed:
        return None
    i = changed[0]
    p, q = a.as_list()[i], b.as_list()[i]
    if len(changed) > 1 or q != 2 * p or p % B:
        return AMBIGUOUS
    return Axis(i, p // B)


def part_sizes(extent: int, parts: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` of each of ``parts`` nearly equal parts of ``extent`` (the first parts one
    larger when it does not divide, as numpy's array_split)."""
    bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.arange(extent), parts)])
    return [(int(bounds[k]), int(bounds[k + 1])) for k in range(parts)]


# op type -> index of the input that is a shape vector (the op's output shape)
_SHAPE_INPUT = {"Conv2DBackpropInput": 0, "Conv2DBackpropFilter": 1,
                "DepthwiseConv2dNativeBackpropInput": 0, "DepthwiseConv2dNativeBackpropFilter": 1}


def plan_parts(op, dim: str, parts: int, axes: dict[str, list] | None) -> list[PartPlan]:
    """The parts of TensorFlow op ``op`` (a `tf.Operation` of the traced step) split ``parts``
    ways on ``dim``; `SplitRefused` when it cannot be. ``axes``: `batch_axes` (batch only)."""
    if len(op.outputs) != 1:
        raise SplitRefused(f"op {op.name!r} ({op.type}) has {len(op.outputs)} outputs; only "
                           "single-output ops can be split")
    shape = tuple(op.outputs[0].shape.as_list())
    if dim == "batch":
        return _batch_parts(op, parts, axes, shape)
    if dim == "channel":
        return _channel_parts(op, parts, shape)
    raise SplitRefused(f"op {op.name!r}: unknown split dimension {dim!r}")


def _batch_parts(op, parts: int, axes, shape) -> list[PartPlan]:
    if axes is None:
        raise SplitRefused(f"op {op.name!r}: batch axes were not computed")
    shape_input = _SHAPE_INPUT.get(op.type)
    ins = []
    for j, t in enumerate(op.inputs):
        a = None if j == shape_input else axes.get(t.op.name, [None] * (t.value_index + 1))[t.value_index]
        if a == AMBIGUOUS:
            raise SplitRefused(f"op {op.name!r} ({op.type}): the batch axis of its input "
                               f"{t.name!r} {t.shape} is ambiguous, so it cannot be split on batch")
        ins.append(a)
    if not any(isinstance(a, Axis) for a in ins):
        raise SplitRefused(f"op {op.name!r} ({op.type}) reads no tensor with a batch axis, so it "
                           "cannot be split on batch")
    out = axes.get(op.name, [AMBIGUOUS])[0]
    if out == AMBIGUOUS:
        raise SplitRefused(f"op {op.name!r} ({op.type}): the batch axis of its output {shape} is "
                           "ambiguous, so it cannot be split on batch")
    batch = _extent(ins, op)
    if batch < parts:
        raise SplitRefused(f"op {op.name!r}: a batch of {batch} cannot be cut into {parts} parts")
    plans = []
    for lo, hi in part_sizes(batch, parts):
        reads = tuple(Region(a.axis, lo * a.scale, hi * a.scale) if isinstance(a, Axis) else None
                      for a in ins)
        region = Region(out.axis, lo * out.scale, hi * out.scale) if out is not None else None
        plans.append(_plan(op, reads, region, shape, shape_input))
    return plans


def _extent(ins, op) -> int:
    for a, t in zip(ins, op.inputs):
        if isinstance(a, Axis):
            return t.shape.as_list()[a.axis] // a.scale
    raise AssertionError("no batch input")


def _plan(op, reads, region, shape, shape_input) -> PartPlan:
    part_shape = list(shape)
    if region is not None:
        part_shape[region.axis] = region.hi - region.lo
    if shape_input is not None:
        dtype = op.inputs[shape_input].dtype.as_numpy_dtype
        reads = reads[:shape_input] + (np.array(part_shape, dtype),) + reads[shape_input + 1:]
    return PartPlan(tuple(reads), region, tuple(part_shape))


def _channel_axis(op) -> int:
    fmt = op.get_attr("data_format") if "data_format" in op.node_def.attr else b"NHWC"
    return 3 if (fmt.decode() if isinstance(fmt, bytes) else fmt) == "NHWC" else 1


def _conv(op):  # filter [kh, kw, in, out]; channel = output channels
    c = _channel_axis(op)
    return op.inputs[1].shape.as_list()[3], {1: (3, 1)}, (c, 1)


def _conv_input_grad(op):  # filter input channels
    c = _channel_axis(op)
    return op.inputs[1].shape.as_list()[2], {1: (2, 1)}, (c, 1)


def _conv_filter_grad(op):  # output channels of the filter gradient
    c = _channel_axis(op)
    return op.outputs[0].shape.as_list()[3], {2: (c, 1)}, (3, 1)


def _depthwise(op):  # filter [kh, kw, C, M]: input channels, M outputs each
    c, (C, M) = _channel_axis(op), op.inputs[1].shape.as_list()[2:]
    return C, {0: (c, 1), 1: (2, 1)}, (c, M)


def _depthwise_input_grad(op):
    c, (C, M) = _channel_axis(op), op.inputs[1].shape.as_list()[2:]
    return C, {1: (2, 1), 2: (c, M)}, (c, 1)


def _depthwise_filter_grad(op):
    c, (C, M) = _channel_axis(op), op.outputs[0].shape.as_list()[2:]
    return C, {0: (c, 1), 2: (c, M)}, (2, 1)


def _matmul(op):  # columns of b
    axis = 0 if op.get_attr("transpose_b") else 1
    return op.outputs[0].shape.as_list()[1], {1: (axis, 1)}, (1, 1)


def _batch_matmul(op):  # columns of y (its last axis, or the one before when adjointed)
    y = op.inputs[1]
    axis = y.shape.rank - (2 if op.get_attr("adj_y") else 1)
    out = op.outputs[0]
    return out.shape.as_list()[-1], {1: (axis, 1)}, (out.shape.rank - 1, 1)


_CHANNEL = {
    "Conv2D": _conv, "Conv2DBackpropInput": _conv_input_grad,
    "Conv2DBackpropFilter": _conv_filter_grad, "DepthwiseConv2dNative": _depthwise,
    "DepthwiseConv2dNativeBackpropInput": _depthwise_input_grad,
    "DepthwiseConv2dNativeBackpropFilter": _depthwise_filter_grad,
    "MatMul": _matmul, "BatchMatMul": _batch_matmul, "BatchMatMulV2": _batch_matmul,
    "BatchMatMulV3": _batch_matmul}

#: op types `plan_parts` can cut on the channel dimension (any op with a batch axis can be
#: cut on batch)
CHANNEL_SPLITTABLE = frozenset(_CHANNEL)


def _channel_parts(op, parts: int, shape) -> list[PartPlan]:
    rule = _CHANNEL.get(op.type)
    if rule is None:
        raise SplitRefused(f"op {op.name!r}: TensorFlow op type {op.type} has no channel split "
                           f"(channel splits exist for {', '.join(sorted(_CHANNEL))})")
    extent, reads, (out_axis, out_scale) = rule(op)
    if extent < parts:
        raise SplitRefused(f"op {op.name!r}: {extent} channels cannot be cut into {parts} parts")
    shape_input = _SHAPE_INPUT.get(op.type)
    plans = []
    for lo, hi in part_sizes(extent, parts):
        ins = tuple(Region(reads[j][0], lo * reads[j][1], hi * reads[j][1]) if j in reads else None
                    for j in range(len(op.inputs)))
        plans.append(_plan(op, ins, Region(out_axis, lo * out_scale, hi * out_scale), shape,
                           shape_input))
    return plans
