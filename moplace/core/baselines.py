"""Baseline strategies every searcher is compared with, registered by name in `BASELINES`.

- ``single``: everything on device 0.
- ``data-parallel``: every co-location group whose ops can all be split on batch is split
  across all devices; the rest run on device 0; gradients are all-reduced in buckets of
  DDP's default 25 MiB (`DDP_BUCKET_BYTES`).
- ``round-robin``: co-location groups, in topological order, dealt to devices in turn.
- ``layer-split``: "expert" model parallelism: groups in topological order cut into contiguous
  runs of nearly equal compute, one run per device.

All use the topological order as priority (`topological_priority`).
"""

from __future__ import annotations

import numpy as np

from ..registry import Registry
from .graph import ROLES, SPLIT_DIMS, OpGraph
from .strategy import Split, Strategy, spread_groups

BASELINES: Registry = Registry("baseline")
#: PyTorch DistributedDataParallel's default gradient bucket (bucket_cap_mb=25)
DDP_BUCKET_BYTES = 25 * 2**20


def reduces_gradients(graph: OpGraph) -> bool:
    """Can a strategy of ``graph`` all-reduce a gradient (an op with a weight gradient that may
    be split on batch)? Only then does its gradient bucket size matter."""
    a = graph.arrays
    return bool(np.any((a.grad_bytes > 0) & ((a.split_mask >> SPLIT_DIMS.index("batch")) & 1 == 1)))


def shards_updates(graph: OpGraph) -> bool:
    """Can a ZeRO stage change anything on ``graph`` (an update op reads a gradient that may
    be all-reduced, and may itself be split on batch into replicas)?"""
    a = graph.arrays
    batch = (a.split_mask >> SPLIT_DIMS.index("batch")) & 1 == 1
    update = a.role == ROLES.index("update")
    return bool(np.any((a.grad_bytes[a.src] > 0) & batch[a.src] & update[a.dst] & batch[a.dst]))


def topological_priority(graph: OpGraph) -> np.ndarray:
    """Priorities that run ops in the graph's (lexicographic) topological order."""
    prio = np.empty(len(graph.ops))
    prio[graph.arrays.topo] = -np.arange(len(graph.ops), dtype=np.float64)
    return prio


def memory_priority(graph: OpGraph) -> np.ndarray:
    """Priorities for a topological order that keeps resident outputs few, for ops run one at a
    time on one device: greedily the ready op whose run adds the fewest bytes net, its output
    (held until its consumers have run) less the outputs of the ops it is the last consumer
    of (ties: the smaller output, then topological position). A heuristic, not an optimum."""
    import heapq

    a = graph.arrays
    n = len(graph.ops)
    position = np.empty(n, np.int64)
    position[a.topo] = np.arange(n)
    waiting = np.diff(a.in_ptr).astype(np.int64)  # inputs not yet produced
    unread = np.diff(a.out_ptr).astype(np.int64)  # consumers not yet run
    out = a.output_bytes
    inputs = [a.src[a.in_edge[a.in_ptr[i]:a.in_ptr[i + 1]]] for i in range(n)]

    def key(i):
        freed = sum(out[j] for j in set(inputs[i].tolist()) if unread[j] == _reads(a, j, i))
        held = out[i] if a.out_ptr[i + 1] > a.out_ptr[i] else 0.0
        return (held - freed, held, position[i])

    heap = [(key(i), i) for i in range(n) if waiting[i] == 0]
    heapq.heapify(heap)
    done = np.zeros(n, bool)
    order = []
    while heap:
        k, i = heapq.heappop(heap)
        if done[i] or k != key(i):  # stale: its inputs' readers changed since it was pushed
            if not done[i]:
                heapq.heappush(heap, (key(i), i))
            continue
        done[i] = True
        order.append(i)
        for j in set(inputs[i].tolist()):
            unread[j] -= _reads(a, j, i)
            if unread[j]:  # a reader left may now free j: its key changed
                for e in a.out_edge[a.out_ptr[j]:a.out_ptr[j + 1]]:
                    r = int(a.dst[e])
                    if not done[r] and waiting[r] == 0:
                        heapq.heappush(heap, (key(r), r))
        for e in a.out_edge[a.out_ptr[i]:a.out_ptr[i + 1]]:
            r = int(a.dst[e])
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(heap, (key(r), r))
    prio = np.empty(n)
    prio[np.array(order, np.int64)] = -np.arange(n, dtype=np.float64)
    return prio


def _reads(a, j: int, i: int) -> int:
    """Edges from op ``j`` to op ``i``."""
    e = a.out_edge[a.out_ptr[j]:a.out_ptr[j + 1]]
    return int(np.count_nonzero(a.dst[e] == i))


def group_order(graph: OpGraph) -> np.ndarray:
    """Co-location groups sorted by the topological position of their first op, a source (an
    op read by others that reads none: a weight, an input) counted just before its first
    reader: sources head a traced graph's order, and a group holding a weight would otherwise
    sort before every group without one (a layer split of a traced Llama put every weighted
    block on the first device and every norm and residual add on the last)."""
    a = graph.arrays
    n = len(graph.ops)
    position = np.empty(n, np.int64)
    position[a.topo] = 2 * np.arange(n)  # even; a source's place: odd, before its reader
    reader = np.full(n, 2 * n, np.int64)
    np.minimum.at(reader, a.src, position[a.dst])
    source = (np.diff(a.in_ptr) == 0) & (reader < 2 * n)
    first = np.full(a.n_groups, 2 * n)
    np.minimum.at(first, a.group, np.where(source, reader - 1, position))
    return np.argsort(first, kind="stable")


@BASELINES.register("single")
def single(graph: OpGraph, n_devices: int) -> Strategy:
    """All ops on device 0."""
    return Strategy(np.zeros(len(graph.ops), np.int64), topological_priority(graph))


@BASELINES.register("data-parallel")
def data_parallel(graph: OpGraph, n_devices: int,
                  bucket_bytes: float = DDP_BUCKET_BYTES) -> Strategy:
    """Split every batch-splittable group n ways on batch, part k on device k; gradients
    all-reduced in buckets of ``bucket_bytes`` (0: each on its own; left at 0 when the graph
    has no gradient to all-reduce)."""
    if n_devices < 2:
        return single(graph, n_devices)
    split = Split("batch", tuple(range(n_devices)))
    batch_ok = [all("batch" in graph.ops[i].splittable for i in members) for members in graph.groups]
    splits = {g: split for g, ok in enumerate(batch_ok) if ok}
    plan = spread_groups(graph, np.zeros(len(graph.groups), np.int64), splits,
                         topological_priority(graph))
    return plan.with_options(bucket_bytes=bucket_bytes) if reduces_gradients(graph) else plan


@BASELINES.register("tensor-parallel")
def tensor_parallel(graph: OpGraph, n_devices: int) -> Strategy:
    """Megatron-LM's tensor parallelism with sequence parallelism on all n devices: every
    group that may split on tensor (a transformer's attention and MLP blocks, forward and
    backward, with their weights) split n ways on it, part k on device k, and every other
    batch-splittable group n ways on batch (the norms, dropouts and residual adds between
    blocks: each device its slice, so the blocks' all-reduces become reduce-scatters); on a
    graph without tensor-splittable groups, that is data parallelism."""
    if n_devices < 2:
        return single(graph, n_devices)
    devices = tuple(range(n_devices))
    splits = {}
    for g, members in enumerate(graph.groups):
        dims = [set(graph.ops[i].splittable) for i in members]
        if all("tensor" in d for d in dims):
            splits[g] = Split("tensor", devices)
        elif all("batch" in d for d in dims):
            splits[g] = Split("batch", devices)
    plan = spread_groups(graph, np.zeros(len(graph.groups), np.int64), splits,
                         topological_priority(graph))
    return plan.with_options(bucket_bytes=DDP_BUCKET_BYTES) if reduces_gradients(graph) else plan


def partition_optimizer_state(graph: OpGraph, strategy: Strategy, n_devices: int) -> Strategy:
    """``strategy`` with its unsplit co-location groups that keep optimizer state (update ops'
    ``param_bytes``) spread over the devices, the largest first onto the device holding the
    least so far: each device keeps about 1/n of the state and runs its updates, as ZeRO-1
    partitions the state, by parameter (the way a graph whose update ops cannot be split,
    TensorFlow's, shards it). Other groups stay where they are."""
    a = graph.arrays
    held = np.where(a.role == ROLES.index("update"), a.param_bytes, 0.0)
    split = np.zeros(len(graph.ops), bool)
    split[strategy.split_table.ops] = True
    state = np.bincount(a.group, weights=held, minlength=a.n_groups)
    state[np.unique(a.group[split])] = 0.0  # a split group's parts stay where they are
    placement = strategy.placement.copy()
    load = np.zeros(n_devices)
    for g in np.argsort(-state, kind="stable").tolist():
        if state[g] <= 0:
            break
        d = int(np.argmin(load))
        load[d] += state[g]
        placement[list(graph.groups[g])] = d
    return strategy.derive(placement=placement)


@BASELINES.register("round-robin")
def round_robin(graph: OpGraph, n_devices: int) -> Strategy:
    """Group i (in topological order) on device i mod n."""
    device = np.empty(graph.arrays.n_groups, np.int64)
    device[group_order(graph)] = np.arange(graph.arrays.n_groups) % n_devices
    return spread_groups(graph, device, None, topological_priority(graph))


@BASELINES.register("layer-split")
def layer_split(graph: OpGraph, n_devices: int, weights: np.ndarray | None = None) -> Strategy:
    """Contiguous runs of groups with nearly equal compute, one run per device.

    ``weights`` is the compute per op (default: its time on the graph's profiled device kind,
    else the fastest time it has).
    """
    if weights is None:
        weights = np.array([_reference_time(op, graph.metadata.get("profiled_on")) for op in graph.ops])
    per_group = np.bincount(graph.arrays.group, weights=weights, minlength=graph.arrays.n_groups)
    order = group_order(graph)
    w = per_group[order]
    total = w.sum()
    if total <= 0:
        mid = np.arange(len(w)) / max(len(w), 1)
    else:  # a group goes to the device whose share of the total holds its midpoint
        mid = (np.cumsum(w) - w / 2) / total
    device = np.empty(graph.arrays.n_groups, np.int64)
    device[order] = np.minimum((mid * n_devices).astype(np.int64), n_devices - 1)
    return spread_groups(graph, device, None, topological_priority(graph))


def _reference_time(op, kind) -> float:
    if kind in op.compute:
        return float(op.compute[kind])
    return float(min(op.compute.values())) if op.compute else 0.0


def baseline(name: str, graph: OpGraph, n_devices: int) -> Strategy:
    """The baseline strategy ``name`` for ``graph`` on ``n_devices`` devices."""
    return BASELINES[name](graph, n_devices)


def one_device_each_kind(graph: OpGraph, cluster) -> list[tuple[str, Strategy]]:
    """Every op on one device in a memory-sparing order (`memory_priority`), once for each kind
    of device (kind, memory, speed) of ``cluster``, as (device name, strategy): the
    zero-communication end of a front lies among single-device placements, and the
    topological order of ``single`` can need far more memory (on a tiny instance 4067 bytes
    where another order needs 2738). Nothing for an empty graph."""
    if not len(graph.ops):
        return []
    prio, kinds, out = memory_priority(graph), set(), []
    for d, dev in enumerate(cluster.devices):
        if (dev.kind, dev.memory_bytes, dev.speed) not in kinds:
            kinds.add((dev.kind, dev.memory_bytes, dev.speed))
            out.append((dev.name, Strategy(np.full(len(graph.ops), d, np.int64), prio)))
    return out


def on_devices(name: str, graph: OpGraph, devices) -> Strategy:
    """The baseline ``name`` on the devices ``devices`` only (indices into the cluster, in the
    order parts go; see `moplace.core.subsets`): the baseline for ``len(devices)`` devices,
    its device k relabelled ``devices[k]``."""
    devices = np.asarray(tuple(devices), dtype=np.int64)
    if devices.size == 0 or np.unique(devices).size != devices.size:
        raise ValueError(f"devices must be distinct and at least one, got {devices.tolist()}")
    plan = baseline(name, graph, int(devices.size))
    splits = {op: Split(s.dim, tuple(int(devices[d]) for d in s.devices))
              for op, s in plan.splits.items()}
    return Strategy(devices[plan.placement], plan.priority, splits, **plan.options)


def with_expert_parallel(graph: OpGraph, strategy: Strategy, ep: int) -> Strategy:
    """``strategy`` with a mixture of experts' experts in expert parallelism over ``ep``
    devices: every co-location group whose ops may all split on ``expert`` (each layer's
    experts, weights and updates) and that ``strategy`` splits on batch over ``ep`` devices,
    split on expert over the same devices (each its ``E / ep`` experts), as the data-parallel
    baseline on ``ep`` devices becomes; `StrategyError` when ``ep`` does not divide the
    experts or no such group is split so."""
    from ..errors import StrategyError

    moe = graph.metadata.get("moe")
    experts = moe.get("experts") if isinstance(moe, dict) else None
    if not isinstance(experts, int) or experts % ep:
        raise StrategyError(f"expert parallel over {ep} devices: "
                            + (f"the {experts} experts of each layer do not divide among them"
                               if isinstance(experts, int) else "the graph has no mixture of "
                               "experts (its metadata names none)"))
    splits = _recut(graph, strategy, ep, lambda g, dims: "expert" if all(
        "expert" in d for d in dims) else None)
    if splits is None:
        raise StrategyError(f"expert parallel over {ep} devices: no group of experts is split "
                            f"on batch over {ep} devices (the data-parallel baseline on {ep} "
                            "devices splits them so; a graph traced before experts were "
                            "marked splittable on expert needs tracing again)")
    return Strategy(strategy.placement, strategy.priority, splits,
                    recompute=strategy.recompute, **strategy.options)


def with_context_parallel(graph: OpGraph, strategy: Strategy, cp: int,
                          comm: str = "p2p") -> Strategy:
    """``strategy`` in context parallelism over ``cp`` devices (`moplace.core.context`): every
    co-location group that ``strategy`` splits on batch over ``cp`` devices split on
    ``sequence`` over them instead (each its slice of every sequence's tokens: ring
    attention), with ``comm`` "a2a" the attention kernels' groups on ``channel`` (heads:
    Ulysses), as the data-parallel baseline on ``cp`` devices becomes; `StrategyError` where
    the graph names no fused attention, the tokens or (Ulysses) heads do not divide, or no
    group is split so."""
    from ..errors import StrategyError
    from .context import context_of, sequence_misfit

    info = context_of(graph)
    why = ("the graph names no fused attention to cut by sequence (metadata.context: a "
           "PyTorch or hf: model traced with SDPA's flash or memory-efficient kernels)"
           if info is None else sequence_misfit(info, cp) or (
               info.ulysses_misfit(cp) if comm == "a2a" else None))
    if why:
        raise StrategyError(why if why.startswith(("context", "all-to-all")) else
                            f"context parallel over {cp} devices: {why}")
    heads = info.attention_groups if comm == "a2a" else ()
    splits = _recut(graph, strategy, cp, lambda g, dims: "channel" if g in heads else
                    "sequence" if all("sequence" in d for d in dims) else None)
    if splits is None:
        raise StrategyError(f"context parallel over {cp} devices: no group is split on batch "
                            f"over {cp} devices (the data-parallel baseline on {cp} devices "
                            "splits them so)")
    devices = next((sp.devices for sp in splits.values() if sp.dim == "sequence"), ())
    for members in graph.groups:  # what no batch split cuts but a sequence split may: the loss
        if devices and members[0] not in strategy.splits \
                and strategy.placement[members[0]] == devices[0] \
                and all("sequence" in graph.ops[i].splittable for i in members):
            splits.update((i, Split("sequence", devices)) for i in members)
    return Strategy(strategy.placement, strategy.priority, splits,
                    recompute=strategy.recompute, **strategy.options)


def _recut(graph: OpGraph, strategy: Strategy, n: int, dim_of) -> dict | None:
    """``strategy``'s splits with each co-location group it splits on batch over ``n`` devices
    split on ``dim_of(group, its ops' splittable sets)`` over them instead (where that is not
    None); None where no group is."""
    splits = dict(strategy.splits)
    cut = 0
    for g, members in enumerate(graph.groups):
        first = strategy.splits.get(members[0])
        if first is None or first.dim != "batch" or first.parts != n:
            continue
        dim = dim_of(g, [graph.ops[i].splittable for i in members])
        if dim is None:
            continue
        for i in members:
            splits[i] = Split(dim, first.devices)
        cut += 1
    return splits if cut else None
