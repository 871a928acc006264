"""Devices and the links between them, as the flat arrays the simulator reads.

A `Cluster` is immutable. Per device: ``memory`` (bytes) and ``speed`` (relative compute speed,
see `KIND_SPEED`). Per ordered pair: ``bandwidth`` (bytes/s) and ``latency`` (s). Contention is
modelled with *resources* (a point-to-point link, a GPU's port, a server's NIC in one direction):
a transfer i->j holds every resource of its route, ``route_res[route_ptr[i*D+j]:route_ptr[i*D+j+1]]``,
for its whole duration (store-and-forward), so two transfers sharing a resource run one after the
other. ``resource_bandwidth`` is each resource's nominal capacity, for reports only: the
simulator times a transfer with the pair's ``bandwidth`` (the bottleneck of its route).
``server`` gives each device's server (an index; one server unless said otherwise): collectives
run hierarchically across servers (`moplace.simulator.collectives`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import groupby
from typing import Mapping, Sequence

import numpy as np

from ..errors import ClusterError, shown

#: Relative compute speed of a device kind. ONE rule: peak dense FP32 (non-tensor-core) TFLOPS
#: from the vendor datasheet divided by the V100 SXM2's 15.7 TFLOPS (NVIDIA Tesla V100 datasheet).
#: Family names use the SXM figure; ``-PCIe`` variants have their own entries.
KIND_SPEED: Mapping[str, float] = {
    "V100": 15.7 / 15.7,        # Tesla V100 SXM2 datasheet: 15.7 TFLOPS FP32
    "V100-PCIe": 14.0 / 15.7,   # Tesla V100 PCIe datasheet: 14 TFLOPS FP32
    "P100": 10.6 / 15.7,        # Tesla P100 datasheet, SXM2 (NVLink): 10.6 TFLOPS FP32
    "P100-PCIe": 9.3 / 15.7,    # Tesla P100 datasheet, PCIe: 9.3 TFLOPS FP32
    "A100": 19.5 / 15.7,        # A100 Tensor Core GPU datasheet: 19.5 TFLOPS FP32
    "H100": 67.0 / 15.7,        # H100 Tensor Core GPU datasheet, SXM5: 67 TFLOPS FP32
    "H100-PCIe": 51.0 / 15.7,   # same datasheet, PCIe: 51 TFLOPS FP32
    # A100 80GB SXM4 (A100 datasheet): 19.5 TFLOPS FP32 as the 40GB one; its own kind because
    # its HBM2e (2,039 GB/s) differs in `moplace.costs.devicespecs`.
    "A100-80GB": 19.5 / 15.7,
    "H200": 67.0 / 15.7,        # H200 Tensor Core GPU datasheet, SXM: 67 TFLOPS FP32
    "B200": 75.0 / 15.7,        # NVIDIA HGX B200 specifications, per GPU: 75 TFLOPS FP32
    # One Xeon Gold 6148 socket (Intel ARK): 20 cores x 2.2 GHz AVX-512 base x 32 FP32 FLOP/cycle
    # (two FMA units x 16 lanes x 2) = 1.41 TFLOPS peak; an assumption for host-side ops.
    "cpu": 1.41 / 15.7,
}
_SPEED_BY_LOWER = {k.lower(): v for k, v in KIND_SPEED.items()}


def kind_speed(kind: str) -> float | None:
    """Relative speed of device kind ``kind`` (case-insensitive), or None when unknown."""
    return _SPEED_BY_LOWER.get(str(kind).lower())


@dataclass(frozen=True)
class Device:
    """One device: ``memory_bytes`` of memory, ``speed`` relative to a V100 (= 1.0)."""

    name: str
    kind: str
    memory_bytes: int
    speed: float


def _frozen(values, dtype, shape=None) -> np.ndarray:
    arr = np.array(values, dtype=dtype, copy=True, order="C")
    if shape is not None and arr.shape != shape:
        raise ClusterError(f"expected an array of shape {shape}, got {arr.shape}")
    arr.flags.writeable = False
    return arr


class Cluster:
    """An immutable set of devices, their pairwise links and the resources those links share.

    ``routes`` maps each ordered pair ``(i, j)``, i != j, to the resource indices it holds; when
    omitted every ordered pair gets its own dedicated link. ``resource_bandwidth`` defaults to the
    fastest pair using each resource. ``labels`` names a pair's link technology (``"NVLink"``) for
    `describe`; it is kept as ``link_labels``, one string per pair ``i*D+j`` ("" when unnamed).
    ``servers``: each device's server index (default: all in server 0); servers are numbered
    0, 1, ... in order of their first device.
    """

    def __init__(self, name: str, devices: Sequence[Device], bandwidth, latency, *,
                 resource_names: Sequence[str] | None = None,
                 routes: Mapping[tuple[int, int], Sequence[int]] | None = None,
                 resource_bandwidth: Sequence[float] | None = None,
                 labels: Mapping[tuple[int, int], str] | None = None,
                 servers: Sequence[int] | None = None):
        devices = tuple(devices)
        _check_devices(devices)
        n = len(devices)
        bw = _frozen(bandwidth, np.float64, (n, n))
        lat = _frozen(latency, np.float64, (n, n))
        _check_links(devices, bw, lat)
        if routes is None:
            resource_names = [f"{a.name}->{b.name}" for a in devices for b in devices if a is not b]
            pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
            routes = {p: [r] for r, p in enumerate(pairs)}
        names = tuple(str(r) for r in resource_names or ())
        ptr, res = _compile_routes(n, len(names), routes)
        if resource_bandwidth is None:
            resource_bandwidth = _fastest_user(n, len(names), ptr, res, bw)
        self.__dict__.update(
            name=str(name), devices=devices, n_devices=n,
            kinds=tuple(d.kind for d in devices),
            memory=_frozen([d.memory_bytes for d in devices], np.float64),
            speed=_frozen([d.speed for d in devices], np.float64),
            bandwidth=bw, latency=lat, n_resources=len(names), resource_names=names,
            route_ptr=ptr, route_res=res,
            resource_bandwidth=_frozen(resource_bandwidth, np.float64, (len(names),)),
            link_labels=tuple((labels or {}).get((k // n, k % n), "") for k in range(n * n)),
            server=_servers(servers, n),
        )

    def __setattr__(self, key, value):
        raise AttributeError(f"Cluster is immutable (tried to set {key!r})")

    def __setstate__(self, state):
        # unpickled arrays come back writeable; freeze them again
        for value in state.values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        if "server" not in state:  # pickled before clusters knew their servers: one server
            state["server"] = _servers(None, state["n_devices"])
        self.__dict__.update(state)

    @property
    def n_servers(self) -> int:
        """How many servers the devices sit in."""
        return int(self.server.max()) + 1

    @property
    def device_names(self) -> tuple[str, ...]:
        """The devices' names, in device order."""
        return tuple(d.name for d in self.devices)

    def __repr__(self) -> str:
        return f"Cluster({self.name!r}, {self.n_devices} devices, {self.n_resources} resources)"

    @classmethod
    def single(cls, kind: str = "V100", memory_bytes: int = 16 * 2**30,
               speed: float | None = None) -> "Cluster":
        """A one-device cluster; ``speed`` defaults to `kind_speed(kind)` (1.0 if unknown)."""
        return cls.uniform(1, kind=kind, memory_bytes=memory_bytes, speed=speed)

    @classmethod
    def uniform(cls, devices: int | Sequence[str], *, kind: str | Sequence[str] = "V100",
                memory_bytes=16 * 2**30, speed=None, bandwidth=None, latency=0.0,
                name: str | None = None, prefix: str = "gpu") -> "Cluster":
        """A cluster in which every ordered pair of devices has a dedicated link of its own.

        ``devices``: how many (named ``prefix0``, ``prefix1``, ...) or their names. ``kind``,
        ``memory_bytes`` and ``speed`` are one value for every device or one per device;
        ``speed`` defaults to `kind_speed` of the device's kind (1.0 if unknown).
        ``bandwidth`` (bytes/s, needed with two devices or more) and ``latency`` (s) are one
        value for every pair or a D x D matrix (its diagonal is ignored). ``name`` defaults to
        ``"DxKIND"`` (``"2xV100+1xP100"`` for mixed kinds).
        """
        names = ([f"{prefix}{i}" for i in range(devices)] if isinstance(devices, int)
                 else [str(d) for d in devices])
        n = len(names)
        kinds = [str(k) for k in _per_device(kind, n, "kind")]
        memory = _per_device(memory_bytes, n, "memory_bytes")
        speeds = [kind_speed(k) if s is None else s
                  for k, s in zip(kinds, _per_device(speed, n, "speed"))]
        devs = [Device(d, k, int(m), 1.0 if s is None else float(s))
                for d, k, m, s in zip(names, kinds, memory, speeds)]
        if bandwidth is None:
            if n > 1:
                raise ClusterError("Cluster.uniform: give the links' bandwidth (bytes/s)")
            bandwidth = math.inf
        if name is None:
            counts = {k: kinds.count(k) for k in kinds}
            name = "+".join(f"{c}x{k}" for k, c in counts.items())
        return cls(name, devs, _per_pair(bandwidth, n), _per_pair(latency, n))

    def route(self, i: int, j: int) -> np.ndarray:
        """Resource indices held by a transfer from device ``i`` to device ``j``."""
        k = i * self.n_devices + j
        return self.route_res[self.route_ptr[k]:self.route_ptr[k + 1]]

    def transfer_time(self, i: int, j: int, nbytes: float) -> float:
        """Seconds to move ``nbytes`` from device ``i`` to ``j``: latency + bytes / bandwidth."""
        if i == j:
            return 0.0
        return float(self.latency[i, j] + nbytes / self.bandwidth[i, j])

    def with_links(self, fits: Mapping[tuple[int, int], object]) -> "Cluster":
        """A copy with the given pairs' figures replaced; routes and resources are kept.

        Values are ``(latency_s, bandwidth_Bps)`` or objects with those attributes (`LinkFit`).
        """
        bw, lat = self.bandwidth.copy(), self.latency.copy()
        for (i, j), fit in fits.items():
            if not (0 <= i < self.n_devices and 0 <= j < self.n_devices) or i == j:
                raise ClusterError(f"with_links: bad device pair ({i}, {j})")
            if hasattr(fit, "bandwidth_Bps"):
                fit = (fit.latency_s, fit.bandwidth_Bps)
            lat[i, j], bw[i, j] = fit
        return self.with_figures(self.name, self.devices, bw, lat)

    def capped(self, memory_bytes: float) -> "Cluster":
        """This cluster with no device holding more than ``memory_bytes`` (a user's per-device
        memory cap: "what fits in 8 GiB"), named for it; links, routes and servers kept."""
        if not _finite_positive(memory_bytes):
            raise ClusterError(f"a memory cap must be a finite number of bytes > 0, got "
                               f"{shown(memory_bytes)}")
        cap = int(memory_bytes)
        devices = [Device(d.name, d.kind, min(d.memory_bytes, cap), d.speed)
                   for d in self.devices]
        return self.with_figures(f"{self.name} (memory capped at {_size_text(cap)})", devices,
                          self.bandwidth, self.latency)

    def with_figures(self, name: str, devices, bandwidth, latency,
                     resource_bandwidth=None) -> "Cluster":
        """A cluster of ``devices`` and these link figures (and resource bandwidths: this
        one's unless given), with this one's routes, resources, labels and servers."""
        n = self.n_devices
        routes = {(i, j): self.route(i, j) for i in range(n) for j in range(n) if i != j}
        labels = {(k // n, k % n): s for k, s in enumerate(self.link_labels) if s}
        return Cluster(name, devices, bandwidth, latency, resource_names=self.resource_names,
                       routes=routes, labels=labels,
                       resource_bandwidth=(self.resource_bandwidth if resource_bandwidth is None
                                           else resource_bandwidth),
                       servers=self.server)

    def describe(self) -> str:
        """A human-readable table of devices and links (used by ``moplace clusters``)."""
        lines = [f"{self.name}: {self.n_devices} device(s), {self.n_resources} link resource(s)",
                 f"  {'device':<10} {'kind':<10} {'memory':>10} {'speed':>6}"]
        for d in self.devices:
            lines.append(f"  {d.name:<10} {d.kind:<10} {d.memory_bytes / 2**30:>6.1f} GiB "
                         f"{d.speed:>6.2f}")
        if self.n_servers > 1:
            members = [np.flatnonzero(self.server == k) for k in range(self.n_servers)]
            lines.append(f"  servers: {self.n_servers} ("
                         + "; ".join(_span(self, m) for m in members) + ")")
        if self.n_devices > 1:
            lines.append("  links (per direction):")
            lines += [f"    {pairs}: {what}" for pairs, what in _link_groups(self)]
        return "\n".join(lines)


def _size_text(nbytes: int) -> str:
    """A memory size in the largest binary unit that keeps it at least 1 (3 GiB, 512 MiB)."""
    for unit, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if nbytes >= unit:
            return f"{nbytes / unit:.4g} {name}"
    return f"{nbytes} B"


def _servers(servers, n: int) -> np.ndarray:
    """Each device's server index, checked: 0, 1, ... numbered in order of first device."""
    if servers is None:
        return _frozen(np.zeros(n, np.int64), np.int64)
    try:
        arr = np.array(servers, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise ClusterError(f"servers: expected one integer per device, got {shown(servers)}") \
            from None
    if arr.shape != (n,):
        raise ClusterError(f"servers: expected {n} entries (one per device), got {arr.size}")
    first = np.unique(arr, return_index=True)[1]
    if arr.min() != 0 or not np.array_equal(arr[np.sort(first)], np.arange(first.size)):
        raise ClusterError("servers: number them 0, 1, ... in order of their first device, got "
                           f"{shown(arr.tolist())}")
    return _frozen(arr, np.int64)


def _per_device(value, n: int, what: str) -> list:
    """``value`` for each of ``n`` devices: one value for all (a string is one value) or one
    per device."""
    if value is None or isinstance(value, str) or np.ndim(value) == 0:
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise ClusterError(f"{what}: expected one value or {n} (one per device), got "
                           f"{len(values)}")
    return values


def _per_pair(value, n: int):
    """``value`` for each ordered pair: one value for all, or already an n x n matrix."""
    return np.full((n, n), float(value)) if np.ndim(value) == 0 else value


def _check_devices(devices: tuple[Device, ...]) -> None:
    if not devices:
        raise ClusterError("a cluster needs at least one device")
    for d in devices:
        if not isinstance(d, Device):
            raise ClusterError(f"not a Device: {shown(d)}")
    names = [d.name for d in devices]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ClusterError(f"duplicate device names: {', '.join(dupes)}")
    for d in devices:
        if not _finite_positive(d.memory_bytes):
            raise ClusterError(f"device {d.name}: memory must be a finite number > 0, got "
                               f"{shown(d.memory_bytes)}")
        if not _finite_positive(d.speed):
            raise ClusterError(f"device {d.name}: speed must be finite and > 0, got "
                               f"{shown(d.speed)}")


def _finite_positive(x) -> bool:
    try:
        return math.isfinite(x) and x > 0
    except (TypeError, OverflowError):  # not a number; an integer too large for a float
        return False


def _check_links(devices, bw: np.ndarray, lat: np.ndarray) -> None:
    n = len(devices)
    for i in range(n):
        for j in range(n):
            pair = f"{devices[i].name}->{devices[j].name}"
            if i != j and not (math.isfinite(bw[i, j]) and bw[i, j] > 0):
                raise ClusterError(f"bandwidth {pair} must be finite and > 0, got {bw[i, j]}")
            if not (math.isfinite(lat[i, j]) and lat[i, j] >= 0):
                raise ClusterError(f"latency {pair} must be finite and >= 0, got {lat[i, j]}")
    # the diagonal is fixed by convention, so readers never special-case it
    bw.flags.writeable = lat.flags.writeable = True
    np.fill_diagonal(bw, math.inf)
    np.fill_diagonal(lat, 0.0)
    bw.flags.writeable = lat.flags.writeable = False


def _compile_routes(n: int, n_res: int, routes) -> tuple[np.ndarray, np.ndarray]:
    ptr, res = [0], []
    for i in range(n):
        for j in range(n):
            route = [] if i == j else list(routes.get((i, j), ()))
            if i != j and not route:
                raise ClusterError(f"no route for device pair ({i}, {j})")
            if any(not 0 <= int(r) < n_res for r in route):
                raise ClusterError(f"route ({i}, {j}) names an unknown resource: {shown(route)}")
            res.extend(int(r) for r in route)
            ptr.append(len(res))
    return _frozen(ptr, np.int64), _frozen(res, np.int64)


def _fastest_user(n, n_res, ptr, res, bw) -> np.ndarray:
    out = np.zeros(n_res)
    for k in range(n * n):
        np.maximum.at(out, res[ptr[k]:ptr[k + 1]], bw[k // n, k % n])
    return np.where(out > 0, out, math.inf)


def _link_groups(c: Cluster) -> list[tuple[str, str]]:
    """Pairs with the same figures and kind of sharing, as ``("gpu0-3 <-> gpu0-3", text)``."""
    n, users = c.n_devices, np.bincount(c.route_res, minlength=c.n_resources)
    groups: dict[str, dict[int, set[int]]] = {}
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            route = c.route(i, j)
            if all(users[r] == 1 for r in route):
                sharing = "dedicated"
            else:  # digits name one server or GPU: the pattern is what pairs have in common
                shared = dict.fromkeys(re.sub(r"\d+", "*", c.resource_names[r]) for r in route)
                sharing = f"via {', '.join(shared)} (shared)"
            label = c.link_labels[i * n + j]
            what = (f"{label + ' ' if label else ''}{c.bandwidth[i, j] / 1e9:.4g} GB/s, "
                    f"{c.latency[i, j] * 1e6:.3g} us, {sharing}")
            groups.setdefault(what, {}).setdefault(i, set()).add(j)
    out = []
    for what, dsts in groups.items():
        # sources whose peers plus themselves are the same set T, and which make up T: a clique
        by_closed: dict[frozenset, list[int]] = {}
        for i, js in dsts.items():
            by_closed.setdefault(frozenset(js | {i}), []).append(i)
        by_dst: dict[frozenset, list[int]] = {}
        for closed, srcs in by_closed.items():
            if set(srcs) == closed:
                out.append((f"{_span(c, closed)} <-> {_span(c, closed)}", what))
            else:
                for i in srcs:
                    by_dst.setdefault(frozenset(dsts[i]), []).append(i)
        out += [(f"{_span(c, i)} -> {_span(c, js)}", what) for js, i in by_dst.items()]
    return out


def _span(c: Cluster, indices) -> str:
    """Compact device names: gpu0, gpu1, gpu2, gpu5 -> gpu0-2,5 (names are listed otherwise)."""
    names = [c.devices[k].name for k in sorted(indices)]
    found = [re.fullmatch(r"(\D*)(\d+)", n) for n in names]
    if not all(found) or len({m.group(1) for m in found}) > 1:
        return ",".join(names)
    numbers = [int(m.group(2)) for m in found]
    runs = groupby(enumerate(numbers), lambda t: t[1] - t[0])  # consecutive numbers
    parts = [[k for _, k in run] for _, run in runs]
    text = ",".join(str(p[0]) if len(p) == 1 else f"{p[0]}-{p[-1]}" for p in parts)
    return found[0].group(1) + text
