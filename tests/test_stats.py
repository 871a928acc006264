import math

import numpy as np
import pytest

from moplace.review.stats import kendall_tau, median_abs_relative_error, relative_errors


def test_kendall_tau_orders():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    # one swapped pair of 6: (C - D) / 6 = (5 - 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)


def test_kendall_tau_b_with_ties_matches_the_formula():
    x, y = [1, 1, 2, 3], [1, 2, 2, 3]
    # pairs: (0,1) x tie; (0,2) C; (0,3) C; (1,2) y tie; (1,3) C; (2,3) C -> C=4, D=0
    # untied pairs: x 5, y 5 -> tau_b = 4 / sqrt(25)
    assert kendall_tau(x, y) == pytest.approx(4 / 5)


def test_kendall_tau_undefined_without_variation():
    assert math.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))


def test_relative_errors():
    np.testing.assert_allclose(relative_errors([1.1, 0.5], [1.0, 1.0]), [0.1, -0.5])
    assert median_abs_relative_error([1.1, 0.5, 1.0], [1.0, 1.0, 1.0]) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        relative_errors([1.0], [0.0])


def test_kendall_tau_resolved_counts_only_pairs_the_measurement_tells_apart():
    from moplace.review.stats import kendall_tau_resolved

    measured = [10.0, 10.2, 20.0, 30.0]
    low, high = [9.0, 9.5, 19.0, 29.0], [11.0, 11.0, 21.0, 31.0]
    # the first two overlap: swapping them in the prediction costs nothing
    tau, pairs = kendall_tau_resolved([10.2, 10.0, 20.0, 30.0], measured, low, high)
    assert (tau, pairs) == (pytest.approx(1.0), 5)
    tau, _ = kendall_tau_resolved([30.0, 10.2, 20.0, 10.0], measured, low, high)
    assert tau < 0
    tau, pairs = kendall_tau_resolved([1, 2], [1.0, 1.1], [0.5, 0.5], [2.0, 2.0])
    assert math.isnan(tau) and pairs == 0
