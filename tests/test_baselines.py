"""Baselines on every bundled graph, and the objectives registry."""

import math

import numpy as np
import pytest

from moplace.core.baselines import (
    BASELINES,
    baseline,
    group_order,
    memory_priority,
    topological_priority,
)
from moplace.core.graph import ROLES, Op, OpGraph
from moplace.core.presets import load_cluster
from moplace.core.strategy import Strategy
from moplace.costs.costmodel import DEFAULT_SPLIT_OVERHEAD_S, CostModel
from moplace.errors import MoplaceError
from moplace.io import list_bundled, load_graph
from moplace.registry import Registry
from moplace.simulator.engine import simulate
from moplace.simulator.evaluation import evaluate
from objectives import DEFAULT, OBJECTIVES, evaluate_trace, memory_violation

from conftest import make_cluster

BUNDLED = list_bundled()
PRESETS = ["4xV100-NVLink", "8xV100-16GB-NVLink"]
_GRAPHS: dict = {}


def graph_of(spec):
    if spec not in _GRAPHS:
        _GRAPHS[spec] = load_graph(spec)
    return _GRAPHS[spec]


@pytest.fixture(scope="module")
def clusters():
    return {name: load_cluster(name) for name in PRESETS}


def test_registry_names():
    assert BASELINES.names() == ["single", "data-parallel", "tensor-parallel", "round-robin",
                                "layer-split"]


def test_bundled_list_is_not_empty():
    assert any(s.startswith("pipedream:") for s in BUNDLED)
    assert any(s.startswith("dnn:") for s in BUNDLED)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("spec", BUNDLED)
def test_every_baseline_on_every_bundled_graph(spec, preset, clusters):
    graph, cluster = graph_of(spec), clusters[preset]
    n = cluster.n_devices
    costs = CostModel(graph, cluster)
    pos = np.empty(len(graph.ops), int)
    pos[graph.arrays.topo] = np.arange(len(graph.ops))
    order = group_order(graph)
    group_pos = np.empty(graph.arrays.n_groups, int)
    group_pos[order] = np.arange(graph.arrays.n_groups)
    for name in BASELINES:
        s = baseline(name, graph, n)
        assert s.validate(graph, n) is s
        ev = evaluate(graph, cluster, s, costs=costs)
        t = ev.trace
        values = ev.objectives()
        assert list(values) == list(DEFAULT)
        assert all(math.isfinite(v) and v >= 0 for v in values.values()), (name, values)
        assert values["runtime"] > 0
        # the busiest device cannot finish before its own compute is done
        assert t.makespan >= t.busy.max() * (1 - 1e-12)
        # every op ran after its inputs (unsplit strategies: split parts pipeline part by part)
        if not s.splits:
                assert (t.op_start[graph.arrays.dst] >= t.op_end[graph.arrays.src] - 1e-12).all()
        # priorities follow the topological order
        np.testing.assert_array_equal(s.priority, -pos.astype(float))
        if name == "single":
            assert s.placement.tolist() == [0] * len(graph.ops) and not s.splits
            assert values["peak_communication"] == 0.0
            assert t.sent.sum() == 0 and t.received.sum() == 0 and t.n_transfers == 0
            assert t.busy[0] == pytest.approx(costs.compute[:, 0].sum(), rel=1e-9)
            assert t.makespan == pytest.approx(t.busy[0], rel=1e-9)  # never waits
        elif name == "round-robin":
            dev = s.placement[[m[0] for m in graph.groups]]
            assert (dev[order] == np.arange(len(order)) % n).all()
            if graph.arrays.n_groups >= n:
                assert set(s.placement.tolist()) == set(range(n))
        elif name == "layer-split":
            dev = s.placement[[m[0] for m in graph.groups]]
            assert (np.diff(dev[order]) >= 0).all(), "runs must be contiguous in group order"
            assert dev.min() >= 0 and dev.max() <= n - 1
            # balance, in the cost model's own seconds on these (identical) devices
            per_group = np.bincount(graph.arrays.group, weights=costs.compute[:, 0],
                                    minlength=graph.arrays.n_groups)
            total = per_group.sum()
            per_dev = np.bincount(dev, weights=per_group, minlength=n)
            assert per_dev.max() <= total / n + per_group.max() + 1e-12 * total
            np.testing.assert_allclose(t.busy, per_dev, rtol=1e-9, atol=1e-15)
        elif name == "data-parallel":
            ok = [all("batch" in graph.ops[i].splittable for i in m) for m in graph.groups]
            for k, members in enumerate(graph.groups):
                for i in members:
                    if ok[k]:
                        assert s.splits[i].dim == "batch"
                        assert s.splits[i].devices == tuple(range(n))
                    else:
                        assert i not in s.splits and s.placement[i] == 0


ALL_BATCH = [s for s in BUNDLED if s.startswith("pipedream:")]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("spec", ALL_BATCH)
def test_data_parallel_divides_compute(spec, preset, clusters):
    graph, cluster = graph_of(spec), clusters[preset]
    n = cluster.n_devices
    assert all("batch" in op.splittable for op in graph.ops)
    s = baseline("data-parallel", graph, n)
    assert len(s.splits) == len(graph.ops)
    t = simulate(graph, cluster, s)
    costs = CostModel(graph, cluster)
    total = costs.compute[:, 0].sum()
    update = graph.arrays.role == ROLES.index("update")
    # a part is t / n + overhead; a batch-"split" update is replicated: a full update per device
    expected = (costs.compute[~update, 0] / n + DEFAULT_SPLIT_OVERHEAD_S).sum() \
        + costs.compute[update, 0].sum()
    np.testing.assert_allclose(t.busy, expected, rtol=1e-9)
    # ~ total / n: updates and per-part overheads are the only excess
    assert total / n <= t.busy.max() <= total / n + costs.compute[update, 0].sum() \
        + len(graph.ops) * DEFAULT_SPLIT_OVERHEAD_S + 1e-12
    assert t.busy.max() < 0.5 * total
    assert (t.traffic > 0).all()  # gradients are all-reduced


def test_data_parallel_on_one_device_is_single():
    g = graph_of("pipedream:vgg16")
    assert baseline("data-parallel", g, 1) == baseline("single", g, 1)


def test_round_robin_with_fewer_groups_than_devices():
    g = OpGraph([Op("a", compute={"V100": 1.0}), Op("b", compute={"V100": 1.0})], [("a", "b")])
    s = baseline("round-robin", g, 4)
    assert s.placement.tolist() == [0, 1]


def test_layer_split_with_no_compute_spreads_by_count():
    g = OpGraph([Op(f"o{i}") for i in range(8)], [(i, i + 1) for i in range(7)])
    s = baseline("layer-split", g, 4)
    assert s.placement.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_layer_split_balances_a_chain():
    times = [1.0, 1.0, 1.0, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0]  # total 12: 3 devices of 4
    g = OpGraph([Op(f"o{i}", compute={"V100": t}) for i, t in enumerate(times)],
                [(i, i + 1) for i in range(len(times) - 1)])
    s = baseline("layer-split", g, 3)
    assert s.placement.tolist() == [0, 0, 0, 0, 1, 2, 2, 2, 2]


def test_group_order_and_topological_priority():
    # op index order differs from the topological order
    g = OpGraph([Op("c", colocation="L"), Op("a"), Op("b", colocation="L"), Op("z")],
                [("a", "c"), ("c", "b"), ("a", "z")])
    topo = g.arrays.topo.tolist()
    assert topo == [1, 0, 2, 3]
    assert topological_priority(g).tolist() == [-1.0, 0.0, -2.0, -3.0]
    # groups: L = {c, b} is group 0, a is 1, z is 2; a comes first, then L, then z
    assert group_order(g).tolist() == [1, 0, 2]


def test_a_weight_sorts_its_group_where_it_is_read_not_where_sources_sit():
    # a traced step: the weights (sources) head the topological order; each is in the group
    # of the matmul that reads it, the norms between them in groups of their own
    ops = [Op("w0", colocation="L0"), Op("w1", colocation="L1"), Op("x"),
           Op("norm0", compute={"V100": 1.0}), Op("mm0", colocation="L0", compute={"V100": 1.0}),
           Op("norm1", compute={"V100": 1.0}), Op("mm1", colocation="L1", compute={"V100": 1.0})]
    g = OpGraph(ops, [("x", "norm0"), ("norm0", "mm0"), ("w0", "mm0"), ("mm0", "norm1"),
                      ("norm1", "mm1"), ("w1", "mm1")])
    assert g.arrays.topo.tolist()[:3] == [0, 1, 2]  # the sources first
    heads = [g.groups[k][0] for k in group_order(g)]
    assert [g.ops[i].name for i in heads] == ["x", "norm0", "w0", "norm1", "w1"]
    placement = baseline("layer-split", g, 2).placement  # contiguous: layer 0, then layer 1
    assert {g.ops[i].name: int(d) for i, d in enumerate(placement)} == {
        "x": 0, "norm0": 0, "w0": 0, "mm0": 0, "norm1": 1, "w1": 1, "mm1": 1}


def test_unknown_baseline_lists_known_ones():
    with pytest.raises(MoplaceError, match="unknown baseline 'magic'; known: single, data-"
                                           "parallel, tensor-parallel, round-robin, layer-split"):
        baseline("magic", graph_of("pipedream:vgg16"), 4)


# -- objectives ----------------------------------------------------------------------------------
class TestObjectives:
    def test_names(self):
        assert OBJECTIVES.names() == ["runtime", "peak_communication", "peak_memory"]
        assert DEFAULT == ("runtime", "peak_communication", "peak_memory")
        assert all(name in OBJECTIVES for name in DEFAULT)
        assert list(OBJECTIVES) == OBJECTIVES.names()

    def test_duplicate_registration_is_refused(self):
        before = OBJECTIVES["runtime"]
        with pytest.raises(ValueError, match="objective 'runtime' is already registered"):
            OBJECTIVES.add("runtime", lambda trace: 0.0)
        with pytest.raises(ValueError, match="already registered"):
            OBJECTIVES.register("peak_memory")(lambda trace: 0.0)
        assert OBJECTIVES["runtime"] is before
        assert OBJECTIVES.names() == ["runtime", "peak_communication", "peak_memory"]

    def test_unknown_name_lists_the_known_ones(self):
        with pytest.raises(MoplaceError) as err:
            OBJECTIVES["latency"]
        msg = str(err.value)
        assert "unknown objective 'latency'" in msg
        for name in DEFAULT:
            assert name in msg
        with pytest.raises(MoplaceError, match="unknown objective 'energy'"):
            evaluate_trace(None, ("energy", "runtime"))

    def test_a_fresh_registry(self):
        r = Registry("thing")
        assert r.add("x", 1) == 1
        assert r.register("y")(2) == 2
        assert r.names() == ["x", "y"] and "x" in r and "z" not in r
        with pytest.raises(ValueError):
            r.add("x", 3)

    def test_values_match_hand_computation(self):
        g = OpGraph([Op("a", compute={"V100": 1.0}, output_bytes=300, param_bytes=50),
                     Op("b", compute={"V100": 2.0}, output_bytes=10),
                     Op("c", compute={"V100": 0.5})],
                    [("a", "b", 300), ("a", "c", 300), ("b", "c", 10)])
        cl = make_cluster(3, bandwidth=100.0, latency=0.25, memory=320)
        t = simulate(g, cl, Strategy([0, 1, 2]))
        values = evaluate_trace(t)
        assert values.dtype == np.float64 and values.shape == (3,)
        assert values[0] == t.makespan
        assert values[1] == (t.sent + t.received).max()
        assert values[2] == t.peak_memory.max()
        # and by hand: a 0-1; a->b, a->c arrive at 1 + 0.25 + 3 = 4.25; b 4.25-6.25;
        # b->c arrives 6.25 + 0.25 + 0.1 = 6.6; c 6.6-7.1
        assert t.makespan == pytest.approx(7.1)
        assert values[1] == 600.0   # device 0 sends a's output twice
        assert t.sent.tolist() == [600, 10, 0] and t.received.tolist() == [0, 300, 310]
        assert values[2] == t.peak_memory.max() == 350.0  # params 50 + a's output 300
        assert memory_violation(t) == pytest.approx(
            np.maximum(t.peak_memory - 320, 0).sum()) == 30.0
        ev = evaluate(g, cl, Strategy([0, 1, 2]))
        assert ev.objectives() == dict(zip(DEFAULT, values.tolist()))
        assert not ev.feasible and ev.violation == 30.0

    def test_objectives_of_a_fake_trace(self):
        class Fake:
            makespan = 3.5
            sent = np.array([1.0, 5.0, 0.0])
            received = np.array([4.0, 1.0, 7.0])
            peak_memory = np.array([10.0, 30.0, 20.0])
            capacity = np.array([15.0, 25.0, 15.0])
        assert evaluate_trace(Fake()).tolist() == [3.5, 7.0, 30.0]
        assert evaluate_trace(Fake(), ("peak_memory", "runtime")).tolist() == [30.0, 3.5]
        assert memory_violation(Fake()) == 5.0 + 5.0

    def test_empty_trace(self):
        class Empty:
            makespan = 0.0
            sent = received = peak_memory = capacity = np.zeros(0)
        assert evaluate_trace(Empty()).tolist() == [0.0, 0.0, 0.0]


def test_memory_priority_keeps_fewer_outputs_resident_than_topological_order():
    # two chains x1 -> y1, x2 -> y2 with large x outputs: the topological order runs x1, x2
    # (both large outputs held), the memory order finishes one chain before the next
    ops = [Op("x1", compute={"V100": 1.0}, output_bytes=1000), Op("x2", compute={"V100": 1.0},
           output_bytes=1000), Op("y1", compute={"V100": 1.0}, output_bytes=10),
           Op("y2", compute={"V100": 1.0}, output_bytes=10)]
    g = OpGraph(ops, [("x1", "y1"), ("x2", "y2")])
    cluster = make_cluster(1)
    on_one = np.zeros(4, np.int64)
    peak = {name: simulate(g, cluster, Strategy(on_one, prio)).peak_memory.max()
            for name, prio in (("topological", topological_priority(g)),
                               ("memory", memory_priority(g)))}
    assert peak == {"topological": 2010, "memory": 1010}


@pytest.mark.parametrize("spec", ["pipedream:vgg16", "pipedream:gnmt",
                                  "dnn:OperatorGraphs/bert_l-3_training"])
def test_memory_priority_is_a_topological_order(spec):
    g = graph_of(spec)
    prio = memory_priority(g)
    a = g.arrays
    assert sorted(prio.tolist()) == (-np.arange(len(g.ops), dtype=float))[::-1].tolist()
    assert np.all(prio[a.src] > prio[a.dst])  # every op before its consumers
