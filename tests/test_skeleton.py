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
from moplace.simulator.collectives import all_reduce_plan
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
        X = space.sample(3, rng)
        X[:, space.micro_batch_gene] = np.minimum(X[:, space.micro_batch_gene], 2)  # m <= 4
        first = [space.decode(x) for x in space.one_decoding(X)]
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


def _edges_by_hand(graph, cluster, strategy, n_compute, dev):
    """A split task graph's edges from the definitions, one pair of parts at a time: a part
    holds its slice of the unit square (batch, channel) and a consumer part needs its batch
    slice (batch split, not an update), its channel shard (channel-split update) or all.
    Each gradient (one bucket each) is all-reduced by the tasks of its devices' plan, every
    phase of a stage after every phase of the stage before; updates read the last."""
    n = len(graph.ops)
    parts = [strategy.splits[i].parts if i in strategy.splits else 1 for i in range(n)]
    dims = [strategy.splits[i].dim if i in strategy.splits else None for i in range(n)]
    first = np.concatenate([[0], np.cumsum(parts)])
    entry, exit_, exit_devs, chain = {}, {}, {}, []
    t = n_compute
    for u in range(n):
        devs = sorted({int(d) for d in dev[first[u]:first[u + 1]]})
        if dims[u] != "batch" or graph.ops[u].grad_bytes <= 0 or len(devs) < 2:
            continue
        plan = all_reduce_plan(cluster, devs)
        ids = [[t + sum(len(st) for st in plan[:i]) + j for j in range(len(stage))]
               for i, stage in enumerate(plan)]
        chain += [(a, b, 0.0, -1, 0.0) for here, nxt in zip(ids, ids[1:])
                  for a in here for b in nxt]
        entry[u], exit_[u], exit_devs[u] = ids[0][0], ids[-1][0], devs
        t = ids[-1][-1] + 1

    def box(k, n_parts, dim):
        part = (k / n_parts, (k + 1) / n_parts)
        return (part, (0.0, 1.0)) if dim == "batch" else ((0.0, 1.0), part) if dim == "channel" \
            else ((0.0, 1.0), (0.0, 1.0))

    def overlap(x, y):
        return max(0.0, min(x[1], y[1]) - max(x[0], y[0]))

    rows = list(chain)  # (src task, dst task, bytes, source device, bytes when moved)
    for e in sorted(graph.edges, key=lambda e: (e.src, e.dst)):
        u, v = e.src, e.dst
        update = graph.ops[v].role == "update"
        if u in entry and update:  # the reduced gradient, from the all-reduce's last task
            for j in range(parts[v]):
                d = int(dev[first[v] + j])
                here = d in exit_devs[u]
                rows.append((exit_[u], first[v] + j, 0.0 if here else e.bytes,
                             d if here else exit_devs[u][0], e.bytes))
            continue
        need = ("batch" if dims[v] == "batch" and not update
                else "channel" if dims[v] == "channel" and update else None)
        for k in range(parts[u]):
            held = box(k, parts[u], dims[u])
            for j in range(parts[v]):
                wanted = box(j, parts[v], need)
                f = overlap(held[0], wanted[0]) * overlap(held[1], wanted[1])
                if f > 0:
                    b = e.bytes * f
                    rows.append((first[u] + k, first[v] + j, b, int(dev[first[u] + k]), b))
    for u, c in entry.items():  # every part feeds its op's all-reduce
        for k in range(parts[u]):
            rows.append((first[u] + k, c, 0.0, int(dev[first[u] + k]), 0.0))
    return sorted(rows, key=lambda r: (r[0], r[1]))


@pytest.mark.parametrize("cluster_name", ["4xV100-NVLink", "2x4xV100-IB100"])
def test_split_edges_are_the_pairs_of_parts_that_share_data(cluster_name):
    cluster = load_cluster(cluster_name)
    rng = np.random.default_rng(7)
    kinds = set()
    for name in ("pipedream:resnet18", "dnn:LayerGraphs/bert24_training",
                 "dnn:OperatorGraphs/bert_l-3_training"):
        graph = load_graph(name)
        costs = CostModel(graph, cluster)
        space = GenomeSpace(graph, cluster.n_devices)
        for s in [space.decode(x).with_options(bucket_bytes=0, zero_stage=0, micro_batches=1)
                  .with_recompute(())
                  for x in space.sample(2, rng)] + [
                baseline("data-parallel", graph, cluster.n_devices).with_options(
                    bucket_bytes=0)]:
            tg, moved = build_split_task_graph(graph, s, costs)
            nc = tg.n_compute
            want = _edges_by_hand(graph, cluster, s, nc, tg.dev)
            got = list(zip(tg.e_src.tolist(), tg.e_dst.tolist(), tg.e_bytes.tolist(),
                           tg.e_srcdev.tolist(), moved.tolist()))
            assert len(got) == len(want), name
            for g, w in zip(got, want):
                assert g[:2] == w[:2] and g[3] == w[3], (name, g, w)
                assert g[2] == pytest.approx(w[2], rel=1e-12) and g[4] == pytest.approx(w[4], rel=1e-12)
                kinds.add("collective" if g[0] >= nc else "control" if g[1] >= nc else "parts")
            local = (tg.e_dst >= nc) | (tg.e_bytes <= 0) | (
                tg.e_srcdev == tg.dev[np.minimum(tg.e_dst, nc - 1)])
            np.testing.assert_array_equal(tg.e_local, local)
            np.testing.assert_array_equal(tg.out_ptr, np.searchsorted(tg.e_src, np.arange(tg.n_tasks + 1)))
            np.testing.assert_array_equal(tg.in_edge, np.argsort(tg.e_dst, kind="stable"))
            np.testing.assert_array_equal(
                tg.in_ptr, np.concatenate([[0], np.cumsum(np.bincount(tg.e_dst, minlength=tg.n_tasks))]))
    assert kinds == {"collective", "control", "parts"}
