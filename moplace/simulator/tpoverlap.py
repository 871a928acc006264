"""Tensor-parallel communication overlapped with the GEMMs, as Megatron-LM's
``--tp-comm-overlap`` runs it (a regular plan's ``tp_overlap=1``, `moplace.simulator.atscale`).

With sequence parallelism each transformer layer all-gathers the sequence shards before each
column-parallel GEMM and reduce-scatters after each row-parallel one (and the mirror images in
the backward). ``--tp-comm-overlap`` (Transformer Engine's userbuffers) cuts each such GEMM
into chunks and moves one chunk's data while the previous chunk computes, so a collective
costs the step only what exceeds its GEMM. Modelled here, then simulated:

- `tensor_parallel_overlap` counts, per micro-batch, the tensor-parallel collectives and what
  of each its GEMM leaves exposed: for every op cut on tensor whose partial sums a collective
  completes, the reduce-scatter (all-reduce without a sequence split after it) of its output
  beyond the time of the op and of the partial sums it adds up; for every output cut on batch or sequence read by ops cut on
  tensor over the same devices, one all-gather of it beyond those readers' time. Each is
  timed as the simulator times a ring over the server's links (`ring_seconds`).
- `hidden_server_links` speeds the replica's links inside a server up by the ratio of the two
  (the collectives' seconds over their exposed seconds), so the simulated step pays, for its
  tensor-parallel communication, what the GEMMs leave exposed, and still overlaps it with
  other work where the plan without the overlap would.

What it leaves out: the SMs the communication kernels take from the GEMMs; the ratio is one
for the whole replica, not one per collective; and any other transfer inside a server (a
pipeline's sends between stages in one server, an expert all-to-all inside a
tensor-parallel group) is sped up alike.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..core.cluster import Cluster
from ..core.graph import SPLIT_DIMS

#: the most a server's links are sped up (when the GEMMs hide every collective)
FREE = 1e9
_TENSOR = SPLIT_DIMS.index("tensor")
_SHARDS = (SPLIT_DIMS.index("batch"), SPLIT_DIMS.index("sequence"))


@lru_cache(maxsize=8)
def hidden_server_links(cluster: Cluster, speedup: float = FREE) -> Cluster:
    """``cluster`` with its links inside a server ``speedup`` times as fast (bandwidth up,
    latency down, and so the resources only they hold; module docstring); the links across
    servers, routes, resources and memory kept."""
    speedup = min(float(speedup), FREE)
    same = cluster.server[:, None] == cluster.server[None, :]
    # the resources a route across servers holds keep their bandwidth (route k: pair k // n, k % n)
    across = np.zeros(cluster.n_resources, bool)
    across[cluster.route_res[np.repeat(~same.ravel(), np.diff(cluster.route_ptr))]] = True
    return cluster.with_figures(
        f"{cluster.name} (tensor-parallel communication overlapped)", cluster.devices,
        np.where(same, cluster.bandwidth * speedup, cluster.bandwidth),
        np.where(same, cluster.latency / speedup, cluster.latency),
        np.where(across, cluster.resource_bandwidth, cluster.resource_bandwidth * speedup))


def ring_seconds(cluster: Cluster, devices, nbytes: float, steps_per_rank: int = 1) -> float:
    """Seconds of a ring collective over ``devices`` of ``cluster`` moving a buffer of
    ``nbytes``: ``steps_per_rank`` (1: a reduce-scatter or an all-gather; 2: an all-reduce)
    times n - 1 steps of one link's latency and ``nbytes / n`` over its bandwidth."""
    n = len(devices)
    if n <= 1 or nbytes <= 0:
        return 0.0
    i, j = int(devices[0]), int(devices[1])
    return steps_per_rank * (n - 1) * (cluster.latency[i, j] + nbytes / n / cluster.bandwidth[i, j])


def tensor_parallel_overlap(graph, plan, cluster, strategy, compute,
                            micro_batches: int | None = None) -> tuple[float, float]:
    """(seconds of the tensor-parallel collectives of one micro-batch of the replica's graph,
    seconds of them that their GEMMs leave exposed) on ``cluster``'s links (the replica's),
    with ``compute`` the cost model's per-op seconds (module docstring)."""
    if plan.tp <= 1 or not strategy.splits:
        return 0.0, 0.0
    a = graph.arrays
    m = plan.micro_batches if micro_batches is None else micro_batches  # in the graph
    n = len(graph.ops)
    dims = np.full(n, -1)
    parts = np.ones(n, np.int64)
    first = np.zeros(n, np.int64)
    devices: dict[int, tuple] = {}
    for op, split in strategy.splits.items():
        dims[op] = SPLIT_DIMS.index(split.dim)
        parts[op] = len(split.devices)
        first[op] = split.devices[0]
        devices[op] = split.devices
    own = compute[np.arange(n), 0] / m / parts  # an op's part, one micro-batch
    total = exposed = 0.0
    tensor = (dims == _TENSOR) & (parts > 1)
    adds = tensor & a.partial_sums
    # as the simulator makes them (`moplace.simulator.buckets`): a collective completes the
    # partial sums an op passes to a reader that is no partial sum itself; it hides under that
    # op's GEMM and those of the partial sums it adds up (a layer's input gradient summed over
    # its query, key and value projections)
    done = np.flatnonzero(adds[a.src] & ~adds[a.dst])
    sums = np.unique(a.src[done])
    whole = np.zeros(n, bool)  # some reader takes the sum whole: all-reduced, else scattered
    whole[a.src[done[~np.isin(dims[a.dst[done]], _SHARDS)]]] = True
    chain: dict[int, float] = {}

    def hidden_by(op: int) -> float:
        if op not in chain:
            ins = a.src[a.in_edge[a.in_ptr[op]:a.in_ptr[op + 1]]]
            chain[op] = own[op] + sum(hidden_by(int(q)) for q in np.unique(ins) if adds[q])
        return chain[op]

    for op in sums.tolist():
        t = ring_seconds(cluster, devices[op], float(a.output_bytes[op]) / m,
                         2 if whole[op] else 1)
        total += t
        exposed += max(0.0, t - hidden_by(op))
    u, v = a.src, a.dst
    gathered = np.flatnonzero(tensor[v] & np.isin(dims[u], _SHARDS) & (parts[u] == parts[v])
                              & (first[u] == first[v]) & (a.edge_bytes > 0)
                              & (a.param_bytes[u] == 0))
    # one gather per shard, under all its readers' GEMMs (a row-parallel layer's backward
    # gathers its output's gradient once for the input's gradient and the weight's)
    size: dict[int, float] = {}
    under: dict[int, float] = {}
    for k in gathered.tolist():
        p = int(u[k])
        size[p] = max(size.get(p, 0.0), float(a.edge_bytes[k]) / m)
        under[p] = under.get(p, 0.0) + own[v[k]]
    for p, nbytes in size.items():
        t = ring_seconds(cluster, devices[p], nbytes)
        total += t
        exposed += max(0.0, t - under[p])
    return total, exposed
