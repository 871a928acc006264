"""Hypervolume of a front (all objectives minimized) and the reference point moplace reports it at.

Reference-point rule (`reference_point`), fixed so that fronts from different runs, searchers
and seeds on the same graph and cluster are comparable: per objective, ``(1 + margin)`` times
the largest value any baseline strategy (single, data-parallel, round-robin, layer-split),
feasible or not, reaches; ``margin`` defaults to 0.1. An objective on which every baseline
scores 0 gets reference 1.0 instead (see `reference_point`).

moplace reports `normalized_hypervolume`: the fraction of the box between the origin and the
reference point that the front dominates, a number in [0, 1] for non-negative objectives.

moocore is imported inside `hypervolume`, so that ``import moplace`` does not load it.
"""

from __future__ import annotations

import numpy as np


def hypervolume(points, reference) -> float:
    """Volume dominated by ``points`` [k, m] and bounded by ``reference`` [m], minimizing.

    Points not strictly better than the reference in every objective are left out (they bound
    no volume); no points left gives 0.0.
    """
    ref = _reference(reference)
    pts = _points(points, ref.size)
    pts = pts[np.all(pts < ref, axis=1)]  # NaN rows compare False and drop out here too
    if len(pts) == 0:
        return 0.0
    import moocore  # heavy-ish, compiled; only the reporting paths need it

    return float(moocore.hypervolume(pts, ref=ref))


def normalized_hypervolume(points, reference) -> float:
    """Hypervolume of ``points / reference`` under the all-ones reference: the fraction of the
    box [0, reference] that ``points`` dominate, in [0, 1] for non-negative objectives.

    Every reference entry must be positive (`reference_point` guarantees it).
    """
    ref = _reference(reference)
    if np.any(ref <= 0):
        raise ValueError(f"normalized hypervolume needs a positive reference, got {ref}")
    pts = _points(points, ref.size)
    # dividing rescales each axis, so this equals hypervolume(points, ref) / prod(ref) while
    # staying O(1) in magnitude (bytes ~1e9 multiplied over three axes would reach 1e27)
    hv = hypervolume(pts / ref, np.ones_like(ref))
    return min(hv, 1.0)  # guard the last ulp; the exact value cannot exceed the unit box


def reference_point(baseline_values, margin: float = 0.1) -> np.ndarray:
    """The documented reference point: per objective ``(1 + margin) * max`` over the baselines.

    ``baseline_values`` [b, m] holds the objective vectors of the baseline strategies (single,
    data-parallel, round-robin, layer-split), feasible or not: they exist for every graph and
    cluster, so the point depends on the problem only and fronts of different runs are measured
    in the same box.

    An objective whose maximum is 0 gets reference 1.0. This happens for peak communication on
    a one-device cluster: every strategy then runs everything on device 0 and moves no bytes,
    so the objective is constant 0; ``(1 + margin) * 0`` would put every point on the
    reference's boundary and make every hypervolume 0. Any positive reference keeps the
    objective neutral (a 0 value spans the full unit factor after normalization); 1.0 in the
    objective's unit (one byte) also means that if some strategy did score above 0 there, it is
    worse than every baseline on that objective and is left out of the box, as points beyond
    the reference are on any objective.
    """
    values = np.asarray(baseline_values, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] == 0 or values.shape[1] == 0:
        raise ValueError(f"baseline values must be a non-empty [b, m] array, got shape {values.shape}")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        # the rule scales a maximum up; for negative or infinite maxima that is meaningless
        raise ValueError("baseline objective values must be finite and non-negative")
    if not (np.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be finite and >= 0, got {margin}")
    top = values.max(axis=0)
    return np.where(top > 0, (1.0 + margin) * top, 1.0)


def _reference(reference) -> np.ndarray:
    ref = np.asarray(reference, dtype=np.float64)
    if ref.ndim != 1 or ref.size == 0 or not np.all(np.isfinite(ref)):
        raise ValueError(f"reference must be a finite 1-D vector, got {reference!r}")
    return ref


def _points(points, m: int) -> np.ndarray:
    pts = np.asarray(points, dtype=np.float64)
    if pts.size == 0:
        return pts.reshape(0, m)
    if pts.ndim != 2 or pts.shape[1] != m:
        raise ValueError(f"points must be [k, {m}] to match the reference, got shape {pts.shape}")
    return pts
