"""The contract every searcher must keep, as a reusable suite.

A test module subclasses `SearcherContract` and provides a ``name`` fixture (the registered
name of the searcher under test); every test below then runs on that searcher:
`test_searcher_contract.py` runs it over the whole registry, `test_plugins.py` over a
searcher registered by a fake third-party package.
"""

import numpy as np
import pytest

from moplace.core.graph import Op, OpGraph
from moplace.core.synthetic import layered_dag
from moplace.optimize.driver import Budget, search
from moplace.optimize.plugins import SEARCHERS, make_searcher
from moplace.optimize.problem import Problem

from conftest import make_cluster


def run(name, problem, budget=40, seed=0):
    return search(problem, make_searcher(name), budget=Budget(evaluations=budget), seed=seed)


class SearcherContract:
    """Valid strategies, budget kept, same seed same result, infeasible problems, one device,
    empty and one-op graphs, and a documented registration."""

    @pytest.fixture(scope="class")
    def problem(self):
        return Problem(layered_dag(60, width=6, seed=1),
                       make_cluster(3, bandwidth=5e9, latency=2e-6))

    def test_strategies_are_valid_for_the_graph(self, name, problem):
        result = run(name, problem)
        assert result.front, "a feasible problem must give a front"
        for point in result.front + result.infeasible:
            point.strategy.validate(problem.graph, problem.n_devices)

    def test_budget_is_respected(self, name, problem):
        for budget in (1, 7):
            result = run(name, problem, budget=budget)
            assert 1 <= result.n_evaluations <= budget

    def test_same_seed_same_result(self, name, problem):
        a, b = run(name, problem, seed=3), run(name, problem, seed=3)
        assert [p.strategy for p in a.front] == [p.strategy for p in b.front]
        np.testing.assert_array_equal([p.values for p in a.front], [p.values for p in b.front])
        assert a.hypervolume_history == b.hypervolume_history

    def test_infeasible_strategies_are_handled(self, name):
        tiny = make_cluster(2, memory=1000)  # nothing fits
        result = run(name, Problem(layered_dag(20, width=4), tiny), budget=10)
        assert not result.feasible_found and result.infeasible
        assert all(p.evaluation.violation > 0 for p in result.infeasible)
        violations = [p.evaluation.violation for p in result.infeasible]
        assert violations == sorted(violations)

    def test_one_device_cluster(self, name):
        result = run(name, Problem(layered_dag(30, width=3), make_cluster(1)), budget=10)
        assert result.front and all(set(p.strategy.placement.tolist()) == {0} for p in result.front)

    @pytest.mark.parametrize("ops", [0, 1])
    def test_empty_and_one_op_graphs(self, name, ops):
        graph = OpGraph([Op(f"o{i}", compute={"V100": 1e-3}) for i in range(ops)])
        result = run(name, Problem(graph, make_cluster(2)), budget=5)
        assert result.n_evaluations >= 1 and result.front
        assert result.front[0].values[0] == pytest.approx(1e-3 * ops)

    def test_registration_is_documented(self, name):
        info = SEARCHERS.info(name)
        assert info.summary and len(info.summary) <= 100, info.summary
        undocumented = [s.name for s in info.settings if not s.doc]
        assert undocumented == [], f"{name}: add these to the class docstring's Settings: section"
        assert make_searcher(name).name == name
