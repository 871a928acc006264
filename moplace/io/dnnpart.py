"""Import the JSON inputs of "Efficient Algorithms for Device Placement of DNN Graph Operators"
(NeurIPS 2020). The format is described in ``moplace/data/dnn-partitioning/README.upstream.md``;
how its fields become ops, and why, is in ``docs/graph-format.md`` and each graph's metadata.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from ..core.graph import MAX_TENSOR_BYTES, Edge, Op, OpGraph
from ..errors import FormatError, GraphError, shown
from .bundled import bundled_source
from .native import read_json

# Operator graphs write cost = bytes / 2**31 * 1000 (ms at 2 GiB/s); used when no edge has a size.
DEFAULT_BYTES_PER_COST = 2**31 / 1000
OPTIMIZER_MARK = "Optimizer"  # BERT/ResNet operator graphs name optimizer steps AdamOptimizer_*

_NUM, _INT, _FLAG = "number", "integer", "boolean or 0/1"
#: no number of the format (bytes, ms, costs) is larger than a 1 TiB tensor in bytes
NUM_LIMIT = float(MAX_TENSOR_BYTES)
INT_LIMIT = 2**63
NODE_FIELDS = {"id": _INT, "supportedOnFpga": _FLAG, "cpuLatency": _NUM, "fpgaLatency": _NUM,
               "isBackwardNode": _FLAG, "size": _NUM}
EDGE_FIELDS = {"sourceId": _INT, "destId": _INT, "cost": _NUM}
TOP_FIELDS = {"maxSizePerFPGA": _NUM, "maxFPGAs": _INT, "maxCPUs": _INT}


def _value(path, record: dict, key: str, kind: str, field: str, optional=False):
    """``record[key]`` checked to be of ``kind``; `FormatError` naming ``field`` otherwise."""
    if key not in record:
        if optional:
            return None
        raise FormatError(path, "missing", field=field)
    v = record[key]
    if kind == _INT:
        ok = isinstance(v, int) and not isinstance(v, bool) and -INT_LIMIT <= v < INT_LIMIT
    elif kind == _FLAG:
        ok = isinstance(v, bool) or v in (0, 1) and isinstance(v, int)
    else:  # comparisons, not math.isfinite: 10**400 is refused, not an OverflowError
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= NUM_LIMIT
    if not ok:
        limits = {_NUM: f" (at most {NUM_LIMIT:g})", _INT: " (64-bit)"}.get(kind, "")
        raise FormatError(path, f"must be a {'finite non-negative ' if kind == _NUM else ''}"
                          f"{kind}{limits}, got {shown(v)}", field=field)
    return bool(v) if kind == _FLAG else v


def _record(path, value, field: str, fields: dict) -> dict:
    if not isinstance(value, dict):
        raise FormatError(path, f"must be an object, got {type(value).__name__}",
                          field=field or None)
    return {k: _value(path, value, k, kind, f"{field}.{k}" if field else k)
            for k, kind in fields.items()}


def _read_nodes(path, nodes) -> list[dict]:
    out, ids = [], {}
    for i, raw in enumerate(nodes):
        at = f"nodes[{i}]"
        node = _record(path, raw, at, NODE_FIELDS)
        name = raw.get("name", f"node{node['id']}")
        if not isinstance(name, str) or not name:
            raise FormatError(path, f"must be a non-empty string, got {name!r}", field=f"{at}.name")
        color = raw.get("colorClass")
        if color is not None and (isinstance(color, bool) or not isinstance(color, (int, str))
                                  or isinstance(color, int) and not -INT_LIMIT <= color < INT_LIMIT):
            raise FormatError(path, f"must be a 64-bit integer or null, got {shown(color)}",
                              field=f"{at}.colorClass")
        if node["id"] in ids:
            raise FormatError(path, f"id {node['id']} already used by nodes[{ids[node['id']]}]",
                              field=f"{at}.id")
        ids[node["id"]] = i
        out.append({**node, "name": name, "colorClass": color})
    return out


def _read_edges(path, edges, ids: set) -> list[dict]:
    out, seen = [], set()
    for i, raw in enumerate(edges):
        at = f"edges[{i}]"
        edge = _record(path, raw, at, EDGE_FIELDS)
        edge["size"] = _value(path, raw, "size", _NUM, f"{at}.size", optional=True)
        for end in ("sourceId", "destId"):
            if edge[end] not in ids:
                raise FormatError(path, f"no node has id {edge[end]}", field=f"{at}.{end}")
        pair = (edge["sourceId"], edge["destId"])
        if pair in seen:
            raise FormatError(path, f"edge {pair[0]} -> {pair[1]} given twice", field=at)
        seen.add(pair)
        out.append(edge)
    return out


def unique_names(nodes: list[dict]) -> dict[int, str]:
    """Node id -> op name: the node's name, with ``#id`` appended to every name used twice."""
    count: dict[str, int] = {}
    for n in nodes:
        count[n["name"]] = count.get(n["name"], 0) + 1
    return {n["id"]: n["name"] if count[n["name"]] == 1 else f"{n['name']}#{n['id']}"
            for n in nodes}


def _bytes_per_cost(edges) -> float:
    ratios = [e["size"] / e["cost"] for e in edges if e["size"] and e["cost"] > 0]
    return statistics.median(ratios) if ratios else DEFAULT_BYTES_PER_COST


def edge_bytes(edges) -> list[int]:
    """Bytes of each edge: its ``size`` rounded up, else ``cost`` times the file's bytes per cost."""
    rate = _bytes_per_cost(edges)
    return [math.ceil(e["size"] if e["size"] is not None else e["cost"] * rate) for e in edges]


def _memory(node, out_bytes: list[int], has_inputs: bool) -> dict:
    size = math.ceil(node["size"])
    if not has_inputs and node["fpgaLatency"] == 0 and node["cpuLatency"] == 0:
        return {"param_bytes": size}  # a stored tensor (weight, constant): resident all step
    output = max(out_bytes) if out_bytes else size
    rest = max(0, size - output)
    if node["isBackwardNode"]:
        return {"output_bytes": output + rest, "grad_bytes": rest}
    return {"output_bytes": output, "param_bytes": rest}


def op_type(name: str) -> str:
    """Op class guessed from an operator name (``MatMul27`` -> ``MatMul``); ``op`` if none shows."""
    match = re.match(r"[A-Z][A-Za-z]*", name.rsplit("/", 1)[-1])
    return match.group(0) if match else "op"


def _role(node) -> str:
    if not node["isBackwardNode"]:
        return "forward"
    return "update" if OPTIMIZER_MARK in node["name"] else "backward"


def _build(nodes, edges, kind):
    names = unique_names(nodes)
    nbytes = edge_bytes(edges)
    outs: dict[int, list[int]] = {n["id"]: [] for n in nodes}
    has_inputs = set()
    for e, b in zip(edges, nbytes):
        outs[e["sourceId"]].append(b)
        has_inputs.add(e["destId"])
    ops = [Op(names[n["id"]], op_type(n["name"]),
              {kind: n["fpgaLatency"] / 1000, "cpu": n["cpuLatency"] / 1000},
              colocation=None if n["colorClass"] is None else str(n["colorClass"]),
              role=_role(n), **_memory(n, outs[n["id"]], n["id"] in has_inputs))
           for n in nodes]
    return ops, [Edge(names[e["sourceId"]], names[e["destId"]], b) for e, b in zip(edges, nbytes)]


def _granularity(path) -> str:
    parts = Path(path).parts
    return "operator" if "OperatorGraphs" in parts else "layer" if "LayerGraphs" in parts else "unknown"


_UNIT_EVIDENCE = {
    "layer": "fpgaLatency is ms: in LayerGraphs/resnet50_training.json every forward node's "
             "fpgaLatency equals PipeDream resnet50 forward_compute_time (ms) of the same node, and "
             "every backward node's equals backward_compute_time",
    "operator": "fpgaLatency taken as ms: in OperatorGraphs/bert_l-3_training.json Add36 reads "
                "and writes a 375,128,064-byte tensor (>= 750 MB moved) in 11.68 units: 64 GB/s "
                "if ms (plausible), 64 TB/s if us (impossible); MatMul27 (3072x128 by 128x30528, "
                "24 GFLOP) takes 8.22 units: 2.9 TFLOP/s if ms, 2.9 PFLOP/s if us; the ResNet50 "
                "operator graph's forward sums to 325 units at batch 32 (Conv1 output = "
                "32x64x112x112 floats), the same scale as the ms layer graphs; edge cost is "
                "bytes/2**31*1000 in every operator graph, i.e. ms at 2 GiB/s",
    "unknown": "fpgaLatency taken as ms, as in the bundled layer and operator graphs",
}


def _optimizer_named(nodes) -> dict:
    """``{"optimizer": name}`` when the update ops' names say which optimizer ran."""
    for mark, name in (("AdamOptimizer", "adam"), ("SGDOptimizer", "sgd")):
        if any(mark in n["name"] for n in nodes):
            return {"optimizer": name}
    return {}


def _metadata(path, kind: str, data: dict, nodes, edges) -> dict:
    grain = _granularity(path)
    has_size = all(e["size"] is not None for e in edges)
    return {
        "format": "dnn-partitioning",
        "source": bundled_source(path),
        "granularity": grain,
        "profiled_on": kind,
        "time_unit_in_file": "ms",
        "max_bytes_per_device": data["maxSizePerFPGA"],
        "max_devices": data["maxFPGAs"],
        "max_cpus": data["maxCPUs"],
        "cpu_only": [n["name"] for n in nodes if not n["supportedOnFpga"]],
        # the operator graphs name their update ops AdamOptimizer_* (BERT) or SGDOptimizer_*
        # (ResNet-50: ONNX Runtime's plain SGD, no state); Adam's state is not in the files
        **_optimizer_named(nodes),
        "estimated": [] if has_size else [
            f"edges without 'size' carry cost * {_bytes_per_cost(edges):.6g} bytes (the file's "
            "median size/cost, or bytes = cost/1000 * 2**31 when no edge has a size)"],
        "assumptions": [
            _UNIT_EVIDENCE[grain],
            f"compute[{kind!r}] = fpgaLatency/1000 s ('FPGA' means any accelerator; the layer "
            "graphs are GPU profiles); compute['cpu'] = cpuLatency/1000 s, which the files set "
            "to a fixed multiple of fpgaLatency (10x layer graphs, 23x operator graphs): a model, "
            "not a measurement",
            "memory: node size is what the node holds on a device. A node without inputs and "
            "with zero latency is a stored tensor (weight, constant): param_bytes = size. "
            "Otherwise output_bytes = its largest out-edge size (its size if it has no out-edge) "
            "and the remainder size - output_bytes is weights (forward: param_bytes; backward: "
            "grad_bytes, also counted in output_bytes); in layer graphs this gives PipeDream's "
            "parameter_size (node77: 205524992 - 205520896 = 4096)",
            "edge bytes = edge size rounded up to whole bytes (operator graphs have sizes such as "
            "0.125); the file's cost (transfer time to CPU DRAM) is not used",
            "role: isBackwardNode -> backward, or update when the name contains 'Optimizer'; "
            "other nodes (all nodes of *_inference graphs) -> forward",
            "colocation = str(colorClass) (null: none); splittable = () because the files "
            "give no tensor shapes",
            "names are made unique by appending '#<id>' to every name used more than once",
        ],
    }


def load_dnn_partitioning(path, *, device_kind: str = "V100", name: str | None = None) -> OpGraph:
    """Load a dnn-partitioning JSON input (layer or operator graph, inference or training).

    Latencies become seconds under ``device_kind`` (accelerator) and ``"cpu"``. Malformed input
    raises `FormatError` naming the field (``nodes[12].fpgaLatency``) or the JSON syntax line.
    """
    data = read_json(path)
    _record(path, data, "", TOP_FIELDS)
    for key in ("nodes", "edges"):
        if not isinstance(data.get(key), list):
            raise FormatError(path, "missing" if key not in data else "must be a list", field=key)
    nodes = _read_nodes(path, data["nodes"])
    edges = _read_edges(path, data["edges"], {n["id"] for n in nodes})
    try:
        ops, op_edges = _build(nodes, edges, device_kind)
        return OpGraph(ops, op_edges, name=name or Path(path).stem,
                       metadata=_metadata(path, device_kind, data, nodes, edges))
    except GraphError as exc:  # a cycle, a latency over the limit...: name the node
        names = unique_names(nodes)
        at = next((f"nodes[{i}]" for i, n in enumerate(nodes) if repr(names[n["id"]]) in str(exc)),
                  None)
        raise FormatError(path, str(exc), field=at) from None
