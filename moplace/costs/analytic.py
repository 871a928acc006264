"""Analytical op costs, for planning on GPUs one does not have: FLOPs and bytes of a TensorFlow
op from its shapes (`op_flops`, `op_bytes`), seconds by roofline (`estimate_seconds`).

An op is plain data (`OpShape`); this module never imports TensorFlow. A multiply-add is 2 FLOPs;
bytes are every data input read once plus every output written once (resource handles: 0). A type
without a rule costs 1 FLOP per output element, like an elementwise op; see `known_type`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

import numpy as np

from ..errors import GraphError
from .devicespecs import (  # noqa: F401
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_MEMORY_EFFICIENCY,
    DEFAULT_MIN_SECONDS,
    DTYPE_BYTES,
    dtype_size,
    normalize_dtype,
    require_spec,
    roofline_seconds,
    tensor_bytes,
)

TRANSCENDENTAL_FLOPS = 4  # exp/log/tanh...: a few instructions on the special-function units


@dataclass(frozen=True)
class OpShape:
    """One TF op as plain data: ``type`` ("Conv2D"), data ``inputs`` and ``outputs`` as
    ``(shape, dtype)`` pairs with concrete dims, and ``attrs`` (data_format, transpose_a, ksize...).
    """

    type: str
    inputs: tuple = ()
    outputs: tuple = ()
    attrs: Mapping[str, object] = field(default_factory=dict, hash=False)

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "inputs", _tensors(self.type, "inputs", self.inputs))
        set_(self, "outputs", _tensors(self.type, "outputs", self.outputs))
        attrs = {k: v.decode() if isinstance(v, bytes) else v  # TF string attrs may be bytes
                 for k, v in dict(self.attrs or {}).items()}
        set_(self, "attrs", MappingProxyType(attrs))


def _tensors(op_type: str, what: str, items) -> tuple:
    out = []
    for item in items:
        try:
            shape, dtype = item
            shape = tuple(int(d) for d in shape)  # None (an unknown dim) fails here
            if min(shape, default=0) < 0:  # -1: unknown
                raise ValueError
        except (TypeError, ValueError):
            raise GraphError(f"{op_type} {what}: expected (shape, dtype) with known dims >= 0, "
                             f"got {item!r}") from None
        out.append((shape, normalize_dtype(dtype)))
    return tuple(out)


_n = math.prod  # elements of a shape


def _shape(op: OpShape, where: str, i: int) -> tuple[int, ...]:
    tensors = op.inputs if where == "in" else op.outputs
    if i >= len(tensors):
        raise GraphError(f"{op.type}: needs {where}put {i}, has {len(tensors)}")
    return tensors[i][0]


_FLOPS: dict[str, Callable[[OpShape], float]] = {}


def _rule(*types: str):
    """Register the decorated function as the FLOP rule of ``types``."""
    return lambda fn: _FLOPS.update(dict.fromkeys(types, fn)) or fn


def _broadcast(op: OpShape, shapes) -> int:
    try:
        return _n(np.broadcast_shapes(*shapes))
    except ValueError:
        raise GraphError(f"{op.type}: dims {shapes} do not broadcast") from None


def _per_element(table: Mapping[str, float], where: str):
    """A rule: ``table[type]`` FLOPs per element of tensor 0 of ``where`` ("in" or "out")."""
    _FLOPS.update(dict.fromkeys(table, lambda op: table[op.type] * _n(_shape(op, where, 0))))


# Elementwise: per output element (broadcasting is in the output shape).
_per_element({**dict.fromkeys((
    "Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "FloorDiv", "FloorMod", "Neg",
    "Abs", "Sign", "Square", "Maximum", "Minimum", "Relu", "Relu6", "ReluGrad", "Relu6Grad",
    "LeakyRelu", "LeakyReluGrad", "Cast", "Sqrt", "Rsqrt", "Reciprocal", "Floor", "Ceil", "Round",
    "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "LogicalAnd",
    "LogicalOr", "LogicalNot", "Select", "SelectV2", "BiasAdd"), 1), **dict.fromkeys((
        "Exp", "Expm1", "Log", "Log1p", "Tanh", "Sigmoid", "Softplus", "Softsign", "Elu", "Selu",
        "Erf", "Erfc", "Pow", "Sin", "Cos", "Xlogy"), TRANSCENDENTAL_FLOPS),
    "SquaredDifference": 2, "ClipByValue": 2, "SqrtGrad": 2, "EluGrad": 2, "TanhGrad": 3,
    "SigmoidGrad": 3, "RsqrtGrad": 3, "ReciprocalGrad": 3, "SeluGrad": 3,
    "SoftplusGrad": TRANSCENDENTAL_FLOPS + 1}, "out")
# Reductions: per input element. Softmax: max, subtract, exp, sum, divide; the cross entropies
# add the loss and the backprop (softmax - labels). FusedBatchNorm training: sum x and x^2 (3),
# y = x*a + b (2); inference only the 2. Its grad: sum dy, xhat, sum dy*xhat, dx (9).
_SOFTMAX = 4 + TRANSCENDENTAL_FLOPS
_per_element({**dict.fromkeys(("Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "ArgMax",
                               "ArgMin", "BiasAddGrad"), 1), "EuclideanNorm": 2, "L2Loss": 2,
              "Softmax": _SOFTMAX, "LogSoftmax": _SOFTMAX, "SoftmaxCrossEntropyWithLogits":
              _SOFTMAX + 2, "SparseSoftmaxCrossEntropyWithLogits": _SOFTMAX + 2, **dict.fromkeys(
                  ("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"), 9)}, "in")
_FLOPS.update(dict.fromkeys(("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"), lambda op:
                            (5 if op.attrs.get("is_training", True) else 2)  # TF's default: True
                            * _n(_shape(op, "in", 0))))
_FLOPS["AddN"] = lambda op: max(len(op.inputs) - 1, 0) * _n(_shape(op, "out", 0))


@_rule("MatMul", "_FusedMatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _matmul(op: OpShape) -> float:
    """2*M*N*K per (broadcast) batch element, honouring transpose_a/b (MatMul), adj_x/y (batch)."""
    a, b = _shape(op, "in", 0), _shape(op, "in", 1)
    ta = op.attrs.get("transpose_a", op.attrs.get("adj_x", False))
    tb = op.attrs.get("transpose_b", op.attrs.get("adj_y", False))
    if len(a) < 2 or len(b) < 2:
        raise GraphError(f"{op.type}: operands need rank >= 2, got {a} and {b}")
    m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
    k2, n = (b[-1], b[-2]) if tb else (b[-2], b[-1])
    if k != k2:
        raise GraphError(f"{op.type}: inner dims of {a} and {b} differ")
    fused = op.type == "_FusedMatMul"  # + bias add and activation: 2 more per output element
    return 2.0 * _broadcast(op, (a[:-2], b[:-2])) * m * n * (k + fused)


@_rule("Einsum")
def _einsum(op: OpShape) -> float:
    """2 FLOPs (a multiply-add) per point of the iteration space over all labels."""
    terms = str(op.attrs.get("equation", "")).replace(" ", "").split("->")[0].split(",")
    if len(terms) != len(op.inputs):
        raise GraphError(f"Einsum: equation has {len(terms)} operands, op {len(op.inputs)}")
    sizes, ellipsis = {}, []  # label -> size; the dims each operand's "..." stands for
    for term, (shape, _) in zip(terms, op.inputs):
        labels, at = term.replace("...", ""), term.find("...")
        if at >= 0:
            ellipsis.append(shape[at:len(shape) - len(labels) + at])
            shape = shape[:at] + shape[len(shape) - len(labels) + at:]
        if len(labels) != len(shape):
            raise GraphError(f"Einsum: term {term!r} does not fit shape {shape}")
        for label, d in zip(labels, shape):
            sizes[label] = max(sizes.get(label, 1), d)
    points = _n(sizes.values()) * _broadcast(op, ellipsis)
    return float((2 if len(terms) > 1 else 1) * points)


# Convolutions: (x, filter, y) locations. Backprops do the forward's work: FLOPs follow y (the
# forward output or the incoming gradient) and the filter, whichever side holds them.
_I0, _I1, _I2, _O0 = ("in", 0), ("in", 1), ("in", 2), ("out", 0)
_CONVS = {
    **dict.fromkeys(("Conv2D", "Conv3D", "_FusedConv2D", "DepthwiseConv2dNative"), (_I0, _I1, _O0)),
    **dict.fromkeys(("Conv2DBackpropInput", "Conv3DBackpropInputV2",
                     "DepthwiseConv2dNativeBackpropInput"), (_O0, _I1, _I2)),
    **dict.fromkeys(("Conv2DBackpropFilter", "Conv3DBackpropFilterV2",
                     "DepthwiseConv2dNativeBackpropFilter"), (_I0, _O0, _I2))}


@_rule(*_CONVS)
def _conv(op: OpShape) -> float:
    """2 * |y| * window: window = kh*kw*(Cin/groups), or kh*kw for depthwise (multiplier in y)."""
    x, f, y = (_shape(op, *loc) for loc in _CONVS[op.type])
    depthwise = op.type.startswith("Depthwise")
    if len(f) < 3 or len(x) != len(y) or len(x) != len(f):
        raise GraphError(f"{op.type}: bad ranks, input {x}, filter {f}, output {y}")
    layout = str(op.attrs.get("data_format", "NHWC"))
    cin, cout = (x[1], y[1]) if layout.startswith("NC") else (x[-1], y[-1])
    ok = (f[-2] == cin and cout == cin * f[-1]) if depthwise else \
        (f[-1] == cout and f[-2] > 0 and cin % f[-2] == 0)
    if not ok:
        raise GraphError(f"{op.type}: channels of input {x}, filter {f}, output {y} do not "
                         f"match (data_format {layout})")
    window = _n(f[:-2]) if depthwise else _n(f[:-1])
    fused = op.type == "_FusedConv2D"  # + bias add and activation: 2 more per output element
    return 2.0 * _n(y) * (window + fused)


# Pooling: one compare/add per window element per output (forward) or per gradient element.
_POOLS = {**dict.fromkeys(("MaxPool", "AvgPool", "MaxPool3D", "AvgPool3D"), _O0),
          **dict.fromkeys(("MaxPoolGrad", "MaxPool3DGrad", "MaxPoolGradV2"), _I2),
          **dict.fromkeys(("AvgPoolGrad", "AvgPool3DGrad"), _I1)}


@_rule(*_POOLS)
def _pool(op: OpShape) -> float:
    if "ksize" not in op.attrs:  # MaxPoolV2 passes ksize as a tensor: give it as an attr
        raise GraphError(f"{op.type}: needs the 'ksize' attr")
    return float(_n(_shape(op, *_POOLS[op.type])) * _n(int(k) for k in op.attrs["ksize"]))


# Optimizer applies: (FLOPs per parameter element, tensors per parameter read AND written: the
# variable and its slots). GD: var -= lr*g. Momentum: accum = m*accum + g; var -= lr*accum.
# Adam: m, v updates (7), var -= lr_t * m / (sqrt(v) + eps) (5).
_OPTIMIZERS = {"ApplyGradientDescent": (2, 1), "ApplyMomentum": (4, 2),
               "ApplyKerasMomentum": (4, 2), "ApplyAdam": (12, 3), "ApplyAdagrad": (6, 2),
               "ApplyAdagradV2": (6, 2), "ApplyRMSProp": (8, 3), "ApplyCenteredRMSProp": (10, 4)}
_OPTIMIZERS.update({"Resource" + k: v for k, v in _OPTIMIZERS.items()})


def _params(op: OpShape) -> tuple[int, str]:
    """(elements, dtype) of the parameter: attrs ``param_elements``/``param_dtype``, else the
    largest data input (the gradient has the variable's shape; the variable is a resource)."""
    data = [t for t in op.inputs if t[1] != "resource"]
    shape, dtype = max(data, key=lambda t: _n(t[0]), default=((0,), "float32"))
    n = op.attrs.get("param_elements", _n(shape))
    return int(n), normalize_dtype(op.attrs.get("param_dtype", dtype))


_FLOPS.update(dict.fromkeys(_OPTIMIZERS, lambda op: _OPTIMIZERS[op.type][0] * _params(op)[0]))

# Views and metadata: no kernel touches data (Reshape/Identity alias their input, ReadVariableOp
# returns the variable's buffer, Shape reads only the shape).
_NO_WORK = ("Const", "Identity", "IdentityN", "NoOp", "Placeholder", "PlaceholderWithDefault",
            "ReadVariableOp", "Shape", "ShapeN", "Size", "Rank", "Reshape", "Squeeze",
            "ExpandDims", "StopGradient", "PreventGradient", "EnsureShape", "VarHandleOp",
            "VariableV2", "VarIsInitializedOp")
# Data movement: 0 FLOPs, inputs read and outputs written.
_MOVES = ("Transpose", "ConcatV2", "Concat", "Pack", "Unpack", "Split", "SplitV", "Tile", "Pad",
          "PadV2", "MirrorPad", "StridedSliceGrad", "ScatterNd", "ReverseV2", "Snapshot",
          "DepthToSpace", "SpaceToDepth", "AssignVariableOp", "Assign")
# Reads only what it writes (a slice or gathered rows); writes output only (reads a shape).
_GATHERS = ("Slice", "StridedSlice", "GatherV2", "GatherNd", "ResourceGather")
_WRITES = ("Fill", "ZerosLike", "OnesLike", "BroadcastTo", "OneHot", "Range")
_FLOPS.update(dict.fromkeys(_NO_WORK + _MOVES + _GATHERS + _WRITES, lambda op: 0.0))


def known_type(op_type: str) -> bool:
    """Whether ``op_type`` has an explicit rule (otherwise `op_flops` uses the default)."""
    return op_type in _FLOPS


def op_flops(op: OpShape) -> float:
    """FLOPs of ``op``; an unknown type costs 1 FLOP per output element (elementwise-like)."""
    rule = _FLOPS.get(op.type)
    return float(rule(op)) if rule else float(sum(_n(s) for s, _ in op.outputs))


def op_bytes(op: OpShape) -> float:
    """Bytes of memory traffic of ``op``: data inputs read plus outputs written, except views
    (0), slices/gathers (output read and written), fills (output written) and optimizer applies
    (each of the variable and its slots read and written, plus the gradient read)."""
    if op.type in _NO_WORK:
        return 0.0
    if op.type in _OPTIMIZERS:
        n, dtype = _params(op)
        return float(n * DTYPE_BYTES[dtype] * (2 * _OPTIMIZERS[op.type][1] + 1))
    if op.type in _GATHERS + _WRITES:
        return (2.0 if op.type in _GATHERS else 1.0) * tensor_bytes(op.outputs)
    return float(tensor_bytes(op.inputs) + tensor_bytes(op.outputs))


def estimate_seconds(op: OpShape, kind: str, *, dtype: str | None = None, **kw) -> float:
    """Roofline seconds of ``op`` on device ``kind`` (keywords go to `roofline_seconds`).

    ``dtype`` picks the peak; by default the op's first floating input (else output) dtype.
    An op with no work (0 FLOPs and 0 bytes: a view, a constant) costs 0 s, not
    ``min_seconds``: it launches no kernel. Raises `DeviceSpecError` for an unknown kind.
    """
    spec = require_spec(kind)
    flops, nbytes = op_flops(op), op_bytes(op)
    if flops == 0 and nbytes == 0:
        return 0.0
    floats = (d for _, d in op.inputs + op.outputs if d.startswith(("float", "bfloat")))
    return roofline_seconds(flops, nbytes, spec, dtype or next(floats, "float32"), **kw)
