"""Searchers against exact Pareto fronts of random tiny instances (moplace.optimize.tiny).

The default run holds NSGA-II and MCMC to their bars on six of the 20 instances: those where
they came closest to missing (seed 0: NSGA-II 99.96% on 0 and 99.98% on 15, MCMC 99.52% on 2,
99.62% on 13 and 99.98% on 15; every other instance at 100%), plus 11 and 14, where TPE was
weakest, so both 2- and 3-device instances are in. The full checks on all 20, and the Optuna
samplers' (2000 trials per instance, TPE 25-65 s each), carry the ``slow`` marker: .ci/run
runs them in its second step (``pytest -m slow``); `experiments/exact_fronts.py` prints every
figure.
"""

import numpy as np
import pytest

from moplace.optimize.driver import Budget, search
from moplace.optimize.plugins import make_searcher
from moplace.optimize.tiny import hv_ratio, tiny_exact

BUDGET = 2000  # the CLI's default evaluation budget
ALL = tuple(range(20))
#: the default run's instances (see the module docstring)
CLOSEST = (0, 2, 11, 13, 14, 15)
# the hypervolume ratio each instance must reach: the issue asks 99% for NSGA-II and MCMC and
# 95% for the Optuna samplers
BARS = {"nsga2": 0.99, "mcmc": 0.99, "optuna-nsga2": 0.95, "optuna-tpe": 0.95}
# optuna-tpe is held to its bar on the five instances where it fell below 95% before its polish
# (seed 0: 94.4%, 86.8%, 65.5%, 91.1%, 84.5%); `experiments/exact_fronts.py` runs all 20.
TPE_HARDEST = (2, 7, 11, 13, 14)
# one test per searcher and instance, so that pytest-xdist spreads the slow ones over the cores
CASES = ([(name, i) for name in ("nsga2", "mcmc") for i in CLOSEST]
         + [pytest.param(name, i, marks=pytest.mark.slow)
            for name in ("nsga2", "mcmc") for i in ALL if i not in CLOSEST]
         + [pytest.param("optuna-nsga2", i, marks=pytest.mark.slow) for i in ALL]
         + [pytest.param("optuna-tpe", i, marks=pytest.mark.slow) for i in TPE_HARDEST])


@pytest.mark.parametrize("name, index", CASES)
def test_reaches_the_exact_front(name, index):
    problem, exact = tiny_exact(0, index)
    result = search(problem, make_searcher(name), budget=Budget(evaluations=BUDGET), seed=0)
    front = np.array([p.values for p in result.front]).reshape(-1, len(problem.objectives))
    ratio = hv_ratio(front, exact)
    assert ratio >= BARS[name], f"{name} on instance {index}: hypervolume / exact {ratio:.4f}"
