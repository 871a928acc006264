"""Small numpy helpers shared by the genome (core) and the simulator."""

from __future__ import annotations

import numpy as np


def segment_ranks(counts: np.ndarray) -> np.ndarray:
    """``0..counts[0]-1, 0..counts[1]-1, ...`` concatenated: each item's rank in its segment."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
