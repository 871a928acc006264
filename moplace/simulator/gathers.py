"""ZeRO-3 (FSDP): sharded weights, all-gathered before each use (see `weight_gathers`).

Under ``zero_stage`` 3 the replicas of a batch split keep 1/n of an op's weights instead of a
copy each. Before the op's parts run, and before the parts of each backward op of its
co-location group that computes its weight gradient (which needs the weights too) and the
clones that recompute it, an all-gather of the weights runs on the devices of the parts
(`collective_plan`, so across servers it is hierarchical). Each gather starts once the ops
that feed the op's own inputs have finished (those that come before every op the gather
serves, in topological order), one op ahead: the gather overlaps the op before, as FSDP's
prefetch does. The gathered weights are not freed task by task here: every device holds, all
step, twice the largest weights gathered on it less its shard (the layer that runs and the
one prefetched), counted with its parameters.
"""

from __future__ import annotations

import numpy as np

from ..arrays import segment_ranks
from ..core.graph import ROLES, SPLIT_DIMS
from .devsets import same, several

_FORWARD, _BACKWARD = ROLES.index("forward"), ROLES.index("backward")
_BATCH, _TENSOR = SPLIT_DIMS.index("batch"), SPLIT_DIMS.index("tensor")


def sharded_weights(a, parts, dims, mask_of) -> np.ndarray:
    """Per op: forward, split on batch over two or more devices, holding weights (not a
    holder of a value made from other ops, such as a causal mask: each replica makes its
    own)."""
    multi = several(mask_of)
    made = (a.output_bytes == 0) & (np.diff(a.in_ptr) > 0)
    return ((dims == _BATCH) & (parts > 1) & multi & (a.param_bytes > 0) & (a.role == _FORWARD)
            & ~made)


def weight_gathers(a, parts, dims, mask_of, weighted, n_ops: int):
    """The gathers of the weights of the ``weighted`` ops (`sharded_weights`), as
    ``(size, ring_mask, users, triggers)``: per gather the bytes, the devices (a row each), the ops whose
    parts wait for it and the ops whose parts it waits for (a list each). An op's weights are
    gathered for the op, and again for the backward: its group's ops that compute its weight
    gradient and the clones that recompute it (ops from ``n_ops`` on, `recompute_plan`)."""
    later: dict[int, list[int]] = {int(a.group[op]): [] for op in np.flatnonzero(weighted)}
    backward = (a.role == _BACKWARD) & (a.grad_bytes > 0) & (dims == _BATCH) & (parts > 1)
    clone = np.arange(a.role.size) >= n_ops
    for op in np.flatnonzero(backward | (clone & (dims == _BATCH) & (parts > 1))).tolist():
        if int(a.group[op]) in later:
            later[int(a.group[op])].append(op)
    position = np.empty(a.role.size, np.int64)
    position[a.topo] = np.arange(a.role.size)
    sizes, masks, users, triggers = [], [], [], []
    for u in np.flatnonzero(weighted).tolist():
        again = [b for b in later[int(a.group[u])] if (mask_of[b] == mask_of[u]).all()]
        for use in ([u], again) if again else ([u],):
            sizes.append(float(a.param_bytes[u]))
            masks.append(mask_of[u])
            users.append(use)
            # only ops before every user (in topological order) can be waited for: none of
            # them waits on a user, so no gather waits on itself
            first = min(position[w] for w in use)
            wait = set().union(*(_two_back(a, w) for w in use))
            triggers.append(sorted(p for p in wait if position[p] < first))
    rows = np.array(masks, np.int64).reshape(len(masks), mask_of.shape[1])
    return np.array(sizes, np.float64), rows, users, triggers


def activation_gathers(a, parts, dims, mask_of, taken,
                       replica) -> tuple[np.ndarray, np.ndarray, list]:
    """Sequence parallelism's gathers in the backward (Megatron-LM): a backward op split on
    tensor that reads a forward op's output split on batch into as many parts on the same
    devices (a shard, such as a norm's output that a column-parallel linear's weight gradient
    needs whole) reads it through an all-gather that starts one op ahead, instead of keeping
    the gathered copy from the forward pass. Returns the producers whose output is gathered
    again (in op order; not those in ``taken``, already read from a collective, nor
    ``replica``s, whose parts each hold it whole), the graph edges read from the gather, and
    per producer the ops whose parts start it."""
    u, v = a.src, a.dst
    edge = ((dims[v] == _TENSOR) & (a.role[v] == _BACKWARD) & (parts[v] > 1)
            & (dims[u] == _BATCH) & (a.role[u] == _FORWARD) & (parts[u] == parts[v])
            & same(mask_of[u], mask_of[v]) & ~taken[u] & ~replica[u] & (a.edge_bytes > 0))
    chosen = np.flatnonzero(edge)
    chosen = chosen[np.argsort(u[chosen], kind="stable")]  # grouped by producer
    ops, starts = np.unique(u[chosen], return_index=True)
    ops = ops.astype(np.int64)
    position = np.empty(a.role.size, np.int64)
    position[a.topo] = np.arange(a.role.size)
    triggers = []
    for op, lo, hi in zip(ops.tolist(), starts.tolist(), starts[1:].tolist() + [chosen.size]):
        readers = v[chosen[lo:hi]].tolist()
        first = min(position[r] for r in readers)  # wait only for ops before every reader
        ahead = set().union(*(_two_back(a, r) for r in readers)) - {op}
        ahead = {p for p in ahead if a.role[p] == _BACKWARD and position[p] < first} or {
            p for r in readers for p in a.src[a.in_edge[a.in_ptr[r]:a.in_ptr[r + 1]]].tolist()
            if p != op and position[p] < first}
        triggers.append(sorted(ahead | {op}))
    return ops, edge, triggers


def _two_back(a, w: int) -> set[int]:
    """The ops that feed the ops that feed ``w``."""
    first = a.src[a.in_edge[a.in_ptr[w]:a.in_ptr[w + 1]]]
    out: set[int] = set()
    for p in first.tolist():
        out.update(a.src[a.in_edge[a.in_ptr[p]:a.in_ptr[p + 1]]].tolist())
    return out


def held_while_gathered(ptr, parts, dev, weighted, param_bytes, n_tasks) -> np.ndarray:
    """Per compute task, the bytes of gathered weights counted on it: on every device, twice
    the largest of (weights - shard) of the weighted ops with a part there, on that part."""
    extra = np.zeros(n_tasks)
    ops = np.flatnonzero(weighted)
    if ops.size == 0:
        return extra
    over = param_bytes[ops] * (parts[ops] - 1) / parts[ops]
    tasks = np.repeat(ptr[ops], parts[ops]) + segment_ranks(parts[ops])
    task_over = np.repeat(over, parts[ops])
    order = np.lexsort((tasks, -task_over, dev[tasks]))  # per device: the largest first
    d = dev[tasks][order]
    first = np.ones(d.size, bool)
    first[1:] = d[1:] != d[:-1]
    extra[tasks[order][first]] = 2 * task_over[order][first]
    return extra

