"""Tensor parallelism as Megatron-LM runs it (issue 35), in the simulator: a split on
``tensor`` keeps each part's shard where it is, a part of an op with partial sums yields a
partial sum of the whole output, completed by one all-reduce (a reduce-scatter when its readers
are sequence-parallel), and a batch split of a weight holder is a replica."""

from __future__ import annotations

import numpy as np
import pytest

from moplace.core.baselines import baseline
from moplace.core.cluster import Cluster
from moplace.core.graph import Edge, Op, OpGraph
from moplace.core.strategy import Split, Strategy
from moplace.costs.costmodel import CostModel
from moplace.errors import FormatError, GraphError
from moplace.io.native import graph_to_dict, load_native, save_graph
from moplace.simulator.build import build_task_graph
from moplace.simulator.collectives import ALL_REDUCE, REDUCE_SCATTER
from moplace.simulator.engine import simulate

MB = 2**20
DEV = (0, 1, 2, 3)
BLOCK = (1, 2, 3, 4, 5)  # w1, fc1, gelu, w2, fc2


def mlp_block(dims=("batch", "tensor"), partial=True, group="block") -> OpGraph:
    """x -> fc1 (column-parallel) -> gelu -> fc2 (row-parallel) -> add (the residual)."""
    def op(name, seconds=0.0, out=0, params=0, **kw):
        return Op(name, compute={"V100": seconds}, output_bytes=out, param_bytes=params,
                  role="forward", **kw)

    ops = [op("x", 1e-4, 8 * MB, splittable=("batch",)),
           op("w1", params=32 * MB, splittable=dims, colocation=group, type="Parameter"),
           op("fc1", 4e-3, 32 * MB, splittable=dims, colocation=group),
           op("gelu", 1e-3, 32 * MB, splittable=dims, colocation=group),
           op("w2", params=32 * MB, splittable=dims, colocation=group, type="Parameter"),
           op("fc2", 4e-3, 8 * MB, splittable=dims, colocation=group, partial_sums=partial),
           op("add", 1e-4, 8 * MB, splittable=("batch",))]
    edges = [("x", "fc1", 8 * MB), ("w1", "fc1", 32 * MB), ("fc1", "gelu", 32 * MB),
             ("gelu", "fc2", 32 * MB), ("w2", "fc2", 32 * MB), ("fc2", "add", 8 * MB),
             ("x", "add", 8 * MB)]
    return OpGraph(ops, [Edge(*e) for e in edges])


CLUSTER = Cluster.uniform(4, kind="V100", bandwidth=100e9)


def run(graph, splits):
    s = Strategy(np.zeros(len(graph.ops), np.int64), splits=splits).validate(graph, 4)
    return simulate(graph, CLUSTER, s), build_task_graph(graph, s, CostModel(graph, CLUSTER))


def test_a_megatron_mlp_needs_one_all_reduce_of_its_output():
    g = mlp_block()
    trace, tg = run(g, {i: Split("tensor", DEV) for i in BLOCK})
    assert tg.coll_kind.tolist() == [ALL_REDUCE]  # fc2's partial sums, nothing between
    ring = 2 * 3 / 4 * 8 * MB  # a ring all-reduce of fc2's 8 MiB output: 2 (n-1)/n each
    # device 0 holds x and sends it whole to the 3 others; the rest is the all-reduce
    np.testing.assert_allclose(trace.sent, [3 * 8 * MB + ring, ring, ring, ring])
    # each part keeps its shard of the weights and of the activations between the linears;
    # fc2's part is a partial sum as large as its whole output
    by_task = dict(zip(tg.task_op[:tg.n_compute].tolist(), tg.param_bytes.tolist()))
    assert by_task[1] == by_task[4] == 8 * MB
    fc2 = tg.op_ptr[5]
    assert tg.out_bytes[fc2] == 8 * MB and tg.out_bytes[tg.op_ptr[2]] == 8 * MB
    single, _ = run(g, {})
    assert trace.makespan < single.makespan / 2.5


def test_splitting_output_channels_instead_gathers_between_the_linears():
    """The channel split the simulator had before: fc2's parts need all of gelu's output and
    the whole weights, far more traffic than the one all-reduce."""
    tensor, _ = run(mlp_block(), {i: Split("tensor", DEV) for i in BLOCK})
    channel, tg = run(mlp_block(("batch", "channel"), partial=False, group=None),
                      {i: Split("channel", DEV) for i in (2, 3, 5)})
    assert tg.coll_kind.size == 0
    assert channel.sent.max() > 5 * tensor.sent.max()


def test_sequence_parallel_readers_make_it_a_reduce_scatter():
    g = mlp_block()
    splits = {**{i: Split("tensor", DEV) for i in BLOCK}, 0: Split("batch", DEV),
              6: Split("batch", DEV)}
    trace, tg = run(g, splits)
    assert tg.coll_kind.tolist() == [REDUCE_SCATTER]
    # the reduce-scatter sends (n-1)/n of the output; x's slices go to the 3 other parts
    np.testing.assert_allclose(trace.sent, 3 / 4 * 8 * MB + 3 * 2 * MB)


def test_partial_sums_on_one_device_are_added_where_they_are():
    trace, tg = run(mlp_block(), {i: Split("tensor", (0, 0)) for i in BLOCK})
    assert tg.coll_kind.size == 0 and trace.sent.sum() == 0


def test_a_partial_sum_reading_partial_sums_adds_its_own_part():
    """Two row-parallel linears summed (the gradient of X through three projections): the add
    reads its own part's partial sums, and one all-reduce completes the sum."""
    ops = [Op("a", compute={"V100": 1e-3}, output_bytes=8 * MB, splittable=("tensor",),
              partial_sums=True, role="backward", colocation="b"),
           Op("b", compute={"V100": 1e-3}, output_bytes=8 * MB, splittable=("tensor",),
              partial_sums=True, role="backward", colocation="b"),
           Op("sum", compute={"V100": 1e-4}, output_bytes=8 * MB, splittable=("tensor",),
              partial_sums=True, role="backward", colocation="b"),
           Op("norm", compute={"V100": 1e-4}, output_bytes=8 * MB, role="backward")]
    g = OpGraph(ops, [Edge(0, 2, 8 * MB), Edge(1, 2, 8 * MB), Edge(2, 3, 8 * MB)])
    trace, tg = run(g, {i: Split("tensor", DEV) for i in range(3)})
    assert tg.coll_kind.tolist() == [ALL_REDUCE]
    np.testing.assert_allclose(trace.sent, 2 * 3 / 4 * 8 * MB)


def test_a_replicated_weight_is_read_where_each_replica_is():
    """Data parallelism on a graph whose weights are ops of their own (PyTorch's): each part
    reads its own replica, so nothing but the gradients moves."""
    ops = [Op("w", "Parameter", param_bytes=32 * MB, splittable=("batch",), role="forward",
              colocation="w"),
           Op("mm", compute={"V100": 1e-3}, output_bytes=8 * MB, splittable=("batch",),
              role="forward"),
           Op("upd", compute={"V100": 1e-4}, param_bytes=64 * MB, splittable=("batch",),
              role="update", colocation="w")]
    g = OpGraph(ops, [Edge(0, 1, 32 * MB), Edge(0, 2, 32 * MB)])
    trace, _ = run(g, {i: Split("batch", DEV) for i in range(3)})
    assert trace.sent.sum() == 0
    assert trace.peak_memory.min() >= 32 * MB + 64 * MB  # every replica keeps it all


def test_the_tensor_parallel_baseline_on_a_graph_without_blocks_is_data_parallel():
    g = mlp_block(("batch",), partial=False)
    tp, dp = baseline("tensor-parallel", g, 4), baseline("data-parallel", g, 4)
    assert tp.simulation_key == dp.simulation_key


def test_partial_sums_go_through_the_graph_format(tmp_path):
    g = mlp_block()
    save_graph(g, tmp_path / "mlp.json")
    again = load_native(tmp_path / "mlp.json")
    assert [op.partial_sums for op in again.ops] == [op.partial_sums for op in g.ops]
    assert "partial_sums" not in graph_to_dict(g)["ops"][0]  # written only where true
    # version 2 only where tensor parallelism is used; version 1 files stay readable, and one
    # claiming version 1 while using it is refused, naming the op
    assert graph_to_dict(g)["version"] == 2
    assert graph_to_dict(mlp_block(("batch",), False, None))["version"] == 1
    text = (tmp_path / "mlp.json").read_text().replace('"version": 2', '"version": 1')
    (tmp_path / "v1.json").write_text(text)
    with pytest.raises(FormatError, match=r"ops\[1\].*needs version 2"):
        load_native(tmp_path / "v1.json")
    with pytest.raises(GraphError, match="partial_sums must be true or false"):
        Op("x", partial_sums="yes")
