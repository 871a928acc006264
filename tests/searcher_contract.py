"""The contract every searcher must keep, as a reusable suite.

A test module subclasses `SearcherContract` and provides a ``name`` fixture (the registered
name of the searcher under test); every test below then runs on that searcher:
`test_searcher_contract.py` runs it over the whole registry, `test_plugins.py` over a
searcher registered by a fake third-party package.
"""

import os
import signal

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


def _islands_problem():
    """Two servers of two devices, fast inside and slow between: data parallelism on one
    server's devices (a seed on a device subset) beats it on all four."""
    from moplace.core.cluster import Cluster, Device

    devices = [Device(f"gpu{i}", "V100", 16 * 2**30, 1.0) for i in range(4)]
    bw = np.full((4, 4), 1e9)
    bw[:2, :2] = bw[2:, 2:] = 100e9
    return Problem(layered_dag(30, width=4, seed=2),
                   Cluster("2x2", devices, bw, np.full((4, 4), 5e-6)))


class SearcherContract:
    """Valid strategies, budget kept, same seed same result, infeasible problems, one device,
    empty and one-op graphs, a documented registration, and Ctrl-C anywhere then resume
    giving the uninterrupted result."""

    @pytest.fixture(scope="class")
    def problem(self):
        return Problem(layered_dag(36, width=6, seed=1),  # 36 ops: optuna suggests 3 per op
                       make_cluster(3, bandwidth=5e9, latency=2e-6))

    def test_strategies_are_valid_for_the_graph(self, name, problem):
        result = run(name, problem)
        assert result.front, "a feasible problem must give a front"
        for point in result.front + result.infeasible:
            point.strategy.validate(problem.graph, problem.n_devices)

    def test_front_weakly_dominates_every_seed(self, name, problem):
        """A seeded searcher's front weakly dominates every feasible seed, and with no feasible
        seed it keeps one at most as violating as the least violating seed."""
        from moplace.optimize.seeds import seed_strategies

        if not make_searcher(name).seeded:
            pytest.skip(f"{name} does not start from the seeds")
        tight = Problem(layered_dag(20, width=4), make_cluster(2, memory=1000))  # nothing fits
        for p in (problem, tight, _islands_problem()):
            seeds = seed_strategies(p)
            evs = p.evaluate_batch([s.strategy for s in seeds])
            result = run(name, p, budget=len(seeds) + 10)
            front = np.array([q.values for q in result.front]).reshape(-1, len(p.objectives))
            for seed, ev in zip(seeds, evs):
                if ev.feasible:
                    assert np.all(front <= ev.values, axis=1).any(), \
                        f"{name}: no point of the front is as good as seed {seed.label!r}"
            if not any(ev.feasible for ev in evs):
                least = min(ev.violation for ev in evs)
                assert result.front or min(q.evaluation.violation
                                           for q in result.infeasible) <= least

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

    @pytest.mark.parametrize("at", [1, 26])
    def test_ctrl_c_anywhere_then_resume_is_the_uninterrupted_search(self, name, problem,
                                                                     tmp_path, monkeypatch, at):
        """A real SIGINT while the simulator runs evaluation ``at`` (the first, and one inside
        a batch for most searchers): the evaluation completes, the search stops with no traceback, and the
        checkpoint continues it to exactly the search that was never stopped."""
        whole = run(name, problem, seed=4)
        evaluate, calls = problem.evaluate, []

        def ctrl_c_inside(strategy, parent=None):
            calls.append(1)
            if len(calls) == at:
                os.kill(os.getpid(), signal.SIGINT)  # arrives while compiled code runs
            return evaluate(strategy, parent)

        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            monkeypatch.setattr(problem, "evaluate", ctrl_c_inside)
            ck = tmp_path / "run.ckpt"
            first = search(problem, make_searcher(name), budget=40, seed=4, checkpoint=ck)
            monkeypatch.undo()
        finally:
            signal.signal(signal.SIGINT, previous)
        if first.status == "finished":  # a one-shot searcher done before evaluation ``at``
            assert first.n_evaluations < at
            return
        # == at, or fewer for a searcher that simulated inside ask (a list scheduler checking
        # its schedule against the baselines): the signal then came during ask
        assert first.status == "interrupted" and first.n_evaluations <= at
        resumed = search(problem, make_searcher(name), budget=40, seed=4, checkpoint=ck)
        assert resumed.n_evaluations == whole.n_evaluations
        assert [p.strategy for p in resumed.front] == [p.strategy for p in whole.front]
        assert resumed.hypervolume_history == whole.hypervolume_history
