"""Megatron-LM's tensor-parallel blocks, found in a traced step (`megatron_blocks`).

A block is what Megatron-LM cuts across t devices with one all-reduce forward and one
backward (Shoeybi et al. 2019, figure 3): linears that read one input X and split their
output features (column-parallel: an attention's query, key and value projections, an MLP's
first linears), the ops between them and one linear that reads their results (row-parallel:
the attention's output projection, the MLP's last linear), which splits its input features,
the reduction dimension, so that its parts yield partial sums of its output. The ops between
act per head or per feature (attention, softmax, dropout, GeLU, SwiGLU), so part k of each
reads only part k of the others.

The blocks are found from the graph's data flow, not from module names: for each forward
linear R (an ``mm``/``addmm`` whose second matrix is a 2-D parameter), the forward ops its
input depends on are walked back up to the linears they reach (C); it is a block when those
all read one tensor X, which the walk does not reach by another way (a residual path, a
norm: then the ops between would need all of it), and the ops between are those of the walk
that depend on C. The backward ops of a block are found by what they read: an op that reads
the block's values, all shards, is a shard of the block (a partial sum when it is a linear
whose two matrices are both shards: the gradient of X through a column-parallel linear); an
add of partial sums only is a partial sum; any other op that reads a partial sum is outside
the block and reads the all-reduced sum. The weights the block reads (but a row-parallel
linear's bias, which Megatron keeps whole) are sharded with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._torch import torch

aten = torch.ops.aten
#: linears and the positions of their two matrices
LINEARS = {aten.mm.default: (0, 1), aten.addmm.default: (1, 2)}
ADDS = frozenset({aten.add.Tensor})
BATCHED = frozenset({aten.bmm.default, aten.baddbmm.default})
SHARD, PARTIAL = "shard", "partial"


@dataclass
class Block:
    """One tensor-parallel block: its row-parallel linear, and per kept node (forward,
    backward and parameter placeholders) whether its parts are shards or partial sums;
    ``core``: an attention's forward core (`attention_core`)."""

    row: object
    columns: list
    status: dict = field(default_factory=dict)
    core: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.row.name


def megatron_blocks(kept, traced, rep, forward) -> list[Block]:
    """The tensor-parallel blocks of a traced step (module docstring). ``kept``: the nodes
    that are ops, in graph order; ``rep``: each node's kept op (views folded); ``forward``:
    the kept ops the loss depends on."""
    kept_set = set(kept)
    inputs = {n: _inputs(n, rep, kept_set) for n in kept}
    readers: dict = {}
    for n in kept:
        for i in inputs[n]:
            readers.setdefault(i, []).append(n)
    weight = {n: _weight(n, rep, traced) for n in kept if n in forward and n.target in LINEARS}
    weight = {n: w for n, w in weight.items() if w is not None}
    position = {n: k for k, n in enumerate(kept)}
    blocks, taken = [], set()
    for row in kept:
        if row not in weight:
            continue
        block = _forward_block(row, weight, inputs, rep, forward, position)
        if block is None or taken & set(block.status):
            continue
        _backward(block, kept[position[row] + 1:], inputs, rep, forward)
        block.core = attention_core(block, inputs, rep, position)
        _drop_shared_weights(block, readers)
        taken |= set(block.status)
        blocks.append(block)
    return blocks


def attention_core(block: Block, inputs, rep, position) -> list:
    """The forward ops of ``block`` from a batched matmul of two of its shards (the scores,
    QK^T) to a batched matmul that reads what they make (attention over V), both included:
    what Korthikanti et al. (2022) recompute selectively, whose activations grow with the
    square of the sequence. Empty for a block without one (an MLP)."""
    status = block.status
    fwd = sorted((n for n in status if n.op == "call_function" and n is not block.row
                  and position.get(n, -1) < position[block.row]), key=position.__getitem__)
    scores = [n for n in fwd if n.target in BATCHED and n not in block.columns
              and all(_operand(n, p, rep) in status for p in (0, 1))]
    if not scores:
        return []
    core = {scores[0]}
    for n in fwd:  # forward, descendants of the scores in the block
        if n not in core and any(i in core for i in inputs[n]):
            core.add(n)
    ends = [n for n in fwd if n in core and n.target in BATCHED and n is not scores[0]]
    if not ends:
        return []
    keep, stack = set(), [ends[0]]  # ...and ancestors of the first matmul after it
    while stack:
        n = stack.pop()
        if n in core and n not in keep:
            keep.add(n)
            stack.extend(inputs[n])
    return sorted(keep, key=position.__getitem__)


def _inputs(n, rep, kept_set) -> list:
    """The kept ops ``n`` reads (through folded views), each once, in order."""
    out = []
    for i in n.all_input_nodes:
        r = rep.get(i)
        if r is not None and r is not n and r in kept_set and r not in out:
            out.append(r)
    return out


def _operand(n, position, rep):
    arg = n.args[position] if position < len(n.args) else None
    return rep.get(arg) if isinstance(arg, torch.fx.Node) else None


def _weight(n, rep, traced):
    """The trained 2-D parameter a linear ``n`` multiplies by, or None."""
    w = _operand(n, LINEARS[n.target][1], rep)
    if w is None or w.op != "placeholder":
        return None
    param = traced.parameters.get(w.name)
    value = w.meta.get("val")
    if param not in traced.trainable or value is None or value.dim() != 2:
        return None
    return w


def _forward_block(row, weight, inputs, rep, forward, position) -> Block | None:
    """The forward part of the block ending at linear ``row``, or None if it is not one."""
    start = _operand(row, LINEARS[row.target][0], rep)
    if start is None or start.op == "placeholder":
        return None
    columns, walk, stack = [], set(), [start]
    while stack:  # the forward ops row's input depends on, up to the linears they reach
        n = stack.pop()
        if n in walk or n.op == "placeholder":
            continue
        if n in weight:
            if n not in columns:
                columns.append(n)
            continue
        walk.add(n)
        stack.extend(i for i in inputs[n] if i in forward)
    if not columns:
        return None
    xs = {_operand(c, LINEARS[c.target][0], rep) for c in columns}
    if len(xs) != 1 or None in xs or xs & walk:
        return None  # the column linears read different tensors, or X reaches row another way
    block = Block(row, columns)
    for c in columns:
        block.status[c] = SHARD
    between = []
    for n in sorted(walk, key=position.__getitem__):  # inputs first
        if any(i in block.status for i in inputs[n]):
            block.status[n] = SHARD
            between.append(n)
    block.status[row] = PARTIAL
    for n in [*columns, *between, row]:
        for i in inputs[n]:
            if i.op == "placeholder" and i.name in _trained(n, row, weight):
                block.status[i] = SHARD
    return block


def _trained(n, row, weight) -> set:
    """The parameters of ``n`` that shard with the block: all it reads, but for the
    row-parallel linear only its weight (its bias stays whole, as Megatron keeps it)."""
    if n is row:
        return {weight[row].name}
    return {i.name for i in n.all_input_nodes if i.op == "placeholder"} | (
        {weight[n].name} if n in weight else set())


def _backward(block: Block, later, inputs, rep, forward) -> None:
    """Add the backward ops of ``block`` (module docstring) from ``later``, the kept ops
    after its row-parallel linear, in graph order."""
    status = block.status
    for n in later:
        if n in forward or n.op != "call_function":
            continue
        mine = [status[i] for i in inputs[n] if i in status]
        if not mine:
            continue
        if PARTIAL in mine:
            if n.target in ADDS and len(mine) == len(inputs[n]) and set(mine) == {PARTIAL}:
                status[n] = PARTIAL
            continue
        if n.target in LINEARS:
            a, b = (_operand(n, p, rep) for p in LINEARS[n.target])
            both = a in status and b in status
            status[n] = PARTIAL if both else SHARD
        else:
            status[n] = SHARD


def _drop_shared_weights(block: Block, readers) -> None:
    """A parameter read by an op outside the block (a tied weight) stays whole."""
    for n in [n for n in block.status if n.op == "placeholder"]:
        if any(r not in block.status for r in readers.get(n, [])):
            del block.status[n]
