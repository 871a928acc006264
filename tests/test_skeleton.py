"""A task graph filled in from its split configuration's skeleton is the one built in full."""

from __future__ import annotations

import numpy as np
import pytest

from moplace import CostModel, list_bundled, load_cluster, load_graph
from moplace.core.baselines import baseline
from moplace.core.genome import GenomeSpace
from moplace.core.strategy import Split, Strategy
from moplace.simulator import build as sk
from moplace.simulator.build import build_task_graph
from moplace.simulator.taskgraph import build_split_task_graph


def _assert_same(a, b, what):
    for name, vb in vars(b).items():
        va = getattr(a, name)
        if isinstance(vb, np.ndarray):
            assert va.dtype == vb.dtype and np.array_equal(va, vb), f"{what}: {name}"
        else:
            assert va == vb, f"{what}: {name}"


@pytest.mark.parametrize("cluster_name", ["4xV100-NVLink",
                                          pytest.param("2x4xV100-IB100", marks=pytest.mark.slow)])
def test_instances_equal_full_builds(cluster_name):
    cluster = load_cluster(cluster_name)
    rng = np.random.default_rng(0)
    gated = local = 0
    for name in list_bundled():
        graph = load_graph(name)
        costs = CostModel(graph, cluster)
        space = GenomeSpace(graph, cluster.n_devices)
        first = [space.decode(x) for x in space.sample(3, rng)]
        first.append(baseline("data-parallel", graph, cluster.n_devices))
        # gradient ops split on two devices only: an update elsewhere receives its gradient
        halves = {i: Split("batch", (0, 1)) for i, op in enumerate(graph.ops)
                  if op.grad_bytes > 0 and "batch" in op.splittable}
        first.append(Strategy(np.zeros(len(graph.ops), np.int64), splits=halves))
        for s in first:
            if not s.splits:
                continue
            for k in range(3):  # neighbours: other placement and order, the same splits
                t = s.derive(rng.integers(0, cluster.n_devices, len(graph.ops)),
                             rng.random(len(graph.ops)))
                a = build_task_graph(graph, t, costs)
                b, _ = build_split_task_graph(graph, t, costs)
                _assert_same(a, b, f"{name}, neighbour {k}")
                into_update = a.e_src >= a.n_compute
                gated += int(np.sum(into_update & ~a.e_local))
                local += int(np.sum(into_update & a.e_local & (a.e_bytes == 0)))
    # both kinds of update edge were met: a gradient received, and one read on the ring
    assert gated > 0 and local > 0, (gated, local)


def test_strategies_with_the_same_splits_share_one_skeleton():
    graph, cluster = load_graph("pipedream:resnet50"), load_cluster("4xV100-NVLink")
    costs = CostModel(graph, cluster)
    dp = baseline("data-parallel", graph, 4)
    rng = np.random.default_rng(1)
    other = dp.derive(priority=rng.random(len(graph.ops)))
    assert sk.skeleton_for(graph, dp, costs) is sk.skeleton_for(graph, other, costs)
    a = build_task_graph(graph, other, costs)
    assert a.e_src is sk.skeleton_for(graph, dp, costs).tg.e_src  # the shape is shared
    assert not a.e_src.flags.writeable  # and cannot be changed through an instance


def test_the_cache_is_bounded(monkeypatch):
    graph, cluster = load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink")
    costs = CostModel(graph, cluster)
    space = GenomeSpace(graph, 4)
    monkeypatch.setattr(sk, "MAX_SKELETONS", 3)
    keys = set()
    for x in space.sample(12, np.random.default_rng(2)):
        s = space.decode(x)
        if s.splits:
            sk.skeleton_for(graph, s, costs)
            keys.add(sk.split_key(s))
    assert len(keys) > 3 and len(sk._CACHE[costs]) == 3


def test_edges_sort_by_source_then_destination_stably():
    from moplace.simulator.taskgraph import sort_edges

    rng = np.random.default_rng(5)
    n_tasks, n_compute, m = 40, 36, 300
    src = rng.integers(0, n_tasks, m)
    dst = rng.integers(0, n_tasks, m)  # repeated (src, dst) pairs: stability shows
    nbytes = rng.choice([0.0, 1.0, 5.0], m)
    srcdev = rng.integers(0, 3, m)
    moved = rng.random(m)
    dev = rng.integers(0, 3, n_compute)
    out = sort_edges(src, dst, nbytes, srcdev, moved, dev, n_compute, n_tasks)
    e_src, e_dst, e_bytes, e_srcdev, e_moved, e_local, out_ptr, in_ptr, in_edge = out
    order = np.lexsort((dst, src))  # stable: by source, then destination, then input order
    for got, want in ((e_src, src), (e_dst, dst), (e_bytes, nbytes), (e_srcdev, srcdev),
                      (e_moved, moved)):
        np.testing.assert_array_equal(got, want[order])
    dst_dev = np.where(e_dst < n_compute, dev[np.minimum(e_dst, n_compute - 1)], -1)
    np.testing.assert_array_equal(e_local, (e_dst >= n_compute) | (e_srcdev == dst_dev)
                                  | (e_bytes <= 0))
    np.testing.assert_array_equal(out_ptr, np.searchsorted(e_src, np.arange(n_tasks + 1)))
    np.testing.assert_array_equal(in_edge, np.argsort(e_dst, kind="stable"))
    counts = np.bincount(e_dst, minlength=n_tasks)
    np.testing.assert_array_equal(in_ptr, np.concatenate([[0], np.cumsum(counts)]))
