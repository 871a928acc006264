"""Fit a link's latency and bandwidth from measured transfers (FastT's communication model).

FastT models the time of a transfer between two devices as linear in its size:
``seconds = latency + bytes / bandwidth``. Given measured ``(bytes, seconds)`` samples of one
device pair, `fit_link` finds latency and bandwidth by least squares; `Cluster.with_links` then
puts the fitted figures into a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from ..core.presets import MAX_RATE
from ..errors import ClusterError

__all__ = ["LinkFit", "LinkFitError", "fit_link", "fit_links"]


class LinkFitError(ClusterError, ValueError):
    """Samples that cannot give a latency and a bandwidth."""


@dataclass(frozen=True)
class LinkFit:
    """A fitted link: ``latency_s`` (s), ``bandwidth_Bps`` (bytes/s), ``rmse_s`` of the fit,
    from ``n`` samples."""

    latency_s: float
    bandwidth_Bps: float
    rmse_s: float
    n: int

    def predict(self, nbytes: float) -> float:
        """Seconds the fitted model gives for a transfer of ``nbytes``."""
        return self.latency_s + nbytes / self.bandwidth_Bps


def fit_link(samples: Iterable[tuple[float, float]], *, relative: bool = False) -> LinkFit:
    """Least-squares fit of ``seconds = latency + bytes / bandwidth`` to ``(bytes, seconds)``.

    ``relative``: minimize relative instead of absolute errors (each sample weighted by
    1 / its seconds), so that samples spanning 1 KiB to 64 MiB all count, not just the largest
    (which alone would decide the latency).

    Needs at least two distinct sizes, finite non-negative values and a positive fitted slope
    whose bandwidth is at most 1 PB/s (`MAX_RATE`, the fastest link a cluster may name): a
    flatter slope is noise on a transfer whose time does not grow measurably with size.
    A negative fitted intercept is clamped to 0 and the slope refit through the origin: latency
    cannot be negative (the simulator requires >= 0), and because the squared error is convex,
    when the free optimum has a negative intercept the best fit with intercept >= 0 has it at 0.
    """
    data = _as_samples(samples)
    size, secs = data[:, 0], data[:, 1]
    if np.unique(size).size < 2:
        raise LinkFitError("need samples of at least 2 distinct sizes to fit latency and bandwidth")
    scale = float(size.max())  # sizes near 1e9 beside a column of ones: rescale for conditioning
    w = 1.0 / np.maximum(secs, max(float(secs.max()), 1e-12) * 1e-9) if relative else np.ones_like(secs)
    design = np.column_stack([np.ones_like(size), size / scale]) * w[:, None]
    (latency, slope), *_ = np.linalg.lstsq(design, secs * w, rcond=None)
    if latency < 0:
        x = size / scale * w
        latency, slope = 0.0, float(x @ (secs * w) / (x @ x))
    slope /= scale
    if not slope > 0:
        raise LinkFitError(f"fitted seconds per byte is {slope:.3g}: time does not grow with size, "
                           "so bandwidth is undefined")
    if 1.0 / slope > MAX_RATE:
        raise LinkFitError(f"fitted bandwidth {1.0 / slope:.3g} B/s is beyond 1 PB/s: time does "
                           "not grow measurably with size, so bandwidth is undefined")
    residual = secs - (latency + size * slope)
    rmse = float(np.sqrt(np.mean(residual**2)))
    return LinkFit(float(latency), float(1.0 / slope), rmse, int(len(size)))


def fit_links(samples_by_pair: Mapping[tuple[int, int], Iterable[tuple[float, float]]]
              ) -> dict[tuple[int, int], LinkFit]:
    """`fit_link` for each device pair; errors name the pair."""
    out = {}
    for pair, samples in samples_by_pair.items():
        try:
            out[tuple(pair)] = fit_link(samples)
        except LinkFitError as exc:
            raise LinkFitError(f"pair {tuple(pair)}: {exc}") from None
    return out


def _as_samples(samples) -> np.ndarray:
    try:
        data = np.asarray(list(samples), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise LinkFitError(f"samples must be (bytes, seconds) numbers: {exc}") from None
    if data.ndim != 2 or data.shape[1] != 2:
        raise LinkFitError(f"samples must be (bytes, seconds) pairs, got shape {data.shape}")
    if not np.all(np.isfinite(data)):
        raise LinkFitError("samples must be finite (no NaN or inf)")
    if np.any(data < 0):
        raise LinkFitError("samples must be non-negative (bytes >= 0, seconds >= 0)")
    return data
