"""PipeDream's partitioner (SOSP'19): contiguous stages, each on a run of devices, by dynamic
programming over the co-location groups in topological order.

The graph's co-location groups (a layer's forward, backward and update ops share one), in
data-flow order (`chain_order`: a topological order of the layers, as PipeDream orders its
profiles' DAGs), are the chain of "layers" PipeDream partitions.
A chain longer than `MAX_BLOCKS` is cut first into that many contiguous blocks of about equal
compute. Then, with devices taken in the cluster's order (servers are numbered in runs, so a
run of devices stays inside a server where it can):

    A(j, d) = min over i < j, d' <= d of max(A(i, d - d'), C(i, d - d'), T(i..j, d'))

the best time of the slowest stage for blocks 0..j-1 on devices 0..d-1 (or on fewer of the
first ones, when that is not slower: ``A(j, d - 1)``), where
``T(i..j, d')`` is the stage of blocks i..j-1 replicated over the d' devices before d: its
compute divided among them plus its weight gradients' ring all-reduce on those devices,
``2 (d'-1)/d' * W / B + 2 (d'-1) * latency`` (B the slowest link between consecutive devices of
the run; a stage can be replicated only where every op of it can be split on batch), and
``C(i, e)`` the transfer of what crosses the cut before block i, forward activations and
backward gradients, over the link from device e - 1 to e. ``A(j, d)`` with a single stage
(``i = 0``) needs ``d' = d``. The program also counts stages, so that a partition of at most
S stages can be asked for (fewer stages, a smaller bubble: ``(S - 1) / (m + S - 1)`` of a
flushed pipeline of m micro-batches is idle). Times are the whole minibatch's, on device 0's kind.
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
    """Groups ``groups`` (co-location group ids) on devices ``first .. first + n - 1``."""

    groups: np.ndarray
    first: int
    n: int


@dataclass(frozen=True)
class Partition:
    """Stages in pipeline order and the partitioner's estimate of its slowest stage (s)."""

    stages: tuple[Stage, ...]
    slowest_s: float

    @property
    def n_devices(self) -> int:
        return sum(s.n for s in self.stages)


def chain(graph, compute: np.ndarray):
    """The groups in topological order and, per group, its compute (s), weight-gradient bytes
    and whether it can be replicated (every op splits on batch); per cut after group k of
    that order, the bytes crossing it."""
    a = graph.arrays
    order = chain_order(graph, compute)
    pos = np.empty(a.n_groups, np.int64)
    pos[order] = np.arange(order.size)
    g_of = pos[a.group]
    work = np.bincount(g_of, weights=compute, minlength=order.size)
    grad = np.bincount(g_of, weights=a.grad_bytes, minlength=order.size)
    batch = (a.split_mask & 1) == 1
    replicable = np.bincount(g_of, weights=~batch, minlength=order.size) == 0
    ps, pd = g_of[a.src], g_of[a.dst]
    lo, hi = np.minimum(ps, pd), np.maximum(ps, pd)
    diff = np.zeros(order.size + 1)
    np.add.at(diff, lo, a.edge_bytes)
    np.add.at(diff, hi, -a.edge_bytes)
    cut = np.cumsum(diff)[:-1]  # cut[k]: bytes between groups <= k and groups > k
    return order, work, grad, replicable, cut


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


class PartitionTable:
    """The dynamic program's table for ``graph`` on devices ``0 .. n_devices - 1`` (see the
    module docstring), counting ``sync_weight`` of a replicated stage's all-reduce: the best
    partition on the first d devices in at most s stages, for every d and s, by `best`."""

    def __init__(self, graph, cluster, compute: np.ndarray, n_devices: int,
                 sync_weight: float = 1.0):
        order, work, grad, replicable, cut = chain(graph, compute)
        b = blocks(work)
        nb = b.size - 1
        cw = np.concatenate([[0.0], np.cumsum(work)])[b]
        cg = np.concatenate([[0.0], np.cumsum(grad)])[b]
        bad = np.concatenate([[0], np.cumsum(~replicable)])[b]
        cuts = np.concatenate([[0.0], cut[b[1:-1] - 1]])  # cuts[i]: before block i
        d = np.arange(n_devices)
        nxt = (d + 1) % max(n_devices, 1)
        bw = np.asarray(cluster.bandwidth, np.float64)[d, nxt]
        lat = np.asarray(cluster.latency, np.float64)[d, nxt]
        self.order, self.bounds, self.n_devices = order, b, n_devices
        self.value, self.first, self.width = _dp(nb, n_devices, max(n_devices, 1), cw,
                                                 cg * sync_weight, bad, cuts, bw, lat)

    def best(self, n_devices: int | None = None, n_stages: int | None = None) -> Partition:
        """The partition on the first ``n_devices`` (default: all) in at most ``n_stages``
        stages (default: any number)."""
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
            stages.append(Stage(self.order[b[i]:b[j]], e - k, k))
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
def _dp(nb, nd, ns, cw, cg, bad, cuts, bw, lat):
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
                    slow_bw, slow_lat = inf, 0.0
                    for q in range(lo, d - 1):
                        if bw[q] < slow_bw:
                            slow_bw = bw[q]
                        if lat[q] > slow_lat:
                            slow_lat = lat[q]
                    for i in range(j - 1, -1, -1):
                        if i == 0 and k != d:
                            continue
                        if i > 0 and s == 1:
                            continue
                        if k > 1 and bad[j] - bad[i] > 0:
                            break  # a group that cannot be replicated: so do longer stages
                        t = (cw[j] - cw[i]) / k
                        if k > 1:
                            t += (2.0 * (k - 1) / k * (cg[j] - cg[i]) / slow_bw
                                  + 2.0 * (k - 1) * slow_lat)
                        if i > 0:
                            prev = best[i, lo, s - 1]
                            comm = lat[lo - 1] + 2.0 * cuts[i] / bw[lo - 1]
                            t = max(t, max(prev, comm))
                        if t < best[j, d, s]:
                            best[j, d, s], ci[j, d, s], cn[j, d, s] = t, i, k
                if d > 1 and best[j, d - 1, s] <= best[j, d, s]:  # leave device d - 1 idle
                    best[j, d, s], ci[j, d, s], cn[j, d, s] = best[j, d - 1, s], j, 0
                if s > 1 and best[j, d, s - 1] <= best[j, d, s]:  # fewer stages do as well
                    best[j, d, s], ci[j, d, s], cn[j, d, s] = best[j, d, s - 1], j, -1
    return best, ci, cn
