"""Costs of ops and transfers on a cluster.

Compute: an op's profiled time on a device of the profiled kind; on a device of another kind,
the time on a reference kind scaled by relative speed (``t_ref * speed(ref) / speed(device)``).
Split parts: ``time / n + split_overhead_s`` unless the op has a measured ``part_compute[n]``.
Transfers: ``latency + bytes / bandwidth`` per device pair (see `Cluster` and `linkfit`).
In place: with ``inplace`` (the default), an op of an in-place type (`INPLACE_TYPES`) may write
its output into an input that no other op reads (see `moplace.simulator.taskgraph`).
"""

from __future__ import annotations

import weakref
from functools import cached_property

import numpy as np

from ..core.graph import OpGraph, inplace_sources

#: Fixed cost of one part of a split op (kernel launch, split/concat bookkeeping), seconds.
#: An assumption: no split or micro-batched step is measured yet (a calibration file,
#: `moplace.costs.calibration`, has a ``split_overhead_s`` field for one, null so far).
DEFAULT_SPLIT_OVERHEAD_S = 10e-6


#: per graph (weakly held), its ops' seconds on a kind of device (`CostModel.compute`)
_COLUMNS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class CostModel:
    """Compute and transfer times of ``graph`` on ``cluster``."""

    def __init__(self, graph: OpGraph, cluster, *, split_overhead_s: float = DEFAULT_SPLIT_OVERHEAD_S,
                 inplace: bool = True):
        if not np.isfinite(split_overhead_s) or split_overhead_s < 0:
            raise ValueError("split_overhead_s must be finite and non-negative")
        self.graph, self.cluster = graph, cluster
        self.split_overhead_s = float(split_overhead_s)
        self.inplace = bool(inplace)

    @cached_property
    def inplace_source(self) -> np.ndarray:
        """Per op, the op whose output buffer it may write into (-1: none): its first input
        whose producer has no other consumer, when the op's type runs in place and
        ``inplace`` is on. Whether it does depends on the two running on one device."""
        a = self.graph.arrays
        out = inplace_sources(a.src, a.dst, a.edge_bytes, a.out_ptr, a.in_edge,
                              a.inplace & self.inplace, len(self.graph.ops))
        out.flags.writeable = False
        return out

    @cached_property
    def compute(self) -> np.ndarray:
        """Seconds of each op on each device, shape (n_ops, n_devices)."""
        out = np.zeros((len(self.graph.ops), self.cluster.n_devices))
        done: dict[tuple[str, float], int] = {}  # devices of one kind and speed share a column
        # a column depends on the device's kind and speed and on the speeds the cluster gives
        # each kind; kept per graph, as the clusters of a search at scale differ in links only
        mix = tuple(sorted({(k, float(v)) for k, v in zip(self.cluster.kinds,
                                                              self.cluster.speed)}))
        kept = _COLUMNS.setdefault(self.graph, {})
        for d in range(self.cluster.n_devices):
            key = (self.cluster.kinds[d], float(self.cluster.speed[d]))
            if key in done:
                out[:, d] = out[:, done[key]]
                continue
            done[key] = d
            column = kept.get((key, mix))
            if column is None:
                column = kept[(key, mix)] = np.array(
                    [self._time_on(op.compute, d) for op in self.graph.ops], np.float64)
            out[:, d] = column
        out.flags.writeable = False
        return out

    @cached_property
    def ops_with_part_profiles(self) -> tuple[int, ...]:
        """Ops with measured split-part times (``Op.part_compute``)."""
        return tuple(i for i, op in enumerate(self.graph.ops) if op.part_compute)

    def part_time(self, op: int, device: int, parts: int) -> float:
        """Seconds of one of ``parts`` equal parts of op ``op`` on ``device``."""
        if parts == 1:
            return float(self.compute[op, device])
        measured = self.graph.ops[op].part_compute.get(parts)
        if measured:
            return self._time_on(measured, device)
        return float(self.compute[op, device]) / parts + self.split_overhead_s

    def with_parts(self, k: int) -> np.ndarray:
        """`compute` stacked on the seconds of one of ``k`` equal parts of each op on each
        device (`part_time`): shape (2 n_ops, n_devices), row ``n_ops + i`` for a part of op
        i. Kept per ``k`` (a micro-batched skeleton fills its copies' durations from it)."""
        kept = self.__dict__.setdefault("_with_parts", {})
        table = kept.get(k)
        if table is None:
            part = self.compute / k + (self.split_overhead_s if k > 1 else 0.0)
            for op in self.ops_with_part_profiles:
                if k in self.graph.ops[op].part_compute:
                    part[op] = [self.part_time(op, d, k) for d in range(self.cluster.n_devices)]
            table = kept[k] = np.vstack([self.compute, part])
            table.flags.writeable = False
        return table

    def transfer_time(self, src: int, dst: int, nbytes: float) -> float:
        """Seconds to move ``nbytes`` from device ``src`` to ``dst`` (0 on one device)."""
        if src == dst:
            return 0.0
        return float(self.cluster.latency[src, dst] + nbytes / self.cluster.bandwidth[src, dst])

    def _time_on(self, times, device: int) -> float:
        if not times:
            return 0.0
        kind = self.cluster.kinds[device]
        if kind in times:
            return float(times[kind])
        ref = self._reference_kind(times)
        return float(times[ref]) * self._speed_of_kind(ref) / float(self.cluster.speed[device])

    def _reference_kind(self, times) -> str:
        profiled = self.graph.metadata.get("profiled_on")
        if profiled in times:
            return profiled
        known = [k for k in times if self._known_speed(k) is not None]
        return known[0] if known else next(iter(times))

    def _speed_of_kind(self, kind: str) -> float:
        speed = self._known_speed(kind)
        return 1.0 if speed is None else speed

    def _known_speed(self, kind: str) -> float | None:
        for d, k in enumerate(self.cluster.kinds):
            if k == kind:
                return float(self.cluster.speed[d])
        from ..core.presets import kind_speed
        return kind_speed(kind)
