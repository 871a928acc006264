"""A traced model's layers, from the graph's repeated structure (`find_layers`), not from
module names.

Every path from the batch's inputs to the loss passes through the residual stream between a
transformer's sublayers (the embedding's output, the sum after each attention, the sum after
each MLP) and through a CNN's stage outputs: these ops *dominate* the loss in the forward
graph of the ops that depend on the batch (constants such as a causal mask or rotary angles,
read by every layer, do not count). Cut there, the forward ops fall into segments; each
segment gets a signature (its ops' types in order), and the shortest run of signatures that
repeats most often is a layer: ``[attention, MLP]`` for a transformer, found however its
modules are named.

The boundaries serve recomputation as Megatron-LM's and PyTorch's activation checkpointing
run it: recompute every group but the boundaries' own, so that each run of recomputed ops
between two boundaries keeps only the boundary before it (``torch.utils.checkpoint`` per
layer, `moplace.core.recompute.layer_checkpoints`).
"""

from __future__ import annotations

import bisect

import networkx as nx

from ..core.graph import ROLES


def find_layers(graph, inputs, loss) -> dict | None:
    """``{"boundaries": [op names], "period": k, "count": n, "segments": s}`` for the op
    graph ``graph`` whose batch enters at the ops named ``inputs`` and whose loss is the op
    named ``loss``: the dominators of the loss (module docstring), in order; the s segments
    between the first and the last repeat every ``period`` segments ``count`` times. None
    when the forward graph has no boundary (nothing dominates the loss but itself)."""
    a = graph.arrays
    forward = a.role == ROLES.index("forward")
    roots = [graph.index[n] for n in inputs if n in graph.index]
    sink = graph.index.get(loss)
    if sink is None or not roots:
        return None
    g = nx.DiGraph()
    keep = forward[a.src] & forward[a.dst]
    g.add_edges_from(zip(a.src[keep].tolist(), a.dst[keep].tolist()))
    chain, reach = [], set()
    for r in roots:  # the input the most ops lie on every path from (the tokens, not labels)
        if r not in g:
            continue
        mine = nx.descendants(g, r) | {r}
        if sink not in mine:
            continue
        idom = nx.immediate_dominators(g.subgraph(mine), r)
        found, v = [], idom[sink]
        while v != r:
            found.append(v)
            v = idom[v]
        if len(found) > len(chain):
            chain, reach = found[::-1], mine
    if not chain:
        return None
    position = {int(o): k for k, o in enumerate(a.topo.tolist())}
    bounds = sorted(chain, key=position.__getitem__)
    edges = [position[b] for b in bounds]
    segments: list[list[str]] = [[] for _ in range(len(bounds) + 1)]
    for o in a.topo.tolist():
        if forward[o] and o in reach and graph.ops[o].type != "Output":  # (see outputs.py)
            segments[bisect.bisect_left(edges, position[o])].append(graph.ops[o].type)
    signatures = [tuple(s) for s in segments[1:-1]]  # between the first and last boundary
    period, count = _period(signatures)
    return {"boundaries": [graph.ops[b].name for b in bounds], "period": period,
            "count": count, "segments": len(signatures)}


def _period(signatures) -> tuple[int, int]:
    """The shortest run length k whose repetition covers the most segments, and how many
    times it repeats back to back (1, 0 when nothing repeats)."""
    best = (1, 0)
    for k in range(1, len(signatures) // 2 + 1):
        for start in range(len(signatures) - 2 * k + 1):
            unit = signatures[start:start + k]
            n, i = 0, start
            while signatures[i:i + k] == unit:
                n, i = n + 1, i + k
            if n >= 2 and n * k > best[0] * best[1]:
                best = (k, n)
    return best
