"""Fitting latency and bandwidth from measured transfers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from moplace.core.cluster import Cluster
from moplace.core.presets import load_cluster
from moplace.costs.linkfit import LinkFit, LinkFitError, fit_link, fit_links
from moplace.errors import ClusterError, MoplaceError

SIZES = [2**k for k in range(10, 31, 2)]  # 1 KiB .. 1 GiB


def test_noiseless_samples_are_recovered_exactly():
    fit = fit_link([(b, 5e-6 + b / 12e9) for b in SIZES])
    assert fit.latency_s == pytest.approx(5e-6, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(12e9, rel=1e-9)
    assert fit.rmse_s == pytest.approx(0, abs=1e-12) and fit.n == len(SIZES)
    assert fit.predict(1e9) == pytest.approx(5e-6 + 1e9 / 12e9)


def test_noisy_samples_are_recovered_approximately():
    rng = np.random.default_rng(7)
    sizes = np.repeat(np.linspace(1e6, 256e6, 40), 5)
    secs = 20e-6 + sizes / 48e9
    noisy = secs * (1 + rng.normal(0, 0.02, sizes.size)) + rng.normal(0, 2e-6, sizes.size)
    fit = fit_link(zip(sizes, noisy))
    assert fit.bandwidth_Bps == pytest.approx(48e9, rel=0.02)
    assert fit.latency_s == pytest.approx(20e-6, abs=15e-6)
    assert 0 < fit.rmse_s < 1e-4


def test_negative_intercept_is_clamped_and_refit_through_origin():
    samples = [(1e6, 0.5e-4), (2e6, 1.6e-4), (3e6, 2.7e-4)]  # free fit: intercept -0.6e-4
    fit = fit_link(samples)
    x = np.array([s for s, _ in samples])
    y = np.array([t for _, t in samples])
    assert fit.latency_s == 0.0
    assert fit.bandwidth_Bps == pytest.approx((x @ x) / (x @ y))


@pytest.mark.parametrize("samples, message", [
    ([], "pairs"),
    ([(1e6, 1e-3)], "2 distinct sizes"),
    ([(1e6, 1e-3), (1e6, 2e-3)], "2 distinct sizes"),
    ([(1e6, 1e-3), (2e6, math.nan)], "finite"),
    ([(1e6, 1e-3), (math.inf, 1e-3)], "finite"),
    ([(1e6, 1e-3), (-2e6, 1e-3)], "non-negative"),
    ([(1e6, 1e-3), (2e6, -1e-3)], "non-negative"),
    ([(1e6, 2e-3), (2e6, 1e-3)], "bandwidth is undefined"),
    ([(1e6, 1e-3), (2e6, 1e-3)], "bandwidth is undefined"),
    ([(1e6, 1e-3), (2e6, 1e-3 + 1e-15)], "beyond 1 PB/s"),  # a slope of noise (seen: 1.3e20 B/s)
    ([(1, 2, 3)], "pairs"),
    ([("a", 1)], "numbers"),
])
def test_bad_input_is_rejected(samples, message):
    with pytest.raises(LinkFitError, match=message) as info:
        fit_link(samples)
    assert isinstance(info.value, ClusterError) and isinstance(info.value, MoplaceError)


def test_fit_links_and_with_links():
    c = load_cluster("4xV100-NVLink")
    samples = {(0, 1): [(b, 3e-6 + b / 40e9) for b in SIZES],
               (1, 0): [(b, 4e-6 + b / 30e9) for b in SIZES]}
    fits = fit_links(samples)
    assert set(fits) == {(0, 1), (1, 0)} and all(isinstance(f, LinkFit) for f in fits.values())
    d = c.with_links(fits)
    assert d.bandwidth[0, 1] == pytest.approx(40e9) and d.latency[1, 0] == pytest.approx(4e-6)
    assert d.bandwidth[0, 2] == c.bandwidth[0, 2]
    with pytest.raises(LinkFitError, match=r"\(2, 3\)"):
        fit_links({(2, 3): [(1, 1e-6)]})


def test_single_cluster_has_no_links_to_fit():
    with pytest.raises(ClusterError):
        Cluster.single().with_links({(0, 1): (0.0, 1e9)})


def test_relative_fit_keeps_the_latency_that_the_largest_sample_hides():
    # the testbed's gRPC link: 300 us + 2 GB/s, and a 64 MiB transfer slowed 2.5x (allocation)
    sizes = [1024, 4992, 24344, 118712, 578860, 2822556, 13762940]
    samples = [(b, 300e-6 + b / 2e9) for b in sizes] + [(2**26, 2.5 * (300e-6 + 2**26 / 2e9))]
    absolute, relative = fit_link(samples), fit_link(samples, relative=True)
    assert absolute.latency_s == 0.0  # the outlier decides the absolute fit
    assert relative.latency_s == pytest.approx(300e-6, rel=0.2)
    exact = [(b, 300e-6 + b / 2e9) for b in sizes]
    fit = fit_link(exact, relative=True)
    assert fit.latency_s == pytest.approx(300e-6) and fit.bandwidth_Bps == pytest.approx(2e9)
