"""Small statistics for comparing predictions with measurements (fidelity reports)."""

from __future__ import annotations

import numpy as np


def relative_errors(predicted, measured) -> np.ndarray:
    """``(predicted - measured) / measured`` elementwise."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    if p.shape != m.shape or np.any(m <= 0):
        raise ValueError("need equally many predictions and positive measurements")
    return (p - m) / m


def median_abs_relative_error(predicted, measured) -> float:
    """Median of ``|predicted - measured| / measured``."""
    return float(np.median(np.abs(relative_errors(predicted, measured))))


def kendall_tau(x, y) -> float:
    """Kendall's tau-b rank correlation of ``x`` and ``y`` (ties in either are allowed).

    1: same order, -1: reversed, 0: unrelated; NaN when either has no two distinct values.
    O(n^2), meant for the few dozen strategies of a fidelity report.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("kendall_tau needs two 1-d sequences of equal length")
    i, j = np.triu_indices(x.size, k=1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    concordant_minus_discordant = float(np.sum(dx * dy))
    pairs_x, pairs_y = float(np.sum(dx != 0)), float(np.sum(dy != 0))
    if pairs_x == 0 or pairs_y == 0:
        return float("nan")
    return concordant_minus_discordant / np.sqrt(pairs_x * pairs_y)
