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


def kendall_tau_resolved(predicted, measured, low, high) -> tuple[float, int]:
    """Kendall's tau-b over the pairs a noisy measurement tells apart, and how many there are.

    A pair counts when the measured intervals ``[low, high]`` (say, the 10th to 90th
    percentile of the timed steps) do not overlap: strategies closer than the measurement's
    own spread have no order to get right. NaN when no pair is told apart.
    """
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    lo, hi = np.asarray(low, float), np.asarray(high, float)
    if not (p.shape == m.shape == lo.shape == hi.shape) or p.ndim != 1:
        raise ValueError("kendall_tau_resolved needs four 1-d sequences of equal length")
    i, j = np.triu_indices(p.size, k=1)
    apart = (hi[i] < lo[j]) | (hi[j] < lo[i])
    i, j = i[apart], j[apart]
    dx, dy = np.sign(p[i] - p[j]), np.sign(m[i] - m[j])
    pairs_x, pairs_y = float(np.sum(dx != 0)), float(np.sum(dy != 0))
    if pairs_x == 0 or pairs_y == 0:
        return float("nan"), int(i.size)
    return float(np.sum(dx * dy) / np.sqrt(pairs_x * pairs_y)), int(i.size)
