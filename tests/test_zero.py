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
    _assert_reference(tg, c, g, trace)


def _assert_reference(tg, cluster, graph, trace):
    """The fast loop's trace of ``tg`` is the reference loop's."""
    ref = reference_trace(tg, cluster, len(graph.ops))
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
    with pytest.raises(StrategyError, match="zero_stage must be one of 0, 1, 2, 3"):
        baseline("data-parallel", g, 4).with_options(zero_stage=4).validate(g, 4)
    s = baseline("data-parallel", g, 4).with_options(zero_stage=1)
    path = tmp_path / "s.json"
    moplace.save_strategy(path, g, s, c)
    data = json.loads(path.read_text())
    assert data["options"]["zero_stage"] == 1
    assert moplace.load_strategy(path, g, c) == s
    for bad in (4, 1.5, "1", True):
        path.write_text(json.dumps(dict(data, options={"zero_stage": bad})))
        with pytest.raises(FormatError, match="options.zero_stage: must be a ZeRO stage"):
            moplace.load_strategy(path, g, c)


def test_the_genome_chooses_the_zero_stage_where_gradients_are_reduced():
    g = load_graph("pipedream:vgg16")
    assert GenomeSpace(g, 1).zero_choices == (0.0,)
    space = GenomeSpace(g, 4)
    assert space.zero_choices == (0.0, 1.0, 3.0)
    s = baseline("data-parallel", g, 4).with_options(zero_stage=1)
    x = space.encode(s)
    assert x[space.zero_gene] == 1 and space.decode(x).zero_stage == 1
    assert space.decode(x) == s


def test_zero3_shards_the_weights_and_gathers_them_before_each_use():
    g, c = load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink")
    costs = CostModel(g, c)
    dp = baseline("data-parallel", g, 4)
    s = dp.with_options(zero_stage=3)
    plain, zero = simulate(g, c, dp, costs=costs), simulate(g, c, s, costs=costs)
    a = g.arrays
    update, weighted = a.role == 2, (a.role == 0) & (a.param_bytes > 0)
    largest = a.param_bytes[weighted].max()
    # a shard of the weights and of the state each, and twice the largest layer gathered
    np.testing.assert_allclose(zero.static_memory, a.param_bytes[weighted].sum() / 4
                               + a.param_bytes[update].sum() / 4 + 2 * largest * 3 / 4)
    # the weights are gathered twice (forward and backward): ZeRO's 1.5 x data parallelism
    np.testing.assert_allclose(zero.traffic, 1.5 * plain.traffic)
    tg = build_task_graph(g, s, costs)
    kinds = np.bincount(tg.coll_kind, minlength=3)
    assert kinds[ALL_REDUCE] == 0 and kinds[ALL_GATHER] == 2 * int(weighted.sum())
    for c_ in np.flatnonzero(tg.coll_kind == ALL_GATHER):
        t = tg.n_compute + c_
        users = tg.e_dst[tg.out_ptr[t]:tg.out_ptr[t + 1]]
        users = users[users < tg.n_compute]
        assert users.size == 4  # every part of the op that uses the weights
        assert np.all(zero.task_end[t] <= zero.task_start[users])
        waits = tg.e_src[tg.in_edge[tg.in_ptr[t]:tg.in_ptr[t + 1]]]
        assert np.all(zero.task_end[waits] <= zero.task_start[t])
    _assert_reference(tg, c, g, zero)


def test_zero3_gathers_one_op_ahead():
    """A layer's weights are gathered once the layer two before it has run, so the gather
    overlaps the layer before (FSDP's prefetch)."""
    g, c = load_graph("pipedream:gnmt"), load_cluster("4xV100-NVLink")
    s = baseline("data-parallel", g, 4).with_options(zero_stage=3)
    tg = build_task_graph(g, s, CostModel(g, c))
    a = g.arrays
    for c_ in np.flatnonzero(tg.coll_kind == ALL_GATHER)[:20]:
        t = tg.n_compute + c_
        user = int(tg.task_op[tg.e_dst[tg.out_ptr[t]]])
        waits = set(tg.task_op[tg.e_src[tg.in_edge[tg.in_ptr[t]:tg.in_ptr[t + 1]]]].tolist())
        feeders = set(a.src[a.in_edge[a.in_ptr[user]:a.in_ptr[user + 1]]].tolist())
        two_back = {int(p) for f in feeders
                    for p in a.src[a.in_edge[a.in_ptr[f]:a.in_ptr[f + 1]]].tolist()}
        assert waits == two_back


def test_the_memory_figure_compares_with_the_strategy_without_its_levers(tmp_path):
    from moplace.core.recompute import recomputable_heads
    from moplace.review.figures import _without_levers
    from moplace.review.figures.timeline import memory_over_time

    g, c = load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink")
    dp = baseline("data-parallel", g, 4)
    both = dp.with_recompute(recomputable_heads(g)[::2]).with_options(zero_stage=1)
    plain, levers = _without_levers(both)
    assert plain == dp and levers == "recomputation and ZeRO-1"
    assert _without_levers(dp) == (dp, "")
    memory_over_time(simulate(g, c, both, record=True), tmp_path / "m.png", lever=levers,
                     without=simulate(g, c, plain, record=True))
    assert (tmp_path / "m.png").stat().st_size > 10_000


@pytest.mark.parametrize("spec", ["pipedream:resnet50", "pipedream:inception_v3"])
def test_random_genomes_with_zero3_and_recomputation_run_to_the_end(spec):
    """Gathers, buckets and recomputation's clones wait on each other without a cycle (a
    cycle would leave tasks unrun), on random strategies, one server or two."""
    from moplace import Problem
    from moplace.core.recompute import recomputable_heads

    for cluster in ("4xV100-NVLink", "2x4xV100-2xIB100"):
        p = Problem(load_graph(spec), load_cluster(cluster))
        space, rng = p.genome, np.random.default_rng(5)
        X = space.sample(8, rng)
        X[:, space.zero_gene] = space.zero_choices.index(3.0)
        genes = space.recompute_genes
        X[:, genes] = rng.random((X.shape[0], genes.stop - genes.start)) < 0.5
        for x in X:
            s = space.decode(x)
            assert s.recompute and p.evaluate(s).trace.makespan > 0
        dp = baseline("data-parallel", p.graph, p.n_devices).with_options(zero_stage=3)
        s = dp.with_recompute(recomputable_heads(p.graph)[::2])
        _assert_reference(build_task_graph(p.graph, s, p.costs), p.cluster, p.graph,
                          simulate(p.graph, p.cluster, s, costs=p.costs))
