"""Simulator: hand-computed schedules and invariants."""


import networkx as nx
import numpy as np
import pytest

from moplace.core.graph import Op, OpGraph
from moplace.core.strategy import Split, Strategy
from moplace.core.synthetic import layered_dag, random_dag
from moplace.simulator.engine import simulate

from conftest import make_cluster

V = "V100"


def op(name, t, out=0, **kw):
    return Op(name, compute={V: t}, output_bytes=out, **kw)


def chain(times, nbytes):
    ops = [op(f"o{i}", t, out=nbytes) for i, t in enumerate(times)]
    return OpGraph(ops, [(f"o{i}", f"o{i + 1}", nbytes) for i in range(len(ops) - 1)])


class TestHandComputed:
    def test_chain_on_one_device(self, cluster2):
        tr = simulate(chain([1.0, 2.0, 0.5], 100), cluster2, Strategy([0, 0, 0]))
        assert tr.makespan == 3.5
        assert tr.traffic.tolist() == [0, 0]
        np.testing.assert_array_equal(tr.op_start, [0, 1, 3])
        # o1 runs while o0's output is held: 100 + 100; then o2 while o1's output is held
        assert tr.peak_memory.tolist() == [200, 0]

    def test_chain_cut_pays_latency_plus_bytes_over_bandwidth(self, cluster2):
        tr = simulate(chain([1.0, 2.0, 0.5], 10**6), cluster2, Strategy([0, 1, 1]))
        cut = 1e-3 + 10**6 / 1e9
        assert tr.makespan == pytest.approx(3.5 + cut, abs=1e-12)
        assert tr.op_start[1] == pytest.approx(1.0 + cut, abs=1e-12)
        assert tr.sent.tolist() == [10**6, 0] and tr.received.tolist() == [0, 10**6]
        assert tr.n_transfers == 1

    def test_diamond_with_transfers(self):
        # a -> b, a -> c, b -> d, c -> d; c alone on device 1
        g = OpGraph([op("a", 1.0, 1000), op("b", 2.0, 10), op("c", 1.0, 2000), op("d", 1.0)],
                    [("a", "b", 1000), ("a", "c", 1000), ("b", "d", 10), ("c", "d", 2000)])
        cl = make_cluster(2, bandwidth=1000.0, latency=0.5)
        tr = simulate(g, cl, Strategy([0, 0, 1, 0]))
        # a: 0-1; a->c arrives 1 + 0.5 + 1 = 2.5; c: 2.5-3.5; c->d arrives 3.5 + 0.5 + 2 = 6
        # b: 1-3; d: max(3, 6) = 6 -> 7
        np.testing.assert_allclose(tr.op_start, [0, 1, 2.5, 6])
        assert tr.makespan == pytest.approx(7.0)
        assert tr.sent.tolist() == [1000, 2000] and tr.received.tolist() == [2000, 1000]
        # device 0 at time 6: b's output (10) and the received 2000 while d runs
        assert tr.peak_memory.tolist() == [2010, 3000]

    def test_transfers_sharing_a_link_queue(self):
        # device 0 feeds devices 1 and 2 through one shared egress port
        routes = {(i, j): [0] if i == 0 else [1 + i * 3 + j] for i in range(3) for j in range(3) if i != j}
        names = [f"r{k}" for k in range(10)]
        cl = make_cluster(3, bandwidth=100.0, latency=0.0, routes=routes, resource_names=names)
        g = OpGraph([op("a", 1.0, 100), op("b", 1.0), op("c", 1.0)], [("a", "b", 100), ("a", "c", 100)])
        tr = simulate(g, cl, Strategy([0, 1, 2], priority=[0, 1, 0]))
        # both transfers are issued at t=1; b's (issued first, edge order) ends at 2, c's at 3
        np.testing.assert_allclose(tr.op_start, [0, 2, 3])
        dedicated = simulate(g, make_cluster(3, bandwidth=100.0), Strategy([0, 1, 2]))
        np.testing.assert_allclose(dedicated.op_start, [0, 2, 2])

    def test_consumers_on_one_device_share_one_transfer(self, cluster2):
        g = OpGraph([op("a", 1.0, 500), op("b", 1.0), op("c", 1.0)], [("a", "b", 500), ("a", "c", 500)])
        tr = simulate(g, cluster2, Strategy([0, 1, 1]))
        assert tr.n_transfers == 1 and tr.sent[0] == 500

    def test_priority_orders_ready_ops(self, cluster2):
        g = OpGraph([op("a", 1.0), op("b", 2.0)])
        first_b = simulate(g, cluster2, Strategy([0, 0], priority=[0.0, 1.0]))
        assert first_b.op_start.tolist() == [2.0, 0.0]
        first_a = simulate(g, cluster2, Strategy([0, 0], priority=[1.0, 0.0]))
        assert first_a.op_start.tolist() == [0.0, 1.0]

    def test_parameters_are_resident_and_capacity_is_checked(self):
        g = OpGraph([op("a", 1.0, 10, param_bytes=1000)])
        tr = simulate(g, make_cluster(2, memory=500), Strategy([1]))
        assert tr.peak_memory.tolist() == [0, 1010]
        assert not tr.feasible and tr.memory_excess.tolist() == [0, 510]


class TestSplits:
    def layer(self, fwd=4.0, bwd=8.0, upd=0.1, params=1000):
        kw = dict(colocation="L", splittable=("batch", "channel"))
        ops = [op("f", fwd, 4000, param_bytes=params, role="forward", **kw),
               op("b", bwd, 1000 + params, grad_bytes=params, role="backward", **kw),
               op("u", upd, 0, param_bytes=params, role="update", **kw)]
        return OpGraph(ops, [("f", "b", 4000), ("b", "u", params)])

    @pytest.mark.parametrize("n", [2, 4, 8])
    def test_data_parallel_is_compute_over_n_plus_allreduce(self, n):
        from moplace.costs.costmodel import DEFAULT_SPLIT_OVERHEAD_S as ovh
        bw, lat, params = 1e9, 1e-5, 10**6
        cl = make_cluster(n, bandwidth=bw, latency=lat)
        g = self.layer(params=params)
        split = Split("batch", tuple(range(n)))
        tr = simulate(g, cl, Strategy([0, 0, 0], splits={0: split, 1: split, 2: split}))
        allreduce = 2 * (n - 1) * (lat + params / n / bw)
        expected = (4.0 + 8.0) / n + 2 * ovh + allreduce + 0.1  # the update is replicated
        assert tr.makespan == pytest.approx(expected, rel=1e-12)
        assert tr.traffic.tolist() == pytest.approx([2 * 2 * (n - 1) / n * params] * n)
        # every device holds full weights and optimizer state
        assert (tr.peak_memory >= 2 * params).all()

    def test_channel_split_gathers_inputs_and_shards_parameters(self):
        n = 4
        cl = make_cluster(n, bandwidth=1e9)
        g = self.layer(params=1000)
        split = Split("channel", tuple(range(n)))
        tr = simulate(g, cl, Strategy([0, 0, 0], splits={0: split, 1: split, 2: split}))
        # b's parts each need all of f's output: 3 remote quarters of 4000 bytes
        assert tr.received.tolist() == [3000] * n
        # params 250 + 250, f part output 1000, received 3000, b part output (2000 / 4)
        assert tr.peak_memory.tolist() == [250 + 250 + 1000 + 3000 + 500] * n

    def test_split_on_a_dimension_the_op_lacks_is_rejected(self, cluster2):
        from moplace.errors import StrategyError
        g = OpGraph([op("a", 1.0, splittable=("batch",))])
        with pytest.raises(StrategyError, match="cannot be split on 'channel'"):
            simulate(g, cluster2, Strategy([0], splits={0: Split("channel", (0, 1))}))


class TestInvariants:
    @pytest.mark.parametrize("seed", range(5))
    def test_one_device_runs_the_sum_of_compute(self, seed):
        g = layered_dag(200, width=6, seed=seed)
        cl = make_cluster(1)
        tr = simulate(g, cl, Strategy(np.zeros(len(g.ops), np.int64)))
        assert tr.makespan == pytest.approx(g.total_compute(V), rel=1e-12)
        assert tr.traffic.sum() == 0 and tr.n_transfers == 0

    @pytest.mark.parametrize("seed", range(5))
    def test_unlimited_devices_and_free_links_give_the_critical_path(self, seed):
        g = random_dag(25, edge_prob=0.2, seed=seed)
        cl = make_cluster(len(g.ops), bandwidth=1e300, latency=0.0)  # free links
        tr = simulate(g, cl, Strategy(np.arange(len(g.ops))))
        nxg = g.to_networkx()
        for u, v in nxg.edges:
            nxg.edges[u, v]["w"] = nxg.nodes[u]["op"].compute[V]
        sink = "\0sink"
        for node in list(nxg.nodes):
            if nxg.out_degree(node) == 0:
                nxg.add_edge(node, sink, w=nxg.nodes[node]["op"].compute[V])
        assert tr.makespan == pytest.approx(nx.dag_longest_path_length(nxg, weight="w"), rel=1e-12)

    def test_same_input_same_trace(self):
        g = layered_dag(500, width=10, seed=3)
        cl = make_cluster(4, bandwidth=5e9, latency=2e-6)
        rng = np.random.default_rng(0)
        s = Strategy(rng.integers(0, 4, len(g.ops)), rng.random(len(g.ops)))
        a, b = simulate(g, cl, s), simulate(g, cl, s)
        assert a.makespan == b.makespan
        np.testing.assert_array_equal(a.task_start, b.task_start)
        np.testing.assert_array_equal(a.peak_memory, b.peak_memory)

    @pytest.mark.parametrize("seed", range(3))
    def test_schedule_respects_dependencies_and_devices_run_one_task_at_a_time(self, seed):
        g = layered_dag(300, width=8, seed=seed)
        cl = make_cluster(3, bandwidth=1e9, latency=1e-5)
        rng = np.random.default_rng(seed)
        tr = simulate(g, cl, Strategy(rng.integers(0, 3, len(g.ops)), rng.random(len(g.ops))))
        for e in g.edges:
            assert tr.op_start[e.dst] >= tr.op_end[e.src] - 1e-15
        for d in range(3):
            on = np.flatnonzero(tr.task_device == d)
            order = on[np.argsort(tr.task_start[on])]
            assert (tr.task_start[order[1:]] >= tr.task_end[order[:-1]] - 1e-15).all()


class TestSharedLinks:
    def test_two_devices_on_one_shared_link(self):
        # one resource carries both directions (a bus): opposite transfers queue
        routes = {(0, 1): [0], (1, 0): [0]}
        cl = make_cluster(2, bandwidth=100.0, routes=routes, resource_names=["bus"])
        g = OpGraph([op("a", 1.0, 100), op("b", 1.0, 100), op("c", 1.0), op("d", 1.0)],
                    [("a", "c", 100), ("b", "d", 100)])
        tr = simulate(g, cl, Strategy([0, 1, 1, 0]))
        # a (dev 0) and b (dev 1) end at 1; a->c takes the bus 1-2 (issued first), b->d 2-3
        np.testing.assert_allclose(tr.op_start, [0, 0, 2, 3])
        full_duplex = simulate(g, make_cluster(2, bandwidth=100.0), Strategy([0, 1, 1, 0]))
        np.testing.assert_allclose(full_duplex.op_start, [0, 0, 2, 2])

    def test_cross_server_transfers_share_the_nic(self):
        from moplace import load_cluster
        cl = load_cluster("2x4xV100-IB100")  # gpu0-3 in server 0, gpu4-7 in server 1
        nbytes = 10**9
        g = OpGraph([op("a", 1.0, nbytes), op("b", 1.0, nbytes), op("c", 1.0), op("d", 1.0)],
                    [("a", "c", nbytes), ("b", "d", nbytes)])
        across = simulate(g, cl, Strategy([0, 1, 4, 5]))
        one = cl.transfer_time(0, 4, nbytes)
        # both leave server 0 at t=1 through its one NIC: the second waits for the first
        np.testing.assert_allclose(sorted(across.op_start[2:]), [1 + one, 1 + 2 * one])
        inside = simulate(g, cl, Strategy([0, 1, 2, 3]))
        assert inside.op_start[2] == pytest.approx(inside.op_start[3])



def test_measured_part_profile_sets_the_duration_of_split_parts():
    measured = Op("m", compute={V: 8.0}, part_compute={2: {V: 5.0}}, splittable=("batch",))
    estimated = Op("e", compute={V: 8.0}, splittable=("batch",))
    cl = make_cluster(2)
    split = {0: Split("batch", (0, 1))}
    assert simulate(OpGraph([measured]), cl, Strategy([0], splits=split)).makespan == 5.0
    from moplace.costs.costmodel import DEFAULT_SPLIT_OVERHEAD_S
    assert simulate(OpGraph([estimated]), cl, Strategy([0], splits=split)).makespan == \
        pytest.approx(4.0 + DEFAULT_SPLIT_OVERHEAD_S)
