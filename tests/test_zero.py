"""ZeRO (issue 32): the replicas of a batch split shard the optimizer state, reduce-scatter the
gradients instead of all-reducing them, each update their shard and all-gather the weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

import moplace
from moplace import OpGraph, load_cluster, load_graph, simulate
from moplace.core.baselines import baseline
from moplace.core.genome import GenomeSpace
from moplace.core.graph import Edge, Op
from moplace.core.strategy import Split, Strategy
from moplace.costs.costmodel import CostModel
from moplace.errors import FormatError, StrategyError
from moplace.simulator.build import build_task_graph
from moplace.simulator.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from moplace.simulator.reference import reference_trace

MIB = 2**20


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_zero1_shards_the_optimizer_state_across_the_replicas(optimizer):
    g, c = load_graph("pipedream:vgg16", optimizer=optimizer), load_cluster("4xV100-NVLink")
    dp = baseline("data-parallel", g, 4)
    plain, zero = simulate(g, c, dp), simulate(g, c, dp.with_options(zero_stage=1))
    a = g.arrays
    update = a.role == 2
    weights, state = a.param_bytes[~update].sum(), a.param_bytes[update].sum()
    assert state == pytest.approx(weights * (1 if optimizer == "momentum" else 2))
    np.testing.assert_allclose(plain.static_memory, weights + state)
    np.testing.assert_allclose(zero.static_memory, weights + state / 4)
    # a reduce-scatter and an all-gather move what an all-reduce moves
    np.testing.assert_allclose(zero.traffic, plain.traffic)
    kinds = np.bincount(zero.collective_kind, minlength=3)
    assert kinds[ALL_REDUCE] == 0 and kinds[REDUCE_SCATTER] == kinds[ALL_GATHER] > 0
    assert zero.peak_memory.max() < plain.peak_memory.max()


def test_each_replica_updates_its_shard_and_the_weights_are_gathered_after():
    g, c = load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink")
    costs = CostModel(g, c)
    s = baseline("data-parallel", g, 4).with_options(zero_stage=1)
    tg = build_task_graph(g, s, costs)
    trace = simulate(g, c, s, costs=costs)
    upd = np.flatnonzero(g.arrays.role == 2)
    parts = np.concatenate([np.arange(tg.op_ptr[u], tg.op_ptr[u + 1]) for u in upd])
    op = tg.task_op[parts]
    np.testing.assert_allclose(tg.dur[parts], costs.compute[op, tg.dev[parts]] / 4
                               + costs.split_overhead_s)
    gathers = np.flatnonzero(tg.coll_kind == ALL_GATHER) + tg.n_compute
    for t in gathers:  # every all-gather starts after the updates it gathers
        before = tg.e_src[tg.in_edge[tg.in_ptr[t]:tg.in_ptr[t + 1]]]
        assert np.all(trace.task_end[before] <= trace.task_start[t])
    ref = reference_trace(tg, c, len(g.ops))
    np.testing.assert_array_equal(ref.task_end, trace.task_end)
    np.testing.assert_array_equal(ref.peak_memory, trace.peak_memory)


def test_across_servers_the_sharded_gradients_stay_on_the_ring():
    """A hierarchical reduce-scatter ends on a part of the ring: the updates still read their
    shard where they are (nothing moves between compute tasks)."""
    g, c = load_graph("pipedream:gnmt"), load_cluster("2x4xV100-2xIB100")
    costs = CostModel(g, c)
    s = baseline("data-parallel", g, 8).with_options(zero_stage=1)
    tg = build_task_graph(g, s, costs)
    assert not np.any(~tg.e_local & (tg.e_bytes > 0))
    plain = simulate(g, c, s.with_options(zero_stage=0), costs=costs)
    zero = simulate(g, c, s, costs=costs)
    np.testing.assert_allclose(zero.traffic, plain.traffic)


def _layer():
    """x -> L -> L/grad -> L/update, L/grad with a 64 MiB weight gradient."""
    op = (lambda name, role, **kw: Op(name, "Conv2D", {"V100": 1e-3}, output_bytes=MIB,  # noqa
                                      splittable=("batch",), role=role, **kw))
    ops = [op("L", "forward", param_bytes=64 * MIB),
           op("L/grad", "backward", grad_bytes=64 * MIB),
           op("L/update", "update", param_bytes=64 * MIB)]
    return OpGraph(ops, [Edge(0, 1, MIB), Edge(1, 2, 64 * MIB)], name="layer")


@pytest.mark.parametrize("update_devices, sharded", [((0, 1), True), ((1, 0), True),
                                                     (None, False), ((0, 1, 2), False)])
def test_only_updates_replicated_on_the_gradients_devices_are_sharded(update_devices, sharded):
    g, c = _layer(), load_cluster("4xV100-NVLink")
    splits = {0: Split("batch", (0, 1)), 1: Split("batch", (0, 1))}
    if update_devices:
        splits[2] = Split("batch", update_devices)
    first = update_devices[0] if update_devices else 0
    s = Strategy([0, 0, first], splits=splits, zero_stage=1).validate(g, 4)
    tg = build_task_graph(g, s, CostModel(g, c))
    kinds = set(tg.coll_kind.tolist())
    assert kinds == ({REDUCE_SCATTER, ALL_GATHER} if sharded else {ALL_REDUCE})
    n = len(update_devices or (0,))
    state = tg.param_bytes[tg.op_ptr[2]:tg.op_ptr[3]]
    np.testing.assert_allclose(state, 64 * MIB / (n if sharded else 1))


def test_the_zero_stage_is_checked_and_written(tmp_path):
    g, c = load_graph("pipedream:alexnet"), load_cluster("4xV100-NVLink")
    with pytest.raises(StrategyError, match="zero_stage must be one of 0, 1, 2"):
        baseline("data-parallel", g, 4).with_options(zero_stage=3).validate(g, 4)
    s = baseline("data-parallel", g, 4).with_options(zero_stage=1)
    path = tmp_path / "s.json"
    moplace.save_strategy(path, g, s, c)
    data = json.loads(path.read_text())
    assert data["options"]["zero_stage"] == 1
    assert moplace.load_strategy(path, g, c) == s
    for bad in (3, 1.5, "1", True):
        path.write_text(json.dumps(dict(data, options={"zero_stage": bad})))
        with pytest.raises(FormatError, match="options.zero_stage: must be a ZeRO stage"):
            moplace.load_strategy(path, g, c)


def test_the_genome_chooses_the_zero_stage_where_gradients_are_reduced():
    g = load_graph("pipedream:vgg16")
    assert GenomeSpace(g, 1).zero_choices == (0.0,)
    space = GenomeSpace(g, 4)
    assert space.zero_choices == (0.0, 1.0)
    s = baseline("data-parallel", g, 4).with_options(zero_stage=1)
    x = space.encode(s)
    assert x[space.zero_gene] == 1 and space.decode(x).zero_stage == 1
    assert space.decode(x) == s
