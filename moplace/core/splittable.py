"""A strategy's splits as flat arrays (`SplitTable`, `moplace.core.strategy.Strategy.split_table`),
what the simulator and the checks read instead of the ``{op: Split}`` mapping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .graph import SPLIT_DIMS


@dataclass(frozen=True, eq=False)
class SplitTable:
    """Splits as arrays, in op order: ``ops``, ``parts``, ``dims`` (index into `SPLIT_DIMS`,
    -1 for an unknown name), the parts' ``devices`` concatenated, and ``signature``, equal for
    equal splits."""

    ops: np.ndarray
    parts: np.ndarray
    dims: np.ndarray
    devices: np.ndarray
    signature: np.ndarray

    @classmethod
    def of(cls, splits: Mapping) -> "SplitTable":
        """The table of ``splits``, ``{op: moplace.core.strategy.Split}``."""
        # the distinct Split objects first (a regular plan shares one per stage and
        # dimension among thousands of ops), then their figures spread with numpy
        n = len(splits)
        ops = np.fromiter(splits.keys(), np.int64, n)
        slot: dict[int, int] = {}
        distinct: list = []
        which = np.empty(n, np.int64)
        for j, s in enumerate(splits.values()):
            k = slot.get(id(s))
            if k is None:
                k = slot[id(s)] = len(distinct)
                distinct.append(s)
            which[j] = k
        ids: dict = {}  # equal splits, numbered in order of first appearance
        sig = np.array([ids.setdefault(s, len(ids)) for s in distinct], np.int64)
        parts = np.array([s.parts for s in distinct], np.int64)
        dims = np.array([SPLIT_DIMS.index(s.dim) if s.dim in SPLIT_DIMS else -1
                         for s in distinct], np.int64)
        flat = np.fromiter((d for s in distinct for d in s.devices), np.int64)
        start = np.cumsum(parts) - parts
        if n:
            length = parts[which]
            offset = np.repeat(start[which] - (np.cumsum(length) - length), length)
            devices = flat[offset + np.arange(int(length.sum()))]
        else:
            devices = np.zeros(0, np.int64)
        return cls(ops=ops, parts=parts[which] if n else np.zeros(0, np.int64),
                   dims=dims[which] if n else np.zeros(0, np.int64), devices=devices,
                   signature=sig[which] if n else np.zeros(0, np.int64))
