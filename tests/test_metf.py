"""m-ETF (Baechi): hand-made DAGs for the earliest-start rule, memory and co-location, edge
cases; real graphs reported against data parallelism and DPOS (printed, not asserted)."""

import dataclasses

import numpy as np
import pytest

from moplace.core.cluster import Cluster
from moplace.core.graph import OpGraph
from moplace.core.strategy import Strategy
from moplace.core.synthetic import layered_dag, random_dag
from moplace.optimize.problem import Problem
from searchers.listsched import ListSchedInput, dpos, heft
from searchers.listsched import metf

from conftest import make_cluster
from test_listsched import (_with_capacity, capacity_cases, check_schedule, graph,
                            two_chains)


def check_etf(inp, r):
    """`check_schedule`, and no unexplained idle time: every op starts exactly when both its
    device is done with the op before it and its inputs have arrived there."""
    check_schedule(inp, r)
    for dev in range(inp.n_devices):
        on = np.flatnonzero(r.placement == dev)
        prev_end = 0.0
        for i in on[np.lexsort((r.finish[on], r.start[on]))]:
            arrive = 0.0
            for e in inp.in_edge[inp.in_ptr[i]:inp.in_ptr[i + 1]]:
                m = inp.src[e]
                pm = r.placement[m]
                delay = 0.0 if pm == dev else inp.latency[pm, dev] + inp.edge_bytes[e] / \
                    inp.bandwidth[pm, dev]
                arrive = max(arrive, r.finish[m] + delay)
            assert r.start[i] == pytest.approx(max(prev_end, arrive), abs=1e-12)
            prev_end = r.finish[i]


def test_two_independent_chains_are_spread():
    inp, r = two_chains(metf)
    assert r.feasible
    check_etf(inp, r)


def test_earliest_start_beats_rank_order():
    # a (25 B) fits only device 1; h (5 s, needs a's output, which reaches device 0 at t=3) and
    # z (4 s, independent) then fit only device 0. rank: a > h > z. HEFT visits h before z and
    # books device 0 at [3, 8); z fits no gap before it and ends at 12. ETF starts z first, at
    # its earliest start 0, and h at 4: makespan 9.
    g = graph([1, 5, 4], [(0, 1, 10)], mem=[25, 10, 10])
    inp = _with_capacity(ListSchedInput.from_problem(
        g, make_cluster(2, bandwidth=1e9, latency=2.0)), [20, 25])
    h, e = heft(inp), metf(inp)
    assert h.placement.tolist() == e.placement.tolist() == [1, 0, 0]
    assert h.start[2] == pytest.approx(8.0) and h.makespan == pytest.approx(12.0)
    assert e.start.tolist() == pytest.approx([0.0, 4.0, 0.0]) and e.makespan == pytest.approx(9.0)
    assert e.order.tolist() == [0, 2, 1] and e.feasible
    check_etf(inp, e)


def test_earliest_start_not_earliest_finish():
    # y is 2 s on device 1 and 100 s on device 0; x (10 s / 1 s) then has its earliest start on
    # the idle device 0, although device 1 would finish it first: ETF takes the start (HEFT the
    # finish). At equal starts the finish decides (y goes to device 1, not device 0).
    g = graph([1, 1])
    costs = np.array([[10.0, 1.0], [100.0, 2.0]])
    inp = ListSchedInput.from_problem(g, make_cluster(2), costs)
    e, h = metf(inp), heft(inp)
    assert e.placement.tolist() == [0, 1] and e.start.tolist() == [0.0, 0.0]
    assert h.placement.tolist() == [1, 1] and h.makespan == pytest.approx(3.0)
    check_etf(inp, e)


def test_equal_starts_prefer_larger_rank_then_lower_index():
    # one device, all ready at t=0: op1 (rank 3 through op2) first; op0, op3, op4 tie on rank
    # too (1): the lower index first
    g = graph([1, 1, 2, 1, 1], [(1, 2, 0)])
    r = metf(ListSchedInput.from_problem(g, Cluster.single()))
    assert r.order.tolist() == [1, 2, 0, 3, 4]


def test_model_fitting_no_single_device_fits_across_two():
    # 4 x 60 B of parameters (+ 8 B outputs): 272 B on one 200 B device, 136 B on each of two
    g = graph([1, 1, 1, 1], [(0, 1, 8), (1, 2, 8), (2, 3, 8)], mem=[60] * 4)
    g = OpGraph([dataclasses.replace(op, output_bytes=8) for op in g.ops], g.edges)
    problem = Problem(g, make_cluster(2, memory=200, bandwidth=1e9))
    assert not problem.baselines["single"].feasible
    r = metf(ListSchedInput.from_problem(g, problem.cluster, problem.costs))
    assert r.feasible and r.placement.tolist() == [0, 0, 1, 1]  # device 0 full after two
    assert problem.evaluate(Strategy(r.placement, r.priority())).feasible


def test_memory_capacity_respected_and_op_that_fits_nowhere():
    (inp, r), (nowhere, r_nowhere) = capacity_cases(metf)
    check_etf(inp, r)
    check_schedule(nowhere, r_nowhere)


def test_colocation_is_respected_and_reserves_the_group():
    # two independent ops would go to two devices; in one group they must share one
    g = graph([1, 1, 1, 1], coloc={0: "g", 1: "g"})
    inp = ListSchedInput.from_problem(g, make_cluster(2))
    r = metf(inp)
    assert r.placement[0] == r.placement[1]
    assert r.placement[2] == r.placement[3] != r.placement[0]
    assert r.makespan == pytest.approx(2.0)
    check_etf(inp, r)
    # the group (2 x 60 B) is checked and reserved as a whole when its first op is placed:
    # device 0 (100 B) holds each op alone but not the group, so op 0 goes to device 1, which
    # then has 30 B left: op 2 (50 B), independent, must go to device 0
    g = graph([1, 1, 1], [(0, 1, 0)], mem=[60, 60, 50], coloc={0: "g", 1: "g"})
    inp = _with_capacity(ListSchedInput.from_problem(g, make_cluster(2)), [100, 150])
    r = metf(inp)
    assert r.placement.tolist() == [1, 1, 0] and r.feasible
    check_etf(inp, r)


def test_deterministic_and_self_consistent():
    for g in (layered_dag(300, seed=1), random_dag(40, seed=2)):
        inp = ListSchedInput.from_problem(g, make_cluster(4, bandwidth=5e9, latency=2e-6))
        a, b = metf(inp), metf(inp)
        for key in ("placement", "start", "finish", "order"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
        assert a.makespan == b.makespan and a.feasible
        check_etf(inp, a)


def test_empty_one_op_and_one_device():
    r = metf(ListSchedInput.from_problem(OpGraph([]), make_cluster(2)))
    assert r.placement.size == 0 and r.makespan == 0.0 and r.feasible
    r = metf(ListSchedInput.from_problem(graph([2.5]), make_cluster(2)))
    assert r.placement.tolist() == [0] and r.makespan == 2.5 and r.priority().tolist() == [0.0]
    inp = ListSchedInput.from_problem(random_dag(30, seed=3), Cluster.single())
    r = metf(inp)
    assert set(r.placement.tolist()) == {0}
    assert r.makespan == pytest.approx(inp.compute.sum())  # one device never idles
    check_etf(inp, r)


def test_searcher_is_registered():
    from moplace.optimize.plugins import make_searcher
    from searchers.listsched import MetfSearcher
    s = make_searcher("m-etf")
    assert isinstance(s, MetfSearcher) and s.name == "m-etf"


def test_schedules_10k_ops_on_8_devices():
    """A large graph is scheduled, feasibly and the same twice; how long it takes is printed by
    ``experiments/bench_listsched.py`` (a timing bound here would fail on a busy machine)."""
    inp = ListSchedInput.from_problem(layered_dag(10_000), make_cluster(8, bandwidth=5e9,
                                                                         latency=2e-6))
    r, again = metf(inp), metf(inp)
    assert r.feasible and r.makespan == again.makespan
    np.testing.assert_array_equal(r.placement, again.placement)


@pytest.mark.parametrize("cluster_name", ["4xV100-NVLink", "8xV100-16GB-NVLink"])
@pytest.mark.parametrize("graph_name", ["pipedream:vgg16", "pipedream:resnet50"])
def test_real_graphs_report_against_data_parallel_and_dpos(graph_name, cluster_name):
    from moplace.core.presets import load_cluster
    from moplace.io import load_graph
    problem = Problem(load_graph(graph_name), load_cluster(cluster_name))
    inp = ListSchedInput.from_problem(problem.graph, problem.cluster, problem.costs)
    runs = {}
    for name, sched in (("m-etf", metf), ("dpos", dpos)):
        r = sched(inp)
        check_schedule(inp, r)
        ev = problem.evaluate(Strategy(r.placement, r.priority()))
        assert np.isfinite(ev.values[0]) and ev.values[0] > 0
        if r.feasible:  # the static memory model is conservative
            assert ev.feasible
        runs[name] = (ev, r)
    dp = problem.baselines["data-parallel"]
    ev, r = runs["m-etf"]
    print(f"m-etf {graph_name:19s} {cluster_name:19s} sim {ev.values[0] * 1e3:8.2f} ms"
          f" (sched {r.makespan * 1e3:8.2f})  / data-parallel {ev.values[0] / dp.values[0]:5.3f}"
          f" (dp feasible {dp.feasible})  / dpos {ev.values[0] / runs['dpos'][0].values[0]:5.3f}"
          f"  feasible {ev.feasible}")
