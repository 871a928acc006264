"""Subsets of a cluster's devices worth running a plan on: each server, and for every size the
best-connected devices.

Using fewer devices than a cluster has is a plan users reach by hand: data parallelism over one
server's 4 GPUs can beat it over both servers, whose all-reduce crosses a slower network. These
subsets are what the subset baselines (`moplace.core.baselines.on_devices`) and the searchers'
seeds are made from:

- **islands**: the groups of devices joined by links at least as fast as some tier of the
  cluster's bandwidths (the servers of a two-server cluster: NVLink inside, InfiniBand
  between), for every tier that splits the cluster;
- **the best ring of each size k** (1 <= k <= devices): the k devices whose all-reduce ring
  (the simulator's: the devices in index order, each hop to the next, the last back to the
  first) is fastest: the fastest slowest device first, then the largest smallest memory,
  then the widest narrowest hop, then the lowest highest hop latency, then the lowest
  indices. Every k-subset is scored up to `EXHAUSTIVE_UP_TO` devices; above, the ring grows
  greedily from the fastest device.

A subset is a tuple of device indices in the order its parts go: a cyclic run of indices
(6, 7, 0, 1) starts where the run starts, so that a genome (parts on consecutive devices)
can encode a split over it; any other subset is in increasing order.
"""

from __future__ import annotations

from itertools import combinations
from typing import NamedTuple

import numpy as np

#: Clusters up to this many devices have every subset scored (2**12 = 4096 subsets).
EXHAUSTIVE_UP_TO = 12


class DeviceSubset(NamedTuple):
    """Devices (in part order) and a label a person reads ("gpu0-3", "best 4")."""

    label: str
    devices: tuple[int, ...]


def device_subsets(cluster) -> list[DeviceSubset]:
    """Every island and the best ring of every size, without repeats and without the whole
    cluster (which the plain baselines cover), smallest first."""
    n = cluster.n_devices
    found: dict[frozenset, DeviceSubset] = {}
    for members in islands(cluster):
        key = frozenset(members)
        if len(key) < n and key not in found:
            found[key] = DeviceSubset(_span_label(cluster, members), part_order(members, n))
    for k in range(1, n):
        members = best_ring(cluster, k)
        key = frozenset(members)
        if key not in found:
            found[key] = DeviceSubset(f"best {k} ({_span_label(cluster, members)})",
                                      part_order(members, n))
    return sorted(found.values(), key=lambda s: (len(s.devices), s.devices))


def islands(cluster) -> list[tuple[int, ...]]:
    """For each distinct bandwidth (fastest first), the connected groups of devices joined by
    links at least that fast, when there is more than one group and some group has two or
    more devices."""
    n = cluster.n_devices
    if n < 2:
        return []
    bw = np.minimum(cluster.bandwidth, cluster.bandwidth.T)  # both directions
    off = ~np.eye(n, dtype=bool)
    out = []
    for tier in np.unique(bw[off])[::-1]:
        groups = _components(n, (bw >= tier) & off)
        if len(groups) > 1 and max(len(g) for g in groups) > 1:
            out += [g for g in groups if len(g) > 1]
    return out


def best_ring(cluster, k: int) -> tuple[int, ...]:
    """The k devices (increasing indices) whose ring scores best (see the module docstring)."""
    n = cluster.n_devices
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n}, got {k}")
    if n <= EXHAUSTIVE_UP_TO:
        return min(combinations(range(n), k), key=lambda s: _ring_key(cluster, s))
    speed = np.asarray(cluster.speed)
    ring = [int(np.lexsort((np.arange(n), -speed))[0])]
    while len(ring) < k:
        rest = [d for d in range(n) if d not in ring]
        ring = list(min((tuple(sorted(ring + [d])) for d in rest),
                        key=lambda s: _ring_key(cluster, s)))
    return tuple(sorted(ring))


def part_order(members, n_devices: int) -> tuple[int, ...]:
    """``members`` in the order their parts go: from the start of their cyclic run of indices
    when they form one (so a genome can encode the split), else increasing."""
    devs = sorted(set(int(d) for d in members))
    k = len(devs)
    for start in range(k):
        rotated = devs[start:] + devs[:start]
        if all((rotated[0] + i) % n_devices == rotated[i] for i in range(k)):
            return tuple(rotated)
    return tuple(devs)


def _ring_key(cluster, devices: tuple[int, ...]) -> tuple:
    """Smaller is better: the slowest device, the smallest memory, the narrowest hop, the
    slowest hop latency (negated where larger is better), then the indices."""
    d = list(devices)
    hops = [(d[i], d[(i + 1) % len(d)]) for i in range(len(d))] if len(d) > 1 else []
    narrowest = min((float(cluster.bandwidth[i, j]) for i, j in hops), default=np.inf)
    slowest_hop = max((float(cluster.latency[i, j]) for i, j in hops), default=0.0)
    return (-float(np.min(cluster.speed[d])), -float(np.min(cluster.memory[d])),
            -narrowest, slowest_hop, tuple(d))


def _components(n: int, adjacent: np.ndarray) -> list[tuple[int, ...]]:
    seen, out = np.zeros(n, bool), []
    for start in range(n):
        if seen[start]:
            continue
        stack, members = [start], []
        seen[start] = True
        while stack:
            i = stack.pop()
            members.append(i)
            for j in np.flatnonzero(adjacent[i] & ~seen).tolist():
                seen[j] = True
                stack.append(j)
        out.append(tuple(sorted(members)))
    return out


def _span_label(cluster, members) -> str:
    """``gpu0-3`` for a run of devices named with one prefix and consecutive numbers, else the
    names joined by commas."""
    names = [cluster.devices[i].name for i in sorted(members)]
    stem = names[0].rstrip("0123456789")
    nums = [name[len(stem):] for name in names]
    if all(name.startswith(stem) and num.isdigit() for name, num in zip(names, nums)):
        values = [int(v) for v in nums]
        if len(values) > 1 and values == list(range(values[0], values[0] + len(values))):
            return f"{stem}{values[0]}-{values[-1]}"
    return ",".join(names)
