"""Front polish (searchers.polish): what is polished, which neighbours are queued, in what
order they are asked and how much of a search they take (issue 30: the RL searchers below
random search's hypervolume)."""

import numpy as np
import pytest

import moplace
from moplace.optimize.problem import Problem
from searchers.orders import StandardOrders
from searchers.polish import FrontPolish

from conftest import make_cluster


@pytest.fixture(scope="module")
def problem():
    return Problem(moplace.load_graph("pipedream:alexnet"), moplace.load_cluster("4xV100-NVLink"))


def _told(problem, polish, strategies):
    evs = [problem.evaluate(s) for s in strategies]
    polish.tell(strategies, evs)
    return evs


def test_a_new_front_point_queues_its_standard_orders_first_then_neighbours(problem):
    polish = FrontPolish(problem, np.random.default_rng(0), share=0.5, per_point=12)
    space = problem.genome
    x = space.sample(1, np.random.default_rng(5))[0]
    start = space.decode(x)
    _told(problem, polish, [start])
    assert polish.polished == 1
    orders = {o.tobytes() for o in StandardOrders(problem)(start.placement)}
    first = polish.take(len(orders))
    assert all(s.placement.tolist() == start.placement.tolist() for s in first)
    assert {s.priority.tobytes() for s in first} == orders
    rest = polish.take(100)
    assert 1 <= len(rest) <= 12
    keys = {s.simulation_key for s in first + rest}
    assert len(keys) == len(first) + len(rest)  # no strategy queued twice
    assert start.simulation_key not in keys  # nor the point itself
    assert all((space.encode(s) != space.encode(start)).any() for s in rest)


def test_only_front_points_are_polished_and_told_strategies_never_come_back(problem):
    polish = FrontPolish(problem, np.random.default_rng(1), share=0.5, per_point=6)
    n = len(problem.graph.ops)
    good = moplace.Strategy(np.zeros(n, np.int64))
    _told(problem, polish, [good, good])  # the same point twice: polished once
    assert polish.polished == 1
    batch = polish.take(4)
    _told(problem, polish, batch)
    again = polish.take(1000)
    assert not {s.simulation_key for s in batch} & {s.simulation_key for s in again}


def test_polish_takes_at_most_its_share():
    problem = Problem(moplace.load_graph("pipedream:vgg16"), make_cluster(4, bandwidth=5e9))
    polish = FrontPolish(problem, np.random.default_rng(2), share=0.25, per_point=8)
    rng = np.random.default_rng(3)
    asked = 0
    for _ in range(6):
        group = problem.graph.arrays.group
        drawn = [moplace.Strategy(rng.integers(4, size=group.max() + 1)[group]) for _ in range(4)]
        _told(problem, polish, drawn)
        while polish.due():
            batch = polish.take(4)
            asked += len(batch)
            _told(problem, polish, batch)
    assert asked == polish.asked > 0
    assert polish.asked <= 0.25 * polish.told + 4  # one batch over at most


def test_a_strategy_without_genome_is_counted_not_polished():
    graph = moplace.load_graph("pipedream:vgg16")
    problem = Problem(graph, make_cluster(4, bandwidth=5e9))
    options = problem.genome.options
    splits = {i: moplace.Split("batch", (0, 2)) for g, members in enumerate(graph.groups)
              if ("batch", 2) in options[g] for i in members}
    assert splits
    odd = moplace.Strategy(np.zeros(len(graph.ops), np.int64), splits=splits)
    polish = FrontPolish(problem, np.random.default_rng(0), share=0.5)
    _told(problem, polish, [odd])
    assert (polish.polished, polish.unencodable) == (0, 1)
    assert not polish.due()
    assert "1 front points with no genome" in polish.note()


def test_lever_moves_change_one_strategy_wide_gene(problem):
    """A lever move changes the bucket size, the ZeRO stage or one recompute gene, and only
    that."""
    polish = FrontPolish(problem, np.random.default_rng(1), share=0.5)
    space = problem.genome
    assert "lever" in polish.kinds
    x = space.sample(1, np.random.default_rng(2))[0]
    x[space.priorities] = np.arange(space.n_ops) / space.n_ops
    tail = np.arange(space.size) >= space.bucket_gene
    seen = set()
    for _ in range(200):
        y = polish._move(x, "lever", None)
        changed = np.flatnonzero(y != x)
        assert changed.size == 1 and tail[changed[0]]
        seen.add("bucket" if changed[0] == space.bucket_gene else
                 "zero" if changed[0] == space.zero_gene else "recompute")
        space.decode(y).validate(problem.graph, problem.n_devices)
    assert seen == {"bucket", "zero", "recompute"}
