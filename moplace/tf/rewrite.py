"""Rewrite a placed training step so that its split ops run as parts, as the simulator has them.

An op split n ways becomes n part nodes (``<op>/moplace_part<k>``), each on its device and
reading what `moplace.tf.splitrules.plan_parts` says it needs. Tensors move the way FlexFlow's
task graph moves them:

- a part that needs a slice of an unsplit op's output reads a ``Slice`` made on the producer's
  device (only the slice travels);
- a part that needs a slice of a split op's output reads the producer's part that holds
  exactly that slice where one does (no copy at all), else slices of the overlapping parts,
  joined by a ``ConcatV2`` on the consumer's device;
- a consumer that needs the whole output of a split op reads one ``ConcatV2`` of the parts
  (``AddN`` of partial sums: a weight gradient computed by batch parts is the sum of the
  parts' gradients) made on the consumer's device, shared by every consumer there.

Every helper node is made once per (tensor, slice, device) and reused. The original node of a
split op is removed; control inputs on it become control inputs on all its parts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.graph import OpGraph
from ..core.strategy import Strategy
from ._tf import tf
from .splitrules import PartPlan, Region, SplitRefused, batch_axes, plan_parts

__all__ = ["SplitNode", "SplitRefused", "part_name", "plan_split_ops", "rewrite_split_nodes",
           "rewrite_splits"]


def part_name(op_name: str, k: int) -> str:
    """The node name of part ``k`` of a split op."""
    return f"{op_name}/moplace_part{k}"


@dataclass(frozen=True)
class _Piece:
    region: Region | None  # None: a partial sum of the whole tensor
    device: str
    tensor: str


def plan_split_ops(traced, graph: OpGraph, strategy: Strategy,
                   which=None) -> dict[int, list[PartPlan]]:
    """The parts of every split op of ``strategy`` (of those of ``which``, op indices, when
    given) in ``traced``; `SplitRefused` names the first op that cannot be cut as asked (and
    why)."""
    ops = {op.name: op for op in traced.func_graph.get_operations()}
    splits = {i: s for i, s in strategy.splits.items() if which is None or i in which}
    axes = None
    if any(s.dim == "batch" for s in splits.values()):
        if traced.batch_axes is None:  # a second trace: once per traced step
            traced.batch_axes = batch_axes(traced)
        axes = traced.batch_axes
    plans = {}
    for i, split in splits.items():
        name = graph.ops[i].name
        if name not in ops:
            raise SplitRefused(f"op {name!r} is not a node of the traced step")
        plans[i] = plan_parts(ops[name], split.dim, split.parts, axes)
    return plans


@dataclass(frozen=True)
class SplitNode:
    """A node of the placed step to cut into parts: its name, and per part its device and
    plan (`moplace.tf.splitrules.plan_parts`)."""

    name: str
    devices: tuple[str, ...]
    plan: list[PartPlan]


def rewrite_splits(graph_def, traced, graph: OpGraph, strategy: Strategy, devices: list[str],
                   plans: dict[int, list[PartPlan]]):
    """``graph_def`` (already placed: every node has its device) with the split ops of
    ``strategy`` rewritten into parts (``plans``: `plan_split_ops`). Modifies and returns it."""
    info = {op.name: op for op in traced.func_graph.get_operations()}
    return rewrite_split_nodes(graph_def, info, [
        SplitNode(graph.ops[i].name, tuple(devices[d] for d in strategy.splits[i].devices), plan)
        for i, plan in plans.items()])


def rewrite_split_nodes(graph_def, info: dict, nodes: list[SplitNode]):
    """``graph_def`` with ``nodes`` rewritten into parts; ``info``: per node name, what has its
    outputs' shapes and dtypes (a traced operation). Modifies and returns it."""
    b = _Builder(graph_def, info)
    split_names = {}
    for item in nodes:
        name, devs, plan = item.name, item.devices, item.plan
        split_names[name] = [part_name(name, k) for k in range(len(plan))]
        b.layout[f"{name}:0"] = [_Piece(p.output, devs[k], f"{part_name(name, k)}:0")
                                 for k, p in enumerate(plan)]
        for k, p in enumerate(plan):
            b.shape[f"{part_name(name, k)}:0"] = p.shape
            b.dtype[f"{part_name(name, k)}:0"] = info[name].outputs[0].dtype
    originals = {n.name: n for n in graph_def.node if n.name in split_names}
    for item in nodes:
        name, devs, plan = item.name, item.devices, item.plan
        node = originals[name]
        for k, p in enumerate(plan):
            inputs = []
            data = [x for x in node.input if not x.startswith("^")]
            for j, x in enumerate(data):
                want = p.inputs[j]
                if isinstance(want, np.ndarray):
                    inputs.append(b.const(want, devs[k]))
                else:
                    inputs.append(b.resolve(_tensor(x), want, devs[k]))
            for x in node.input:
                if x.startswith("^"):
                    inputs += [f"^{q}" for q in split_names.get(x[1:], [x[1:]])]
            part = b.add(part_name(name, k), node.op, inputs, devs[k])
            part.attr.MergeFrom(node.attr)
            if "_class" in part.attr:  # colocation with the whole op no longer holds
                del part.attr["_class"]
    for node in list(graph_def.node):
        if node.name in split_names or node.name in b.made:
            continue
        new = []
        for x in node.input:
            src = _tensor(x.lstrip("^")).split(":")[0]
            if src not in split_names:
                new.append(x)
            elif x.startswith("^"):
                new += [f"^{p}" for p in split_names[src] if f"^{p}" not in new]
            else:
                device = node.device or b.layout[_tensor(x)][0].device
                new.append(b.resolve(_tensor(x), None, device))
        if new != list(node.input):
            del node.input[:]
            node.input.extend(new)
    kept = [n for n in graph_def.node if n.name not in split_names]
    del graph_def.node[:]
    graph_def.node.extend(kept)
    return graph_def


def _tensor(x: str) -> str:
    return x if ":" in x else f"{x}:0"


class _Builder:
    """Makes helper nodes (constants, slices, concatenations, sums), each once."""

    def __init__(self, graph_def, info):
        self.graph_def = graph_def
        self.info = info
        self.device = {n.name: n.device for n in graph_def.node}
        self.layout: dict[str, list[_Piece]] = {}
        self.shape: dict[str, tuple] = {}
        self.dtype: dict[str, object] = {}
        self.made: set[str] = set()
        self.cache: dict[tuple, str] = {}
        self.names = set(self.device)

    def add(self, name: str, op: str, inputs: list[str], device: str):
        node = self.graph_def.node.add()
        node.name, node.op, node.device = name, op, device
        node.input.extend(inputs)
        self.made.add(name)
        self.names.add(name)
        return node

    def _fresh(self, base: str, kind: str) -> str:
        k = 0
        while f"{base}/moplace_{kind}{k}" in self.names:
            k += 1
        return f"{base}/moplace_{kind}{k}"

    def _shape(self, t: str) -> tuple:
        if t in self.shape:
            return self.shape[t]
        name, slot = t.split(":")
        return tuple(self.info[name].outputs[int(slot)].shape.as_list())

    def _dtype(self, t: str):
        if t in self.dtype:
            return self.dtype[t]
        name, slot = t.split(":")
        return self.info[name].outputs[int(slot)].dtype

    def const(self, value: np.ndarray, device: str) -> str:
        key = ("const", value.dtype.str, value.shape, value.tobytes(), device)
        if key not in self.cache:
            node = self.add(self._fresh("moplace", "const"), "Const", [], device)
            node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
            self.cache[key] = f"{node.name}:0"
        return self.cache[key]

    def slice(self, t: str, region: Region, device: str) -> str:
        shape = self._shape(t)
        if region.lo == 0 and region.hi == shape[region.axis]:
            return t
        key = ("slice", t, region)
        if key not in self.cache:
            begin = np.zeros(len(shape), np.int32)
            size = np.array(shape, np.int32)
            begin[region.axis], size[region.axis] = region.lo, region.hi - region.lo
            node = self.add(self._fresh(t.split(":")[0], "slice"), "Slice",
                            [t, self.const(begin, device), self.const(size, device)], device)
            node.attr["T"].type = self._dtype(t).as_datatype_enum
            node.attr["Index"].type = tf.int32.as_datatype_enum
            out = f"{node.name}:0"
            self.shape[out], self.dtype[out] = tuple(size.tolist()), self._dtype(t)
            self.cache[key] = out
        return self.cache[key]

    def _join(self, kind: str, tensors: list[str], axis: int | None, device: str, like: str) -> str:
        if len(tensors) == 1:
            return tensors[0]
        key = (kind, tuple(tensors), axis, device)
        if key not in self.cache:
            dtype = self._dtype(like)
            base = like.split(":")[0].split("/moplace_")[0]
            if kind == "concat":
                node = self.add(self._fresh(base, "concat"), "ConcatV2",
                                [*tensors, self.const(np.array(axis, np.int32), device)], device)
                node.attr["Tidx"].type = tf.int32.as_datatype_enum
                shape = list(self._shape(tensors[0]))
                shape[axis] = sum(self._shape(t)[axis] for t in tensors)
            else:
                node = self.add(self._fresh(base, "sum"), "AddN", tensors, device)
                shape = list(self._shape(tensors[0]))
            node.attr["N"].i = len(tensors)
            node.attr["T"].type = dtype.as_datatype_enum
            out = f"{node.name}:0"
            self.shape[out], self.dtype[out] = tuple(shape), dtype
            self.cache[key] = out
        return self.cache[key]

    def resolve(self, t: str, want: Region | None, device: str) -> str:
        """A tensor holding ``want`` of ``t`` (None: all of it), to be read on ``device``."""
        pieces = self.layout.get(t)
        if pieces is None:  # an unsplit producer: slice it where it is
            src = t.split(":")[0]
            return t if want is None else self.slice(t, want, self.device.get(src) or device)
        if pieces[0].region is None:  # partial sums: slice each where it is, add here
            parts = [p.tensor if want is None else self.slice(p.tensor, want, p.device)
                     for p in pieces]
            return self._join("sum", parts, None, device, pieces[0].tensor)
        axis = pieces[0].region.axis
        if want is None:
            return self._join("concat", [p.tensor for p in pieces], axis, device, pieces[0].tensor)
        if want.axis != axis:  # cut across the parts: slice each, join along the parts' axis
            parts = [self.slice(p.tensor, want, p.device) for p in pieces]
            return self._join("concat", parts, axis, device, pieces[0].tensor)
        parts = []
        for p in pieces:
            lo, hi = max(want.lo, p.region.lo), min(want.hi, p.region.hi)
            if lo < hi:
                local = Region(axis, lo - p.region.lo, hi - p.region.lo)
                parts.append(self.slice(p.tensor, local, p.device))
        return self._join("concat", parts, axis, device, pieces[0].tensor)
