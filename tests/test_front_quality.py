"""Searchers against exact Pareto fronts on 20 random tiny instances (moplace.optimize.tiny).

NSGA-II and MCMC run on all 20 in the default run (about 10 s each). The Optuna samplers take
minutes for all of them (2000 trials per instance, TPE 25-35 s each), so the default run holds
them to their bars on the instances where they are weakest, and the full checks carry the
``slow`` marker (.ci/run's second step; `experiments/exact_fronts.py` prints every figure).
"""

import numpy as np
import pytest

from moplace.optimize.driver import Budget, search
from moplace.optimize.plugins import make_searcher
from moplace.optimize.tiny import hv_ratio, tiny_benchmark

BUDGET = 2000  # the CLI's default evaluation budget
# per searcher: (the hypervolume ratio every instance must reach, how many of the 20 must reach
# 99%). The issue asks 99% for NSGA-II and MCMC and 95% for the Optuna samplers.
BARS = {"nsga2": (0.99, 20), "optuna-nsga2": (0.95, 0), "mcmc": (0.99, 20)}
# optuna-tpe is held to its bar on the five instances where it fell below 95% before its polish
# (seed 0: 94.4%, 86.8%, 65.5%, 91.1%, 84.5%); the default run keeps the worst of them, 11.
TPE_HARDEST = (2, 7, 11, 13, 14)
# optuna-nsga2's three lowest instances (seed 0: 98.8%, 99.2%, 99.6%; the rest reach 99.97%+)
OPTUNA_NSGA2_LOWEST = (0, 1, 13)


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


@pytest.mark.parametrize("name", [
    "nsga2", "mcmc", pytest.param("optuna-nsga2", marks=pytest.mark.slow)])
def test_reaches_the_exact_front(tiny, name):
    ratios = _ratios(name, tiny)
    floor, at_99 = BARS[name]
    detail = (f"{name}: hypervolume / exact on 20 instances: min {ratios.min():.4f}, "
              f"median {np.median(ratios):.4f}; per instance {np.round(ratios, 4).tolist()}")
    assert ratios.min() >= floor, detail
    assert np.sum(ratios >= 0.99) >= at_99, detail


def test_optuna_nsga2_reaches_the_exact_front_where_it_is_weakest(tiny):
    ratios = _ratios("optuna-nsga2", [tiny[i] for i in OPTUNA_NSGA2_LOWEST])
    assert ratios.min() >= BARS["optuna-nsga2"][0], \
        f"optuna-nsga2 on instances {OPTUNA_NSGA2_LOWEST}: {np.round(ratios, 4).tolist()}"


@pytest.mark.parametrize("instances", [
    (11,), pytest.param(TPE_HARDEST, marks=pytest.mark.slow)], ids=["worst", "five-hardest"])
def test_tpe_reaches_95_percent_where_it_was_weakest(tiny, instances):
    ratios = _ratios("optuna-tpe", [tiny[i] for i in instances])
    assert ratios.min() >= 0.95, f"optuna-tpe on instances {instances}: {np.round(ratios, 4).tolist()}"
