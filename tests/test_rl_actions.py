"""What the RL policies' decisions mean (searchers.rl.actions) and how they are scored
(searchers.rl.rewards): numpy only, no TensorFlow."""

import numpy as np
import pytest

from moplace.core.graph import Op, OpGraph
from moplace.core.synthetic import layered_dag
from moplace.optimize.problem import Problem
from searchers.rl.actions import ActionSpace, _allot, order_priority
from searchers.rl.rewards import (
    MovingAverage,
    WeightBaseline,
    sqrt_runtime_reward,
    weighted_log_reward,
)

from conftest import make_cluster


class Actions:  # the fields of policy.Actions, without importing TensorFlow
    def __init__(self, groups, devices, splits, levels):
        self.groups, self.devices, self.splits, self.levels = (
            np.asarray(a) for a in (groups, devices, splits, levels))


@pytest.fixture(scope="module")
def problem():
    return Problem(layered_dag(30, width=3, seed=3), make_cluster(3))


def test_decisions_become_strategies(problem):
    space = ActionSpace(problem, 4, splits=3, levels=2)
    n = len(problem.graph.ops)
    groups = np.arange(n) % 4
    a = Actions([groups], [[0, 1, 2, 1]], [[0, 2, 0, 1]], [[0, 1, 0, 1]])
    s = space.strategies(a)[0]
    np.testing.assert_array_equal(s.placement, np.array([0, 1, 2, 1])[groups])
    splittable = {i for i, op in enumerate(problem.graph.ops) if "batch" in op.splittable}
    for i, split in s.splits.items():  # group 1: 3 ways from device 1; group 3: 2 ways
        assert groups[i] in (1, 3) and i in splittable and split.dim == "batch"
        assert split.devices == ((1, 2, 0) if groups[i] == 1 else (1, 2))
    assert {i for i in splittable if groups[i] in (1, 3)} == set(s.splits)
    # a higher level runs first; within a level, the upward-rank order
    base = order_priority(problem)
    np.testing.assert_allclose(s.priority, np.array([0, 1, 0, 1])[groups] + base)
    assert base.min() > 0 and base.max() < 1 and len(set(base)) == n
    s.validate(problem.graph, 3)


def test_targets_give_back_the_placement(problem):
    """Imitation targets: the decisions that give a strategy's placement exactly, whole ops,
    groups of one device each and contiguous in the topological order."""
    from searchers.listsched import heuristic_strategies

    dpos = heuristic_strategies(problem)[0]
    space = ActionSpace(problem, 6, splits=3, levels=4)
    groups, devices, splits, levels = space.targets(dpos)
    s = space.strategies(Actions([groups], [devices], [splits], [levels]))[0]
    np.testing.assert_array_equal(s.placement, dpos.placement)
    assert not s.splits and set(groups) == set(range(6))
    assert levels.min() == 0 and levels.max() == 3


def test_colocated_ops_move_together():
    ops = [Op(f"o{i}", compute={"V100": 1e-3}, colocation=f"g{i // 2}") for i in range(6)]
    problem = Problem(OpGraph(ops), make_cluster(2))
    space = ActionSpace(problem, 2)
    assert space.n_units == 3
    s = space.strategies(Actions([[0, 1, 0]], [[1, 0]], [[0, 0]], [[0, 0]]))[0]
    assert s.placement.tolist() == [1, 1, 0, 0, 1, 1]


def test_allot_shares_groups_by_units():
    assert _allot(np.array([10, 30, 0]), 8).tolist() == [2, 6, 0]
    assert _allot(np.array([1, 100, 1]), 4).tolist() == [1, 2, 1]
    assert _allot(np.array([5, 1, 9]), 2).tolist() == [1, 0, 1]
    assert _allot(np.zeros(3), 4).tolist() == [0, 0, 0]


def test_rewards():
    r = sqrt_runtime_reward([4.0, 1.0, 9.0], [True, True, False], reference=1.0, fail_factor=100)
    np.testing.assert_allclose(r, [-2.0, -1.0, -10.0])
    values = np.array([[1.0, 2.0, 4.0], [2.0, 0.0, 4.0]])
    w = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]])
    r = weighted_log_reward(values, [0.0, 8.0], w, scale=[2.0, 4.0, 8.0], capacity=16, beta=2.0)
    np.testing.assert_allclose(r, [-np.log(0.5), -np.log(0.25 + 1.0)])
    # a perfect score is floored, not infinite
    assert np.isfinite(weighted_log_reward([[0.0]], [0.0], [[1.0]], [1.0], 1.0))


def test_baselines():
    avg = MovingAverage(0.9)
    assert avg.update([1.0, 3.0]) == 2.0 and avg.value == 2.0
    assert avg.update([12.0]) == 2.0 and avg.value == pytest.approx(3.0)
    wb = WeightBaseline()
    rng = np.random.default_rng(0)
    w = rng.dirichlet(np.ones(3), 200)
    before = wb.update(w, 2.0 * w[:, 0] - w[:, 2])
    assert np.all(before == 0)  # nothing seen yet
    np.testing.assert_allclose(wb.predict([[1.0, 0, 0], [0, 0, 1.0]]), [2.0, -1.0], atol=0.05)
