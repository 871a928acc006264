"""PipeDream's partitioner (issue 33): contiguous stages by dynamic programming, checked
against every partition of small chains, and its pipelines as a searcher and seeds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import moplace
from moplace import OpGraph, load_cluster, load_graph, simulate
from moplace.core.graph import Edge, Op
from moplace.optimize.problem import Problem
from searchers.pipeline.partition import chain, chain_order, device_path, partition
from searchers.pipeline.searcher import pipeline_candidates, pipeline_seeds, pipeline_strategy


def _chain(times, act=1000, splittable=("batch",)):
    """A training chain: layer k's forward, backward (weight gradient 0) and no update."""
    ops, edges = [], []
    for k, t in enumerate(times):
        g = f"L{k}"
        ops += [Op(f"{g}/f", "MatMul", {"V100": t}, act, colocation=g, role="forward",
                   splittable=splittable),
                Op(f"{g}/b", "MatMulGrad", {"V100": 2 * t}, act, colocation=g,
                   role="backward", splittable=splittable)]
        edges.append(Edge(f"{g}/f", f"{g}/b", act))
        if k:
            edges += [Edge(f"L{k - 1}/f", f"{g}/f", act), Edge(f"{g}/b", f"L{k - 1}/b", act)]
    return OpGraph(ops, edges, name="chain")


def _brute_force(work, n_dev):
    """The least slowest stage over every cut of ``work`` into contiguous stages, one device
    each (no transfers: the links are free)."""
    best = np.inf
    n = len(work)
    for n_stages in range(1, min(n, n_dev) + 1):
        for cuts in itertools.combinations(range(1, n), n_stages - 1):
            bounds = (0, *cuts, n)
            best = min(best, max(sum(work[a:b]) for a, b in zip(bounds, bounds[1:])))
    return best


@pytest.mark.parametrize("seed", range(5))
def test_the_slowest_stage_is_the_least_any_contiguous_partition_gives(seed):
    rng = np.random.default_rng(seed)
    times = rng.uniform(1e-3, 5e-3, 7)
    g = _chain(times, splittable=())  # nothing replicated: a pure pipeline
    c = moplace.Cluster.uniform(3, bandwidth=1e18, latency=0.0)
    part = partition(g, c, moplace.CostModel(g, c).compute[:, 0], 3)
    assert part.slowest_s == pytest.approx(_brute_force(list(3 * times), 3))
    groups = np.concatenate([s.groups for s in part.stages])
    assert groups.tolist() == list(range(7))  # contiguous, in order, each group once


def test_a_heavy_layer_is_replicated_and_a_stage_may_use_fewer_devices():
    g = _chain([1e-3, 1e-3, 8e-3])
    c = moplace.Cluster.uniform(4, bandwidth=1e18, latency=0.0)
    part = partition(g, c, moplace.CostModel(g, c).compute[:, 0], 4)
    last = part.stages[-1]
    assert last.n >= 2 and part.slowest_s < 3 * 8e-3  # the heavy layer split on batch
    assert part.n_devices <= 4


def test_stages_can_be_capped():
    g = _chain([1e-3] * 6, splittable=())
    c = moplace.Cluster.uniform(6, bandwidth=1e18, latency=0.0)
    compute = moplace.CostModel(g, c).compute[:, 0]
    assert len(partition(g, c, compute, 6).stages) == 6
    two = partition(g, c, compute, 6, n_stages=2)
    assert len(two.stages) == 2 and two.slowest_s == pytest.approx(9e-3)


def test_groups_follow_the_data_flow_not_the_topological_order():
    """A weight (no inputs) comes first in a topological order; its group sits where the op
    reading it does."""
    g = load_graph("dnn:OperatorGraphs/resnet50_training")
    c = load_cluster("8xV100-16GB-NVLink")
    part = partition(g, c, moplace.CostModel(g, c).compute[:, 0], 8)
    s = pipeline_strategy(g, part, 1, 0)
    a = g.arrays
    fwd = (a.role[a.src] == 0) & (a.role[a.dst] == 0)
    stage = np.empty(8, np.int64)
    stage[[st.devices[0] for st in part.stages]] = np.arange(len(part.stages))
    rank = stage[s.placement]
    assert not np.any(fwd & (rank[a.src] > rank[a.dst]))  # forward goes forward
    assert sorted(chain_order(g, moplace.CostModel(g, c).compute[:, 0]).tolist()) == \
        list(range(a.n_groups))


def test_the_searcher_asks_for_pipelines_and_seeds_three():
    g, c = load_graph("pipedream:gnmt"), load_cluster("2x4xV100-IB100")
    p = Problem(g, c)
    candidates = pipeline_candidates(p)
    assert len(candidates) >= 5 and all(s.strategy.pipelined for s in candidates)
    for seed in candidates:
        seed.strategy.validate(g, 8)
        if seed.strategy.schedule_name != "zero-bubble":
            p.genome.encode(seed.strategy)  # every 1F1B or GPipe pipeline has a genome
    assert any(s.strategy.schedule_name == "zero-bubble" for s in candidates)
    seeds = pipeline_seeds(p)
    assert len(seeds) == 3 and {s.strategy.schedule_name for s in seeds} == {"1f1b", "gpipe"}
    best = min(simulate(g, c, s.strategy).makespan for s in candidates)
    dp = simulate(g, c, moplace.baseline("data-parallel", g, 8)).makespan
    assert best < 0.7 * dp  # a pipeline beats data parallelism across the servers


def test_one_device_is_gradient_accumulation():
    g = load_graph("pipedream:vgg16")
    p = Problem(g, moplace.Cluster.single())
    for seed in pipeline_candidates(p):
        assert set(seed.strategy.placement.tolist()) == {0} and seed.strategy.pipelined


def test_the_device_path_follows_the_fastest_links():
    """On a DGX-1 the cluster's numbering crosses PCIe between GPUs 3 and 4 and takes the
    single NVLink between 0 and 1; the path takes only double NVLinks (48 GB/s)."""
    c = load_cluster("8xV100-16GB-NVLink")
    path = device_path(c, 8)
    assert sorted(path.tolist()) == list(range(8))
    assert np.all(c.bandwidth[path[:-1], path[1:]] == 48e9)
    # where the cluster's order is as fast, it is kept (servers stay in runs)
    assert device_path(load_cluster("2x4xV100-IB100"), 8).tolist() == list(range(8))
    assert device_path(moplace.Cluster.uniform(3, bandwidth=1e9, latency=0.0), 3).tolist() == \
        [0, 1, 2]


def test_a_cut_carries_each_output_once_each_way():
    """L0/f's output is read by L1/f and by L1/b beyond the cut after L0: one transfer
    forward (not two), and L1/b's gradient one transfer back."""
    base = _chain([1e-3, 1e-3], act=1000)
    g = OpGraph(base.ops, [*base.edges, Edge("L0/f", "L1/b", 1000)], name="chain")
    order, work, grad, replicable, forward, backward = chain(g, np.full(4, 1e-3))
    assert forward[0] == 1000.0 and backward[0] == 1000.0  # the cut after L0
