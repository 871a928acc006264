"""Coarsening: a graph made smaller for search by merging the ops any sensible plan keeps
together, with the mapping back to the real ops kept in the graph.

The rule: an op whose output exactly one op reads is merged into that reader when both have
the same role and the same split dimensions, the op yields no partial sums (its reader would
take them unsummed), its co-location group is none or the reader's, and no metadata names it
(a layer boundary). Moving such an op to another device than its reader's only moves its
output there; splitting it differently only gathers it again. Applied from the sinks back,
the rule merges chains and trees (element-wise tails, a norm's statistics, a cast after a
matmul) into the op at their end, their *root*.

A merged op keeps its root's name, type, output, co-location group and partial sums; its
compute is the members' summed per device kind (the kinds every member has), as are its
weights and gradients and, where every member has the same part counts, its measured parts'
times; its inputs are the members' inputs from outside. Only the root's output leaves it, so
no plan is lost that moves data the fine graph would not move.

An inner output (read only inside the merged op) is held only while the op runs: the most
of them held at once beside the root's output, as the members run in topological order, is
its ``scratch_bytes``, which the simulator counts in the peak while the op runs (inputs from
outside are held to the merged op's end, where the last member reading them may free them
sooner: the peak errs high there). What it does not keep: the members run as
one, after all their inputs are ready.

``metadata["coarsened"]`` records ``{"ops": ops before, "members": {root: [member names in
topological order]}}`` for the merged ops of more than one member; `expand_names` maps a
merged op's name back to its members (a plan's per-op placement names every real op), and
`expand_strategy` a plan for the coarsened graph to the same plan for the real one.
"""

from __future__ import annotations

import numpy as np

from ..errors import GraphError
from .graph import Edge, Op, OpGraph
from .recompute import recomputable_heads
from .strategy import Strategy

#: graphs with more ops than this are coarsened by default (`moplace profile --coarsen auto`):
#: up to it, one op per aten op searches well
COARSEN_ABOVE = 20_000


def coarsen(graph: OpGraph) -> OpGraph:
    """``graph`` with every op merged into its only reader where the rule of the module
    docstring allows, again until nothing merges (two readers of an op merged into one make
    it an op of one reader); ``graph`` itself when nothing merges."""
    while True:
        merged = _coarsen_once(graph)
        if merged is graph:
            return graph
        graph = merged


def _coarsen_once(graph: OpGraph) -> OpGraph:
    a = graph.arrays
    n = len(graph.ops)
    protected = _named_in_metadata(graph)
    out_deg = np.diff(a.out_ptr)
    root = np.arange(n)
    for u in a.topo[::-1].tolist():  # readers first: a reader's root is final
        if out_deg[u] != 1:
            continue
        v = int(a.dst[a.out_edge[a.out_ptr[u]]])
        if _mergeable(graph.ops[u], graph.ops[v], protected):
            root[u] = root[v]
    if (root == np.arange(n)).all():
        return graph
    members: dict[int, list[int]] = {}
    for i in a.topo.tolist():
        members.setdefault(int(root[i]), []).append(i)
    kept = sorted(members)  # roots in op order
    ops = [_merged(graph, members[r], r) for r in kept]
    best: dict[tuple[int, int], int] = {}
    for e in graph.edges:
        s, d = int(root[e.src]), int(root[e.dst])
        if s != d:
            best[s, d] = max(best.get((s, d), 0), e.bytes)
    pos = {r: k for k, r in enumerate(kept)}
    edges = [Edge(pos[s], pos[d], b) for (s, d), b in sorted(best.items())]
    before = graph.metadata.get("coarsened", {})
    mapping = {k: [m for i in v for m in expand_names(graph, graph.ops[i].name)]
               for k, v in ((graph.ops[r].name, members[r]) for r in kept) if len(v) > 1}
    previous = {k: v for k, v in before.get("members", {}).items()  # still an op of its own
                if k not in mapping and root[graph.index[k]] == graph.index[k]}
    metadata = {**graph.metadata, "coarsened": {
        "ops": int(before.get("ops", n)), "members": {**previous, **mapping}}}
    return OpGraph(ops, edges, name=graph.name, metadata=metadata)


def expand_names(graph: OpGraph, name: str) -> list[str]:
    """The real ops op ``name`` of ``graph`` stands for: its members if coarsening merged
    it, else itself."""
    return list(graph.metadata.get("coarsened", {}).get("members", {}).get(name, [name]))


def expand_strategy(coarse: OpGraph, fine: OpGraph, strategy: Strategy) -> Strategy:
    """``strategy``, a plan for ``coarse``, as the same plan for ``fine``, the graph coarsened
    into it: each real op on its merged op's device, with its split and priority (members run
    in their data order), every real group of a recomputed group recomputed, and the
    strategy-wide levers as they are. To evaluate a plan searched coarsened on the real ops."""
    of = np.full(len(fine.ops), -1, np.int64)
    for i, op in enumerate(coarse.ops):
        for name in expand_names(coarse, op.name):
            if name not in fine.index:
                raise GraphError(f"op {name!r} of {coarse.name!r} is not in {fine.name!r}: "
                                 "not the graph it was coarsened from")
            of[fine.index[name]] = i
    if (of < 0).any():
        missing = fine.ops[int(np.flatnonzero(of < 0)[0])].name
        raise GraphError(f"op {missing!r} of {fine.name!r} is in no op of {coarse.name!r}: "
                         "not the graph it was coarsened from")
    chosen = np.isin(coarse.arrays.group[of], coarse.arrays.group[list(strategy.recompute)])
    heads = np.intersect1d(fine.group_head[chosen], recomputable_heads(fine))
    return Strategy(strategy.placement[of], strategy.priority[of],
                    {j: strategy.splits[k] for j, k in enumerate(of.tolist())
                     if k in strategy.splits},
                    bucket_bytes=strategy.bucket_bytes, zero_stage=strategy.zero_stage,
                    micro_batches=strategy.micro_batches, schedule=strategy.schedule,
                    recompute=tuple(heads.tolist()))


def _mergeable(u: Op, v: Op, protected: frozenset) -> bool:
    return (u.role == v.role and set(u.splittable) == set(v.splittable)
            and not u.partial_sums and u.colocation in (None, v.colocation)
            and u.name not in protected)


def _merged(graph: OpGraph, members: list[int], r: int) -> Op:
    """The op standing for ``members`` (in topological order) of ``graph``, root ``r``."""
    root = graph.ops[r]
    if len(members) == 1:
        return root
    ops = [graph.ops[i] for i in members]
    kinds = set.intersection(*(set(op.compute) for op in ops))
    counts = {frozenset(op.part_compute) for op in ops}
    part_compute = {}
    if len(counts) == 1:
        for m in next(iter(counts)):
            shared = set.intersection(*(set(op.part_compute[m]) for op in ops))
            part_compute[m] = {k: sum(op.part_compute[m][k] for op in ops) for k in shared}
    return Op(root.name, root.type, {k: sum(op.compute[k] for op in ops) for k in sorted(kinds)},
              output_bytes=root.output_bytes,
              param_bytes=sum(op.param_bytes for op in ops),
              grad_bytes=sum(op.grad_bytes for op in ops),
              colocation=root.colocation, splittable=root.splittable, role=root.role,
              part_compute=part_compute, partial_sums=root.partial_sums,
              scratch_bytes=_inner_peak(graph, members, r))


def _inner_peak(graph: OpGraph, members: list[int], r: int) -> int:
    """The scratch of the op merging ``members`` (topological order) of ``graph``, root ``r``:
    the most bytes its members hold at once beyond the root's output (which the merged op
    holds from its start), as they run in that order: each inner output (every member's but
    the root's, read by one member) from its op's start to its reader's end, and each
    member's own scratch while it runs."""
    a, inner = graph.arrays, set(members) - {r}
    live = peak = 0
    for m in members:
        op = graph.ops[m]
        if m != r:
            live += op.output_bytes
        peak = max(peak, live + op.scratch_bytes - (graph.ops[r].output_bytes if m != r else 0))
        producers = set(a.src[a.in_edge[a.in_ptr[m]:a.in_ptr[m + 1]]].tolist()) & inner
        live -= sum(graph.ops[p].output_bytes for p in producers)
    return int(peak)


def _named_in_metadata(graph: OpGraph) -> frozenset:
    """The op names the graph's metadata refers to (the layer boundaries)."""
    layers = graph.metadata.get("layers") or {}
    return frozenset(layers.get("boundaries", ()))
