"""Chebyshev scalarization weights: ``k`` weight vectors spread over the objectives' simplex.

Each MCMC chain starts with one of them (the first balanced); see the package docstring.
"""

from __future__ import annotations

from math import comb

import numpy as np


def spread_weights(k: int, m: int) -> np.ndarray:
    """``k`` weight vectors on the ``m``-simplex, spread out: the balanced vector first, then
    greedily the lattice point farthest from those chosen (a Das-Dennis lattice fine enough
    to hold ``k`` points). Deterministic; every weight is at least a small positive floor so
    that no objective is ignored entirely."""
    if m == 1:
        return np.ones((k, 1))
    h = 1
    while _n_lattice(h, m) < k + m:
        h += 1
    lattice = np.array(_lattice(h, m), dtype=np.float64) / h
    chosen = [np.full(m, 1.0 / m)]
    for _ in range(k - 1):
        dist = np.min([np.linalg.norm(lattice - c, axis=1) for c in chosen], axis=0)
        chosen.append(lattice[int(np.argmax(dist))])  # ties: first in lattice order
    w = np.maximum(np.array(chosen), 0.02)
    return w / w.sum(axis=1, keepdims=True)


def _n_lattice(h: int, m: int) -> int:
    """Points of the Das-Dennis lattice with ``h`` divisions on the ``m``-simplex."""
    return comb(h + m - 1, m - 1)


def _lattice(h: int, m: int):
    """The Das-Dennis lattice: every tuple of ``m`` non-negative integers summing to ``h``."""
    if m == 1:
        return [(h,)]
    return [(i,) + rest for i in range(h, -1, -1) for rest in _lattice(h - i, m - 1)]
