"""Which co-location groups a strategy may recompute (see `Strategy.recompute`, and
`moplace.simulator.recompute` for how a recomputed group runs).

A group can be recomputed when one of its ops is a forward op that has inputs and whose output
a backward (non-forward) op reads: that output can be freed after its forward readers and made
again before the backward needs it. Forward ops without inputs (data loading, constants) are
never recomputed: their outputs stay, as a segment's first input does under
``torch.utils.checkpoint``.
"""

from __future__ import annotations

import weakref

import numpy as np

from .graph import ROLES, OpGraph

_FORWARD = ROLES.index("forward")
_HEADS: "weakref.WeakKeyDictionary[OpGraph, np.ndarray]" = weakref.WeakKeyDictionary()


def recomputable_ops(graph: OpGraph) -> np.ndarray:
    """Per op: a forward op with inputs whose output a non-forward op reads."""
    a = graph.arrays
    forward = a.role == _FORWARD
    read_back = np.zeros(forward.size, bool)
    read_back[a.src[~forward[a.dst]]] = True
    return forward & (np.diff(a.in_ptr) > 0) & read_back


def recomputable_heads(graph: OpGraph) -> np.ndarray:
    """The first op of every co-location group that can be recomputed, ascending (read-only;
    computed once per graph)."""
    heads = _HEADS.get(graph)
    if heads is None:
        heads = np.unique(graph.group_head[recomputable_ops(graph)]).astype(np.int64)
        heads.flags.writeable = False
        _HEADS[graph] = heads
    return heads
