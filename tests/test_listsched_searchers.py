"""HEFT, DPOS and OS-DPOS as searchers, on every bundled real graph and preset cluster."""

import numpy as np
import pytest

from moplace import list_bundled, load_cluster, load_graph
from moplace.optimize.driver import search
from moplace.optimize.plugins import make_searcher
from moplace.optimize.problem import Problem
from searchers.listsched import ListSchedInput, dpos

CLUSTERS = ["4xV100-NVLink", "8xV100-16GB-NVLink"]


@pytest.fixture(scope="module", params=CLUSTERS)
def cluster(request):
    return load_cluster(request.param)


@pytest.mark.parametrize("name", list_bundled())
def test_os_dpos_is_never_slower_than_the_best_baseline(name, cluster):
    problem = Problem(load_graph(name), cluster)
    feasible = [ev.values[0] for ev in problem.baselines.values() if ev.feasible]
    result = search(problem, make_searcher("os-dpos"), budget=500)
    if feasible:  # memory is respected where a feasible placement exists
        assert result.front, f"{name}: a baseline fits but os-dpos found nothing feasible"
        best = min(p.values[0] for p in result.front)
        assert best <= min(feasible) * (1 + 1e-12)
    else:
        assert result.infeasible


@pytest.mark.parametrize("name", list_bundled())
def test_dpos_memory_model_is_conservative(name, cluster):
    # DPOS pins params + outputs statically; the simulator frees activations, so a placement
    # DPOS calls feasible must be feasible when simulated
    problem = Problem(load_graph(name), cluster)
    result = dpos(ListSchedInput.from_problem(problem.graph, cluster, problem.costs))
    from moplace.core.strategy import Strategy
    ev = problem.evaluate(Strategy(result.placement, result.priority()))
    if result.feasible:
        assert ev.feasible


def test_os_dpos_keeps_only_improvements():
    problem = Problem(load_graph("pipedream:vgg16"), load_cluster("8xV100-16GB-NVLink"))
    dp = problem.baselines["data-parallel"].values[0]
    exhaustive = search(problem, make_searcher("os-dpos", patience=10**6), budget=2000)
    fastt = search(problem, make_searcher("os-dpos"), budget=2000)
    best = lambda r: min(p.values[0] for p in r.front)  # noqa: E731
    assert best(exhaustive) <= best(fastt) <= dp
    assert fastt.n_evaluations < exhaustive.n_evaluations


@pytest.mark.parametrize("searcher", ["heft", "dpos"])
def test_scheduler_estimate_agrees_with_the_simulator(searcher):
    problem = Problem(load_graph("pipedream:resnet50"), load_cluster("4xV100-NVLink"))
    s = make_searcher(searcher)
    result = search(problem, s, budget=1)
    simulated = result.front[0].values[0] if result.front else result.infeasible[0].values[0]
    assert simulated == pytest.approx(s.estimated_makespan, rel=0.1)
    assert np.isfinite(simulated)


def test_seeds_put_everything_on_one_device_of_each_kind():
    from moplace.core.baselines import memory_priority
    from moplace.optimize.tiny import tiny_instance
    from searchers.listsched import heuristic_strategies

    vgg = Problem(load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink"))
    mixed = tiny_instance(1, 5)  # a P100 and two A100s of different memory sizes
    assert [d.kind for d in mixed.cluster.devices] == ["P100", "A100", "A100"]
    for p, devices in ((vgg, [0]), (mixed, [0, 1, 2])):
        seeds = heuristic_strategies(p)
        assert len(seeds) == 2 + 5 + len(devices)  # DPOS, HEFT, the baselines, the singles
        for s, d in zip(seeds[7:], devices):
            assert np.all(s.placement == d)
            np.testing.assert_array_equal(s.priority, memory_priority(p.graph))
