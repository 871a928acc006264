"""Collectives across a pod, timed as NCCL's own cost model times them (no device matrix).

A regular plan's replicas reduce their gradients, gather their ZeRO shards and exchange
their experts' tokens over groups of ranks that span servers (`moplace.simulator.replica`).
Each such collective is timed here from the pod's figures (`moplace.core.pod.Pod`), the way
NCCL's tuning model (NVIDIA/nccl ``src/graph/tuning.cc``, Simple protocol) picks its
algorithm: the time of each algorithm is ``latency + bytes / algorithm bandwidth`` and the
fastest is taken.

- **Ring** (every kind): ``2 (n - 1)`` steps for an all-reduce, ``n - 1`` for a
  reduce-scatter or an all-gather; each step in a server costs 3.4 us, each step between
  servers 9.6 us, on top of a base of 8.4 us (tuning.cc's Simple-protocol figures); its
  algorithm bandwidth is the bus bandwidth times ``n / steps``.
- **Tree** (all-reduces only): a base of 0, ``2 ((ranks per server - 1) x 28 us +
  log2(servers) x 50 us)`` of latency, half of 0.9 x the bus bandwidth (tuning.cc's tree
  figures; its per-size correction factors are left out).
- **Bus bandwidth**: inside one server, the pod's NVLink ring figure, or NVLink SHARP's for
  all-reduces above `moplace.core.pod.NVLS_FROM_BYTES`; across servers, each of the group's
  ranks in a server brings its own NIC (rail-optimized: one NIC per GPU), so the bus runs at
  ``min(NVLink, ranks per server x NIC)``, divided by the pod's oversubscription once the group
  leaves a leaf of `LEAF_SERVERS` servers.
- **All-to-all** (experts' dispatch and combine): each rank sends ``(n - 1) / n`` of its
  buffer, the share for ranks of its own server over NVLink and the rest through its NIC, at
  once; the slower of the two, plus one step's latency of the slower path.

A group is ``n`` ranks ``stride`` apart in rank order (`group_servers`), as Megatron lays out
its tensor-, context-, expert-, data- and pipeline-parallel groups.
"""

from __future__ import annotations

import math

from ..core.pod import NVLS_FROM_BYTES

ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL = ("all-reduce", "reduce-scatter",
                                                     "all-gather", "all-to-all")
KINDS = (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL)
#: tuning.cc, Simple protocol: the ring's base latency and per-step latencies in and between
#: servers, the tree's per-hop latencies (seconds)
RING_BASE, RING_INTRA, RING_INTER = 8.4e-6, 3.4e-6, 9.6e-6
TREE_INTRA, TREE_INTER = 28e-6, 50e-6
#: servers under one leaf switch of a rail-optimized fat-tree (a DGX SuperPOD scalable unit)
LEAF_SERVERS = 32


def group_servers(n: int, stride: int, per_server: int) -> tuple[int, int]:
    """(ranks per server, servers) of ``n`` ranks ``stride`` apart in servers of
    ``per_server`` consecutive ranks."""
    if n <= 1:
        return 1, 1
    if stride >= per_server:
        return 1, n
    r = min(n, max(1, per_server // stride))
    return r, math.ceil(n / r)


def bus_bandwidth(pod, n: int, stride: int, kind: str = ALL_REDUCE, nbytes: float = 0.0) -> float:
    """The bus bandwidth (bytes/s) a group of ``n`` ranks ``stride`` apart runs at (module
    docstring)."""
    r, servers = group_servers(n, stride, pod.per_server)
    nvlink = pod.nvlink_bandwidth
    if servers == 1:
        if kind == ALL_REDUCE and pod.nvls_bandwidth and nbytes >= NVLS_FROM_BYTES:
            return pod.nvls_bandwidth
        return nvlink
    nic = pod.nic_bandwidth / (pod.oversubscription if servers > LEAF_SERVERS else 1.0)
    return min(nvlink, r * nic)


def collective_time(pod, kind: str, nbytes: float, n: int, stride: int = 1) -> tuple[float, str]:
    """(seconds, algorithm) of collective ``kind`` over ``n`` ranks ``stride`` apart on
    ``pod``; ``nbytes``: the whole buffer (an all-reduce's input, a reduce-scatter's input, an
    all-gather's output), or for an all-to-all what each rank sends in all, its own share
    included. ``(0.0, "none")`` for one rank or no bytes."""
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; known: {', '.join(KINDS)}")
    if n <= 1 or nbytes <= 0:
        return 0.0, "none"
    r, servers = group_servers(n, stride, pod.per_server)
    if kind == ALL_TO_ALL:
        intra = nbytes * (r - 1) / n / pod.nvlink_bandwidth
        nic = pod.nic_bandwidth / (pod.oversubscription if servers > LEAF_SERVERS else 1.0)
        inter = nbytes * (n - r) / n / nic if servers > 1 else 0.0
        lat = pod.nic_latency if servers > 1 else pod.nvlink_latency
        return max(intra, inter) + lat, "all-to-all"
    bus = bus_bandwidth(pod, n, stride, kind, nbytes)
    steps = 2 * (n - 1) if kind == ALL_REDUCE else n - 1
    inter_steps = (2 if kind == ALL_REDUCE else 1) * (servers - 1)
    ring = (RING_BASE + (steps - inter_steps) * RING_INTRA + inter_steps * RING_INTER
            + nbytes / (bus * n / steps))
    best = (ring, "ring")
    if kind == ALL_REDUCE and servers > 1:
        tree = (2 * ((r - 1) * TREE_INTRA + math.log2(servers) * TREE_INTER)
                + nbytes / (0.5 * 0.9 * bus))
        best = min(best, (tree, "tree"))
    return best


def moved_bytes(kind: str, nbytes: float, n: int) -> float:
    """Bytes each rank sends (and receives) in collective ``kind`` of ``nbytes`` over ``n``
    ranks (`collective_time`'s convention): ``2 (n-1)/n`` of the buffer for an all-reduce,
    ``(n-1)/n`` otherwise."""
    if n <= 1:
        return 0.0
    return nbytes * (n - 1) / n * (2.0 if kind == ALL_REDUCE else 1.0)
