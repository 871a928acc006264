"""The searcher contract (`searcher_contract.SearcherContract`) over every registered searcher."""

import pytest

from moplace.optimize.driver import Budget
from moplace.optimize.plugins import SEARCHERS, make_searcher

from searcher_contract import SearcherContract

NAMES = SEARCHERS.names()
#: Searchers that train a TensorFlow policy: each contract run builds and compiles one (5-15 s),
#: so their contract runs behind the slow marker (tests/test_rl_searchers.py covers them in the
#: default run).
POLICY_SEARCHERS = {"hierarchical", "trinity"}


@pytest.fixture(params=[pytest.param(n, marks=pytest.mark.slow) if n in POLICY_SEARCHERS else n
                        for n in NAMES])
def name(request):
    return request.param


class TestContract(SearcherContract):
    pass


def test_every_built_in_searcher_is_registered():
    assert set(NAMES) >= {"single", "data-parallel", "round-robin", "layer-split", "random",
                          "heft", "dpos", "m-etf", "os-dpos", "nsga2", "mcmc", "optuna-nsga2",
                          "optuna-tpe", "hierarchical", "trinity"}


def test_unknown_searcher_lists_the_known_ones():
    from moplace.errors import MoplaceError
    with pytest.raises(MoplaceError, match="unknown searcher 'simulated-annealing'; known: .*random"):
        make_searcher("simulated-annealing")


@pytest.mark.parametrize("kw", [dict(evaluations=0), dict(evaluations=-3), dict(seconds=-1.0),
                                dict(evaluations=None, seconds=None), dict(seconds=float("nan"))])
def test_bad_budgets_are_refused(kw):
    from moplace.errors import MoplaceError
    with pytest.raises(MoplaceError, match="budget"):
        Budget(**kw)
