"""Recomputation run for real: the recomputed forward ops cloned in the training step.

The simulator runs a strategy that recomputes co-location groups on the graph of
`moplace.simulator.recompute.recompute_plan`; this makes the same graph of TensorFlow nodes.
Each clone is a copy of its op's node, ``<op>/moplace_recompute``, on the same device, reading
the clones of its recomputed inputs and the original outputs of the others; every backward
node the plan moves to the clone reads it instead of the original; a clone the plan makes wait
for the backward gets a control input on each op it waits for. The order the simulator ran
the clones in is then enforced like every other op's (`moplace.tf.apply`). With
micro-batches, each micro-batch's copy of a recomputed op gets its own clone
(``moplace_mb<i>/<op>/moplace_recompute``), read by that micro-batch's backward copies, as the
simulator's plan has them (`moplace.simulator.microbatch`).

Not applied here (the strategy is then not expressible, with the reason): recomputing an op
that is also split, or for a backward reader that is split (parts and the slices and joins
around them, some shared with forward readers, would all need clones),
and a node TensorFlow calls stateful (a second run could give another value;
`moplace.core.recompute.NEVER_RECOMPUTED` keeps the known ones out of every plan).
"""

from __future__ import annotations

from ..core.graph import OpGraph
from ..core.strategy import Strategy
from ..simulator.microbatch import microbatch_plan
from ..simulator.recompute import recompute_plan
from ._tf import tf  # noqa: F401  (TensorFlow's environment first)
from .microbatch import copied_ops, copy_name
from .rewrite import part_name
from .splitrules import SplitRefused


class RecomputeRefused(SplitRefused):
    """A recomputation the testbed cannot apply; the message names the op and says why."""


def recompute_name(op_name: str) -> str:
    """The node name of an op's clone."""
    return f"{op_name}/moplace_recompute"


def rewrite_recompute(graph_def, graph: OpGraph, strategy: Strategy) -> int:
    """Add the clones of ``strategy``'s recomputed ops to ``graph_def`` (placed, splits
    already rewritten, micro-batches too: each micro-batch's copy gets its clone) and move
    their backward readers onto them; returns how many clones. `RecomputeRefused` names an op
    that cannot be recomputed here."""
    names = [op.name for op in graph.ops]
    if strategy.pipelined:
        plan = microbatch_plan(graph, strategy.recompute, int(strategy.micro_batches))
        first = plan.orig.size - plan.n_clone_ops
        copied = copied_ops(graph)
        node_of = [copy_name(names[i], b) if copied[i] else names[i]
                   for i, b in zip(plan.orig.tolist(), plan.mb.tolist())]
    else:
        plan = recompute_plan(graph, strategy.recompute)
        first = plan.n_ops
        node_of = [names[i] for i in plan.orig.tolist()]
    orig = plan.orig
    clones = range(first, orig.size)
    for v in clones:
        if int(orig[v]) in strategy.splits:
            raise RecomputeRefused(f"op {names[int(orig[v])]!r} is both split and recomputed: "
                                   "the testbed recomputes unsplit ops only")
    a = plan.arrays
    moved: dict[int, set[str]] = {}  # reader -> the nodes it now reads from their clones
    for v in clones:
        for e in range(a.out_ptr[v], a.out_ptr[v + 1]):
            dst = int(a.dst[a.out_edge[e]])
            if dst >= first:
                continue
            if int(orig[dst]) in strategy.splits:  # its parts read through shared slices
                raise RecomputeRefused(
                    f"op {names[int(orig[v])]!r} is recomputed for op {names[int(orig[dst])]!r},"
                    " which is split: the testbed recomputes ops for unsplit readers only")
            moved.setdefault(dst, set()).add(node_of[v])
    nodes = {node.name: node for node in graph_def.node}
    for v in clones:
        node = nodes[node_of[v]]
        if _stateful(node.op):
            raise RecomputeRefused(f"op {names[int(orig[v])]!r} ({node.op}) is stateful: run "
                                   "again it could give another value")
    renamed = {node_of[v]: recompute_name(node_of[v]) for v in clones}
    for v in clones:  # each clone: its op's node reading the clones' outputs
        node = nodes[node_of[v]]
        clone = graph_def.node.add()
        clone.CopyFrom(node)
        clone.name = renamed[node_of[v]]
        del clone.input[:]
        clone.input.extend(_renamed(x, renamed) for x in node.input)
        if "_class" in clone.attr:  # colocation with the original is not wanted
            del clone.attr["_class"]
        have = {x.lstrip("^").split(":")[0] for x in clone.input}
        for e in range(a.in_ptr[v], a.in_ptr[v + 1]):
            src = int(a.src[a.in_edge[e]])
            if src < first and node_of[src] not in have:  # waits for the backward to reach it
                split = strategy.splits.get(int(orig[src]))  # a split op: all its parts
                clone.input.extend([f"^{part_name(node_of[src], k)}" for k in range(split.parts)]
                                   if split else [f"^{node_of[src]}"])
                have.add(node_of[src])
    for dst, read in moved.items():
        node = nodes[node_of[dst]]
        new = [x if x.startswith("^") else _renamed(x, {o: renamed[o] for o in read})
               for x in node.input]
        del node.input[:]
        node.input.extend(new)
    return len(clones)


def _renamed(x: str, renamed: dict[str, str]) -> str:
    """Input ``x`` (``name``, ``name:k`` or ``^name``) reading ``renamed[name]`` instead."""
    control = x.startswith("^")
    name, _, slot = x.lstrip("^").partition(":")
    if name not in renamed:
        return x
    return ("^" if control else "") + renamed[name] + (f":{slot}" if slot else "")


def _stateful(op_type: str) -> bool:
    """TensorFlow's word on ``op_type`` (an op it does not know counts as stateful)."""
    from tensorflow.python.framework import op_def_registry

    found = op_def_registry.get(op_type)
    return found is None or bool(found.is_stateful)
