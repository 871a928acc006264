"""The backward's program order (`backward_gates`): in a traced PyTorch step no backward op
runs before the backward begins.

A joint graph traced by AOTAutograd has backward ops that read forward values only: the
sigmoid a SiLU's gradient needs, a norm's powers, the buffers a backward fills, a weight's
transpose. A list scheduler runs them as soon as their inputs are in, so whenever a device
waits in the forward (for a tensor-parallel all-reduce, a context-parallel ring's keys and
values, a stage's activations) it ran them then, and held their outputs through the rest of
the forward: on Llama-3.1-8B at 131,072 tokens under context parallelism over 8 H100s, 158
such ops and 35 GiB a device more than the same split without the ring's waits. PyTorch runs
the backward graph when ``loss.backward()`` is called, after the forward.

So, in graphs traced from PyTorch (``metadata["format"] == "pytorch"``), each root of the
backward (a backward op no backward op feeds) waits, once its inputs are in, for the end of
the forward's last op of its micro-batch (the deepest forward ops: the loss, or the output it
keeps apart). It then runs as the list scheduler chooses. Other graphs keep the list
scheduler's freedom: TensorFlow's executor runs an op when its inputs are in, and the profiles
of PipeDream and of the NeurIPS'20 dataset chain each backward from the loss already.
"""

from __future__ import annotations

import numpy as np

from ..arrays import frozen
from ..core.graph import ROLES, OpGraph
from .plancache import PlanCache

_KEPT = PlanCache(limit=1)
_FORWARD, _BACKWARD = ROLES.index("forward"), ROLES.index("backward")
#: the gates of a task graph without program order
NO_GATES = (frozen(np.zeros(0, np.int64)), frozen(np.zeros(0, np.int64)))


def backward_gates(graph: OpGraph) -> tuple[np.ndarray, np.ndarray] | None:
    """Per op of ``graph``: is it a root of the backward, and does its end begin the backward
    (the deepest forward ops)? None where the backward keeps no program order (see module
    docstring) or has no root."""
    return _kept(graph)[0]


def task_gates(graph: OpGraph, task_op: np.ndarray | None = None,
               task_mb: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A task graph's ``gate`` and ``opens`` (per compute task: the micro-batch whose backward
    it waits for, or begins; -1: none; both empty where `backward_gates` is None), for its
    compute tasks' ops ``task_op`` and micro-batches ``task_mb`` (empty or None: all 0);
    without ``task_op``, a task per op (an unsplit plan's, kept per graph). Made with the task
    graph's shape (`moplace.simulator.taskgraph`), so once per split configuration."""
    gates, per_op = _kept(graph)
    if gates is None or task_op is None:
        return per_op
    root, last = gates
    mb = task_mb if task_mb is not None and task_mb.size else np.zeros(task_op.size, np.int64)
    return (frozen(np.where(root[task_op], mb, -1).astype(np.int64)),
            frozen(np.where(last[task_op], mb, -1).astype(np.int64)))


def _kept(graph: OpGraph):
    """(root, last) per op, or None; and the gates of a task per op. Kept per graph."""
    if graph.metadata.get("format") != "pytorch":
        return None, NO_GATES
    return _KEPT.get(graph, "backward", lambda: _gates(graph))


def _gates(graph: OpGraph):
    a = graph.arrays
    backward, forward = a.role == _BACKWARD, a.role == _FORWARD
    fed = np.zeros(a.role.size, bool)
    fed[a.dst[backward[a.src]]] = True
    root = backward & ~fed
    if not root.any() or not forward.any():
        return None, NO_GATES
    depth = graph.depth
    last = forward & (depth == depth[forward].max())
    return (root, last), (frozen(np.where(root, 0, -1).astype(np.int64)),
                          frozen(np.where(last, 0, -1).astype(np.int64)))
