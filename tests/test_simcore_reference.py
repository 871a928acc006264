"""The fast event loop gives the reference loop's trace, bit for bit.

`moplace.simulator.reference` keeps the event loop as it was before it was made faster. Every
bundled graph, under every baseline and under random strategies with splits, on clusters with
dedicated links (4xV100-NVLink), shared NICs (2x4xV100-IB100) and a shared PCIe bus
(4xP100-PCIe), must give the same start and end of every task, the same traffic, peaks, and
recorded transfers and memory changes: compared with ``array_equal``, so to the last ulp.
"""

from __future__ import annotations

import numpy as np
import pytest

from moplace import CostModel, list_bundled, load_cluster, load_graph
from moplace.core.baselines import BASELINES, baseline
from moplace.core.genome import GenomeSpace
from moplace.core.synthetic import layered_dag
from moplace.errors import StrategyError
from moplace.simulator.engine import run_task_graph
from moplace.simulator.reference import reference_trace
from moplace.simulator.build import build_task_graph

CLUSTERS = ("4xV100-NVLink", "2x4xV100-IB100", "4xP100-PCIe")
FIELDS = ("task_start", "task_end", "op_start", "op_end", "sent", "received", "peak_memory",
          "static_memory", "busy", "transfers", "memory")


def assert_same_trace(fast, ref, what):
    assert fast.makespan == ref.makespan, what
    assert fast.n_transfers == ref.n_transfers, what
    for name in FIELDS:
        a, b = getattr(fast, name), getattr(ref, name)
        assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True), f"{what}: {name}"


def _strategies(graph, n_dev, seed):
    out = {name: baseline(name, graph, n_dev) for name in BASELINES}
    space = GenomeSpace(graph, n_dev)
    rng = np.random.default_rng(seed)
    for k, x in enumerate(space.sample(3, rng)):
        # at most 4 micro-batches: the loops compared alike, on a graph a quarter the size of
        # 32 micro-batches' (tests/test_microbatch.py compares pipelines on real graphs)
        x[space.micro_batch_gene] = min(x[space.micro_batch_gene], 2)
        out[f"random genome {k}"] = space.decode(space.one_decoding(x[None])[0])
    return out


def _compare(graph, cluster, seed=0, refused_ok=False):
    """How many traces were compared; ``refused_ok``: skip the strategies the simulator
    refuses."""
    costs = CostModel(graph, cluster)
    n = 0
    for name, strategy in _strategies(graph, cluster.n_devices, seed).items():
        try:
            tg = build_task_graph(graph, strategy, costs)
        except StrategyError:
            if not refused_ok:
                raise
            continue
        for record in (False, True):
            fast = run_task_graph(tg, cluster, len(graph.ops), record=record)
            ref = reference_trace(tg, cluster, len(graph.ops), record=record)
            assert_same_trace(fast, ref, f"{graph.name} on {cluster.name}, {name}, record={record}")
            n += 1
    return n


# the default run checks every other bundled graph on 4xV100-NVLink; every graph and the other
# clusters (two servers over InfiniBand, a shared PCIe bus) run with the slow checks (the
# default run keeps < 4 min)
@pytest.mark.parametrize("cluster_name, step", [(CLUSTERS[0], 2)] + [
    pytest.param(name, 1, marks=pytest.mark.slow) for name in CLUSTERS])
def test_every_bundled_graph_gives_the_reference_trace(cluster_name, step):
    cluster = load_cluster(cluster_name)
    names = list_bundled()[::step]
    n = sum(_compare(load_graph(name), cluster, seed) for seed, name in enumerate(names))
    assert n == len(names) * (len(list(BASELINES)) + 3) * 2


@pytest.mark.parametrize("n_dev", [4, pytest.param(8, marks=pytest.mark.slow)])
def test_synthetic_graphs_give_the_reference_trace(n_dev):
    cluster = load_cluster({4: "4xV100-NVLink", 8: "8xV100-16GB-NVLink"}[n_dev])
    for seed in range(3):
        _compare(layered_dag(400, width=12, seed=seed), cluster, seed)


def test_more_devices_than_the_flag_bits_give_the_reference_trace():
    # 70 devices: beyond the 62 bits the loop keeps idle devices in, it scans all of them
    from conftest import make_cluster

    # (splits past device 62 are refused: the unsplit plans, round-robin over all 70, remain)
    cluster = make_cluster(70, bandwidth=5e9, latency=2e-6)
    assert _compare(layered_dag(300, width=80, seed=1), cluster, 1, refused_ok=True) >= 4


def test_the_comparison_can_fail():
    # one task made a picosecond longer: the traces differ, and the comparison says so
    graph, cluster = load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink")
    tg = build_task_graph(graph, baseline("round-robin", graph, 4), CostModel(graph, cluster))
    ref = reference_trace(tg, cluster, len(graph.ops))
    tg.dur = tg.dur.copy()
    tg.dur[5] += 1e-12
    with pytest.raises(AssertionError, match="nudged"):
        assert_same_trace(run_task_graph(tg, cluster, len(graph.ops)), ref, "nudged")
