"""A strategy: where each op runs, in what order, and which ops are split.

- placement: one device index per op (for a split op, the device of its first part);
- priority: one number per op; among ready ops on a device the highest runs first
  (ties: lower op index first);
- splits: op index -> `Split(dim, devices)`, one device per part (at least two parts).

Ops in one co-location group must have the same placement and the same split. Pure model
parallelism is a strategy without splits; pure data parallelism splits every op on ``batch``
across all devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import numpy as np

from .errors import StrategyError
from .graph import OpGraph


@dataclass(frozen=True)
class Split:
    """Cut an op along ``dim`` into ``len(devices)`` equal parts, part k on ``devices[k]``."""

    dim: str
    devices: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "devices", tuple(int(d) for d in self.devices))

    @property
    def parts(self) -> int:
        return len(self.devices)


class Strategy:
    """An immutable placement + priority + split assignment for one `OpGraph`."""

    def __init__(self, placement, priority=None, splits: Mapping[int, Split] | None = None):
        self.placement = _readonly(np.asarray(placement, dtype=np.int64))
        n = self.placement.shape[0]
        if priority is None:
            priority = -np.arange(n, dtype=np.float64)
        self.priority = _readonly(np.asarray(priority, dtype=np.float64))
        self.splits: Mapping[int, Split] = MappingProxyType(dict(sorted((splits or {}).items())))
        if self.priority.shape != (n,):
            raise StrategyError(f"priority has {self.priority.size} entries for {n} ops")

    def __eq__(self, other) -> bool:
        return (isinstance(other, Strategy) and np.array_equal(self.placement, other.placement)
                and np.array_equal(self.priority, other.priority)
                and dict(self.splits) == dict(other.splits))

    def __hash__(self) -> int:
        return hash((self.placement.tobytes(), self.priority.tobytes(), tuple(self.splits.items())))

    def __repr__(self) -> str:
        return (f"Strategy({self.placement.size} ops on {len(set(self.placement.tolist()))} devices, "
                f"{len(self.splits)} splits)")

    def devices_of(self, op: int) -> tuple[int, ...]:
        """Devices running op ``op``: its parts' devices, or its one device."""
        split = self.splits.get(op)
        return split.devices if split else (int(self.placement[op]),)

    def validate(self, graph: OpGraph, n_devices: int) -> "Strategy":
        """Check this strategy against ``graph`` and a cluster of ``n_devices``; return self."""
        n = len(graph.ops)
        if self.placement.shape != (n,):
            raise StrategyError(f"strategy places {self.placement.size} ops but graph "
                                f"{graph.name!r} has {n}")
        bad = np.flatnonzero((self.placement < 0) | (self.placement >= n_devices))
        if bad.size:
            i = int(bad[0])
            raise StrategyError(f"op {graph.ops[i].name!r} is placed on device "
                                f"{int(self.placement[i])}, out of range 0..{n_devices - 1}")
        if not np.all(np.isfinite(self.priority)):
            i = int(np.flatnonzero(~np.isfinite(self.priority))[0])
            raise StrategyError(f"op {graph.ops[i].name!r} has a non-finite priority")
        for i, split in self.splits.items():
            _check_split(graph, i, split, n_devices, int(self.placement[i]))
        _check_groups(graph, self)
        return self


def _check_split(graph: OpGraph, i: int, split: Split, n_devices: int, first: int) -> None:
    if not 0 <= i < len(graph.ops):
        raise StrategyError(f"split names op index {i}, out of range")
    op = graph.ops[i]
    if split.dim not in op.splittable:
        raise StrategyError(f"op {op.name!r} cannot be split on {split.dim!r} "
                            f"(splittable: {list(op.splittable) or 'none'})")
    if split.parts < 2:
        raise StrategyError(f"op {op.name!r}: a split needs at least 2 parts")
    bad = [d for d in split.devices if not 0 <= d < n_devices]
    if bad:
        raise StrategyError(f"op {op.name!r}: split part on device {bad[0]}, out of range "
                            f"0..{n_devices - 1}")
    if split.devices[0] != first:
        raise StrategyError(f"op {op.name!r}: placement must equal the first part's device")


def _check_groups(graph: OpGraph, strategy: Strategy) -> None:
    head = graph.group_head
    bad = np.flatnonzero(strategy.placement != strategy.placement[head])
    split_ops = set(strategy.splits) | {int(head[i]) for i in strategy.splits}
    bad_split = [i for i in sorted(split_ops) for m in graph.groups[graph.arrays.group[i]]
                 if strategy.splits.get(m) != strategy.splits.get(i)]
    if bad.size or bad_split:
        m = int(bad[0]) if bad.size else bad_split[0]
        a = graph.ops[int(head[m])]
        b = graph.ops[m] if bad.size else next(graph.ops[k] for k in graph.groups[graph.arrays.group[m]]
                                               if strategy.splits.get(k) != strategy.splits.get(m))
        raise StrategyError(f"ops {a.name!r} and {b.name!r} share co-location group "
                            f"{a.colocation!r} but have different placements or splits")


def _readonly(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def spread_groups(graph: OpGraph, group_device, group_split: Mapping[int, Split] | None = None,
                  priority=None) -> Strategy:
    """A strategy from one device (and optional split) per co-location group."""
    group = graph.arrays.group
    placement = np.asarray(group_device, dtype=np.int64)[group]
    splits = {}
    for g, split in (group_split or {}).items():
        for op in graph.groups[g]:
            if split is not None:
                splits[op] = split
    return Strategy(placement, priority, splits)
