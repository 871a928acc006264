"""The op graph: what one training step computes, with measured costs.

An `OpGraph` is immutable. It is built from `Op` and `Edge` records, checked once (unique names,
finite non-negative costs, valid edges, no cycle), and compiled on demand into flat numpy arrays
(`OpGraph.arrays`) that the simulator reads. networkx is used for building and analysis
(`OpGraph.to_networkx`, cycle reports), never in the simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Iterable, Mapping

import networkx as nx
import numpy as np

from ..arrays import EdgeArrays, csr_ptr
from ..errors import GraphError, shown
from ._inplace import inplace_sources_kernel
# csr_index is here for the simulator's edge build (`_topo` is private to this package)
from ._topo import csr_index, depths, lexicographic_topo_order  # noqa: F401

ROLES = ("forward", "backward", "update", "other")
#: appended to, never reordered: stored arrays hold a dimension's index (``split_mask`` bits, a
#: genome's split options). ``expert``: a mixture-of-experts layer's experts cut by expert
#: (expert parallelism: each part holds its slice of every ``[E, ...]`` tensor of the layer
#: and reads its slice of every input, `moplace.simulator.taskgraph`)
#: ``sequence``: the tokens of each sequence cut into contiguous slices (context parallelism:
#: a token-wise op's part computes its slice, a fused attention's reads the keys and values of
#: every slice, `moplace.torch.context`); held as a third axis beside batch and channel
SPLIT_DIMS = ("batch", "channel", "tensor", "expert", "sequence")

#: Limits no real training step comes near; a value beyond them is a damaged file, and keeping
#: them makes every sum the simulator forms fit an int64 of bytes and a finite float of seconds.
MAX_OPS = 2_000_000
MAX_EDGES = 20_000_000
MAX_TENSOR_BYTES = 2**40  # 1 TiB: one output, parameter or gradient tensor, or one edge
MAX_OP_SECONDS = 1e5  # about 28 hours for one op
MAX_NAME_CHARS = 4096


def _frozen_mapping(value) -> Mapping:
    return MappingProxyType(dict(value or {}))


@dataclass(frozen=True)
class Op:
    """One operation of the training step.

    compute: seconds per device kind, e.g. ``{"V100": 1.2e-3}`` (profiled or estimated).
    output_bytes: bytes of the op's output (activation or gradient), allocated while it runs.
    param_bytes: bytes resident for the whole step on the op's device (weights, optimizer state).
    grad_bytes: bytes of weight gradient the op produces; when the op is split on ``batch`` the
        parts' gradients are summed by an all-reduce among their devices (see the simulator).
    colocation: ops with the same group name must share a device and a split.
    splittable: dimensions the op may be cut along, a subset of ``SPLIT_DIMS``.
    role: ``forward``, ``backward``, ``update`` or ``other``.
    part_compute: measured seconds of one part when split n ways on batch,
        ``{n: {kind: seconds}}``; without it a part costs compute / n plus a fixed overhead.
    partial_sums: split on ``tensor``, each part yields a partial sum of the whole output (cut on
        its reduction dimension, as a row-parallel linear), which an all-reduce completes.
    scratch_bytes: bytes the op holds only while it runs, beside its output (the inner outputs
        of ops merged into one: `moplace.core.coarsen`).
    """

    name: str
    type: str = "op"
    compute: Mapping[str, float] = field(default_factory=dict)
    output_bytes: int = 0
    param_bytes: int = 0
    grad_bytes: int = 0
    colocation: str | None = None
    splittable: tuple[str, ...] = ()
    role: str = "other"
    part_compute: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    partial_sums: bool = False
    scratch_bytes: int = 0

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "compute", _frozen_mapping(self.compute))
        if isinstance(self.splittable, str):  # tuple("batch") would be its letters
            raise GraphError(f"op {self.name!r}: splittable must be a list of dimension names "
                             f"such as ('batch',), got the string {self.splittable!r}")
        set_(self, "splittable", tuple(self.splittable))
        try:
            set_(self, "part_compute", MappingProxyType(
                {_part_count(n): _frozen_mapping(t) for n, t in (self.part_compute or {}).items()}))
        except (TypeError, ValueError, AttributeError):
            raise GraphError(f"op {shown(self.name)}: part_compute must map part counts to "
                             f"{{device kind: seconds}}, got {shown(self.part_compute)}") from None
        self._check()

    def _check(self):
        where = f"op {self.name!r}"
        if not isinstance(self.name, str) or not self.name or len(self.name) > MAX_NAME_CHARS:
            raise GraphError(f"an op has an empty, non-string or too long name: "
                             f"{shown(self.name)}")
        if not isinstance(self.type, str):
            raise GraphError(f"{where}: type must be a string, got {shown(self.type)}")
        if self.colocation is not None and not isinstance(self.colocation, str):
            raise GraphError(f"{where}: colocation must be a group name, got "
                             f"{shown(self.colocation)}")
        for key in ("output_bytes", "param_bytes", "grad_bytes", "scratch_bytes"):
            _check_bytes(f"{where}: {key}", getattr(self, key))
        for kind, seconds in self.compute.items():
            if not isinstance(kind, str):
                raise GraphError(f"{where}: compute keys are device kinds, got {shown(kind)}")
            _check_seconds(f"{where}: compute[{kind!r}]", seconds)
        for n, times in self.part_compute.items():
            if not 2 <= n <= 1 << 20:
                raise GraphError(f"{where}: part_compute keys are part counts >= 2 (and at most "
                                 f"{1 << 20}), got {shown(n)}")
            for kind, seconds in times.items():
                _check_seconds(f"{where}: part_compute[{n}][{kind!r}]", seconds)
        bad = [d for d in self.splittable if not isinstance(d, str) or d not in SPLIT_DIMS]
        if bad:
            raise GraphError(f"{where}: unknown split dimension {bad[0]!r} (known: {SPLIT_DIMS})")
        if self.role not in ROLES or not isinstance(self.partial_sums, (bool, np.bool_)):
            raise GraphError(f"{where}: unknown role {self.role!r} (known: {ROLES})"
                             if self.role not in ROLES else f"{where}: partial_sums must be "
                             f"true or false, got {shown(self.partial_sums)}")


def _check_seconds(where: str, seconds) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float, np.floating, np.integer)):
        raise GraphError(f"{where} must be a number of seconds, got {shown(seconds)}")
    try:
        ok = math.isfinite(seconds) and 0 <= seconds <= MAX_OP_SECONDS
    except OverflowError:  # an int too large for a float
        ok = False
    if not ok:
        raise GraphError(f"{where} must be between 0 and {MAX_OP_SECONDS:g} seconds, got "
                         f"{shown(seconds)}")


def _part_count(n) -> int:
    if isinstance(n, bool) or (isinstance(n, float) and not n.is_integer()):
        raise ValueError(n)
    return int(n)  # "4" from a JSON key is 4


def _check_bytes(where: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not 0 <= value <= MAX_TENSOR_BYTES:
        raise GraphError(f"{where} must be a non-negative integer number of bytes, at most "
                         f"{MAX_TENSOR_BYTES} (1 TiB), got {shown(value)}")


@dataclass(frozen=True)
class Edge:
    """Data flowing from op ``src`` to op ``dst`` (indices into `OpGraph.ops`)."""

    src: int
    dst: int
    bytes: int = 0


#: Op types (case-insensitive) that may write their output into an input no other op reads, as
#: frameworks run them: element-wise activations and arithmetic (PyTorch's ReLU(inplace=True)
#: and ``out += identity`` in torchvision's ResNets; TensorFlow forwards the input buffer of
#: such kernels when its reference count is one; ONNX runtimes reuse it likewise)
INPLACE_TYPES = frozenset({
    "relu", "relu6", "elu", "selu", "leakyrelu", "sigmoid", "tanh", "gelu", "softplus",
    "add", "addv2", "biasadd", "sub", "mul", "div", "realdiv", "neg", "square", "sqrt",
    "rsqrt", "exp", "log"})


@dataclass(frozen=True, eq=False)
class CompiledGraph(EdgeArrays):
    """Flat arrays of an `OpGraph` for numeric code: its edges (`EdgeArrays`) and its ops'.

    ``group`` numbers co-location groups 0..n_groups-1 (an op without one is its own group).
    ``split_mask`` bit k: dimension `SPLIT_DIMS`[k]. ``role`` indexes `ROLES`. ``inplace``: the op's
    type is one of `INPLACE_TYPES`. ``partial_sums``, ``scratch_bytes``: the ops' fields (the
    latter None when no op has scratch; the simulator's plan graphs read the graph's).
    """

    output_bytes: np.ndarray
    param_bytes: np.ndarray
    grad_bytes: np.ndarray
    role: np.ndarray
    split_mask: np.ndarray
    group: np.ndarray
    n_groups: int
    topo: np.ndarray
    inplace: np.ndarray
    partial_sums: np.ndarray
    scratch_bytes: np.ndarray | None = None


class OpGraph:
    """An immutable, acyclic graph of ops; see the module docstring."""

    def __init__(self, ops: Iterable[Op], edges: Iterable[Edge | tuple] = (), *,
                 name: str = "graph", metadata: Mapping | None = None):
        self.ops: tuple[Op, ...] = tuple(ops)
        if len(self.ops) > MAX_OPS:
            raise GraphError(f"{len(self.ops)} ops: more than the {MAX_OPS} a graph may have")
        self.name = name
        self.metadata = MappingProxyType(dict(metadata or {}))
        self.index: Mapping[str, int] = MappingProxyType(self._index_ops())
        self.edges: tuple[Edge, ...] = self._normalise_edges(edges)
        self._check_acyclic()

    # -- construction ----------------------------------------------------------------------
    def _index_ops(self) -> dict[str, int]:
        index: dict[str, int] = {}
        for i, op in enumerate(self.ops):
            if not isinstance(op, Op):
                raise GraphError(f"ops must be Op records, got {type(op).__name__} at {i}")
            if op.name in index:
                raise GraphError(f"duplicate op name {op.name!r}")
            index[op.name] = i
        return index

    def _normalise_edges(self, edges) -> tuple[Edge, ...]:
        out: dict[tuple[int, int], Edge] = {}
        for edge in edges:
            edge = edge if isinstance(edge, Edge) else _edge_from_tuple(edge)
            src, dst = (self._resolve(edge.src), self._resolve(edge.dst))
            _check_bytes(f"edge {self.ops[src].name!r} -> {self.ops[dst].name!r}: bytes", edge.bytes)
            nbytes = edge.bytes
            if src == dst:
                raise GraphError(f"op {self.ops[src].name!r} has an edge to itself (a cycle)")
            if (src, dst) in out:
                raise GraphError(f"duplicate edge {self.ops[src].name!r} -> {self.ops[dst].name!r}")
            out[(src, dst)] = Edge(src, dst, int(nbytes))
            if len(out) > MAX_EDGES:
                raise GraphError(f"more than the {MAX_EDGES} edges a graph may have")
        return tuple(out[k] for k in sorted(out))

    def _resolve(self, ref) -> int:
        if isinstance(ref, str):
            if ref not in self.index:
                raise GraphError(f"edge names unknown op {ref!r}")
            return self.index[ref]
        if isinstance(ref, (int, np.integer)) and not isinstance(ref, bool) and 0 <= ref < len(self.ops):
            return int(ref)
        raise GraphError(f"edge endpoint {ref!r} is not an op name or index in 0..{len(self.ops) - 1}")

    def _check_acyclic(self) -> None:
        if self._topo_order.size == len(self.ops):
            return
        cycle = nx.find_cycle(self.to_networkx())  # only to name the cycle
        names = [u for u, _ in cycle] + [cycle[0][0]]
        shown = names if len(names) <= 12 else names[:6] + ["..."] + names[-5:]
        raise GraphError(f"graph {self.name!r} has a cycle: " + " -> ".join(shown))

    def __setattr__(self, key, value):
        if key in self.__dict__:
            raise AttributeError(f"OpGraph is immutable (tried to set {key!r})")
        object.__setattr__(self, key, value)

    # -- views -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ops)

    def __repr__(self) -> str:
        return f"OpGraph({self.name!r}, {len(self.ops)} ops, {len(self.edges)} edges)"

    def op(self, name: str) -> Op:
        """The op called ``name``; `GraphError` if there is none."""
        try:
            return self.ops[self.index[name]]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no op {name!r}") from None

    def to_networkx(self) -> nx.DiGraph:
        """A fresh networkx DiGraph: nodes are op names with the `Op` as ``op``, edges carry ``bytes``."""
        g = nx.DiGraph(name=self.name)
        for op in self.ops:
            g.add_node(op.name, op=op)
        for e in self.edges:
            g.add_edge(self.ops[e.src].name, self.ops[e.dst].name, bytes=e.bytes)
        return g

    @classmethod
    def from_networkx(cls, g: nx.DiGraph, *, name: str | None = None, metadata=None) -> "OpGraph":
        """Build from a DiGraph whose nodes carry an ``op`` attribute (an `Op`) and edges ``bytes``."""
        ops = []
        for node, data in g.nodes(data=True):
            op = data.get("op")
            if not isinstance(op, Op) or op.name != node:
                raise GraphError(f"node {node!r} needs an 'op' attribute holding Op(name={node!r})")
            ops.append(op)
        # bytes are validated by the constructor (int() would truncate 2.7 and pass -0.5 as 0)
        edges = [Edge(u, v, d.get("bytes", 0)) for u, v, d in g.edges(data=True)]
        return cls(ops, edges, name=name or g.graph.get("name", "graph"), metadata=metadata)

    def device_kinds(self) -> set[str]:
        """Device kinds that have a compute time for at least one op."""
        return {kind for op in self.ops for kind in op.compute}

    def total_compute(self, kind: str) -> float:
        """Sum of compute seconds on ``kind`` (ops without a time for it count 0)."""
        return float(sum(op.compute.get(kind, 0.0) for op in self.ops))

    @cached_property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """Co-location groups as tuples of op indices, numbered as in ``arrays.group``."""
        group = self.arrays.group
        order = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(self.arrays.n_groups + 1))
        members = order.tolist()
        return tuple(tuple(members[a:b]) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()))

    @cached_property
    def group_head(self) -> np.ndarray:
        """Per op, the first op of its co-location group (itself when alone)."""
        group = self.arrays.group
        _, first = np.unique(group, return_index=True)  # ids are 0..n_groups-1, all used
        return first.astype(np.int64)[group]

    @cached_property
    def depth(self) -> np.ndarray:
        """Per op, the most edges on a path to it from an op without inputs: where it sits in
        the data flow (weights and inputs at 0), unlike its place in ``arrays.topo``."""
        a = self.arrays
        out = depths(a.topo, a.out_ptr, a.out_edge, a.dst)
        out.flags.writeable = False
        return out

    @cached_property
    def _topo_order(self) -> np.ndarray:
        """Ops in lexicographic topological order (fewer than all of them on a cycle): found
        once, by the cycle check, and kept for ``arrays.topo``."""
        return lexicographic_topo_order(len(self.ops), *self._endpoints())

    def _endpoints(self) -> tuple[np.ndarray, np.ndarray]:
        """Source and destination op of every edge, as int64 arrays."""
        m = len(self.edges)
        return (np.fromiter((e.src for e in self.edges), np.int64, m),
                np.fromiter((e.dst for e in self.edges), np.int64, m))

    @cached_property
    def arrays(self) -> CompiledGraph:
        """The graph compiled to flat numpy arrays (computed once)."""
        n = len(self.ops)
        src, dst = self._endpoints()
        nbytes = np.fromiter((e.bytes for e in self.edges), np.float64, len(self.edges))
        out_ptr, out_edge = _csr(src, n)
        in_ptr, in_edge = _csr(dst, n)
        group, n_groups = _group_ids(self.ops)
        topo = self._topo_order
        compiled = CompiledGraph(
            src=src, dst=dst, edge_bytes=nbytes, out_ptr=out_ptr, out_edge=out_edge,
            in_ptr=in_ptr, in_edge=in_edge,
            output_bytes=np.array([op.output_bytes for op in self.ops], np.float64),
            param_bytes=np.array([op.param_bytes for op in self.ops], np.float64),
            grad_bytes=np.array([op.grad_bytes for op in self.ops], np.float64),
            role=np.array([ROLES.index(op.role) for op in self.ops], np.int64),
            split_mask=np.array([sum(1 << SPLIT_DIMS.index(d) for d in set(op.splittable))
                                 for op in self.ops], np.int64),
            group=group, n_groups=n_groups, topo=topo,
            inplace=np.array([op.type.lower() in INPLACE_TYPES for op in self.ops], bool),
            partial_sums=np.array([bool(op.partial_sums) for op in self.ops], bool),
            scratch_bytes=np.array([op.scratch_bytes for op in self.ops], np.float64)
            if any(op.scratch_bytes for op in self.ops) else None)
        for value in vars(compiled).values():  # the graph is immutable: so are its arrays
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        return compiled


def inplace_sources(src, dst, nbytes, out_ptr, in_edge, capable, n_compute) -> np.ndarray:
    """Per node of a graph (ops, or a task graph's tasks) whose first ``n_compute`` nodes may
    run in place: the node whose output buffer it may write into, -1 for none. That is the
    source of its largest in-edge (the first in ``in_edge`` order of equals) that carries
    bytes from a node with no other out-edge, for nodes where ``capable``; the edges are ``src``/``dst``/``nbytes``,
    ``out_ptr`` their CSR by source and ``in_edge`` the edges grouped by destination."""
    out = np.full(out_ptr.shape[0] - 1, -1, np.int64)
    return inplace_sources_kernel(np.asarray(src, np.int64), np.asarray(dst, np.int64),
                                  np.asarray(nbytes, np.float64), np.asarray(out_ptr, np.int64),
                                  np.asarray(in_edge, np.int64), np.asarray(capable, np.bool_),
                                  int(n_compute), out)


def _edge_from_tuple(edge) -> Edge:
    try:
        return Edge(*edge)
    except TypeError:
        raise GraphError(f"an edge must be (src, dst) or (src, dst, bytes), got {edge!r}") from None


def _csr(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    return csr_ptr(keys, n), np.argsort(keys, kind="stable").astype(np.int64)


def _group_ids(ops) -> tuple[np.ndarray, int]:
    ids: dict[str, int] = {}
    group = np.empty(len(ops), np.int64)
    for i, op in enumerate(ops):
        key = op.colocation if op.colocation is not None else "\0" + op.name
        group[i] = ids.setdefault(key, len(ids))
    return group, len(ids)

