"""ZeRO-3 (FSDP): sharded weights, all-gathered before each use (see `weight_gathers`).

Under ``zero_stage`` 3 the replicas of a batch split keep 1/n of an op's weights instead of a
copy each. Before the op's parts run, and before the parts of each backward op of its
co-location group that computes its weight gradient (which needs the weights too), an
all-gather of the weights runs on the devices of the parts (`collective_plan`, so across
servers it is hierarchical). Each gather starts once the ops that feed the op's own inputs have
finished, one op ahead: the gather overlaps the op before, as FSDP's prefetch does. The
gathered weights are not freed task by task here: every device holds, all step, twice the
largest weights gathered on it less its shard (the layer that runs and the one prefetched),
counted with its parameters.
"""

from __future__ import annotations

import numpy as np

from ..arrays import segment_ranks
from ..core.graph import ROLES, SPLIT_DIMS
from .collectives import ALL_GATHER, collective_plan

_FORWARD, _BACKWARD = ROLES.index("forward"), ROLES.index("backward")
_BATCH = SPLIT_DIMS.index("batch")


def sharded_weights(a, parts, dims, mask_of) -> np.ndarray:
    """Per op: forward, split on batch over two or more devices, holding weights."""
    multi = (mask_of & (mask_of - 1)) != 0
    return (dims == _BATCH) & (parts > 1) & multi & (a.param_bytes > 0) & (a.role == _FORWARD)


def weight_gathers(a, cluster, parts, dims, mask_of, weighted):
    """The gathers of the weights of the ``weighted`` ops (`sharded_weights`), as
    ``(size, ring_mask, user, triggers)``: per gather the bytes, the devices, the op whose parts
    wait for it, and the ops whose parts it waits for (a list each)."""
    members: dict[int, list[int]] = {}
    for op in np.flatnonzero(weighted).tolist():
        members.setdefault(int(a.group[op]), [])
    backward = (a.role == _BACKWARD) & (a.grad_bytes > 0) & (dims == _BATCH) & (parts > 1)
    for op in np.flatnonzero(backward).tolist():
        if int(a.group[op]) in members:
            members[int(a.group[op])].append(op)
    sizes, masks, users, triggers = [], [], [], []
    for u in np.flatnonzero(weighted).tolist():
        for w in [u] + [b for b in members[int(a.group[u])] if mask_of[b] == mask_of[u]]:
            sizes.append(float(a.param_bytes[u]))
            masks.append(int(mask_of[u]))
            users.append(w)
            triggers.append(_two_back(a, w))
    return (np.array(sizes, np.float64), np.array(masks, np.int64), np.array(users, np.int64),
            triggers)


def _two_back(a, w: int) -> list[int]:
    """The ops that feed the ops that feed ``w``."""
    first = a.src[a.in_edge[a.in_ptr[w]:a.in_ptr[w + 1]]]
    out: set[int] = set()
    for p in first.tolist():
        out.update(a.src[a.in_edge[a.in_ptr[p]:a.in_ptr[p + 1]]].tolist())
    return sorted(out)


def gather_plans(cluster, masks):
    """The distinct rings of ``masks``, each gather's ring, and each ring's plan."""
    rings, ring_of = np.unique(masks, return_inverse=True)
    plans = [collective_plan(cluster, [d for d in range(cluster.n_devices) if m >> d & 1],
                             ALL_GATHER) for m in rings.tolist()]
    return plans, ring_of.ravel()


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

