"""Delta simulation: a patched task graph is the built one, and its trace the full trace."""

import dataclasses

import numpy as np
import pytest

import moplace
from moplace.core.baselines import baseline
from moplace.core.cluster import Cluster, Device
from moplace.core.graph import Op, OpGraph
from moplace.core.strategy import Split, Strategy
from moplace.core.synthetic import layered_dag
from moplace.optimize.problem import Problem
from moplace.simulator.build import PATCHED, build, build_task_graph
from moplace.simulator.delta import SimulationBase, patched_task_graph
from moplace.simulator.engine import simulate
from moplace.simulator.incremental import IncrementalSimulator

from conftest import make_cluster


def _mixed_cluster():
    """Two V100s and a P100 (compute times differ by device) behind one shared port."""
    devices = [Device("a", "V100", 2**34, 1.0), Device("b", "V100", 2**34, 1.0),
               Device("c", "P100", 2**34, 0.6)]
    bw = np.full((3, 3), 1e10)
    np.fill_diagonal(bw, np.inf)
    lat = np.full((3, 3), 5e-6)
    np.fill_diagonal(lat, 0.0)
    return Cluster("mixed-3", devices, bw, lat)


@pytest.fixture(scope="module")
def problems():
    return {
        "layered": Problem(layered_dag(60, width=5, seed=3),
                           make_cluster(3, bandwidth=5e9, latency=2e-6)),
        "vgg16": Problem(moplace.load_graph("pipedream:vgg16"), moplace.load_cluster("4xV100-NVLink")),
        "gnmt-mixed": Problem(moplace.load_graph("pipedream:gnmt"), _mixed_cluster()),
    }


PROBLEMS = ("gnmt-mixed", "layered", "vgg16")


def _neighbour(space, x, rng, moves):
    """``x`` with ``moves`` random group moves and priority swaps (splits kept)."""
    G = space.n_groups
    y = x.copy()
    for _ in range(moves):
        if rng.random() < 0.5:
            g = int(rng.integers(G))
            y[g] = (y[g] + 1 + rng.integers(space.n_devices - 1)) % space.n_devices
        else:
            i, j = rng.choice(space.n_ops, 2, replace=False)
            y[2 * G + i], y[2 * G + j] = y[2 * G + j], y[2 * G + i]
    return y


def _base(p, strategy):
    """``strategy`` with the task graph it is simulated on."""
    tg = build_task_graph(p.graph, strategy.validate(p.graph, p.n_devices), p.costs)
    return SimulationBase(strategy, tg, p.graph, p.costs)


def _simulated(sim, strategy, parent=None):
    """The trace of ``strategy`` from ``sim``, and whether it was patched."""
    before = sim.patched
    trace = sim.simulate(strategy, parent)
    return trace, sim.patched == before + 1


def _assert_same_task_graph(a, b):
    for f in dataclasses.fields(a):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if isinstance(va, np.ndarray):
            assert va.dtype == vb.dtype and np.array_equal(va, vb), f.name
        else:
            assert va == vb, f.name


def _assert_same_trace(a, b):
    for name in ("task_start", "task_end", "sent", "received", "peak_memory", "op_start", "op_end"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    assert a.makespan == b.makespan and a.n_transfers == b.n_transfers


@pytest.mark.parametrize("name", PROBLEMS)
def test_patched_task_graph_and_trace_equal_the_full_ones(problems, name):
    p = problems[name]
    space, rng = p.genome, np.random.default_rng(7)
    starts = list(space.sample(6, rng))
    for x in starts[::2]:  # half recompute nothing: their moves patch
        x[space.recompute_genes] = 0
    for x in starts[:-1]:  # one micro-batch but in one: micro-batched graphs are built in full
        x[space.micro_batch_gene] = 0
    starts[-1][space.micro_batch_gene] = 2
    starts.append(space.encode(baseline("data-parallel", p.graph, p.n_devices)))  # collectives
    starts.append(space.encode(baseline("single", p.graph, p.n_devices)))  # no splits
    patched = 0
    sim = IncrementalSimulator(p.graph, p.cluster, p.costs)
    for x in starts:
        parent = space.decode(x)
        sim.simulate(parent)
        base = _base(p, parent)
        for moves in (1, 1, 2, 3):
            y = _neighbour(space, x, rng, moves)
            child = space.decode(y)
            tg = patched_task_graph(base, child, p.graph, p.costs)
            full = build_task_graph(p.graph, child.validate(p.graph, p.n_devices), p.costs)
            if tg is not None:
                patched += 1
                _assert_same_task_graph(tg, full)
            built, how = build(p.graph, child, p.costs, base)  # the one chooser
            _assert_same_task_graph(built, full)
            trace, was_patched = _simulated(sim, child, parent)
            # without splits the simulator builds (its unsplit fast path is cheaper)
            assert was_patched == (tg is not None and bool(child.splits)) == (how == PATCHED)
            _assert_same_trace(trace, simulate(p.graph, p.cluster, space.decode(y), costs=p.costs))
            # the child's own task graph patches onward as well
            grand = space.decode(_neighbour(space, y, rng, 1))
            _assert_same_trace(sim.simulate(grand, child),
                               simulate(p.graph, p.cluster, space.decode(space.encode(grand)),
                                        costs=p.costs))
    assert patched >= len(starts)  # most moves patch: the test exercises the patch


def test_derived_strategy_shares_splits_and_patches(vgg):
    p = vgg
    parent = baseline("data-parallel", p.graph, p.n_devices)
    sim = IncrementalSimulator(p.graph, p.cluster, p.costs)
    sim.simulate(parent)
    pr = parent.priority.copy()
    pr[[3, 4]] = pr[[4, 3]]
    child = parent.derive(priority=pr)
    assert child.splits is parent.splits and child == parent.__class__(
        parent.placement, pr, dict(parent.splits), bucket_bytes=parent.bucket_bytes)
    trace, patched = _simulated(sim, child, parent)
    assert patched
    _assert_same_trace(trace, simulate(p.graph, p.cluster, p.genome.decode(p.genome.encode(child)),
                                       costs=p.costs))


def test_no_patch_across_splits_or_problems(vgg, small):
    p = vgg
    dp = baseline("data-parallel", p.graph, p.n_devices)
    base = _base(p, dp)
    single = baseline("single", p.graph, p.n_devices)
    assert patched_task_graph(base, single, p.graph, p.costs) is None  # splits differ
    other_costs = moplace.CostModel(p.graph, p.cluster)
    assert patched_task_graph(base, dp, p.graph, other_costs) is None
    moved = dp.derive(placement=np.where(np.arange(dp.placement.size) == 0, 1, dp.placement))
    assert patched_task_graph(base, moved, p.graph, p.costs) is None  # a split op moved


def test_no_patch_when_a_moved_op_reads_an_all_reduce():
    """An unsplit update op reads its producer's reduced gradient from the all-reduce ring
    (locally on a ring device, else by a transfer): moving it is built in full."""
    ops = [Op("x", compute={"V100": 1e-3}, output_bytes=4000),
           Op("w", compute={"V100": 2e-3}, output_bytes=4000, grad_bytes=2000,
              splittable=("batch",), role="backward"),
           Op("u", compute={"V100": 1e-4}, role="update")]
    g = OpGraph(ops, [("x", "w", 4000), ("w", "u", 2000)])
    cl = make_cluster(3, bandwidth=1e9, latency=1e-6)
    p = Problem(g, cl)
    parent = Strategy([0, 0, 0], splits={1: Split("batch", (0, 1))})
    sim = IncrementalSimulator(p.graph, p.cluster, p.costs)
    sim.simulate(parent)
    child = parent.derive(placement=[0, 0, 2])
    assert patched_task_graph(_base(p, parent), child, p.graph, p.costs) is None
    trace, patched = _simulated(sim, child, parent)
    assert not patched and trace.received[2] == 2000  # the gradient goes to u
    _assert_same_trace(trace, simulate(p.graph, p.cluster, Strategy([0, 0, 2], splits={
        1: Split("batch", (0, 1))}), costs=p.costs))


def test_a_parent_the_simulator_no_longer_holds_is_built_in_full(vgg):
    p = vgg
    sim = IncrementalSimulator(p.graph, p.cluster, p.costs, max_kept=2)
    parent = baseline("data-parallel", p.graph, p.n_devices)
    sim.simulate(parent)
    for _ in range(2):  # two other strategies with splits push the parent out
        sim.simulate(baseline("data-parallel", p.graph, p.n_devices))
    pr = parent.priority.copy()
    pr[[3, 4]] = pr[[4, 3]]
    child = parent.derive(priority=pr)
    trace, patched = _simulated(sim, child, parent)
    assert not patched
    _assert_same_trace(trace, simulate(p.graph, p.cluster, child, costs=p.costs))


def test_mcmc_names_parents_and_the_front_is_the_same_without_them(vgg):
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher

    fronts = {}
    for delta in (True, False):
        p = Problem(vgg.graph, vgg.cluster)
        result = search(p, make_searcher("mcmc", delta=delta), budget=200, seed=0)
        fronts[delta] = [(tuple(pt.values), pt.strategy) for pt in result.front]
        assert (p.simulator.patched > 0) == delta
        assert all(not hasattr(pt.strategy, "delta") for pt in result.front)
    assert fronts[True] == fronts[False]
