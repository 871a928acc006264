"""What an aten op's cost depends on, recorded at trace time (`node_features`), so that a
calibrated cost model (`moplace.costs.calibration`) can cost it on a device kind it was
measured on, and ``moplace calibrate`` can fit one from measured graphs.

Per op a small dict (the graph keeps them as ``metadata["cost_features"]``, by op name):

- ``cls``: ``matmul`` (``mm``, ``addmm``, ``bmm``, ``baddbmm``, convolutions as their implicit
  GEMM) with ``m``, ``n``, ``k`` and ``batch``; ``attention`` (the fused SDPA kernels) with
  ``bh`` (batch × heads), ``s_q``, ``s_kv``, ``d``, ``causal`` and ``bwd``; ``memory``
  (everything else: costed by the bytes it moves) with ``sub``, its family (`SUBCLASSES`);
  ``optimizer`` (an update op) with ``numel`` and ``total`` (the trained parameters of the
  whole step, whose update runs as a few multi-tensor kernels).
- ``op``: the aten op's name; ``flops`` (PyTorch's formulas, `estimate.node_flops`);
  ``bytes`` read and written (an embedding's gather: the rows it reads); ``dtype``
  (devicespecs' name).
"""

from __future__ import annotations

from . import estimate as est
from ._torch import torch
from .attention import attention_sizes

#: memory-bound families, by words in the aten op's name (first match wins); the rest are
#: ``elementwise``
SUBCLASSES = (("softmax", ("softmax",)), ("norm", ("norm",)),
              ("index", ("embedding", "index", "gather", "scatter", "nll_loss")),
              ("copy", ("copy", "clone", "cat", "stack", "contiguous")),
              ("reduce", ("sum", "mean", "amax", "amin", "max", "min", "var", "std")),
              ("factory", ("zeros", "ones", "full", "empty", "arange", "scalar_tensor",
                           "fill", "rand", "like")))
_MATMUL = {"mm": (0, 1), "addmm": (1, 2), "bmm": (0, 1), "baddbmm": (1, 2)}


def op_name(node) -> str:
    """The aten op's name without namespace and overload (``_softmax_backward_data``)."""
    packet = getattr(node.target, "overloadpacket", None)
    return str(getattr(packet, "__name__", getattr(node.target, "__name__", node.target)))


def memory_subclass(name: str) -> str:
    """The memory-bound family of the aten op called ``name`` (`SUBCLASSES`)."""
    for sub, words in SUBCLASSES:
        if any(w in name for w in words):
            return sub
    return "elementwise"


def node_features(node) -> dict:
    """The cost features of a traced aten call (module docstring)."""
    name = op_name(node)
    value = node.meta.get("val")
    out = {"op": name, "flops": est.node_flops(node), "bytes": est.node_bytes(node),
           "dtype": est.dtype_name(value)}
    if name == "embedding" and len(node.args) > 1 and isinstance(node.args[1], torch.fx.Node):
        # a gather reads the rows it returns, not its whole table (GPT-2's 50,257 x 1,024
        # table: 6 µs on the H200, where the table's bytes would say 200)
        out["bytes"] = 2 * est.nbytes(value) + est.nbytes(node.args[1].meta.get("val"))
    shapes = [tuple(_shape(a)) for a in node.args]
    if name in _MATMUL:
        a, b = (shapes[i] for i in _MATMUL[name])
        if len(a) >= 2 and len(b) >= 2:
            batch = a[0] if len(a) == 3 else 1
            out.update(cls="matmul", m=int(a[-2]), k=int(a[-1]), n=int(b[-1]), batch=int(batch))
            return out
    if name.startswith("convolution") and out["flops"] > 0:
        return {**out, **_conv_gemm(node, name, shapes)}
    sizes = attention_sizes(node)
    if sizes is not None:
        out.update(cls="attention", **sizes)
        return out
    out.update(cls="memory", sub=memory_subclass(name))
    return out


def update_features(value, total: int, optimizer: str) -> dict:
    """The cost features of the update of one trained parameter (``value``, its tensor) in a
    step whose trained parameters number ``total``."""
    return {"op": f"{optimizer}_update", "cls": "optimizer", "numel": int(value.numel()),
            "total": int(total), "element_size": int(value.element_size()),
            "dtype": est.dtype_name(value), "flops": 0.0, "bytes": est.nbytes(value)}


def _conv_gemm(node, name: str, shapes) -> dict:
    """A convolution as the implicit GEMM its kernels run: output positions × output channels
    × (input channels / groups × kernel size); the backward as its two GEMMs' sum, one
    equivalent GEMM of the same FLOPs."""
    value = est.tensors(node.meta.get("val"))
    w = shapes[2] if name == "convolution_backward" else shapes[1]
    y = shapes[0] if name == "convolution_backward" else tuple(value[0].shape) if value else ()
    if len(w) < 3 or len(y) < 3:
        return {"cls": "memory", "sub": "elementwise"}
    positions = y[0]
    for s in y[2:]:
        positions *= s
    k = 1
    for s in w[1:]:
        k *= s
    return {"cls": "matmul", "m": int(positions), "n": int(w[0]), "k": int(k), "batch": 1}


def _shape(arg) -> tuple:
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else ()
