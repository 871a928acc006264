"""PipeDream's partitioner (SOSP'19): contiguous stages, each on a run of devices, by dynamic
programming over the co-location groups in topological order.

The graph's co-location groups (a layer's forward, backward and update ops share one), in
data-flow order (`chain_order`: a topological order of the layers, as PipeDream orders its
profiles' DAGs), are the chain of "layers" PipeDream partitions.
A chain longer than `MAX_BLOCKS` is cut first into that many contiguous blocks of about equal
compute. The devices are taken along a path through the cluster (`device_path`: the one whose
links between neighbours are fastest; on a DGX-1 the NVLink pairs, not the cluster's numbering,
which crosses PCIe between GPUs 3 and 4); then

    A(j, d) = min over i < j, d' <= d of max(A(i, d - d'), C(i, d - d'), T(i..j, d'))

the best time of the slowest stage for blocks 0..j-1 on the path's first d devices (or on fewer
of them, when that is not slower: ``A(j, d - 1)``), where
``T(i..j, d')`` is the stage of blocks i..j-1 replicated over the d' devices before d: its
compute divided among them, plus what micro-batching adds to each device (``m`` times a copy's
overhead per copied op, for m micro-batches), plus its weight gradients' ring all-reduce on
those devices, ``2 (d'-1)/d' * W / B + 2 (d'-1) * latency`` (B the slowest link of the ring
over the run, closed from its last device to its first; a stage can be replicated only where
every op of it can be split on batch), and ``C(i, e)`` the transfers crossing the cut before
block i over the slowest link from the path's device e - 1 into the run: the larger of the
forward bytes (each output once, however many ops read it beyond the cut) and the backward
bytes, as a link carries each direction on its own. ``A(j, d)`` with a single stage
(``i = 0``) needs ``d' = d``. The program also counts stages, so that a partition of at most S stages can be asked for (fewer stages, a smaller
bubble: ``(S - 1) / (m + S - 1)`` of a flushed pipeline of m micro-batches is idle). Times are
the whole minibatch's, on device 0's kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from moplace.core.baselines import group_order
from moplace.core.graph import ROLES

#: the most blocks the dynamic program runs over (longer chains are grouped into blocks)
MAX_BLOCKS = 256


@dataclass(frozen=True)
class Stage:
    """Groups ``groups`` (co-location group ids) on ``devices`` (a run of the device path)."""

    groups: np.ndarray
    devices: tuple[int, ...]

    @property
    def n(self) -> int:
        return len(self.devices)


@dataclass(frozen=True)
class Partition:
    """Stages in pipeline order and the partitioner's estimate of its slowest stage (s)."""

    stages: tuple[Stage, ...]
    slowest_s: float

    @property
    def n_devices(self) -> int:
        return sum(s.n for s in self.stages)

    @property
    def key(self) -> tuple:
        """What tells two partitions apart: each stage's groups and devices."""
        return tuple((tuple(s.groups.tolist()), s.devices) for s in self.stages)


def chain(graph, compute: np.ndarray):
    """The groups in topological order and, per group, its compute (s), weight-gradient bytes
    and whether it can be replicated (every op splits on batch); per cut after group k of
    that order, the bytes crossing it forward and backward (each op's output once, the
    largest of its edges, on every cut between it and its farthest reader that way)."""
    a = graph.arrays
    order = chain_order(graph, compute)
    pos = np.empty(a.n_groups, np.int64)
    pos[order] = np.arange(order.size)
    g_of = pos[a.group]
    work = np.bincount(g_of, weights=compute, minlength=order.size)
    grad = np.bincount(g_of, weights=a.grad_bytes, minlength=order.size)
    batch = (a.split_mask & 1) == 1
    replicable = np.bincount(g_of, weights=~batch, minlength=order.size) == 0
    n_ops = len(graph.ops)
    pd = g_of[a.dst]
    size = np.zeros(n_ops)
    np.maximum.at(size, a.src, a.edge_bytes)
    far, near = np.full(n_ops, -1), np.full(n_ops, order.size)
    np.maximum.at(far, a.src, pd)
    np.minimum.at(near, a.src, pd)
    forward = _spans(g_of, far, size, order.size)  # [own group, farthest reader)
    backward = _spans(near, g_of, size, order.size)  # [nearest reader, own group)
    return order, work, grad, replicable, forward, backward


def _spans(lo: np.ndarray, hi: np.ndarray, size: np.ndarray, n: int) -> np.ndarray:
    """Per cut k (after group k), the total ``size`` of the spans with lo <= k < hi."""
    ok = hi > lo
    diff = np.zeros(n + 1)
    np.add.at(diff, lo[ok], size[ok])
    np.add.at(diff, hi[ok], -size[ok])
    return np.cumsum(diff)[:-1]


def chain_order(graph, compute: np.ndarray) -> np.ndarray:
    """The co-location groups in data-flow order: by the mean depth (`OpGraph.depth`) of
    their forward ops weighted by compute (or unweighted, where they take no time); a group
    without forward ops by the mean depth of its ops mirrored about the deepest forward op
    (the backward pass runs from the loss back to the inputs); ties in the order of their
    first ops. A group of a layer's weights, its
    operator, its backward and update sits where its operator does, not where its weights do
    (which depend on nothing, and come first in a topological order)."""
    a = graph.arrays
    depth = graph.depth.astype(np.float64)
    fwd = a.role == ROLES.index("forward")
    has_fwd = np.bincount(a.group, weights=fwd, minlength=a.n_groups) > 0
    use = np.where(has_fwd[a.group], fwd, True)
    # a group without forward ops (a gradient's sum, an update) mirrors the forward: the
    # backward pass walks back from the loss, the deepest forward op
    loss = depth[fwd].max() if fwd.any() else 0.0
    depth = np.where(has_fwd[a.group], depth, np.maximum(2 * loss - depth, 0.0))
    w = np.where(use, compute, 0.0)
    wsum = np.bincount(a.group, weights=w, minlength=a.n_groups)
    count = np.bincount(a.group, weights=use, minlength=a.n_groups)
    mean_w = np.bincount(a.group, weights=w * depth, minlength=a.n_groups)
    mean_n = np.bincount(a.group, weights=use * depth, minlength=a.n_groups)
    key = np.where(wsum > 0, mean_w / np.where(wsum > 0, wsum, 1.0),
                   mean_n / np.maximum(count, 1.0))
    first = np.empty(a.n_groups, np.int64)
    first[group_order(graph)] = np.arange(a.n_groups)
    return np.lexsort((first, key))


def blocks(work: np.ndarray, n_max: int = MAX_BLOCKS) -> np.ndarray:
    """Boundaries (``b[0] = 0 .. b[-1] = len(work)``) of at most ``n_max`` contiguous blocks
    of about equal work (every group its own block when there are few)."""
    n = work.size
    if n <= n_max:
        return np.arange(n + 1)
    total = np.cumsum(work)
    share = total[-1] / n_max if total[-1] > 0 else 0.0
    if share == 0:
        return np.unique(np.linspace(0, n, n_max + 1).astype(np.int64))
    ends = np.searchsorted(total, share * np.arange(1, n_max), side="left") + 1
    return np.unique(np.concatenate([[0], ends, np.arange(0, n + 1, max(1, n // n_max)), [n]]))


#: the transfer that ranks links for the device path (bytes): large enough that bandwidth,
#: not latency, decides
PATH_BYTES = 64 * 2**20
#: the most devices whose best path is found exactly (a dynamic program over subsets)
EXACT_PATH_DEVICES = 12


def device_path(cluster, n_devices: int) -> np.ndarray:
    """An order of devices ``0 .. n_devices - 1`` in which each moves `PATH_BYTES` to the
    next fastest in total: exact up to `EXACT_PATH_DEVICES` devices (the cluster's own order
    where it is as fast), nearest neighbour from device 0 beyond."""
    n = n_devices
    bw = np.asarray(cluster.bandwidth, np.float64)[:n, :n]
    lat = np.asarray(cluster.latency, np.float64)[:n, :n]
    cost = lat + PATH_BYTES / np.where(bw > 0, bw, 1e-30)
    natural = np.arange(n)
    if n <= 2:
        return natural
    if n > EXACT_PATH_DEVICES:
        path, left = [0], set(range(1, n))
        while left:
            nxt = min(left, key=lambda d: (cost[path[-1], d], d))
            path.append(nxt)
            left.remove(nxt)
        found = np.array(path)
    else:
        found = _best_path(cost)
    total = lambda p: float(cost[p[:-1], p[1:]].sum())  # noqa: E731
    return natural if total(natural) <= total(found) * (1 + 1e-9) else found


@njit(cache=True)
def _best_path(cost):
    """The Hamiltonian path of least total ``cost`` (a dynamic program over subsets)."""
    n = cost.shape[0]
    full = 1 << n
    best = np.full((full, n), np.inf)
    prev = np.full((full, n), -1, np.int64)
    for d in range(n):
        best[1 << d, d] = 0.0
    for mask in range(1, full):
        for d in range(n):
            if not (mask >> d) & 1 or best[mask, d] == np.inf:
                continue
            for e in range(n):
                if (mask >> e) & 1:
                    continue
                v = best[mask, d] + cost[d, e]
                if v < best[mask | (1 << e), e]:
                    best[mask | (1 << e), e], prev[mask | (1 << e), e] = v, d
    last = int(np.argmin(best[full - 1]))
    path = np.empty(n, np.int64)
    mask = full - 1
    for k in range(n - 1, -1, -1):
        path[k] = last
        p = prev[mask, last]
        mask ^= 1 << last
        last = p
    return path


class PartitionTable:
    """The dynamic program's table for ``graph`` on the first ``n_devices`` of the cluster,
    taken along ``path`` (default `device_path`; see the module docstring), counting
    ``sync_weight`` of a replicated stage's all-reduce and, per op, ``extra`` seconds on each
    device of its stage (what micro-batching adds; default none): the best partition on the
    path's first d devices in at most s stages, for every d and s, by `best`. ``chained``:
    `chain` of ``graph`` and ``compute``, when the caller made it for several tables."""

    def __init__(self, graph, cluster, compute: np.ndarray, n_devices: int,
                 sync_weight: float = 1.0, extra: np.ndarray | None = None,
                 path: np.ndarray | None = None, chained: tuple | None = None):
        order, work, grad, replicable, forward, backward = (
            chain(graph, compute) if chained is None else chained)
        pos = np.empty(order.size, np.int64)
        pos[order] = np.arange(order.size)
        added = np.zeros(order.size) if extra is None else np.bincount(
            pos[graph.arrays.group], weights=extra, minlength=order.size)
        b = blocks(work + added)
        nb = b.size - 1
        cw = np.concatenate([[0.0], np.cumsum(work)])[b]
        co = np.concatenate([[0.0], np.cumsum(added)])[b]
        cg = np.concatenate([[0.0], np.cumsum(grad)])[b]
        bad = np.concatenate([[0], np.cumsum(~replicable)])[b]
        cuts = np.concatenate([[0.0], np.maximum(forward, backward)[b[1:-1] - 1]])
        path = device_path(cluster, n_devices) if path is None else np.asarray(path)
        bw = np.asarray(cluster.bandwidth, np.float64)[np.ix_(path, path)]
        lat = np.asarray(cluster.latency, np.float64)[np.ix_(path, path)]
        self.order, self.bounds, self.n_devices, self.path = order, b, n_devices, path
        self.value, self.first, self.width = _dp(nb, n_devices, max(n_devices, 1), cw, co,
                                                 cg * sync_weight, bad, cuts, bw, lat)

    def best(self, n_devices: int | None = None, n_stages: int | None = None) -> Partition:
        """The partition on the path's first ``n_devices`` (default: all) in at most
        ``n_stages`` stages (default: any number)."""
        e = self.n_devices if n_devices is None else n_devices
        s = e if n_stages is None else max(1, min(n_stages, self.n_devices))
        b, j, stages = self.bounds, self.bounds.size - 1, []
        value = float(self.value[j, e, s])
        while j > 0:
            i, k = int(self.first[j, e, s]), int(self.width[j, e, s])
            if k == 0:  # device e - 1 left idle
                e -= 1
                continue
            if k < 0:  # fewer stages do as well
                s -= 1
                continue
            stages.append(Stage(self.order[b[i]:b[j]], tuple(self.path[e - k:e].tolist())))
            j, e, s = i, e - k, s - 1
        return Partition(tuple(reversed(stages)), value)


def partition(graph, cluster, compute: np.ndarray, n_devices: int,
              n_stages: int | None = None, sync_weight: float = 1.0) -> Partition:
    """The partition of ``graph`` onto devices ``0 .. n_devices - 1`` of ``cluster`` whose
    slowest stage is fastest (see the module docstring), of at most ``n_stages`` stages (any
    number when None); ``compute``: seconds per op."""
    return PartitionTable(graph, cluster, compute, n_devices, sync_weight).best(
        n_stages=n_stages)


@njit(cache=True)
def _dp(nb, nd, ns, cw, co, cg, bad, cuts, bw, lat):
    """``best[j, d, s]``: the slowest stage of blocks 0..j-1 on devices 0..d-1 in at most s
    stages; the choice (first block i and devices k of the last stage; k = 0: device d - 1
    idle; k = -1: at most s - 1 stages)."""
    inf = np.inf
    best = np.full((nb + 1, nd + 1, ns + 1), inf)
    best[0] = 0.0  # nothing to place: no stage
    ci = np.zeros((nb + 1, nd + 1, ns + 1), np.int64)
    cn = np.zeros((nb + 1, nd + 1, ns + 1), np.int64)
    for s in range(1, ns + 1):
        for j in range(1, nb + 1):
            for d in range(1, nd + 1):
                for k in range(1, d + 1):  # devices of the last stage: d - k .. d - 1
                    lo = d - k
                    # the ring over the run (closed by d - 1 -> lo), and the slowest link
                    # from the previous stage's last device into the run
                    slow_bw, slow_lat = inf, 0.0
                    for q in range(lo, d):
                        nq = q + 1 if q < d - 1 else lo
                        if k > 1 and bw[q, nq] < slow_bw:
                            slow_bw = bw[q, nq]
                        if k > 1 and lat[q, nq] > slow_lat:
                            slow_lat = lat[q, nq]
                    in_bw, in_lat = inf, 0.0
                    if lo > 0:
                        for q in range(lo, d):
                            in_bw = min(in_bw, bw[lo - 1, q])
                            in_lat = max(in_lat, lat[lo - 1, q])
                    for i in range(j - 1, -1, -1):
                        if i == 0 and k != d:
                            continue
                        if i > 0 and s == 1:
                            continue
                        if k > 1 and bad[j] - bad[i] > 0:
                            break  # a group that cannot be replicated: so do longer stages
                        t = (cw[j] - cw[i]) / k + co[j] - co[i]
                        if k > 1:
                            t += (2.0 * (k - 1) / k * (cg[j] - cg[i]) / slow_bw
                                  + 2.0 * (k - 1) * slow_lat)
                        if i > 0:
                            prev = best[i, lo, s - 1]
                            comm = in_lat + cuts[i] / in_bw
                            t = max(t, max(prev, comm))
                        if t < best[j, d, s]:
                            best[j, d, s], ci[j, d, s], cn[j, d, s] = t, i, k
                if d > 1 and best[j, d - 1, s] <= best[j, d, s]:  # leave device d - 1 idle
                    best[j, d, s], ci[j, d, s], cn[j, d, s] = best[j, d - 1, s], j, 0
                if s > 1 and best[j, d, s - 1] <= best[j, d, s]:  # fewer stages do as well
                    best[j, d, s], ci[j, d, s], cn[j, d, s] = best[j, d, s - 1], j, -1
    return best, ci, cn
