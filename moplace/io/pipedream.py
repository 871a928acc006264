"""Import a PipeDream profile (``graph.txt``) as the op graph of one full training step.

The file profiles each layer's forward and backward time (ms, one minibatch, one GPU) and its
output and weight sizes (bytes). From it we build forward ops ``L``, backward ops ``L/grad`` and,
for layers with weights, optimizer ops ``L/update``; see ``docs/graph-format.md``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from ..core.graph import MAX_OP_SECONDS, MAX_TENSOR_BYTES, Edge, Op, OpGraph
from ..errors import FormatError, GraphError, shown
from .bundled import bundled_source

KEYS = ("forward_compute_time", "backward_compute_time", "activation_size", "parameter_size")
SEP = " -- "
# SGD with momentum reads weight, gradient and momentum and writes weight and momentum: 5 passes.
UPDATE_BYTES_PER_PARAM_BYTE = 5
V100_HBM2_BYTES_PER_S = 900e9

_BOTH = ("batch", "channel")
_SPLIT_BY_TYPE = {
    **{t: _BOTH for t in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "Linear", "ReLU",
                          "ReLU6", "LeakyReLU", "Sigmoid", "Tanh", "GELU", "MaxPool2d",
                          "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Dropout",
                          "Add", "Sub", "Mul", "Concat", "Cat")},
    # a channel cut of BatchNorm would change nothing but its statistics' layout: batch only
    **{t: ("batch",) for t in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")},
    # loading a minibatch splits with it: each data-parallel replica loads its own slice
    "Input": ("batch",),
}


@dataclass(frozen=True)
class Layer:
    """One node line of the file."""

    name: str
    type: str
    fwd_ms: float
    bwd_ms: float
    activation: int
    params: int
    line: int


def layer_type(description: str) -> str:
    """Layer class from a description: ``Conv2d(3, 64, ...)`` -> ``Conv2d``, ``Input0`` -> ``Input``."""
    head = description.split("(", 1)[0].strip()
    if re.fullmatch(r"Input\d*", head):
        return "Input"
    return head or "op"


def splittable(type_: str) -> tuple[str, ...]:
    """Dimensions a layer of this class may be cut along (unknown classes: batch only)."""
    return _SPLIT_BY_TYPE.get(type_, ("batch",))


#: the largest value each key may have: op times of at most MAX_OP_SECONDS (in ms here) and
#: tensors of at most MAX_TENSOR_BYTES, as every op graph
_MAX = {"forward_compute_time": MAX_OP_SECONDS * 1e3, "backward_compute_time": MAX_OP_SECONDS * 1e3,
        "activation_size": MAX_TENSOR_BYTES, "parameter_size": MAX_TENSOR_BYTES}


def _number(text: str, path, line: int, key: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FormatError(path, f"{key}={shown(text)} is not a number", line=line) from None
    if not (math.isfinite(value) and 0 <= value <= _MAX[key]):
        raise FormatError(path, f"{key}={shown(text)} must be finite and non-negative, at most "
                          f"{_MAX[key]:g}", line=line)
    return value


def _size(text: str, path, line: int, key: str) -> int:
    # multi-output layers (GNMT's LSTMs) list one size per output: "[6291456.0; 131072.0]"
    if text.startswith("[") and text.endswith("]"):
        parts = [p.strip() for p in text[1:-1].split(";") if p.strip()]
        total = sum(round(_number(p, path, line, key)) for p in parts)
        if total > _MAX[key]:
            raise FormatError(path, f"{key}: the sizes add up to more than {_MAX[key]:g} bytes",
                              line=line)
        return total
    return round(_number(text, path, line, key))


def _parse_values(text: str, path, line: int) -> dict[str, str]:
    values: dict[str, str] = {}
    for item in text.split(", "):
        key, eq, value = item.strip().partition("=")
        if not eq or not key or not value:
            raise FormatError(path, f"expected key=value, got {shown(item.strip())}", line=line)
        if key not in KEYS:
            raise FormatError(path, f"unknown key {shown(key)} (expected {', '.join(KEYS)})", line=line)
        if key in values:
            raise FormatError(path, f"key {shown(key)} given twice", line=line)
        values[key] = value.strip()
    missing = [k for k in KEYS if k not in values]
    if missing:
        raise FormatError(path, f"missing {', '.join(missing)}", line=line)
    return values


def _parse_node(text: str, path, line: int) -> Layer:
    parts = text.split(SEP)
    if len(parts) < 3:
        raise FormatError(path, "expected 'name -- description -- key=value, ...'", line=line)
    # the name is first and the values last; a description containing ' -- ' stays whole
    name, description, values = parts[0].strip(), SEP.join(parts[1:-1]), parts[-1]
    if not name or " " in name:
        raise FormatError(path, f"bad node name {shown(name)}", line=line)
    v = _parse_values(values, path, line)
    return Layer(name, layer_type(description),
                 _number(v["forward_compute_time"], path, line, "forward_compute_time"),
                 _number(v["backward_compute_time"], path, line, "backward_compute_time"),
                 _size(v["activation_size"], path, line, "activation_size"),
                 _size(v["parameter_size"], path, line, "parameter_size"), line)


def parse_pipedream(path) -> tuple[dict[str, Layer], list[tuple[str, str]]]:
    """Layers by name and forward edges ``(src, dst)`` of a ``graph.txt``; `FormatError` on bad lines."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(path, f"cannot read the file: {exc}") from None
    layers: dict[str, Layer] = {}
    edges: list[tuple[str, str, int]] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if raw[0].isspace():
            ends = [p.strip() for p in raw.strip().split(SEP)]
            if len(ends) != 2 or not all(ends):
                raise FormatError(path, f"expected an edge 'nodeA -- nodeB', got {shown(raw.strip())}",
                                  line=n)
            edges.append((ends[0], ends[1], n))
            continue
        layer = _parse_node(raw, path, n)
        if layer.name in layers:
            raise FormatError(path, f"node {shown(layer.name)} defined again (first on line "
                              f"{layers[layer.name].line})", line=n)
        layers[layer.name] = layer
    if not layers:
        raise FormatError(path, "no node lines: not a PipeDream graph.txt")
    return layers, _check_edges(layers, edges, path)


def _check_edges(layers, edges, path) -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], int] = {}
    for src, dst, n in edges:
        for end in (src, dst):
            if end not in layers:
                raise FormatError(path, f"edge names unknown node {shown(end)}", line=n)
        if (src, dst) in seen:
            raise FormatError(path, f"edge {src} -> {dst} repeated (first on line "
                              f"{seen[(src, dst)]})", line=n)
        seen[(src, dst)] = n
    try:
        cycle = nx.find_cycle(nx.DiGraph(list(seen)))
    except nx.NetworkXNoCycle:
        return list(seen)
    lines = sorted(seen[(a, b)] for a, b in cycle)
    raise FormatError(path, "the edges form a cycle: " + " -> ".join([a for a, _ in cycle] + [cycle[0][0]])
                      + f" (edges on lines {', '.join(map(str, lines))})", line=lines[0])


def update_seconds(param_bytes: int) -> float:
    """Estimated optimizer-update time: memory-bound, 5 passes over the weights at V100 HBM2 speed."""
    return UPDATE_BYTES_PER_PARAM_BYTE * param_bytes / V100_HBM2_BYTES_PER_S


def _ops_and_edges(layers, fwd_edges, kind, state_factor):
    preds: dict[str, list[str]] = {name: [] for name in layers}
    for src, dst in fwd_edges:
        preds[dst].append(src)
    ops, edges = [], []
    for L in layers.values():
        dims = splittable(L.type)
        ops.append(Op(L.name, L.type, {kind: L.fwd_ms / 1000}, output_bytes=L.activation,
                      param_bytes=L.params, colocation=L.name, splittable=dims, role="forward"))
        input_grads = sum(layers[p].activation for p in preds[L.name])
        ops.append(Op(f"{L.name}/grad", L.type + "Grad", {kind: L.bwd_ms / 1000},
                      output_bytes=input_grads + L.params, grad_bytes=L.params,
                      colocation=L.name, splittable=dims, role="backward"))
        edges.append(Edge(L.name, f"{L.name}/grad", L.activation))
        if L.params > 0:
            ops.append(Op(f"{L.name}/update", "SGDUpdate", {kind: update_seconds(L.params)},
                          param_bytes=round(state_factor * L.params), colocation=L.name,
                          splittable=dims, role="update"))
            edges.append(Edge(f"{L.name}/grad", f"{L.name}/update", L.params))
    for src, dst in fwd_edges:
        nbytes = layers[src].activation
        edges.append(Edge(src, dst, nbytes))
        edges.append(Edge(f"{dst}/grad", f"{src}/grad", nbytes))
    return ops, edges


#: image inputs PipeDream's models read (channels, height, width): ImageNet crops, 299 for
#: Inception-v3
_IMAGE_INPUTS = ((3, 224, 224), (3, 299, 299))


def profile_batch(layers: dict) -> int | None:
    """The minibatch a profile ran, from its one image input's bytes in FP32 (PipeDream's
    training precision): 77,070,336 B = 128 x 3 x 224 x 224 x 4; None when the input is not
    an image of `_IMAGE_INPUTS` (GNMT's token input reports no size)."""
    inputs = [L for L in layers.values() if L.type == "Input"]
    if len(inputs) != 1 or inputs[0].activation <= 0:
        return None
    for shape in _IMAGE_INPUTS:
        per_sample = 4 * shape[0] * shape[1] * shape[2]
        if inputs[0].activation % per_sample == 0:
            return inputs[0].activation // per_sample
    return None


def _metadata(path, kind: str, state_factor: float, batch: int | None = None) -> dict:
    return {
        "format": "pipedream",
        "source": bundled_source(path),
        "profiled_on": kind,
        "batch_size": batch,
        "precision": "FP32",
        "time_unit_in_file": "ms",
        **({"optimizer": "momentum"} if state_factor == 1.0 else {}),
        "estimated": [
            "update compute (L/update ops) is not profiled: estimated as memory-bound, "
            f"{UPDATE_BYTES_PER_PARAM_BYTE} * parameter_size bytes moved (SGD with momentum reads "
            "weight, gradient, momentum and writes weight, momentum) at "
            f"{V100_HBM2_BYTES_PER_S:.0f} B/s (V100 HBM2 datasheet bandwidth)",
        ],
        "assumptions": [
            f"times were profiled on one {kind} GPU (the file names neither GPU nor batch size)",
            "the batch size is the image input's bytes over an FP32 ImageNet crop (3 x 224 x 224, "
            "or 299 x 299 for Inception-v3); PipeDream trained in FP32",
            "L/grad needs L's output activation (edge L -> L/grad, activation_size(L) bytes)",
            "L/grad outputs the gradients w.r.t. L's inputs (sum of its predecessors' "
            "activation_size) plus its weight gradient (grad_bytes = parameter_size)",
            "for a forward edge P -> S, S/grad sends activation_size(P) bytes to P/grad",
            f"L/update keeps optimizer state of {state_factor} * parameter_size bytes "
            "(SGD momentum buffer) as its param_bytes",
            "a layer listing several output sizes ([a; b; c]) has activation_size = their sum, "
            "and every out-edge carries that sum",
            "the Input layer's forward time is the profiler's data-loading time, kept as measured",
        ],
    }


def load_pipedream(path, *, device_kind: str = "V100", optimizer_state_factor: float = 1.0,
                   name: str | None = None) -> OpGraph:
    """Load a PipeDream ``graph.txt`` as a full training step (forward, backward, update).

    Times are converted from ms to seconds under ``device_kind``. ``optimizer_state_factor``
    sizes each update op's optimizer state relative to the layer's weights (1.0 = momentum).
    Malformed lines raise `FormatError` naming the line; a cycle raises `GraphError`.
    """
    if not (math.isfinite(optimizer_state_factor) and optimizer_state_factor >= 0):
        raise ValueError(f"optimizer_state_factor must be >= 0, got {optimizer_state_factor!r}")
    layers, fwd_edges = parse_pipedream(path)
    try:
        ops, edges = _ops_and_edges(layers, fwd_edges, device_kind, optimizer_state_factor)
        return OpGraph(ops, edges, name=name or Path(path).parent.name or Path(path).stem,
                       metadata=_metadata(path, device_kind, optimizer_state_factor,
                                          profile_batch(layers)))
    except GraphError as exc:  # a value the graph refuses (a gradient over 1 TiB...): which line
        line = next((L.line for L in layers.values() if repr(L.name) in str(exc)), None)
        raise FormatError(path, str(exc), line=line) from None
