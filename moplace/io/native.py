"""moplace's own graph file: JSON holding exactly what an `OpGraph` holds (``docs/graph-format.md``).

``save_graph`` then ``load_native`` gives back equal ops, edges and metadata; floats survive
bit-for-bit because Python's json writes the shortest repr that reads back to the same double.
Unknown keys are errors, so a typo is reported instead of silently becoming a default.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

from ..core.graph import MAX_OP_SECONDS, MAX_TENSOR_BYTES, ROLES, SPLIT_DIMS, Edge, Op, OpGraph
from ..errors import LONG_INTEGER, FormatError, GraphError, shown

#: how deep `metadata` may nest (what `profile` writes nests 3 deep); deeper is a damaged file,
#: and would be deeper than what copies, pickles or logs it can recurse
MAX_METADATA_DEPTH = 32

FORMAT = "moplace-graph"
#: 2 added tensor parallelism (a ``tensor`` split, ``partial_sums``) and ``scratch_bytes``; a
#: graph without them is written as version 1, which moplace before it reads too
VERSION = 2
VERSIONS = (1, 2)
TOP_KEYS = {"format", "version", "name", "metadata", "ops", "edges"}
OP_KEYS = {"name", "type", "compute", "output_bytes", "param_bytes", "grad_bytes", "colocation",
           "splittable", "role", "part_compute", "partial_sums", "scratch_bytes"}
EDGE_KEYS = {"src", "dst", "bytes"}


def read_json(path):
    """Parse a JSON file; `FormatError` with the line of a syntax error, or if it is unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or a NUL in the name
        raise FormatError(path, f"cannot read the file: {exc}") from None
    try:
        return json.loads(text)  # NaN/Infinity parse; the field checks refuse them by name
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"invalid JSON: {exc.msg} (column {exc.colno})",
                          line=exc.lineno) from None
    except RecursionError:
        raise FormatError(path, "invalid JSON: arrays or objects nested too deeply") from None
    except ValueError as exc:  # int() of an integer over 4,300 digits
        found = LONG_INTEGER.search(text)
        if found is None:
            raise FormatError(path, f"invalid JSON: {exc}") from None
        start = text.rfind("\n", 0, found.start()) + 1
        raise FormatError(path, f"invalid JSON: an integer of {len(found.group())} digits "
                          f"(column {found.start() - start + 1}; no figure of a graph needs more "
                          "than 20)", line=text.count("\n", 0, found.start()) + 1) from None


# -- saving --------------------------------------------------------------------------------------
def _plain(value):
    """json `default`: mapping proxies (OpGraph.metadata) become dicts, numpy scalars Python ones."""
    if isinstance(value, MappingProxyType):
        return dict(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"metadata value {value!r} is not JSON-serialisable")


def _py(number):
    """A numpy scalar as the equal Python number (json cannot write numpy types)."""
    return number.item() if hasattr(number, "item") else number


def _op_record(op: Op) -> dict:
    record = {"name": op.name, "type": op.type,
              "compute": {k: _py(v) for k, v in op.compute.items()},
              "output_bytes": int(op.output_bytes), "param_bytes": int(op.param_bytes)}
    if op.grad_bytes:
        record["grad_bytes"] = int(op.grad_bytes)
    record.update(colocation=op.colocation, splittable=list(op.splittable), role=op.role)
    if op.part_compute:
        record["part_compute"] = {str(n): {k: _py(v) for k, v in t.items()}
                                  for n, t in op.part_compute.items()}
    if op.partial_sums:
        record["partial_sums"] = True
    if op.scratch_bytes:
        record["scratch_bytes"] = int(op.scratch_bytes)
    return record


def _needs_version_2(op: Op) -> bool:
    """Does ``op`` use what version 2 of the format added?"""
    return bool(op.partial_sums) or "tensor" in op.splittable or op.scratch_bytes > 0


def graph_to_dict(graph: OpGraph) -> dict:
    """The JSON-ready dictionary `save_graph` writes."""
    names = [op.name for op in graph.ops]
    return {"format": FORMAT, "version": VERSION if any(map(_needs_version_2, graph.ops))
            else 1, "name": graph.name,
            "metadata": dict(graph.metadata),
            "ops": [_op_record(op) for op in graph.ops],
            "edges": [{"src": names[e.src], "dst": names[e.dst], "bytes": int(e.bytes)}
                      for e in graph.edges]}


def save_graph(graph: OpGraph, path) -> None:
    """Write ``graph`` to ``path`` in the moplace-graph JSON format (one op or edge per line)."""
    data = graph_to_dict(graph)
    lines = [json.dumps(op, default=_plain, allow_nan=False) for op in data["ops"]]
    edges = [json.dumps(e) for e in data["edges"]]
    head = {k: data[k] for k in ("format", "version", "name")}
    text = ("{\n" + "".join(f" {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items())
            + f' "metadata": {json.dumps(data["metadata"], default=_plain, allow_nan=False)},\n'
            + ' "ops": [\n  ' + ",\n  ".join(lines) + "\n ],\n"
            + ' "edges": [\n  ' + ",\n  ".join(edges) + "\n ]\n}\n")
    Path(path).write_text(text, encoding="utf-8")


# -- loading -------------------------------------------------------------------------------------
class _Reader:
    """Type-checks values of one file, naming the field path in every error."""

    def __init__(self, path):
        self.path = path

    def fail(self, field: str, message: str):
        raise FormatError(self.path, message, field=field or None)

    def obj(self, value, field, keys=None, required=()):
        if not isinstance(value, dict):
            self.fail(field, f"must be an object, got {type(value).__name__}")
        for key in value:
            if keys is not None and key not in keys:
                self.fail(f"{field}.{_key(key)}" if field else _key(key),
                          f"unknown key {shown(key)} (known: {', '.join(sorted(keys))})")
        for key in required:
            if key not in value:
                self.fail(f"{field}.{key}" if field else key, "missing")
        return value

    def integer(self, value, field):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TENSOR_BYTES:
            self.fail(field, f"must be a non-negative integer, at most {MAX_TENSOR_BYTES} (1 TiB), "
                             f"got {shown(value)}")
        return value

    def seconds(self, value, field):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not 0 <= value <= MAX_OP_SECONDS:  # also refuses nan
            self.fail(field, f"must be a finite non-negative number of seconds, at most "
                             f"{MAX_OP_SECONDS:g}, got {shown(value)}")
        return value

    def string(self, value, field, allow_none=False):
        if value is None and allow_none:
            return None
        if not isinstance(value, str) or not value:
            self.fail(field, f"must be a non-empty string, got {shown(value)}")
        return value

    def times(self, value, field):
        self.obj(value, field)
        return {k: self.seconds(v, f"{field}.{k}") for k, v in value.items()}


def _read_op(r: _Reader, rec, at: str) -> Op:
    r.obj(rec, at, OP_KEYS, required=("name",))
    kw = {"name": r.string(rec["name"], f"{at}.name")}
    if "type" in rec:
        kw["type"] = r.string(rec["type"], f"{at}.type")
    if "compute" in rec:
        kw["compute"] = r.times(rec["compute"], f"{at}.compute")
    for key in ("output_bytes", "param_bytes", "grad_bytes", "scratch_bytes"):
        if key in rec:
            kw[key] = r.integer(rec[key], f"{at}.{key}")
    if "colocation" in rec:
        kw["colocation"] = r.string(rec["colocation"], f"{at}.colocation", allow_none=True)
    if "splittable" in rec:
        dims = rec["splittable"]
        if not isinstance(dims, list) or any(not isinstance(d, str) or d not in SPLIT_DIMS
                                             for d in dims):
            r.fail(f"{at}.splittable", f"must be a list drawn from {list(SPLIT_DIMS)}, got "
                   f"{shown(dims)}")
        kw["splittable"] = tuple(dims)
    if "role" in rec:
        if not isinstance(rec["role"], str) or rec["role"] not in ROLES:
            r.fail(f"{at}.role", f"must be one of {list(ROLES)}, got {shown(rec['role'])}")
        kw["role"] = rec["role"]
    if "part_compute" in rec:
        kw["part_compute"] = _read_parts(r, rec["part_compute"], f"{at}.part_compute")
    if "partial_sums" in rec:
        if not isinstance(rec["partial_sums"], bool):
            r.fail(f"{at}.partial_sums", f"must be true or false, got "
                   f"{shown(rec['partial_sums'])}")
        kw["partial_sums"] = rec["partial_sums"]
    try:
        return Op(**kw)
    except GraphError as exc:
        r.fail(at, str(exc))


def _read_parts(r: _Reader, value, field) -> dict[int, dict]:
    r.obj(value, field)
    parts = {}
    for key, times in value.items():
        # (the length first: int() of over 4,300 digits raises)
        if not (key.isascii() and key.isdigit() and len(key) <= 7) or not 2 <= int(key) <= 1 << 20:
            r.fail(f"{field}.{_key(key)}", "keys are part counts from 2 to "
                   f"{1 << 20} written as strings, e.g. \"2\"")
        parts[int(key)] = r.times(times, f"{field}.{key}")
    return parts


def _read_edges(r: _Reader, records, names: set[str]) -> list[Edge]:
    if not isinstance(records, list):
        r.fail("edges", "must be a list")
    edges = []
    for i, rec in enumerate(records):
        at = f"edges[{i}]"
        r.obj(rec, at, EDGE_KEYS, required=("src", "dst"))
        for end in ("src", "dst"):
            if not isinstance(rec[end], str) or rec[end] not in names:
                r.fail(f"{at}.{end}", f"names no op: {shown(rec[end])}")
        edges.append(Edge(rec["src"], rec["dst"], r.integer(rec.get("bytes", 0), f"{at}.bytes")))
    return edges


def _key(key: str) -> str:
    """A key of the file for a field path: a damaged one cut short."""
    return key if len(key) <= 24 else key[:20] + "..."


def _check_depth(r: _Reader, value, field: str) -> None:
    """Refuse values nested deeper than `MAX_METADATA_DEPTH` (walked without recursion)."""
    stack = [(value, field, 1)]
    while stack:
        value, at, depth = stack.pop()
        if depth > MAX_METADATA_DEPTH:
            r.fail(at, f"nested more than {MAX_METADATA_DEPTH} levels deep")
        if isinstance(value, dict):
            stack.extend((v, f"{at}.{_key(k)}", depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, at, depth + 1) for v in value)


def load_native(path) -> OpGraph:
    """Load a moplace-graph JSON file; `FormatError` names the file and field of any problem."""
    r = _Reader(path)
    data = r.obj(read_json(path), "", TOP_KEYS, required=("format", "version", "ops"))
    if data["format"] != FORMAT:
        r.fail("format", f"must be {FORMAT!r}, got {shown(data['format'])}")
    if data["version"] not in VERSIONS or isinstance(data["version"], bool):
        r.fail("version", f"unsupported version {shown(data['version'])} (this moplace reads "
                          f"{', '.join(map(str, VERSIONS))})")
    if not isinstance(data["ops"], list):
        r.fail("ops", "must be a list")
    ops, seen = [], {}
    for i, rec in enumerate(data["ops"]):
        op = _read_op(r, rec, f"ops[{i}]")
        if op.name in seen:
            r.fail(f"ops[{i}].name", f"duplicate op name {shown(op.name)} (also "
                                     f"ops[{seen[op.name]}])")
        seen[op.name] = i
        if data["version"] == 1 and _needs_version_2(op):
            r.fail(f"ops[{i}]", "a tensor split, partial_sums or scratch_bytes needs version 2 "
                   "of the format")
        ops.append(op)
    edges = _read_edges(r, data.get("edges", []), set(seen))
    name = r.string(data.get("name", Path(path).stem), "name")
    metadata = r.obj(data.get("metadata", {}), "metadata")
    _check_depth(r, metadata, "metadata")
    if "profiled_on" in metadata:  # the device kind the costs were measured on
        r.string(metadata["profiled_on"], "metadata.profiled_on")
    try:
        return OpGraph(ops, edges, name=name, metadata=metadata)
    except GraphError as exc:  # duplicate edges, a cycle, too many: name the file as well
        raise GraphError(f"{path}, field 'edges': {exc}") from None
