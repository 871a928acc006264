"""Roofline estimates of aten ops: FLOPs from PyTorch's own formulas
(``torch.utils.flop_counter``: matmuls, convolutions, forward and backward; fused attention by
FlashAttention's convention, `moplace.torch.attention`), bytes
from the tensors each op reads and writes at their dtypes, seconds from the device kind's peak
compute for that dtype and its memory bandwidth (`moplace.costs.devicespecs`).

Every other op is costed as memory-bound (its bytes over the bandwidth); ops that only view a
tensor (`ALIASES`) cost nothing. Where a calibration ships for a device kind
(`moplace.costs.calibration`: achieved, not datasheet, throughput, fitted on measured
kernels), an op's time on it is the calibrated estimate from its cost features
(`moplace.torch.features`) instead. Estimates, not measurements: the graph says so
(``metadata.estimated``) and every result computed on them repeats it
(`moplace.costs.origin`).
"""

from __future__ import annotations

import operator

from ..costs.calibration import shipped
from ..costs.devicespecs import normalize_dtype, require_spec, roofline_seconds
from ._torch import torch

aten = torch.ops.aten
#: ops that return a view of (or an element of) their input: no kernel, no new memory
ALIASES = frozenset({
    aten.t.default, aten.view.default, aten._unsafe_view.default, aten.detach.default,
    aten.alias.default, aten.permute.default, aten.transpose.int, aten.expand.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.default, aten.squeeze.dims,
    aten.slice.Tensor, aten.select.int, aten.as_strided.default, aten.unbind.int,
    aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default, aten.reshape.default,
    operator.getitem,
    aten._assert_tensor_metadata.default})  # a check of a tensor's dtype: no kernel


def tensors(value) -> list:
    """The tensors in a traced node's value (one, a tuple or list of them, or none)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors(v)]
    return []


def nbytes(value) -> int:
    """Bytes of the tensors in ``value``, at their dtypes."""
    return int(sum(t.numel() * t.element_size() for t in tensors(value)))


def dtype_name(value) -> str:
    """The dtype of ``value``'s first floating tensor as devicespecs names it (``bfloat16``);
    ``float32`` when it has none."""
    for t in tensors(value):
        if t.is_floating_point():
            return normalize_dtype(str(t.dtype).removeprefix("torch."))
    return "float32"


def node_flops(node) -> float:
    """FLOPs of an aten call, by PyTorch's formula for its op (0 for ops it has none for:
    element-wise and data movement, costed by their bytes); fused attention by
    FlashAttention's convention (`moplace.torch.attention.attention_flops`)."""
    from torch.utils.flop_counter import flop_registry

    from .attention import attention_flops

    fused = attention_flops(node)
    if fused is not None:
        return fused

    packet = getattr(node.target, "overloadpacket", None)
    formula = flop_registry.get(packet)
    if formula is None:
        return 0.0
    args = torch.fx.node.map_arg(node.args, lambda n: n.meta.get("val"))
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: n.meta.get("val"))
    try:
        return float(formula(*args, **kwargs, out_val=node.meta.get("val")))
    except Exception:  # noqa: BLE001 - a formula that does not take this call: bytes only
        return 0.0


def node_bytes(node) -> int:
    """Bytes an aten call reads and writes: its input tensors and its outputs."""
    read = sum(nbytes(a.meta.get("val")) for a in node.all_input_nodes)
    return int(read + nbytes(node.meta.get("val")))


def estimate(flops: float, moved: float, dtype: str, kinds, features=None,
             calibrations=None) -> dict[str, float]:
    """Seconds on each device kind of ``kinds``: with an op's cost ``features``
    (`moplace.torch.features`) and a calibration for the kind (``calibrations``, kind ->
    `Calibration`, the user's own from ``profile --calibration``; else the one shipped,
    `moplace.costs.calibration.shipped`), the calibrated estimate; else the roofline
    (`roofline_seconds`)."""
    out = {}
    for kind in kinds:
        spec = require_spec(kind)
        cal = _calibration(spec.kind, calibrations) if features is not None else None
        out[kind] = (cal.seconds(features) if cal is not None
                     else float(roofline_seconds(flops, moved, spec, dtype)))
    return out


def estimate_notes(kinds, calibrations=None) -> dict[str, str]:
    """Per device kind of ``kinds``, what its estimates are, in words (the graph's
    ``metadata.estimated``, repeated by every result computed on it: `moplace.costs.origin`)."""
    out = {}
    for kind in kinds:
        cal = _calibration(require_spec(kind).kind, calibrations)
        out[kind] = (cal.note() if cal is not None
                     else "roofline from aten ops' FLOPs and bytes, moplace.torch.estimate")
    return out


def _calibration(kind: str, calibrations):
    """The user's calibration for ``kind`` if one was given, else the shipped one, or None."""
    given = (calibrations or {}).get(kind)
    return given if given is not None else shipped(kind)
