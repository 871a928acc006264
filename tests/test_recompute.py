"""Recomputation (issue 32): a recomputed group's forward outputs are freed after their forward
readers and made again, by clones of its forward ops, when the backward reaches them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import moplace
from moplace import OpGraph, load_cluster, load_graph, simulate
from moplace.core.baselines import baseline
from moplace.core.genome import GenomeSpace
from moplace.core.graph import Edge, Op
from moplace.core.recompute import recomputable_heads
from moplace.core.strategy import Strategy
from moplace.costs.costmodel import CostModel
from moplace.errors import StrategyError
from moplace.io.bundled import list_bundled
from moplace.simulator.build import build_task_graph
from moplace.simulator.recompute import recompute_plan
from moplace.simulator.reference import reference_trace

MIB = 2**20


def _layers(sizes=(100, 200, 300), grad=10):
    """in -> L1 -> L2 -> L3 (forward, outputs ``sizes`` MiB), Lk/grad reads Lk and the
    gradient of L(k+1); each layer's forward and backward share a co-location group. 1 ms
    each."""
    ops = [Op("in", "Data", {"V100": 1e-3}, output_bytes=MIB)]
    edges = [Edge("in", "L1", MIB)]
    for k, mib in enumerate(sizes, start=1):
        ops.append(Op(f"L{k}", "Conv2D", {"V100": 1e-3}, output_bytes=mib * MIB,
                      colocation=f"L{k}", role="forward"))
        ops.append(Op(f"L{k}/grad", "Conv2DGrad", {"V100": 1e-3}, output_bytes=grad * MIB,
                      colocation=f"L{k}", role="backward"))
        edges.append(Edge(f"L{k}", f"L{k}/grad", mib * MIB))
        if k > 1:
            edges += [Edge(f"L{k - 1}", f"L{k}", sizes[k - 2] * MIB),
                      Edge(f"L{k}/grad", f"L{k - 1}/grad", grad * MIB)]
    return OpGraph(ops, edges, name="layers")


def _one_device(g, heads=()):
    i = g.index
    return Strategy(np.zeros(len(g.ops), np.int64), recompute=[i[h] for h in heads])


def test_a_recomputed_layer_is_freed_after_the_forward_and_made_again_for_its_backward():
    g, c = _layers(), moplace.Cluster.single()
    plain, rec = (simulate(g, c, _one_device(g, h), record=True) for h in ((), ("L2",)))
    # without: L1, L2, L3 and L3's gradient are held together
    assert plain.peak_memory[0] == (100 + 200 + 300 + 10) * MIB
    # recomputed, L2 is freed once L3 has read it: the peak is the forward's last layer
    assert rec.peak_memory[0] == (100 + 200 + 300) * MIB
    assert rec.n_recomputed == 1 and plain.n_recomputed == 0
    clone = int(np.flatnonzero(rec.recomputed)[0])
    assert rec.task_op[clone] == g.index["L2"]
    ends = {g.ops[int(rec.task_op[t])].name: rec.task_end[t] for t in range(len(g.ops))}
    # it runs after L3's backward (which triggers it) and before L2's backward reads it
    assert rec.task_start[clone] >= ends["L3/grad"]
    assert rec.task_end[clone] <= rec.op_start[g.index["L2/grad"]]
    assert rec.makespan == pytest.approx(plain.makespan + 1e-3)  # one more 1 ms op
    assert rec.busy[0] == pytest.approx(plain.busy[0] + 1e-3)
    # op times are the first run's: the clone is told apart, not folded in
    assert rec.op_end[g.index["L2"]] < rec.task_start[clone]


def test_the_plan_moves_backward_readers_to_the_clone_and_waits_for_the_backward():
    g = _layers()
    i = g.index
    plan = recompute_plan(g, (i["L2"],))
    a = plan.arrays
    assert plan.n_clones == 1 and plan.orig[-1] == i["L2"]
    clone = len(g.ops)
    edges = {(int(s), int(d)): float(b) for s, d, b in zip(a.src, a.dst, a.edge_bytes)}
    assert (i["L2"], i["L2/grad"]) not in edges  # the original is no longer read backward
    assert edges[(clone, i["L2/grad"])] == 200 * MIB
    assert edges[(i["L1"], clone)] == 100 * MIB  # the run's input, kept resident
    assert edges[(i["L3/grad"], clone)] == 0  # the trigger
    assert edges[(i["L2"], i["L3"])] == 200 * MIB  # forward readers keep the original
    assert a.param_bytes[clone] == 0 and a.grad_bytes[clone] == 0


def test_a_run_of_recomputed_layers_keeps_only_its_input_and_recomputes_from_it():
    g = _layers(sizes=(100, 200, 300, 50, 20))
    i = g.index
    plan = recompute_plan(g, (i["L2"], i["L3"]))
    a = plan.arrays
    c2, c3 = len(g.ops), len(g.ops) + 1
    edges = {(int(s), int(d)) for s, d in zip(a.src, a.dst)}
    assert {(i["L1"], c2), (c2, c3), (i["L4/grad"], c2)} <= edges
    assert (i["L4/grad"], c3) not in edges  # only the run's first clone waits
    assert (i["L2"], c3) not in edges  # the second reads the first's clone
    s = _one_device(g, ("L2", "L3"))
    trace = simulate(g, moplace.Cluster.single(), s)
    ref = reference_trace(build_task_graph(g, s, CostModel(g, moplace.Cluster.single())),
                          moplace.Cluster.single(), len(g.ops))
    np.testing.assert_array_equal(trace.task_end, ref.task_end)
    np.testing.assert_array_equal(trace.peak_memory, ref.peak_memory)


def test_only_groups_with_something_to_recompute_can_be_named():
    g = _layers()
    i = g.index
    assert recomputable_heads(g).tolist() == sorted([i["L1"], i["L2"], i["L3"]])
    for heads, message in [((i["in"],), "nothing to recompute"),
                           ((i["L2/grad"],), "name the group by its first op 'L2'"),
                           ((99,), "out of range")]:
        with pytest.raises(StrategyError, match=message):
            _one_device(g).with_recompute(heads).validate(g, 1)


def test_stateful_control_flow_is_never_recomputed():
    """A While (an LSTM's loop in a traced Keras step) is stateful to TensorFlow: the testbed
    cannot run it again, so no plan recomputes it (found by split_equivalence.py on gnmt)."""
    for kind in ("While", "If", "StatefulPartitionedCall"):
        g = _layers()
        ops = [Op(o.name, kind if o.name == "L2" else o.type, o.compute, o.output_bytes,
                  colocation=o.colocation, role=o.role) for o in g.ops]
        g = OpGraph(ops, g.edges, name="layers")
        i = g.index
        assert i["L2"] not in recomputable_heads(g).tolist()
        assert i["L1"] in recomputable_heads(g).tolist()


GRAPHS = ["pipedream:resnet50", "pipedream:gnmt", "dnn:OperatorGraphs/bert_l-3_training"]


@pytest.mark.parametrize("spec", GRAPHS)
def test_the_fast_loop_matches_the_reference_with_recomputation(spec):
    g, c = load_graph(spec), load_cluster("4xV100-NVLink")
    costs = CostModel(g, c)
    heads = recomputable_heads(g)
    rng = np.random.default_rng(1)
    for b in ("data-parallel", "layer-split", "single"):
        for chosen in (heads[::2], heads[rng.random(heads.size) < 0.3]):
            s = baseline(b, g, c.n_devices).with_recompute(chosen).validate(g, c.n_devices)
            trace = simulate(g, c, s, costs=costs)
            ref = reference_trace(build_task_graph(g, s, costs), c, len(g.ops))
            for name in ("task_start", "task_end", "peak_memory", "sent", "op_end"):
                np.testing.assert_array_equal(getattr(trace, name), getattr(ref, name), name)
            assert trace.n_recomputed > 0


def test_every_bundled_graph_recomputes_without_a_cycle():
    for spec in list_bundled():
        g = load_graph(spec)
        heads = recomputable_heads(g)
        for chosen in (heads, heads[::2], heads[1::3]):
            plan = recompute_plan(g, tuple(chosen.tolist()))
            assert plan.arrays.topo.size == plan.orig.size, spec


def test_recomputing_every_other_layer_trades_time_for_memory():
    """pipedream:resnet50 in data parallelism on four V100s: every other group recomputed
    takes about a third off the peak memory, for about a fifth more time."""
    g, c = load_graph("pipedream:resnet50"), load_cluster("4xV100-NVLink")
    dp = baseline("data-parallel", g, c.n_devices)
    plain = simulate(g, c, dp)
    rec = simulate(g, c, dp.with_recompute(recomputable_heads(g)[::2]))
    assert rec.peak_memory.max() < 0.7 * plain.peak_memory.max()
    assert plain.makespan < rec.makespan < 1.3 * plain.makespan


def test_strategy_files_name_the_recomputed_groups(tmp_path):
    g, c = load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink")
    heads = recomputable_heads(g)[::3]
    s = baseline("data-parallel", g, 4).with_recompute(heads)
    path = tmp_path / "s.json"
    moplace.save_strategy(path, g, s, c)
    data = json.loads(path.read_text())
    assert data["version"] == 5
    assert data["recompute"] == [g.ops[h].name for h in heads]
    assert moplace.load_strategy(path, g, c) == s
    old = dict(data, version=2)
    del old["recompute"]
    path.write_text(json.dumps(old))
    assert moplace.load_strategy(path, g, c).recompute == ()  # before it: nothing recomputed
    for bad, message in [("conv", "must be a list"), ([3], "must be an op name"),
                         (["nope"], "unknown op 'nope'")]:
        path.write_text(json.dumps(dict(data, recompute=bad)))
        with pytest.raises(moplace.errors.FormatError, match=message):
            moplace.load_strategy(path, g, c)


def test_the_genome_carries_one_recompute_gene_per_group_that_can_be():
    g = load_graph("pipedream:resnet50")
    space = GenomeSpace(g, 4)
    heads = recomputable_heads(g)
    assert space.recompute_genes.stop - space.recompute_genes.start == heads.size
    rng = np.random.default_rng(0)
    x = space.one_decoding(space.sample(1, rng))[0]
    s = space.decode(x)
    assert list(s.recompute) == heads[x[space.recompute_genes] == 1].tolist()
    np.testing.assert_array_equal(space.encode(s), x)
    x[space.recompute_genes] = 0
    assert space.decode(x).recompute == ()


def test_the_figures_tell_recomputed_ops_apart_and_show_what_recomputation_frees(tmp_path):
    from moplace.review.figures import timeline

    g, c = load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink")
    dp = baseline("data-parallel", g, 4)
    rec = dp.with_recompute(recomputable_heads(g)[::2])
    trace, without = simulate(g, c, rec, record=True), simulate(g, c, dp, record=True)
    bars = {}
    for _, _, category, starts, _ in timeline._lanes(trace):
        bars[category] = bars.get(category, 0) + len(starts)
    assert bars["recomputed"] == trace.n_recomputed > 0
    assert bars["split part"] + bars["recomputed"] == int(np.count_nonzero(trace.task_device >= 0))
    timeline.gantt(trace, tmp_path / "gantt.png")
    timeline.memory_over_time(trace, tmp_path / "memory.png", without=without,
                              lever="recomputation")
    assert (tmp_path / "gantt.png").stat().st_size > 10_000
    assert (tmp_path / "memory.png").stat().st_size > 10_000


def test_a_backward_op_that_only_remakes_forward_values_does_not_start_the_recomputation():
    """PyTorch's decomposed backward of SiLU or of a norm makes a value again from the saved
    input alone (no gradient): it could run right after the forward, but in a PyTorch trace
    the recomputation it reads from still waits for the gradient to reach the layer."""
    g = _layers()
    ops = list(g.ops)
    ops.insert(g.index["L2"] + 1, Op("L2/remake", "sigmoid", {"V100": 1e-4}, output_bytes=MIB,
                                     colocation="L2", role="backward"))  # early in the order
    names = [op.name for op in g.ops]
    edges = [Edge(names[e.src], names[e.dst], e.bytes) for e in g.edges]
    edges += [Edge("L2", "L2/remake", 200 * MIB), Edge("L2/remake", "L2/grad", MIB)]
    g = OpGraph(ops, edges, name="remake", metadata={"format": "pytorch"})
    i = g.index
    plan = recompute_plan(g, (i["L2"],))
    a = plan.arrays
    edges = {(int(s), int(d)) for s, d in zip(a.src, a.dst)}
    assert (i["L3/grad"], len(g.ops)) in edges  # the clone still waits for L3's gradient
    rec = simulate(g, moplace.Cluster.single(), _one_device(g, ("L2",)), record=True)
    clone = int(np.flatnonzero(rec.recomputed)[0])
    assert rec.task_start[clone] >= rec.op_end[i["L3/grad"]]
    assert rec.peak_memory[0] < (100 + 200 + 300 + 10) * MIB  # L2 not held through L3
