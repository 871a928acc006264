"""Exact fronts of tiny problems (moplace.optimize.exact) and the tiny benchmark (moplace.optimize.tiny)."""

import time

import numpy as np
import pytest

from moplace.core.graph import Edge, Op, OpGraph
from moplace.core.synthetic import random_dag
from moplace.errors import MoplaceError
from moplace.optimize.driver import search
from moplace.optimize.exact import (
    enumeration_size,
    exact_front,
    linear_extensions,
    transitive_ancestors,
)
from moplace.optimize.plugins import make_searcher
from moplace.optimize.problem import Limits, Problem
from moplace.optimize.tiny import (
    exact_reference,
    hv_ratio,
    tiny_benchmark,
    tiny_exact,
    tiny_instance,
    tiny_instances,
)

from conftest import make_cluster


def weakly_dominated(point, front_values) -> bool:
    return bool(np.any(np.all(np.asarray(front_values) <= np.asarray(point), axis=1)))


def same_front(a, b) -> None:
    assert a.values.shape == b.values.shape
    np.testing.assert_array_equal(a.values, b.values)


# -- order enumeration -----------------------------------------------------------------------

def test_linear_extensions_of_chain_antichain_and_diamond():
    assert linear_extensions((0, 1, 2), [0, 0b1, 0b11]) == [(0, 1, 2)]
    assert len(linear_extensions((0, 1, 2), [0, 0, 0])) == 6
    # diamond 0 -> {1, 2} -> 3: two orders
    g = OpGraph([Op(f"o{i}", compute={"V100": 1.0}) for i in range(4)],
                [Edge(0, 1), Edge(0, 2), Edge(1, 3), Edge(2, 3)])
    anc = transitive_ancestors(g)
    assert anc == [0, 0b1, 0b1, 0b111]
    assert sorted(linear_extensions(range(4), anc)) == [(0, 1, 2, 3), (0, 2, 1, 3)]
    # a subset ignores ops outside it but keeps transitive precedence (0 before 3)
    assert linear_extensions((0, 3), anc) == [(0, 3)]


def _grouped_problem():
    ops = [Op(f"o{i}", compute={"V100": 0.5 + 0.3 * i}, output_bytes=100 + 50 * i,
              param_bytes=10 * i, colocation="g" if i in (1, 3) else None) for i in range(5)]
    g = OpGraph(ops, [Edge(0, 1, 300), Edge(0, 2, 200), Edge(1, 4, 400), Edge(2, 3, 100)],
                name="grouped")
    return Problem(g, make_cluster(3, bandwidth=300.0, latency=0.05, memory=900))


def _tight_problem():
    """Heavy parameters: a device holding 4 or more ops cannot fit, whatever the order."""
    base = random_dag(5, seed=3)
    ops = [Op(op.name, compute=op.compute, output_bytes=op.output_bytes % 200 + 50,
              param_bytes=300 + op.param_bytes) for op in base.ops]
    g = OpGraph(ops, base.edges, name="tight", metadata=base.metadata)
    return Problem(g, make_cluster(2, bandwidth=400.0, latency=0.1, memory=1500))


def _limited_problem():
    """User limits on peak communication and peak memory (both prune in the smart method)."""
    base = tiny_instance(5, 0, n_devices=2, n_ops=5)
    return Problem(base.graph, base.cluster, limits=Limits(peak_comm_bytes=600, peak_mem_bytes=1500))


SMALL = [
    pytest.param(lambda: tiny_instance(0, 0, n_devices=2, n_ops=5), id="tiny-2dev-a"),
    # two more 2-device instances (3.5 s each, brute force) in the slow run
    pytest.param(lambda: tiny_instance(1, 2, n_devices=2, n_ops=5), id="tiny-2dev-b",
                 marks=pytest.mark.slow),
    pytest.param(lambda: tiny_instance(2, 4, n_devices=2, n_ops=5), id="tiny-2dev-c",
                 marks=pytest.mark.slow),
    pytest.param(lambda: tiny_instance(3, 1, n_devices=3, n_ops=4), id="tiny-3dev-4ops"),
    pytest.param(_grouped_problem, id="colocation-3dev"),
    pytest.param(_tight_problem, id="tight-memory"),
    pytest.param(_limited_problem, id="user-limits"),
]


@pytest.mark.parametrize("make", SMALL)
def test_smart_enumeration_matches_brute_force(make):
    problem = make()
    brute = exact_front(problem, method="brute")
    smart = exact_front(problem)
    deduped = exact_front(problem, dedupe=True)
    assert len(brute) > 0
    same_front(smart, brute)
    same_front(deduped, brute)
    n = len(problem.graph.ops)
    assert brute.n_evaluations == brute.n_placements * int(np.prod(np.arange(1, n + 1)))
    assert smart.n_evaluations < brute.n_evaluations
    assert deduped.n_evaluations <= smart.n_evaluations <= smart.n_orders
    assert smart.n_orders == enumeration_size(problem)


def test_memory_pruning_happens_and_colocation_is_respected():
    tight = exact_front(_tight_problem())
    assert tight.n_pruned > 0  # the brute-force comparison above checks it loses nothing
    grouped = _grouped_problem()
    front = exact_front(grouped)
    assert front.n_placements == 3 ** 4  # 5 ops, 4 co-location groups
    for s in front.strategies:
        assert s.placement[1] == s.placement[3]


def test_exact_strategies_reproduce_their_values():
    problem = tiny_instance(0, 3)
    front = exact_front(problem)
    assert len(front) > 0 and not front.splits_ignored
    for values, strategy in zip(front.values, front.strategies):
        ev = problem.evaluate(strategy)
        assert ev.feasible and not strategy.splits
        np.testing.assert_array_equal(ev.values, values)


def test_max_evaluations_guard():
    problem = tiny_instance(0, 0, n_devices=2, n_ops=6)
    needed = enumeration_size(problem)
    with pytest.raises(MoplaceError, match="max_evaluations"):
        exact_front(problem, max_evaluations=needed - 1)
    with pytest.raises(MoplaceError, match="max_evaluations"):
        exact_front(problem, method="brute", max_evaluations=needed)
    assert exact_front(problem, max_evaluations=needed).n_evaluations == needed
    with pytest.raises(MoplaceError, match="unknown method"):
        exact_front(problem, method="clever")


# -- the 20 tiny instances -------------------------------------------------------------------

# the default run checks the first 4 instances (2 and 3 devices, about 5 s); all 20 (about
# 25 s) are checked behind the slow marker
@pytest.fixture(scope="module", params=[4, pytest.param(20, marks=pytest.mark.slow)],
                ids=["first-4", "all-20"])
def tiny_bench(request):
    count = request.param
    start = time.perf_counter()
    bench = tiny_benchmark(count, 0)
    seconds = time.perf_counter() - start
    total = sum(f.seconds for _, f in bench)
    evals = sum(f.n_evaluations for _, f in bench)
    print(f"\n{count} tiny instances: build + exact fronts {seconds:.1f} s; enumeration "
          f"{total:.1f} s, {evals} evaluations, {1e6 * total / max(evals, 1):.0f} us each")
    return bench, seconds


def test_tiny_instances_are_deterministic_and_sized():
    a, b = tiny_instances(4, seed=7), tiny_instances(4, seed=7)
    for p, q in zip(a, b):
        assert p.graph.edges == q.graph.edges and p.graph.ops == q.graph.ops
        np.testing.assert_array_equal(p.cluster.memory, q.cluster.memory)
        np.testing.assert_array_equal(p.cluster.bandwidth, q.cluster.bandwidth)
    assert [p.n_devices for p in a] == [2, 3, 2, 3]
    assert tiny_instances(4, seed=8)[0].graph.edges != a[0].graph.edges or \
        not np.array_equal(tiny_instances(4, seed=8)[0].cluster.memory, a[0].cluster.memory)


def test_benchmark_builds_in_time_and_is_interesting(tiny_bench):
    bench, _ = tiny_bench
    assert len(bench) in (4, 20)
    # the build time is printed above and measured by experiments/exact_fronts.py: no test
    # fails because the machine is busy
    for problem, front in bench:
        n = len(problem.graph.ops)
        assert 5 <= n <= 8 and problem.n_devices in (2, 3)
        assert len(front) >= 1
        assert 0 < front.n_feasible < front.n_evaluations  # memory binds, but not everywhere


def test_exact_front_is_non_dominated_and_distinct(tiny_bench):
    for _, front in tiny_bench[0]:
        v = front.values
        for i in range(len(v)):
            others = np.delete(v, i, axis=0)
            assert not weakly_dominated(v[i], others)


def test_exact_front_dominates_baselines_and_random_search(tiny_bench):
    for k, (problem, front) in enumerate(tiny_bench[0]):
        for name, ev in problem.baselines.items():
            if ev.feasible:
                assert weakly_dominated(ev.values, front.values), (problem, name)
        result = search(problem, make_searcher("random"), budget=200, seed=k)
        assert result.n_evaluations == 200
        for point in result.front:
            assert weakly_dominated(point.values, front.values), problem
        found = [p.values for p in result.front]
        ratio = hv_ratio(found, front)
        assert 0.0 <= ratio <= 1.0 + 1e-12
        assert hv_ratio(found, front, problem.reference) <= 1.0 + 1e-12


def test_hv_ratio():
    problem, front = tiny_exact(0, 0)
    assert hv_ratio(front.values, front) == pytest.approx(1.0)
    assert hv_ratio(front.values, front, problem.reference) == pytest.approx(1.0)
    assert hv_ratio(np.empty((0, 3)), front) == 0.0
    ref = exact_reference(front)
    np.testing.assert_allclose(ref, 1.1 * front.values.max(axis=0))
    if len(front) > 1:
        assert hv_ratio(front.values[:1], front) < 1.0
