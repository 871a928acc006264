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
BARS = {"nsga2": (0.99, 20), "optuna-nsga2": (0.95, 0), "mcmc": (0.99, 20)}
# optuna-tpe takes 25-35 s per instance for 2000 trials here, too slow for all 20 in the suite
# (`experiments/exact_fronts.py` runs them): it is held to its bar on the five instances where
# it fell below 95% before its polish (seed 0: 94.4%, 86.8%, 65.5%, 91.1%, 84.5%).
TPE_HARDEST = (2, 7, 11, 13, 14)


@pytest.fixture(scope="module")
def tiny():
    return tiny_benchmark(20, 0)


def _ratios(name, instances) -> np.ndarray:
    ratios = []
    for problem, exact in instances:
        result = search(problem, make_searcher(name), budget=Budget(evaluations=BUDGET), seed=0)
        front = np.array([p.values for p in result.front]).reshape(-1, len(problem.objectives))
        ratios.append(hv_ratio(front, exact))
    return np.array(ratios)


@pytest.mark.parametrize("name", list(BARS))
def test_reaches_the_exact_front(tiny, name):
    ratios = _ratios(name, tiny)
    floor, at_99 = BARS[name]
    detail = (f"{name}: hypervolume / exact on 20 instances: min {ratios.min():.4f}, "
              f"median {np.median(ratios):.4f}; per instance {np.round(ratios, 4).tolist()}")
    assert ratios.min() >= floor, detail
    assert np.sum(ratios >= 0.99) >= at_99, detail


def test_tpe_reaches_95_percent_where_it_was_weakest(tiny):
    ratios = _ratios("optuna-tpe", [tiny[i] for i in TPE_HARDEST])
    assert ratios.min() >= 0.95, f"optuna-tpe on instances {TPE_HARDEST}: {np.round(ratios, 4).tolist()}"
