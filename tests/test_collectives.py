"""Collectives as NCCL runs them (issue 32): rings in the order of the fastest links,
hierarchical all-reduce across servers, NICs per server, gradient buckets; and the reference:
where none of that applies, every bundled graph's baselines give the traces they gave before."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

import moplace
from moplace import Cluster, load_cluster, load_graph, simulate
from moplace.core.baselines import DDP_BUCKET_BYTES, baseline
from moplace.core.presets import parse_cluster
from moplace.core.strategy import Split, Strategy
from moplace.errors import ClusterError, FormatError, StrategyError
from moplace.simulator.collectives import (ALL_GATHER, ALL_REDUCE, KINDS, REDUCE_SCATTER,
                                           all_reduce_plan, best_ring)
from moplace.costs.costmodel import CostModel
from moplace.simulator.build import build_task_graph
from moplace.simulator.reference import reference_trace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))


def test_bundled_baselines_give_the_traces_they_gave_before():
    """On 4xV100-NVLink with one bucket per gradient (the model before issue 32), every bundled
    graph's baselines give the recorded traces: makespan, traffic and memory per device, and
    every task's start and end, bit for bit."""
    import baseline_traces

    want = json.loads((ROOT / "tests/data/baseline_traces.json").read_text())
    recorded = sorted({b for rows in want["traces"].values() for b in rows})
    got = baseline_traces.record(list(want["traces"]), want["cluster"], recorded,
                                 **baseline_traces.TODAY)
    assert got == want["traces"]


def test_the_dgx1_ring_uses_nvlink_only():
    c = load_cluster("8xV100-16GB-NVLink")
    ring = best_ring(c, range(8))
    links = list(zip(ring, ring[1:] + ring[:1]))
    assert sorted(ring) == list(range(8)) and ring[0] == 0
    assert min(c.bandwidth[i, j] for i, j in links) == 48e9  # every hop a 2-link NVLink pair
    assert all(c.link_labels[i * 8 + j].startswith("NVLink") for i, j in links)
    # sorted order crosses PCIe/QPI (gpu3 -> gpu4 has no NVLink)
    assert c.bandwidth[3, 4] == 10e9


def test_uniform_links_keep_sorted_order():
    c = load_cluster("4xV100-NVLink")
    assert best_ring(c, [3, 1, 2, 0]) == [0, 1, 2, 3]
    (stage,), = all_reduce_plan(c, [0, 1, 2, 3]),
    assert len(stage) == 1 and stage[0].kind == ALL_REDUCE


def test_greedy_ring_beyond_the_exact_search():
    c = Cluster.uniform(12, bandwidth=np.where(np.eye(12, k=1) + np.eye(12, k=-1), 40e9, 5e9))
    ring = best_ring(c, range(12))
    assert sorted(ring) == list(range(12)) and ring[:3] == [0, 1, 2]


def _expected_phases(c, devs, b):
    """The hierarchical all-reduce's durations by hand (the formulas of the issue)."""
    k = len(devs) // c.n_servers
    intra = max((k - 1) * (c.latency[i, j] + b / k / c.bandwidth[i, j])
                for i in range(8) for j in range(8) if i != j and c.server[i] == c.server[j])
    across = 2 * (c.latency[0, 4] + b / k / 2 / c.bandwidth[0, 4])
    return intra, across


def test_hierarchical_all_reduce_across_servers():
    c = load_cluster("2x4xV100-2xIB100")
    plan = all_reduce_plan(c, range(8))
    assert [[ph.kind for ph in stage] for stage in plan] == [
        [REDUCE_SCATTER], [ALL_REDUCE] * 4, [ALL_GATHER]]
    b = np.array([64e6])
    intra, across = _expected_phases(c, range(8), b[0])
    rs, ag = plan[0][0], plan[2][0]
    assert rs.duration(b)[0] == pytest.approx(intra) and ag.duration(b)[0] == pytest.approx(intra)
    assert rs.traffic(b)[0] == pytest.approx(3 / 4 * b[0])  # (n-1)/n of the buffer
    for ph in plan[1]:
        assert ph.duration(b)[0] == pytest.approx(across)
        assert ph.traffic(b)[0] == pytest.approx(2 * (1 / 2) * b[0] / 4)  # 2(n-1)/n of a quarter
    # ranks 0, 1 use the first NIC of each server, ranks 2, 3 the second
    names = [{c.resource_names[r] for r in ph.resources} for ph in plan[1]]
    assert names[0] == names[1] != names[2] == names[3]
    assert all("nic" in n for group in names for n in group)


def test_one_device_per_server_or_uneven_servers_use_one_ring():
    c = load_cluster("2x4xV100-IB100")
    assert [len(st) for st in all_reduce_plan(c, [0, 4])] == [1]
    assert [len(st) for st in all_reduce_plan(c, [0, 1, 4])] == [1]


def test_a_shared_nic_takes_turns_and_two_nics_halve_the_time():
    """Data parallelism of gnmt across two 4-V100 servers: the shards' all-reduces that share a
    NIC run one after another, so two NICs per server cut the time their traffic takes."""
    g = load_graph("pipedream:gnmt")
    one, two = load_cluster("2x4xV100-IB100"), load_cluster("2x4xV100-2xIB100")
    s = baseline("data-parallel", g, 8)
    t1, t2 = simulate(g, one, s), simulate(g, two, s)
    assert t2.makespan < 0.7 * t1.makespan
    for t, cl in ((t1, one), (t2, two)):
        nc = int(np.sum(t.task_device >= 0))
        across = np.flatnonzero((t.collective_kind == ALL_REDUCE))
        spans = sorted((t.task_start[nc + c], t.task_end[nc + c]) for c in across)
        # the across-server all-reduces on one NIC never overlap
        by_nic = {}
        for c in across:
            devs = t.collective_dev[t.collective_ptr[c]:t.collective_ptr[c + 1]]
            by_nic.setdefault(int(devs[0]) * (2 if cl is two else 1) // 4, []).append(
                (t.task_start[nc + c], t.task_end[nc + c]))
        for runs in by_nic.values():
            runs.sort()
            assert all(a[1] <= b[0] + 1e-12 for a, b in zip(runs, runs[1:]))
        assert spans


@pytest.mark.parametrize("cluster_name", ["2x4xV100-IB100", "8xV100-16GB-NVLink"])
@pytest.mark.parametrize("bucket", [0, DDP_BUCKET_BYTES, 2**40])
def test_the_fast_loop_matches_the_reference_with_buckets_and_stages(cluster_name, bucket):
    g, c = load_graph("pipedream:resnet18"), load_cluster(cluster_name)
    s = baseline("data-parallel", g, c.n_devices).with_options(bucket_bytes=bucket)
    fast = simulate(g, c, s)
    ref = reference_trace(build_task_graph(g, s, CostModel(g, c)), c, len(g.ops))
    np.testing.assert_array_equal(fast.task_start, ref.task_start)
    np.testing.assert_array_equal(fast.task_end, ref.task_end)
    np.testing.assert_array_equal(fast.peak_memory, ref.peak_memory)
    np.testing.assert_array_equal(fast.sent, ref.sent)


def test_buckets_group_gradients_in_backward_order():
    g, c = load_graph("pipedream:resnet50"), load_cluster("4xV100-NVLink")
    dp = baseline("data-parallel", g, 4)
    assert dp.bucket_bytes == DDP_BUCKET_BYTES
    each = simulate(g, c, dp.with_options(bucket_bytes=0))
    ddp = simulate(g, c, dp)
    one = simulate(g, c, dp.with_options(bucket_bytes=2**40))
    n_grads = int(np.sum(g.arrays.grad_bytes > 0))
    assert len(each.collective_kind) == n_grads
    total = g.arrays.grad_bytes.sum()
    assert len(ddp.collective_kind) == int(np.ceil(total / DDP_BUCKET_BYTES)) \
        or len(ddp.collective_kind) < n_grads
    assert len(one.collective_kind) == 1
    # the same bytes move however they are bucketed
    assert ddp.sent == pytest.approx(each.sent) and one.sent == pytest.approx(each.sent)
    # one bucket for everything waits for the last gradient: its all-reduce cannot overlap
    nc = int(np.sum(one.task_device >= 0))
    last_grad = max(one.op_end[i] for i in np.flatnonzero(g.arrays.grad_bytes > 0)
                    if i != one.task_op[nc])
    assert one.task_start[nc] >= last_grad - 1e-12


def test_a_bucket_closes_after_a_gradient_whose_update_is_read():
    """A gradient whose update op has consumers ends its bucket, so no bucket waits on work
    that waits on it (else the step would never finish)."""
    from moplace import OpGraph
    from moplace.core.graph import Edge, Op

    def op(name, role, t, grad=0):
        return Op(name, compute={"V100": t}, output_bytes=10**6, param_bytes=grad,
                  grad_bytes=grad, splittable=("batch",), role=role)

    ops = [op("f1", "forward", 1e-3), op("g1", "backward", 1e-3, 10**6),
           op("u1", "update", 1e-4), op("g2", "backward", 1e-3, 10**6), op("u2", "update", 1e-4)]
    edges = [Edge(0, 1, 10**6), Edge(1, 2, 10**6), Edge(2, 3, 10**3), Edge(3, 4, 10**6)]
    g = OpGraph(ops, edges, name="chain")
    c = load_cluster("4xV100-NVLink")
    split = Split("batch", (0, 1, 2, 3))
    s = Strategy(np.zeros(5, np.int64), None, {i: split for i in range(5)},
                 bucket_bytes=2**40)
    t = simulate(g, c, s)
    assert len(t.collective_kind) == 2 and np.isfinite(t.makespan)


def test_collective_kinds_are_in_the_trace():
    g, c = load_graph("pipedream:resnet18"), load_cluster("2x4xV100-IB100")
    t = simulate(g, c, baseline("data-parallel", g, 8))
    kinds = {KINDS[k] for k in t.collective_kind.tolist()}
    assert kinds == {"all-reduce", "reduce-scatter", "all-gather"}
    assert t.collective_ptr.size == t.collective_kind.size + 1


# -- strategies carry their options -----------------------------------------------------------

def test_strategy_options_count_in_equality_and_keys():
    s = Strategy(np.zeros(3, np.int64))
    b = s.with_options(bucket_bytes=1e6)
    assert s != b and s.simulation_key != b.simulation_key
    assert b.with_options(bucket_bytes=0) == s
    assert b.with_options(bucket_bytes=0).simulation_key == s.simulation_key
    assert b.derive(priority=np.ones(3)).bucket_bytes == 1e6
    assert "bucket_bytes=1e+06" in repr(b)
    with pytest.raises(StrategyError, match="unknown strategy option 'buckets'"):
        s.with_options(buckets=1)


def test_a_strategy_pickled_before_options_reads_with_defaults():
    s = Strategy(np.zeros(3, np.int64))
    del s.__dict__["bucket_bytes"]  # as pickled before the option existed
    back = pickle.loads(pickle.dumps(s))
    assert back.bucket_bytes == 0.0 and back == Strategy(np.zeros(3, np.int64))


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), 2.0**41])
def test_a_bad_bucket_size_is_refused(bad):
    g = load_graph("pipedream:alexnet")
    s = baseline("single", g, 1).with_options(bucket_bytes=bad)
    with pytest.raises(StrategyError, match="bucket_bytes"):
        s.validate(g, 1)


def test_strategy_files_carry_options_and_versions(tmp_path):
    g, c = load_graph("pipedream:alexnet"), load_cluster("4xV100-NVLink")
    s = baseline("data-parallel", g, 4)
    path = tmp_path / "s.json"
    moplace.save_strategy(path, g, s, c)
    data = json.loads(path.read_text())
    assert data["version"] == 5 and data["options"] == {"bucket_bytes": DDP_BUCKET_BYTES,
                                                        "zero_stage": 0, "micro_batches": 1,
                                                        "schedule": "1f1b", "fp8": "none"}
    assert moplace.load_strategy(path, g, c) == s
    old = dict(data, version=1)
    del old["options"], old["recompute"]
    path.write_text(json.dumps(old))
    assert moplace.load_strategy(path, g, c).bucket_bytes == 0  # version 1: the default
    path.write_text(json.dumps(dict(data, version=6)))
    with pytest.raises(FormatError, match="format version 6, newer than this moplace reads"):
        moplace.load_strategy(path, g, c)
    path.write_text(json.dumps(dict(data, options={"bucket_bytes": -5})))
    with pytest.raises(FormatError, match="options.bucket_bytes"):
        moplace.load_strategy(path, g, c)


# -- servers and NICs -------------------------------------------------------------------------

def test_cluster_files_say_how_many_nics_a_server_has():
    c = load_cluster("2x4xV100-2xIB100")
    assert c.server.tolist() == [0, 0, 0, 0, 1, 1, 1, 1] and c.n_servers == 2
    nic = lambda i, j: {c.resource_names[r] for r in c.route(i, j)}  # noqa: E731
    assert nic(0, 4) == {"server0.nic0.tx", "server1.nic0.rx"}
    assert nic(1, 5) == nic(0, 4)  # a GPU pair shares a NIC
    assert nic(2, 6) == {"server0.nic1.tx", "server1.nic1.rx"}
    assert "servers: 2 (gpu0-3; gpu4-7)" in c.describe()
    one = load_cluster("2x4xV100-IB100")
    assert {one.resource_names[r] for r in one.route(2, 6)} == {"server0.nic.tx", "server1.nic.rx"}


def test_more_nics_than_gpus_is_refused_by_field():
    text = ('[[servers]]\nrepeat = 2\ncount = 2\nnics = 3\nkind = "V100"\nmemory = "16GiB"\n'
            '[servers.interconnect]\nbandwidth = "48GB/s"\nlatency = "2us"\n'
            '[network]\nbandwidth = "12GB/s"\nlatency = "10us"\n')
    with pytest.raises(FormatError, match=r"servers\[0\].nics.*at most 2 NICs"):
        parse_cluster(text, "c.toml")


def test_servers_are_checked_and_survive_copies():
    with pytest.raises(ClusterError, match="servers: expected 3 entries"):
        Cluster.uniform(2, bandwidth=1e9).__class__(
            "x", Cluster.uniform(3, bandwidth=1e9).devices, np.full((3, 3), 1e9),
            np.zeros((3, 3)), servers=[0, 1])
    with pytest.raises(ClusterError, match="number them 0, 1"):
        Cluster("x", Cluster.uniform(2, bandwidth=1e9).devices, np.full((2, 2), 1e9),
                np.zeros((2, 2)), servers=[1, 0])
    c = load_cluster("2x4xV100-IB100")
    assert c.with_links({}).server.tolist() == c.server.tolist()
    state = pickle.loads(pickle.dumps(c)).__dict__
    state.pop("server")
    old = Cluster.__new__(Cluster)
    old.__setstate__(state)  # pickled before clusters knew servers: one server
    assert old.n_servers == 1


def test_the_gantt_chart_tells_collective_kinds_apart(tmp_path):
    from moplace.review.figures.timeline import _lanes, gantt

    g, c = load_graph("pipedream:resnet18"), load_cluster("2x4xV100-IB100")
    t = simulate(g, c, baseline("data-parallel", g, 8), record=True)
    bars = {}
    for _, lane, category, starts, _ in _lanes(t):
        bars[category] = bars.get(category, 0) + len(starts)
    assert bars["reduce-scatter"] == bars["all-gather"] > 0 and bars["all-reduce"] > 0
    assert bars["reduce-scatter"] == 8 * int(np.sum(t.collective_kind == REDUCE_SCATTER))
    gantt(t, tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 0


@pytest.mark.parametrize("cluster_name", ["2x4xV100-2xIB100", "4xV100-NVLink"])
def test_reduce_scatter_and_all_gather_are_collectives_of_their_own(cluster_name):
    """Each moves (n-1)/n of the buffer in and out of every device, as nccl-tests count them
    (hierarchically across servers: inside, then 1/k across); an all-reduce is the two."""
    from moplace.simulator.collectives import collective_plan

    c = load_cluster(cluster_name)
    devs, b = list(range(c.n_devices)), np.array([96e6])
    n = len(devs)

    def moved(plan):  # bytes each device sends, over the stages (one phase per device a stage)
        per = np.zeros(c.n_devices)
        for stage in plan:
            for ph in stage:
                per[ph.devices] += ph.traffic(b)[0]
        return per

    rs, ag = collective_plan(c, devs, REDUCE_SCATTER), collective_plan(c, devs, ALL_GATHER)
    np.testing.assert_allclose(moved(rs), (n - 1) / n * b[0])
    np.testing.assert_allclose(moved(ag), (n - 1) / n * b[0])
    np.testing.assert_allclose(moved(all_reduce_plan(c, devs)), 2 * (n - 1) / n * b[0])
    kinds = {ph.kind for stage in rs for ph in stage}
    assert kinds == {REDUCE_SCATTER} and {ph.kind for st in ag for ph in st} == {ALL_GATHER}
