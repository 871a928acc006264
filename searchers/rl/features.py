"""What the RL policies see of a problem: per-op and per-group features, computed once per problem.

Per op (the Hierarchical planner's and Trinity's op features, ``../shared/PAPERS.md`` 2 and 4):

- **type**: an index into `VOCABULARY`, a fixed list of common op types shared by every graph
  (so a policy trained on some graphs reads another's types the same way). Names from
  TensorFlow, PyTorch (PipeDream) and ONNX (NeurIPS'20) are folded to one token by `type_token`:
  ``Conv2d``, ``Conv2D`` and ``Conv`` are all ``conv``; the gradient of an op has the op's token
  (its role says it is a gradient). A type outside the vocabulary shares slot 0, ``UNKNOWN``.
- **numbers** (`NUMERIC`): role one-hot (forward, backward, update, other), splittable on batch
  and on channel, log2 of output and parameter bytes over 32 (about 0-1 for 1 B - 4 GiB), and
  compute time z-scored over the graph (Trinity) from the mean over the cluster's devices, and
  the op's place in the topological order (0 first, 1 last) with sines and cosines of it at
  six frequencies: without a position, ops of repeated blocks (ResNet's) look alike and no
  grouper can keep a stretch of the graph together.
- **neighbours**: up to `NEIGHBOURS` predecessors and as many successors, nearest first by BFS
  (the Hierarchical planner's adjacency), as op indices padded with -1.

Per group (`group_features`, for any assignment of ops to groups, as the grouper samples it):
the share of each vocabulary type among the group's ops (times the type embedding matrix this is
the group's mean type embedding), the mean of its ops' numbers, its summed output bytes (log2 /
32) and 0/1 adjacency to the other groups.

Everything is numpy; `problem_features` caches its result per problem.
"""

from __future__ import annotations

import re
import weakref
from collections import deque
from dataclasses import dataclass

import numpy as np

from moplace.core.graph import ROLES, SPLIT_DIMS

UNKNOWN = "<unknown>"
#: Op-type tokens, slot 0 for any other type. Common layers of the bundled graphs and the
#: TensorFlow front end's traces; appending keeps a trained policy's slots valid.
VOCABULARY = (
    UNKNOWN, "conv", "matmul", "relu", "batchnorm", "layernorm", "add", "sub", "mul", "div",
    "dropout", "transpose", "reshape", "identity", "pool", "avgpool", "maxpool", "reducesum",
    "reducemean", "concat", "split", "slice", "gather", "softmax", "crossentropy", "gelu", "tanh",
    "sigmoid", "lstm", "embedding", "cast", "shape", "size", "input", "expand", "squeeze", "mask",
    "min", "max", "sgdupdate", "adamupdate", "accumulate", "bias", "sqrt", "exp", "log", "pad",
    "tile", "fill", "const", "variable", "noop", "send", "recv",
)
_INDEX = {token: k for k, token in enumerate(VOCABULARY)}
#: Spellings of one token (after lower-casing and dropping gradient suffixes and digits).
_SYNONYMS = {
    "convd": "conv", "convolution": "conv", "depthwiseconvdnative": "conv", "convdbackpropinput":
    "conv", "convdbackpropfilter": "conv", "gemm": "matmul", "linear": "matmul", "batchmatmul":
    "matmul", "batchmatmulv": "matmul", "dense": "matmul", "batchnormd": "batchnorm",
    "batchnormalization": "batchnorm", "fusedbatchnorm": "batchnorm", "fusedbatchnormv":
    "batchnorm", "layernormalization": "layernorm", "addv": "add", "addn": "add", "biasadd": "bias",
    "trainabledropout": "dropout", "view": "reshape", "flatten": "reshape", "unsqueeze": "expand",
    "expanddims": "expand", "avgpoold": "avgpool", "averagepool": "avgpool", "maxpoold": "maxpool",
    "sum": "reducesum", "mean": "reducemean", "concatv": "concat", "getitem": "slice",
    "stridedslice": "slice", "gathernd": "gather", "gatherv": "gather", "resourcegather": "gather",
    "sparsesoftmaxcrossentropy": "crossentropy", "softmaxcrossentropy": "crossentropy",
    "sparsesoftmaxcrossentropywithlogits": "crossentropy", "emubidirlstm": "lstm",
    "sgd": "sgdupdate", "resourceapplygradientdescent": "sgdupdate", "adamoptimizer": "adamupdate",
    "resourceapplyadam": "adamupdate", "accumulategrad": "accumulate", "realdiv": "div",
    "masked": "mask", "placeholder": "input", "readvariableop": "variable", "varhandleop": "variable",
    "assignvariableop": "variable", "rsqrt": "sqrt", "maximum": "max", "minimum": "min",
}
_GRADIENT = re.compile(r"(grad|gradient|backward)$")
#: Columns of `OpFeatures.numbers`.
NUMERIC = (*(f"role_{r}" for r in ROLES), *(f"splits_{d}" for d in SPLIT_DIMS),
           "log_output_bytes", "log_param_bytes", "compute_z", "position",
           *(f"position_{f}{k}" for k in (1, 2, 4, 8, 16, 32) for f in ("sin", "cos")))
_FIRST_POSITION = NUMERIC.index("position")
#: Most predecessors (and most successors) listed per op.
NEIGHBOURS = 6
_LOG_SCALE = 32.0  # log2(bytes + 1) / 32: about 0-1 from 1 B to 4 GiB


def type_token(op_type: str) -> str:
    """The vocabulary token of an op type name (`UNKNOWN` when it has none)."""
    name = re.sub(r"[^a-z]", "", str(op_type).lower())
    while True:  # "ReshapeGradient", "__getitem__Grad", "ReluGradGrad"
        stripped = _GRADIENT.sub("", name)
        if stripped == name or not stripped:
            break
        name = stripped
    name = _SYNONYMS.get(name, name)
    return name if name in _INDEX else UNKNOWN


def type_index(op_type: str) -> int:
    """`type_token`'s slot in `VOCABULARY`."""
    return _INDEX[type_token(op_type)]


@dataclass(frozen=True, eq=False)
class OpFeatures:
    """The features of every op of one problem (see the module docstring)."""

    types: np.ndarray       # [n] int64, index into VOCABULARY
    numbers: np.ndarray     # [n, len(NUMERIC)] float32
    neighbours: np.ndarray  # [n, 2 * NEIGHBOURS] int64: predecessors then successors, -1 pads
    output_bytes: np.ndarray  # [n] float64, raw (groups sum them)
    src: np.ndarray         # [e] int64, the graph's edges
    dst: np.ndarray

    @property
    def n_ops(self) -> int:
        return int(self.types.size)


@dataclass(frozen=True, eq=False)
class GroupFeatures:
    """The features of the groups of one assignment of ops to ``n`` groups."""

    type_share: np.ndarray   # [n, len(VOCABULARY)] float32: share of each type among its ops
    numbers: np.ndarray      # [n, len(NUMERIC)] float32: mean of its ops' numbers
    log_output: np.ndarray   # [n] float32: log2(summed output bytes + 1) / 32
    adjacency: np.ndarray    # [n, n] float32: 1 where an edge joins two different groups
    sizes: np.ndarray        # [n] int64: ops per group (0: empty)


def _log_bytes(values) -> np.ndarray:
    return np.log2(np.asarray(values, np.float64) + 1.0) / _LOG_SCALE


def op_features(graph, compute: np.ndarray) -> OpFeatures:
    """The features of ``graph``'s ops; ``compute`` [n, devices] is seconds per op and device
    (a problem's ``costs.compute``)."""
    a = graph.arrays
    n = len(graph.ops)
    mean_time = np.asarray(compute, np.float64).reshape(n, -1).mean(axis=1) if n else np.zeros(0)
    spread = mean_time.std() if n else 0.0
    z = (mean_time - mean_time.mean()) / spread if spread > 0 else np.zeros(n)
    numbers = np.zeros((n, len(NUMERIC)), np.float32)
    numbers[np.arange(n), a.role] = 1.0
    for k in range(len(SPLIT_DIMS)):
        numbers[:, len(ROLES) + k] = (a.split_mask >> k) & 1
    col = _FIRST_POSITION
    numbers[:, col - 3] = _log_bytes(a.output_bytes)
    numbers[:, col - 2] = _log_bytes(a.param_bytes)
    numbers[:, col - 1] = z
    position = np.empty(n)
    position[a.topo] = np.arange(n) / max(n - 1, 1)
    numbers[:, col] = position
    for k, f in enumerate((1, 2, 4, 8, 16, 32)):
        numbers[:, col + 1 + 2 * k] = np.sin(np.pi * f * position)
        numbers[:, col + 2 + 2 * k] = np.cos(np.pi * f * position)
    types = np.fromiter((type_index(op.type) for op in graph.ops), np.int64, n)
    neighbours = np.full((n, 2 * NEIGHBOURS), -1, np.int64)
    preds = [a.src[a.in_edge[a.in_ptr[i]:a.in_ptr[i + 1]]] for i in range(n)]
    succs = [a.dst[a.out_edge[a.out_ptr[i]:a.out_ptr[i + 1]]] for i in range(n)]
    for i in range(n):
        neighbours[i, :NEIGHBOURS] = _bfs(i, preds, NEIGHBOURS)
        neighbours[i, NEIGHBOURS:] = _bfs(i, succs, NEIGHBOURS)
    for arr in (types, numbers, neighbours):
        arr.flags.writeable = False
    return OpFeatures(types=types, numbers=numbers, neighbours=neighbours,
                      output_bytes=np.asarray(a.output_bytes, np.float64), src=a.src, dst=a.dst)


def _bfs(start: int, adjacent, limit: int) -> np.ndarray:
    """Up to ``limit`` ops reachable from ``start`` along ``adjacent``, nearest first (ties in
    index order), padded with -1."""
    out = np.full(limit, -1, np.int64)
    seen, queue, k = {start}, deque([start]), 0
    while queue and k < limit:
        for nxt in sorted(adjacent[queue.popleft()]):
            if nxt not in seen:
                seen.add(int(nxt))
                queue.append(int(nxt))
                out[k] = nxt
                k += 1
                if k == limit:
                    break
    return out


def group_features(ops: OpFeatures, assignment: np.ndarray, n_groups: int) -> GroupFeatures:
    """The features of the groups that ``assignment`` [n_ops] (values in 0..n_groups-1) makes;
    an empty group has zeros."""
    g = np.asarray(assignment, np.int64)
    if g.shape != (ops.n_ops,):
        raise ValueError(f"assignment has shape {g.shape}, the graph has {ops.n_ops} ops")
    if ops.n_ops and (g.min() < 0 or g.max() >= n_groups):
        raise ValueError(f"assignment values must be in 0..{n_groups - 1}")
    sizes = np.bincount(g, minlength=n_groups)
    per = np.maximum(sizes, 1)[:, None]
    share = np.zeros((n_groups, len(VOCABULARY)), np.float64)
    np.add.at(share, (g, ops.types), 1.0)
    numbers = np.zeros((n_groups, ops.numbers.shape[1]), np.float64)
    np.add.at(numbers, g, ops.numbers)
    output = np.bincount(g, weights=ops.output_bytes, minlength=n_groups)
    adjacency = np.zeros((n_groups, n_groups), np.float32)
    gs, gd = g[ops.src], g[ops.dst]
    cut = gs != gd
    adjacency[gs[cut], gd[cut]] = 1.0
    adjacency[gd[cut], gs[cut]] = 1.0
    return GroupFeatures(type_share=(share / per).astype(np.float32),
                         numbers=(numbers / per).astype(np.float32),
                         log_output=_log_bytes(output).astype(np.float32),
                         adjacency=adjacency, sizes=sizes)


_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def problem_features(problem) -> OpFeatures:
    """`op_features` of ``problem``'s graph on its cluster, computed once per problem."""
    found = _CACHE.get(problem)
    if found is None:
        found = _CACHE[problem] = op_features(problem.graph, problem.costs.compute)
    return found
