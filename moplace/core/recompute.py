"""Which co-location groups a strategy may recompute (see `Strategy.recompute`, and
`moplace.simulator.recompute` for how a recomputed group runs).

A group can be recomputed when one of its ops is a forward op that has inputs and whose output
a backward (non-forward) op reads: that output can be freed after its forward readers and made
again before the backward needs it. Forward ops without inputs (data loading, constants) are
never recomputed: their outputs stay, as a segment's first input does under
``torch.utils.checkpoint``; nor are ops that read state, draw random numbers or run control flow TensorFlow calls stateful
(`NEVER_RECOMPUTED`: run again, they could give another value), whose outputs stay too.
"""

from __future__ import annotations

import weakref

import numpy as np

from .derived import structure_of
from .graph import ROLES, OpGraph

_FORWARD = ROLES.index("forward")
#: op types (lower case) that are never run again: variable reads, random draws, and the
#: control flow TensorFlow calls stateful (a ``While`` or ``If`` whose body it cannot vouch
#: for; the testbed refuses to run them again)
NEVER_RECOMPUTED = frozenset({
    "readvariableop", "varhandleop", "randomuniform", "randomuniformint", "randomstandardnormal",
    "truncatednormal", "randomshuffle", "multinomial", "randomgamma", "randompoisson",
    "randompoissonv2", "while", "if", "case", "statefulpartitionedcall"})
_HEADS: "weakref.WeakKeyDictionary[OpGraph, np.ndarray]" = weakref.WeakKeyDictionary()
_AGAIN: "weakref.WeakKeyDictionary[OpGraph, np.ndarray]" = weakref.WeakKeyDictionary()
_CORES: "weakref.WeakKeyDictionary[OpGraph, np.ndarray]" = weakref.WeakKeyDictionary()
_CHECKPOINTS: "weakref.WeakKeyDictionary[OpGraph, np.ndarray]" = weakref.WeakKeyDictionary()


def _once(cache, graph: OpGraph, make) -> np.ndarray:
    """``make(graph)``, computed once per graph (per graph of one structure: a derived graph
    asks the one it was derived from, `moplace.core.derived.structure_of`) and kept
    read-only in ``cache``."""
    graph = structure_of(graph)
    out = cache.get(graph)
    if out is None:
        out = make(graph)
        out.flags.writeable = False
        cache[graph] = out
    return out


def can_run_again(graph: OpGraph) -> np.ndarray:
    """Per op: a forward op with inputs whose type is not in `NEVER_RECOMPUTED` (read-only;
    computed once per graph)."""
    def make(g):
        kind = np.array([op.type.lower() not in NEVER_RECOMPUTED for op in g.ops], bool)
        return (g.arrays.role == _FORWARD) & (np.diff(g.arrays.in_ptr) > 0) & kind

    return _once(_AGAIN, graph, make)


def recomputable_ops(graph: OpGraph) -> np.ndarray:
    """Per op: one that can run again (`can_run_again`) whose output a non-forward op reads."""
    a = graph.arrays
    read_back = np.zeros(a.role.size, bool)
    read_back[a.src[a.role[a.dst] != _FORWARD]] = True
    return can_run_again(graph) & read_back


def recomputable_heads(graph: OpGraph) -> np.ndarray:
    """The first op of every co-location group that can be recomputed, ascending (read-only;
    computed once per graph)."""
    return _once(_HEADS, graph, lambda g: np.unique(
        g.group_head[recomputable_ops(g)]).astype(np.int64))


#: the suffix of the co-location group a front end gives each attention's core (scores,
#: softmax, dropout, attention over values: `moplace.torch.megatron.attention_core`)
CORE_SUFFIX = ":attention-core"


def attention_cores(graph: OpGraph) -> np.ndarray:
    """The recomputable groups (`recomputable_heads`) that are attention cores: recomputing
    just those is Megatron-LM's selective recomputation (Korthikanti et al. 2022)."""
    return _once(_CORES, graph, lambda g: recomputable_heads(g)[
        np.array([(g.ops[h].colocation or "").endswith(CORE_SUFFIX)
                  for h in recomputable_heads(g).tolist()], bool)])


def layer_checkpoints(graph: OpGraph) -> np.ndarray:
    """Activation checkpointing per layer, as Megatron-LM's full recomputation and
    ``torch.utils.checkpoint`` run it: every recomputable group but those of the layer
    boundaries a front end found (``graph.metadata["layers"]["boundaries"]``, op names:
    `moplace.torch.layers`) and those the batch does not flow into, so each run of recomputed
    ops keeps only the boundary before it. Every recomputable group when the graph names no
    boundaries."""
    return _once(_CHECKPOINTS, graph, _layer_checkpoints)


def _layer_checkpoints(graph: OpGraph) -> np.ndarray:
    heads = recomputable_heads(graph)
    layers = graph.metadata.get("layers")
    names = layers.get("boundaries") if isinstance(layers, dict) else None
    bounds = [graph.index[n] for n in names if isinstance(n, str) and n in graph.index] \
        if isinstance(names, list) else []
    if not bounds or not heads.size:
        return heads
    kept = {int(graph.group_head[b]) for b in bounds}
    # only what the batch flows into after the first boundary: a constant every layer reads
    # (rotary angles, a causal mask) recomputed would join every layer's run into one
    a = graph.arrays
    flows = np.zeros(a.role.size, bool)
    flows[bounds[0]] = True
    for v in a.topo.tolist():
        if flows[v]:
            flows[a.dst[a.out_edge[a.out_ptr[v]:a.out_ptr[v + 1]]]] = True
    group_flows = np.zeros(a.n_groups, bool)
    group_flows[a.group[flows]] = True
    return heads[[h not in kept and bool(group_flows[a.group[h]]) for h in heads.tolist()]]
