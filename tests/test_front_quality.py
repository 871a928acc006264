"""Searchers against exact Pareto fronts on 20 random tiny instances (moplace.tiny)."""

import numpy as np
import pytest

import searchers  # noqa: F401
from moplace.search import Budget, search
from moplace.searcher import make_searcher
from moplace.tiny import hv_ratio, tiny_benchmark

BUDGET = 2000  # the CLI's default evaluation budget
# per searcher: (the hypervolume ratio every instance must reach, how many of the 20 must reach
# 99%). The issue asks 99% for NSGA-II and MCMC and 95% for the Optuna samplers.
# optuna-tpe is too slow for 2000 trials on 20 instances in a test (about 0.1 s per trial).
BARS = {"nsga2": (0.99, 20), "optuna-nsga2": (0.95, 0), "mcmc": (0.99, 20)}


@pytest.fixture(scope="module")
def tiny():
    return tiny_benchmark(20, 0)


@pytest.mark.parametrize("name", list(BARS))
def test_reaches_the_exact_front(tiny, name):
    ratios = []
    for problem, exact in tiny:
        result = search(problem, make_searcher(name), budget=Budget(evaluations=BUDGET), seed=0)
        front = np.array([p.values for p in result.front]).reshape(-1, len(problem.objectives))
        ratios.append(hv_ratio(front, exact))
    ratios = np.array(ratios)
    floor, at_99 = BARS[name]
    detail = (f"{name}: hypervolume / exact on 20 instances: min {ratios.min():.4f}, "
              f"median {np.median(ratios):.4f}; per instance {np.round(ratios, 4).tolist()}")
    assert ratios.min() >= floor, detail
    assert np.sum(ratios >= 0.99) >= at_99, detail
