"""`Problem.evaluate_batch`: the same evaluations as one by one, computed on threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from moplace import load_cluster, make_searcher, search
from moplace.core.baselines import BASELINES, baseline
from moplace.core.genome import GenomeSpace
from moplace.core.synthetic import layered_dag
from moplace.optimize import problem as problem_module
from moplace.optimize.problem import THREADED_MIN_OPS, Problem


@pytest.fixture(scope="module")
def problem():
    graph = layered_dag(THREADED_MIN_OPS, width=16, seed=4)
    return Problem(graph, load_cluster("4xV100-NVLink"))


def _strategies(problem, n=6):
    space = GenomeSpace(problem.graph, problem.n_devices)
    out = [baseline(name, problem.graph, problem.n_devices) for name in BASELINES]
    return out + [space.decode(x) for x in space.sample(n, np.random.default_rng(0))]


def test_batch_gives_the_serial_evaluations_in_order(problem, monkeypatch):
    strategies = _strategies(problem)
    serial = [problem.evaluate(s) for s in strategies]
    threads = set()
    evaluate = Problem.evaluate

    def spy(self, strategy, parent=None):
        threads.add(threading.current_thread().name)
        return evaluate(self, strategy, parent)

    monkeypatch.setattr(Problem, "evaluate", spy)
    batch = problem.evaluate_batch(strategies, workers=2)
    assert len(batch) == len(serial)
    for a, b in zip(serial, batch):
        assert np.array_equal(a.values, b.values) and a.violation == b.violation
        assert np.array_equal(a.trace.task_end, b.trace.task_end)
    assert threads and all(name.startswith("moplace-evaluate") for name in threads)


def test_small_graphs_and_single_strategies_stay_in_this_thread(monkeypatch):
    small = Problem(layered_dag(100, width=8), load_cluster("4xV100-NVLink"))
    seen = set()
    evaluate = Problem.evaluate
    monkeypatch.setattr(Problem, "evaluate",
                        lambda self, s: seen.add(threading.current_thread().name) or evaluate(self, s))
    small.evaluate_batch(_strategies(small, 2), workers=2)
    assert seen == {threading.current_thread().name}


def test_a_search_is_the_same_on_one_core_or_two(problem, monkeypatch):
    runs = []
    for workers in (1, 2):
        monkeypatch.setattr(problem_module, "batch_workers", lambda w=workers: w)
        result = search(problem, make_searcher("nsga2", pop_size=10), budget=40, seed=3)
        runs.append(sorted(tuple(p.evaluation.values) for p in result.front))
    assert runs[0] == runs[1]


def test_batch_workers_is_the_affinity():
    assert problem_module.batch_workers() >= 1
