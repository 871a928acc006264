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
