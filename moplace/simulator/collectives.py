"""How a collective runs on a set of devices, as NCCL runs it.

- **Inside a server**, a ring in the order that uses the fastest links: of all rings through
  the devices, the one whose slowest link is fastest, then whose largest and total latencies
  are least, then the first in lexicographic order (NCCL searches rings over the topology; on
  a DGX-1 it finds the all-NVLink ring 0-1-3-2-6-7-5-4 that sorted order misses). Up to
  `EXACT_RING` devices every ring is tried; beyond, a greedy ring (the fastest link onward).
- **Across servers**, when every server holds the same number k >= 2 of the devices, a
  hierarchical all-reduce: a reduce-scatter on each server's ring, then k all-reduces across
  servers, the i-th among the devices i-th on their server's ring, each of 1/k of the buffer
  (over their NICs: those sharing a NIC take turns), then an all-gather on each server's ring.
  Otherwise (one device per server, or servers holding different numbers) one ring through
  every device.

Reduce-scatter and all-gather are collectives of their own (`collective_plan`; sharding needs
them): inside a server a ring; across servers the reduce-scatter inside each server then 1/k
across per rank, the all-gather the other way round.

A collective is a sequence of *stages*, each of *phases* that run side by side; each phase
becomes a task of the trace that holds its rings' links for its duration. A phase on rings of
m devices moving a buffer of b bytes (each ring its ``share`` of it) takes

- all-reduce: ``2 (m-1)`` steps, moving ``2 (m-1)/m * share * b`` in and out of every device;
- reduce-scatter and all-gather: ``m-1`` steps, moving ``(m-1)/m * share * b``;

a step being the slowest link's ``latency + share * b / (m * bandwidth)`` (the bus-bandwidth
factors of nccl-tests). A flat ring on sorted devices in one server is exactly the
all-reduce moplace modelled before.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .devsets import distinct, members

#: collective kinds, as codes in a task graph and a trace
ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER = 0, 1, 2
KINDS = ("all-reduce", "reduce-scatter", "all-gather")
#: rings of up to this many devices are found by trying every ring (8! = 40,320 at 9)
EXACT_RING = 9
#: a bucket reduced across servers goes in pieces of at most this many bytes, pipelined
#: (NCCL moves a buffer through its stages in chunks, so a piece's reduce-scatter inside a
#: server overlaps the previous piece's transfer across servers)
PIECE_BYTES = 16 * 2**20


@dataclass(frozen=True, eq=False)
class Ring:
    """Devices in ring order, and the latency and bandwidth of each link (device k to k+1)."""

    devices: tuple[int, ...]
    latency: np.ndarray
    bandwidth: np.ndarray

    def step(self, chunk: np.ndarray) -> np.ndarray:
        """Seconds of one ring step moving ``chunk`` bytes per link (an array of sizes)."""
        if len(self.devices) < 2:
            return np.zeros_like(chunk)
        return np.max(self.latency[None, :] + chunk[:, None] / self.bandwidth[None, :], axis=1)


@dataclass(frozen=True, eq=False)
class Phase:
    """Rings of equal size running one kind of collective side by side, each on ``share``
    of the buffer; ``devices`` (sorted) and ``resources`` are what the phase's task holds."""

    kind: int
    rings: tuple[Ring, ...]
    share: float
    devices: np.ndarray
    resources: np.ndarray

    @property
    def ring_size(self) -> int:
        return len(self.rings[0].devices)

    def duration(self, nbytes: np.ndarray) -> np.ndarray:
        """Seconds the phase takes on buffers of ``nbytes`` (an array)."""
        m = self.ring_size
        steps = 2 * (m - 1) if self.kind == ALL_REDUCE else m - 1
        chunk = np.asarray(nbytes, np.float64) * self.share / m
        return steps * np.max([r.step(chunk) for r in self.rings], axis=0)

    def traffic(self, nbytes: np.ndarray) -> np.ndarray:
        """Bytes each of the phase's devices sends (and receives) on buffers of ``nbytes``."""
        m = self.ring_size
        factor = 2 * (m - 1) / m if self.kind == ALL_REDUCE else (m - 1) / m
        return factor * self.share * np.asarray(nbytes, np.float64)


#: a collective's stages: each a tuple of phases that run side by side
Plan = tuple[tuple[Phase, ...], ...]

_PLANS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def all_reduce_plan(cluster, devices) -> Plan:
    """The stages of an all-reduce among ``devices`` (indices into ``cluster``), as NCCL runs
    it (see the module docstring); kept per cluster and device set."""
    return collective_plan(cluster, devices, ALL_REDUCE)


def collective_plan(cluster, devices, kind: int) -> Plan:
    """The stages of a collective of ``kind`` (`ALL_REDUCE`, `REDUCE_SCATTER`, `ALL_GATHER`)
    among ``devices``, kept per cluster, device set and kind. Across servers holding k >= 2
    devices each: a reduce-scatter inside each server, then one of 1/k across servers per
    rank (each device ends with its 1/n of the buffer); an all-gather the other way round;
    an all-reduce as in the module docstring."""
    key = (tuple(sorted(set(int(d) for d in devices))), int(kind))
    with _LOCK:
        kept = _PLANS.setdefault(cluster, {})
        plan = kept.get(key)
    if plan is None:
        plan = _plan(cluster, *key)
        with _LOCK:
            kept[key] = plan
    return plan


def ring_plans(cluster, masks: np.ndarray, kinds) -> tuple[list, np.ndarray]:
    """The plans of collectives on the device sets ``masks`` (rows of bitmask words,
    `moplace.simulator.devsets`) of ``kinds`` (one or per row), each distinct (devices, kind)
    planned once: the plans, and each row's plan."""
    masks = np.asarray(masks, np.int64)
    keys, plan_of = distinct(masks if masks.ndim == 2 else masks[:, None], kinds)
    plans = [collective_plan(cluster, members(k[:-1]), int(k[-1])) for k in keys]
    return plans, plan_of


def _plan(cluster, devs: tuple[int, ...], kind: int = ALL_REDUCE) -> Plan:
    server = cluster.server[list(devs)]
    servers = sorted(set(server.tolist()))
    counts = {s: int(np.sum(server == s)) for s in servers}
    k = counts[servers[0]]
    if len(servers) == 1 or k < 2 or any(c != k for c in counts.values()):
        return ((_phase(cluster, kind, [best_ring(cluster, devs)], 1.0),),)
    local = [best_ring(cluster, [d for d in devs if cluster.server[d] == s]) for s in servers]
    across = tuple(_phase(cluster, kind, [best_ring(cluster, [r[i] for r in local])], 1.0 / k)
                   for i in range(k))
    if kind == REDUCE_SCATTER:
        return ((_phase(cluster, REDUCE_SCATTER, local, 1.0),), across)
    if kind == ALL_GATHER:
        return (across, (_phase(cluster, ALL_GATHER, local, 1.0),))
    return ((_phase(cluster, REDUCE_SCATTER, local, 1.0),), across,
            (_phase(cluster, ALL_GATHER, local, 1.0),))


def _phase(cluster, kind: int, rings, share: float) -> Phase:
    made, devices, resources = [], [], []
    for ring in rings:
        n = len(ring)
        links = [(ring[i], ring[(i + 1) % n]) for i in range(n)] if n > 1 else []
        made.append(Ring(tuple(ring), np.array([cluster.latency[i, j] for i, j in links]),
                         np.array([cluster.bandwidth[i, j] for i, j in links])))
        devices += ring
        resources += [r for i, j in links for r in cluster.route(i, j).tolist()]
    return Phase(kind, tuple(made), share, np.array(sorted(devices), np.int64),
                 np.unique(np.array(resources, np.int64)))


def best_ring(cluster, devices) -> list[int]:
    """The ring through ``devices`` that NCCL's search would pick (see the module docstring),
    starting at the lowest device."""
    devs = sorted(int(d) for d in devices)
    n = len(devs)
    if n <= 2:
        return devs
    bw = cluster.bandwidth[np.ix_(devs, devs)]
    lat = cluster.latency[np.ix_(devs, devs)]
    if n > EXACT_RING:
        return [devs[k] for k in _greedy_ring(bw, lat)]
    rings, nxt = _rings(n)
    slowest = bw[rings, nxt].min(axis=1)
    worst_lat, total_lat = lat[rings, nxt].max(axis=1), lat[rings, nxt].sum(axis=1)
    best = np.lexsort((np.arange(len(rings)), total_lat, worst_lat, -slowest))[0]
    return [devs[k] for k in rings[best].tolist()]


@lru_cache(maxsize=None)
def _rings(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ring through n devices starting at device 0, in lexicographic order, and each
    position's successor."""
    rings = np.array([(0,) + p for p in itertools.permutations(range(1, n))], np.int64)
    rings.flags.writeable = False
    nxt = np.roll(rings, -1, axis=1)
    nxt.flags.writeable = False
    return rings, nxt


def _greedy_ring(bw: np.ndarray, lat: np.ndarray) -> list[int]:
    ring, left = [0], set(range(1, bw.shape[0]))
    while left:
        here = ring[-1]
        nxt = min(left, key=lambda j: (-bw[here, j], lat[here, j], j))
        ring.append(nxt)
        left.remove(nxt)
    return ring
