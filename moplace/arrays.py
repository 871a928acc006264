"""Small numpy helpers shared by the genome (core) and the simulator."""

from __future__ import annotations

import numpy as np


def csr_ptr(keys: np.ndarray, n: int) -> np.ndarray:
    """The CSR row pointer of rows 0..n-1 holding ``keys`` (each key's count, cumulated)."""
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr


def segment_ranks(counts: np.ndarray) -> np.ndarray:
    """``0..counts[0]-1, 0..counts[1]-1, ...`` concatenated: each item's rank in its segment."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
