"""FP8 matmuls as a precision lever (`Strategy.fp8`): which matmuls run in FP8, how long they
take, and the FP8 weight copies they keep.

**Which.** ``all``: every matmul (cost feature class ``matmul``, forward and backward) of the
model's layers (`OpGraph.metadata` ``layers``); ``inner``: those of every layer but the first
and the last, as Megatron-LM's ``--first-last-layers-bf16`` keeps them. The embedding, the
output head (lm_head) and attention stay in BF16, as Transformer Engine and torchtitan's
float8 converter (``filter_fqns = ["output"]``) leave them. A matmul's layer is found as
pipeline stages are: a forward op by its depth, a backward op by its depth mirrored about the
loss's, against the depths of the layers' boundaries.

**Time** (`fp8_costs`). No FP8 kernel has been measured: an FP8 matmul runs at the datasheet
FP8 peak with the efficiency its BF16 time shows (``t * peak_bf16 / peak_fp8``: the time at
the calibrated BF16 efficiency, at the FP8 peak), plus its **scaling work**: both operands
read in BF16 and written in FP8 (3 bytes an element) at the memory roofline
(`moplace.costs.devicespecs.DEFAULT_MEMORY_EFFICIENCY` of the datasheet bandwidth), which
also covers the amax each cast takes. A kind without an FP8 peak (V100, A100) refuses FP8.

**Memory** (`fp8_weight_bytes`). Each weight an FP8 matmul reads keeps an FP8 copy, one byte
an element, beside its BF16 weight, where the weight is resident (sharded as it is).
"""

from __future__ import annotations

import copy
import weakref

import numpy as np

from ..core.graph import ROLES, OpGraph
from ..errors import StrategyError
from .devicespecs import DEFAULT_MEMORY_EFFICIENCY, device_spec, dtype_size

_FWD = ROLES.index("forward")
#: what every result with FP8 matmuls says of their times
FP8_NOTE = ("FP8 matmuls: timed at the datasheet FP8 peak with the efficiency their BF16 times "
            "show, plus their scaling work; no FP8 kernel has been measured")
#: bytes an element the scaling work moves: read in BF16 (2), written in FP8 (1)
CAST_BYTES = 3
#: how many single-input ops (casts, transposes, views) may stand between a weight and its
#: matmul
_WEIGHT_HOPS = 3

_VIEWS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_OPS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def fp8_matmuls(graph: OpGraph, mode: str) -> np.ndarray:
    """Per op of ``graph``: does it run in FP8 under ``mode`` (`FP8_MODES`)? `StrategyError`
    when the graph names no matmul shapes or no layers."""
    kept = _OPS.setdefault(graph, {})
    if mode not in kept:
        kept[mode] = _matmuls(graph, mode)
    return kept[mode]


def _matmuls(graph: OpGraph, mode: str) -> np.ndarray:
    n = len(graph.ops)
    out = np.zeros(n, bool)
    if mode == "none":
        return out
    features = graph.metadata.get("cost_features")
    layers = graph.metadata.get("layers")
    if not isinstance(features, dict) or not isinstance(layers, dict):
        raise StrategyError(f"FP8 needs the model's matmul shapes and layers; graph "
                            f"{graph.name!r} names none (a PyTorch trace does)")
    names, period, count = layers["boundaries"], layers["period"], layers["count"]
    depth = graph.depth.astype(np.float64)
    a = graph.arrays
    forward = a.role == _FWD
    loss = depth[forward].max() if forward.any() else 0.0
    key = np.where(forward, depth, 2 * loss - depth)
    edges = np.array([depth[graph.index[names[j * period]]] for j in range(count + 1)])
    layer = np.searchsorted(edges, key, side="left") - 1  # -1: before the first; count: after
    first, last = (1, count - 2) if mode == "inner" else (0, count - 1)
    for i, op in enumerate(graph.ops):
        f = features.get(op.name)
        if isinstance(f, dict) and f.get("cls") == "matmul" and first <= layer[i] <= last:
            out[i] = True
    return out


def fp8_weight_bytes(graph: OpGraph, mode: str) -> np.ndarray:
    """Per op, the bytes of FP8 weight copies it keeps under ``mode``: a weight (an op with
    parameters and no inputs) that a forward FP8 matmul reads, directly or through up to
    three single-input ops, keeps one byte an element (its parameter bytes over its element
    size). Kept per graph and mode."""
    kept = _OPS.setdefault(graph, {})
    if ("weights", mode) not in kept:
        kept[("weights", mode)] = _weight_bytes(graph, fp8_matmuls(graph, mode))
    return kept[("weights", mode)]


def _weight_bytes(graph: OpGraph, matmuls: np.ndarray) -> np.ndarray:
    a = graph.arrays
    features = graph.metadata.get("cost_features") or {}
    extra = np.zeros(len(graph.ops))
    for op in np.flatnonzero(matmuls & (a.role == _FWD)).tolist():
        frontier = [op]
        for _ in range(_WEIGHT_HOPS + 1):
            nxt = []
            for v in frontier:
                for q in range(a.in_ptr[v], a.in_ptr[v + 1]):
                    u = int(a.src[a.in_edge[q]])
                    if a.in_ptr[u + 1] == a.in_ptr[u] and a.param_bytes[u] > 0:
                        size = dtype_size(features.get(graph.ops[op].name, {}).get(
                            "dtype", "bfloat16"))
                        extra[u] = a.param_bytes[u] / size
                    elif a.in_ptr[u + 1] - a.in_ptr[u] == 1:
                        nxt.append(u)
            frontier = nxt
    return extra


def has_fp8(cluster) -> bool:
    """Does every device of ``cluster`` have FP8 tensor cores (a datasheet FP8 peak)?"""
    specs = [device_spec(kind) for kind in dict.fromkeys(cluster.kinds)]
    return all(s is not None and "float8" in s.peak_flops for s in specs)


def fp8_costs(costs, mode: str):
    """``costs`` with every FP8 matmul of ``mode`` timed in FP8 (see the module docstring):
    a copy, kept per cost model and mode; `StrategyError` on a device kind without FP8."""
    kept = _VIEWS.setdefault(costs, {})
    if mode in kept:
        return kept[mode]
    graph, cluster = costs.graph, costs.cluster
    on = fp8_matmuls(graph, mode)
    features = graph.metadata["cost_features"]
    compute = np.array(costs.compute)
    elements = np.zeros(len(graph.ops))
    for i in np.flatnonzero(on).tolist():
        f = features[graph.ops[i].name]
        elements[i] = f.get("batch", 1) * (f["m"] * f["k"] + f["k"] * f["n"])
    for d in range(cluster.n_devices):
        kind = cluster.kinds[d]
        spec = device_spec(kind)
        if spec is None or "float8" not in spec.peak_flops:
            raise StrategyError(f"FP8 on {kind}: the kind has no FP8 tensor cores (FP8 runs on "
                                "H100, H200 and B200)")
        scale = spec.peak("bfloat16") / spec.peak_flops["float8"]
        cast = elements * CAST_BYTES / (spec.mem_bandwidth_Bps * DEFAULT_MEMORY_EFFICIENCY)
        compute[on, d] = compute[on, d] * scale + cast[on]
    view = copy.copy(costs)
    view.__dict__.pop("_with_parts", None)
    compute.flags.writeable = False
    view.__dict__["compute"] = compute
    kept[mode] = view
    return view
