"""A strategy: where each op runs, in what order, and which ops are split.

- placement: one device index per op (for a split op, the device of its first part);
- priority: one number per op; among ready ops on a device the highest runs first
  (ties: lower op index first);
- splits: op index -> `Split(dim, devices)`, one device per part (at least two parts);
- options, strategy-wide (`STRATEGY_OPTIONS`, each with a default that keeps the model as it
  was before it existed): ``bucket_bytes``, the gradient bucket size (0: every gradient is
  reduced on its own; DDP's default is 25 MiB) and ``zero_stage``, how far the replicas of a
  batch split shard what they keep (0: nothing; 1, ZeRO-1: the optimizer state, each replica
  updating its shard after a reduce-scatter of the gradients and all-gathering the updated
  weights; 2, ZeRO-2: the gradients too, which the simulator already frees once reduced, so
  it runs as 1; 3, ZeRO-3 or FSDP: the weights too, all-gathered before each use;
  `ZERO_STAGES`); ``micro_batches``, how many micro-batches the step's batch is cut into (1:
  the whole batch at once; m: every forward and backward op runs once per micro-batch, where
  it is placed, its weight gradients accumulate and the updates run once, after the last) and
  ``schedule``, the order of the micro-batches' tasks on each device (`SCHEDULES`: 0, 1F1B as
  PipeDream-Flush runs it; 1, GPipe; 2, interleaved 1F1B; 3, zero-bubble); ``fp8``, which
  matmuls run in FP8 (`FP8_MODES`: 0, none; 1, all of the layers'; 2, all but the first and
  last layers', `moplace.costs.fp8`);
- recompute: the co-location groups whose forward outputs are freed after their forward
  readers and recomputed before the backward needs them, each named by its first op (its
  group head; `moplace.core.recompute.recomputable_heads` lists the groups that can be).

Ops in one co-location group must have the same placement and the same split. Pure model
parallelism is a strategy without splits; pure data parallelism splits every op on ``batch``
across all devices.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Mapping

import numpy as np

from ..errors import StrategyError
from .graph import OpGraph
from .options import (FP8_MODES, MAX_BUCKET_BYTES, MAX_MICRO_BATCHES, SCHEDULE_LABELS,
                      SCHEDULES, STRATEGY_OPTIONS, ZERO_STAGES)
from .recompute import recomputable_heads
from .splittable import SplitTable

__all__ = ["FP8_MODES", "MAX_BUCKET_BYTES", "MAX_MICRO_BATCHES", "SCHEDULE_LABELS", "SCHEDULES",
           "STRATEGY_OPTIONS", "ZERO_STAGES", "Split", "Strategy"]


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
    """An immutable placement + priority + split assignment for one `OpGraph`, with its
    strategy-wide options (`STRATEGY_OPTIONS`)."""

    bucket_bytes: float = 0.0  # class defaults: strategies pickled before they existed
    zero_stage: float = 0.0
    micro_batches: float = 1.0
    schedule: float = 0.0
    fp8: float = 0.0
    recompute: tuple[int, ...] = ()

    def __init__(self, placement, priority=None, splits: Mapping[int, Split] | None = None, *,
                 bucket_bytes: float = 0.0, zero_stage: float = 0.0, micro_batches: float = 1.0,
                 schedule: float = 0.0, recompute=(), fp8: float = 0.0):
        self.bucket_bytes = float(bucket_bytes)
        self.zero_stage = float(zero_stage)
        self.micro_batches = float(micro_batches)
        self.schedule = float(schedule)
        self.fp8 = float(fp8)
        self.recompute = _heads(recompute)
        self.placement = _readonly(np.asarray(placement, dtype=np.int64))
        n = self.placement.shape[0]
        if priority is None:
            priority = -np.arange(n, dtype=np.float64)
        self.priority = _readonly(np.asarray(priority, dtype=np.float64))
        self.splits: Mapping[int, Split] = MappingProxyType(dict(sorted((splits or {}).items())))
        if self.priority.shape != (n,):
            raise StrategyError(f"priority has {self.priority.size} entries for {n} ops")

    def __getstate__(self) -> dict:
        # The splits go as their table (small integer arrays) and their distinct values: a
        # split op is one of a few options, and unpickling 367 Split objects of resnet50 took
        # 1.6 ms, more than simulating the strategy
        state = {k: v for k, v in self.__dict__.items() if k != "split_table"}
        t = self.split_table
        firsts = np.sort(np.unique(t.signature, return_index=True)[1])
        distinct = tuple(self.splits[o] for o in t.ops[firsts].tolist())
        state["splits"] = (t.ops.astype(np.int32), t.signature.astype(np.int32), distinct,
                           t.parts.astype(np.int16), t.dims.astype(np.int8),
                           t.devices.astype(np.int16))
        return state

    def __setstate__(self, state: dict) -> None:
        state.pop("delta", None)  # an evaluation hint that strategies pickled by moplace 0.1 carry
        splits = state.get("splits")
        if isinstance(splits, tuple):  # else written before the compact form: a mapping
            ops, which, distinct, parts, dims, devices = splits
            state["splits"] = MappingProxyType(dict(zip(ops.tolist(),
                                                        map(distinct.__getitem__, which.tolist()))))
            state["split_table"] = SplitTable(
                ops=ops.astype(np.int64), parts=parts.astype(np.int64),
                dims=dims.astype(np.int64), devices=devices.astype(np.int64),
                signature=which.astype(np.int64))
        self.__dict__.update(state)
        for name in ("placement", "priority"):
            value = self.__dict__.get(name)
            if isinstance(value, np.ndarray):
                value.flags.writeable = False

    def derive(self, placement=None, priority=None) -> "Strategy":
        """This strategy with another placement and/or priorities and the same splits (shared,
        with their table): the cheap way to make a neighbour that moves unsplit ops only."""
        child = Strategy(self.placement if placement is None else placement,
                         self.priority if priority is None else priority, **self.options,
                         recompute=self.recompute)
        child.splits = self.splits
        if "split_table" in self.__dict__:
            child.__dict__["split_table"] = self.split_table
        return child

    @property
    def pipelined(self) -> bool:
        """Does the step run as more than one micro-batch?"""
        return self.micro_batches > 1

    @property
    def schedule_name(self) -> str:
        """The pipeline schedule's name (`SCHEDULES`)."""
        return SCHEDULES[int(self.schedule)]

    @property
    def fp8_mode(self) -> str:
        """The precision lever's name (`FP8_MODES`)."""
        return FP8_MODES[int(self.fp8)]

    @property
    def options(self) -> dict[str, float]:
        """The strategy-wide options (`STRATEGY_OPTIONS`), by name."""
        return {name: getattr(self, name) for name in STRATEGY_OPTIONS}

    def with_options(self, **options) -> "Strategy":
        """This strategy with some strategy-wide options replaced (placement, priorities and
        splits shared)."""
        unknown = sorted(set(options) - set(STRATEGY_OPTIONS))
        if unknown:
            raise StrategyError(f"unknown strategy option {unknown[0]!r}; options are: "
                                f"{', '.join(STRATEGY_OPTIONS)}")
        child = self.derive()
        for name, value in options.items():
            child.__dict__[name] = float(value)
        return child

    def with_recompute(self, heads) -> "Strategy":
        """This strategy recomputing the groups of ``heads`` (first ops of their co-location
        groups) instead of its own (placement, priorities and splits shared)."""
        child = self.derive()
        child.__dict__["recompute"] = _heads(heads)
        return child

    def __eq__(self, other) -> bool:
        return (isinstance(other, Strategy) and np.array_equal(self.placement, other.placement)
                and np.array_equal(self.priority, other.priority)
                and dict(self.splits) == dict(other.splits) and self.options == other.options
                and self.recompute == other.recompute)

    def __hash__(self) -> int:
        return hash((self.placement.tobytes(), self.priority.tobytes(), tuple(self.splits.items()),
                     tuple(self.options.values()), self.recompute))

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v:g}" for k, v in self.options.items()
                        if v != STRATEGY_OPTIONS[k])
        if self.recompute:
            extra += f", {len(self.recompute)} groups recomputed"
        return (f"Strategy({self.placement.size} ops on {len(set(self.placement.tolist()))} devices, "
                f"{len(self.splits)} splits{extra})")

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
        _check_splits(graph, self, n_devices)
        _check_groups(graph, self)
        _check_options(self)
        _check_recompute(graph, self)
        return self

    @cached_property
    def simulation_key(self) -> bytes:
        """A 16-byte digest, equal for strategies that the simulator runs identically: the same
        placement and splits, and on every device the same order of the ops that have a task
        there (priority, ties by op index: the simulator's rule). Priorities count only
        through that order, so strategies whose priorities differ but order every device's
        ops alike share a key (the searchers' memory of evaluations relies on this)."""
        t = self.split_table
        n = self.placement.size
        whole = np.ones(n, bool)
        whole[t.ops] = False
        ops = np.concatenate([np.flatnonzero(whole), np.repeat(t.ops, t.parts)])
        devs = np.concatenate([self.placement[whole], t.devices])
        order = np.lexsort((ops, -self.priority[ops], devs))
        h = hashlib.blake2b(digest_size=16)
        for arr in (self.placement, t.ops, t.parts, t.dims, t.devices, devs[order], ops[order]):
            h.update(np.ascontiguousarray(arr, np.int64).tobytes())
            h.update(b"|")
        for name, default in STRATEGY_OPTIONS.items():  # only where not the default: keys of
            value = getattr(self, name)                 # strategies without options stay
            if name == "schedule" and not self.pipelined:
                continue  # one micro-batch runs alike under every schedule
            if value != default:
                h.update(f"{name}={value!r}|".encode())
        if self.recompute:
            h.update(b"recompute=" + np.asarray(self.recompute, np.int64).tobytes())
        return h.digest()

    @cached_property
    def used_devices(self) -> list[int]:
        """The devices that run any of this strategy's ops or split parts, in order."""
        return sorted(set(self.placement.tolist()) | set(self.split_table.devices.tolist()))

    @cached_property
    def split_table(self) -> "SplitTable":
        """The splits as flat arrays (computed once; the strategy is immutable)."""
        return SplitTable.of(self.splits)


def _check_splits(graph: OpGraph, strategy: Strategy, n_devices: int) -> None:
    if not strategy.splits:
        return
    t, n = strategy.split_table, len(graph.ops)
    bad = np.flatnonzero((t.ops < 0) | (t.ops >= n))
    if bad.size:
        raise StrategyError(f"split names op index {int(t.ops[bad[0]])}, out of range 0..{n - 1}")
    allowed = (t.dims >= 0) & ((graph.arrays.split_mask[t.ops] >> np.maximum(t.dims, 0)) & 1 == 1)
    first = np.cumsum(t.parts) - t.parts
    off_range = np.flatnonzero((t.devices < 0) | (t.devices >= n_devices))
    checks = [
        (~allowed, lambda i, k: f"op {_name(graph, i)} cannot be split on "
         f"{strategy.splits[i].dim!r} (splittable: {list(graph.ops[i].splittable) or 'none'})"),
        (t.parts < 2, lambda i, k: f"op {_name(graph, i)}: a split needs at least 2 parts"),
        (t.parts > n_devices, lambda i, k: f"op {_name(graph, i)}: a split has at most one part "
         f"per device ({n_devices}), got {int(t.parts[k])} parts"),
        (np.isin(np.arange(t.ops.size), np.searchsorted(first, off_range, side="right") - 1),
         lambda i, k: f"op {_name(graph, i)}: split part on device "
         f"{next(d for d in strategy.splits[i].devices if not 0 <= d < n_devices)}, "
         f"out of range 0..{n_devices - 1}"),
        (t.devices[first] != strategy.placement[t.ops],
         lambda i, k: f"op {_name(graph, i)}: placement must equal the first part's device"),
    ]
    for failed, message in checks:
        where = np.flatnonzero(failed)
        if where.size:
            raise StrategyError(message(int(t.ops[where[0]]), int(where[0])))


def _check_options(strategy: Strategy) -> None:
    b = strategy.bucket_bytes
    if not (np.isfinite(b) and 0 <= b <= MAX_BUCKET_BYTES):
        raise StrategyError(f"bucket_bytes must be from 0 (one bucket per gradient) to "
                            f"{MAX_BUCKET_BYTES:.0f} bytes, got {b!r}")
    if strategy.zero_stage not in ZERO_STAGES:
        raise StrategyError(f"zero_stage must be one of {', '.join(map(str, ZERO_STAGES))}, "
                            f"got {strategy.zero_stage!r}")
    m = strategy.micro_batches
    if not (np.isfinite(m) and m == int(m) and 1 <= m <= MAX_MICRO_BATCHES):
        raise StrategyError(f"micro_batches must be a whole number from 1 to "
                            f"{MAX_MICRO_BATCHES}, got {m!r}")
    if strategy.schedule not in range(len(SCHEDULES)):
        known = ", ".join(f"{k} ({name})" for k, name in enumerate(SCHEDULES))
        raise StrategyError(f"schedule must be one of {known}, got {strategy.schedule!r}")
    if strategy.fp8 not in range(len(FP8_MODES)):
        known = ", ".join(f"{k} ({name})" for k, name in enumerate(FP8_MODES))
        raise StrategyError(f"fp8 must be one of {known}, got {strategy.fp8!r}")
    if m > 1 and strategy.zero_stage == 3:
        raise StrategyError("zero_stage 3 with micro-batches is not modelled: ZeRO-3 would "
                            "gather the weights again for every micro-batch; use stage 1")


def _check_recompute(graph: OpGraph, strategy: Strategy) -> None:
    if not strategy.recompute:
        return
    n = len(graph.ops)
    heads = np.asarray(strategy.recompute, np.int64)
    if heads[0] < 0 or heads[-1] >= n:
        bad = int(heads[0] if heads[0] < 0 else heads[-1])
        raise StrategyError(f"recompute names op index {bad}, out of range 0..{n - 1}")
    not_head = heads[graph.group_head[heads] != heads]
    if not_head.size:
        op, head = graph.ops[int(not_head[0])], graph.ops[int(graph.group_head[not_head[0]])]
        raise StrategyError(f"recompute names op {op.name!r}, which shares co-location group "
                            f"{op.colocation!r}: name the group by its first op {head.name!r}")
    useless = heads[~np.isin(heads, recomputable_heads(graph))]
    if useless.size:
        raise StrategyError(f"recompute names op {_name(graph, int(useless[0]))}, whose group "
                            "has no forward output with inputs that a backward op reads: "
                            "nothing to recompute")


def _heads(values) -> tuple[int, ...]:
    try:
        return tuple(sorted({int(v) for v in values}))
    except (TypeError, ValueError):
        raise StrategyError(f"recompute must be op indices, got {values!r}") from None


def _name(graph: OpGraph, i: int) -> str:
    return repr(graph.ops[i].name)


def _check_groups(graph: OpGraph, strategy: Strategy) -> None:
    head = graph.group_head
    t = strategy.split_table
    sig = np.full(len(graph.ops), -1, np.int64)
    sig[t.ops] = t.signature
    bad = np.flatnonzero((strategy.placement != strategy.placement[head]) | (sig != sig[head]))
    if bad.size:
        a, b = graph.ops[int(head[bad[0]])], graph.ops[int(bad[0])]
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
