"""CostModel: compute on profiled and other kinds, split parts, transfers."""

import numpy as np
import pytest

from moplace.core.cluster import KIND_SPEED, Cluster, Device
from moplace.core.graph import Op, OpGraph
from moplace.core.presets import load_cluster
from moplace.costs.costmodel import DEFAULT_SPLIT_OVERHEAD_S, CostModel

from conftest import make_cluster

V = "V100"


def graph(*ops, profiled_on=V):
    return OpGraph(ops, name="g", metadata={"profiled_on": profiled_on} if profiled_on else {})


def mixed_cluster():
    """gpu0 V100 (1.0), gpu1 A100 (2.0), gpu2 A100 (2.0), gpu3 A100 at a different speed (4.0)."""
    devices = [Device("v", V, 2**34, 1.0), Device("a1", "A100", 2**34, 2.0),
               Device("a2", "A100", 2**34, 2.0), Device("a3", "A100", 2**34, 4.0)]
    bw = np.full((4, 4), 1e9)
    np.fill_diagonal(bw, np.inf)
    return Cluster("mixed", devices, bw, np.zeros((4, 4)))


class TestCompute:
    def test_profiled_kind_is_used_as_is(self):
        g = graph(Op("a", compute={V: 1.25e-3}), Op("b", compute={V: 0.0}), Op("c", compute={V: 7}))
        cm = CostModel(g, load_cluster("4xV100-NVLink"))
        assert cm.compute.shape == (3, 4)
        assert (cm.compute[0] == 1.25e-3).all()
        assert (cm.compute[1] == 0.0).all()
        assert (cm.compute[2] == 7.0).all()

    def test_other_kind_is_scaled_by_relative_speed(self):
        # profiled on V100 (speed 1.0), run on the A100 preset
        t = 3.7e-3
        cluster = load_cluster("4xA100-40GB-NVLink")
        assert set(cluster.kinds) == {"A100"} and V not in cluster.kinds
        cm = CostModel(graph(Op("a", compute={V: t})), cluster)
        for d in range(cluster.n_devices):
            assert cm.compute[0, d] == pytest.approx(t * 1.0 / float(cluster.speed[d]), rel=1e-12)
        # the preset's A100 speed is the datasheet ratio 19.5 / 15.7, rounded
        assert cm.compute[0, 0] == pytest.approx(t / 1.242, rel=1e-12)
        assert cm.compute[0, 0] < t

    def test_slower_kind_takes_longer(self):
        t = 2e-3
        cluster = load_cluster("4xP100-PCIe")
        cm = CostModel(graph(Op("a", compute={V: t})), cluster)
        speed = float(cluster.speed[0])
        assert speed < 1.0
        assert cm.compute[0, 0] == pytest.approx(t / speed, rel=1e-12)

    def test_a_time_for_the_device_kind_wins_over_scaling(self):
        g = graph(Op("a", compute={V: 4.0, "A100": 3.0}))
        cm = CostModel(g, mixed_cluster())
        assert cm.compute[0].tolist() == [4.0, 3.0, 3.0, 3.0]

    def test_devices_of_one_kind_at_different_speeds(self):
        g = graph(Op("a", compute={V: 4.0}))
        cm = CostModel(g, mixed_cluster())
        np.testing.assert_allclose(cm.compute[0], [4.0, 2.0, 2.0, 1.0], rtol=1e-15)

    def test_reference_kind_is_the_profiled_one(self):
        # both kinds known; profiled_on picks which one is scaled
        op = Op("a", compute={V: 1.0, "cpu": 30.0})
        cl = make_cluster(2, kind="P100")
        by_v100 = CostModel(graph(op, profiled_on=V), cl).compute[0, 0]
        by_cpu = CostModel(graph(op, profiled_on="cpu"), cl).compute[0, 0]
        assert by_v100 == pytest.approx(1.0 * 1.0 / 1.0, rel=1e-12)  # make_cluster speed is 1.0
        assert by_cpu == pytest.approx(30.0 * KIND_SPEED["cpu"] / 1.0, rel=1e-12)

    def test_reference_falls_back_to_a_kind_of_known_speed(self):
        # profiled_on names a kind the op has no time for: use one whose speed is known
        g = graph(Op("a", compute={"mystery": 5.0, "cpu": 20.0}), profiled_on=V)
        cm = CostModel(g, make_cluster(1))
        assert cm.compute[0, 0] == pytest.approx(20.0 * KIND_SPEED["cpu"], rel=1e-12)

    def test_unknown_kind_counts_as_speed_one(self):
        g = graph(Op("a", compute={"mystery": 5.0}), profiled_on=None)
        cm = CostModel(g, mixed_cluster())
        np.testing.assert_allclose(cm.compute[0], [5.0, 2.5, 2.5, 1.25], rtol=1e-15)

    def test_op_without_compute_costs_nothing(self):
        g = graph(Op("a"), Op("b", compute={V: 1.0}))
        for cluster in (load_cluster("4xA100-40GB-NVLink"), mixed_cluster()):
            cm = CostModel(g, cluster)
            assert (cm.compute[0] == 0.0).all()
            for parts in (1, 2, 4):
                assert cm.part_time(0, 1, parts) == (0.0 if parts == 1 else
                                                     DEFAULT_SPLIT_OVERHEAD_S)

    def test_compute_is_read_only(self):
        cm = CostModel(graph(Op("a", compute={V: 1.0})), make_cluster(2))
        with pytest.raises(ValueError):
            cm.compute[0, 0] = 5.0


class TestParts:
    def test_unsplit_part_is_the_op(self):
        cm = CostModel(graph(Op("a", compute={V: 1.0})), make_cluster(2))
        assert cm.part_time(0, 1, 1) == 1.0

    @pytest.mark.parametrize("n", [2, 3, 4, 8])
    def test_part_is_time_over_n_plus_overhead(self, n):
        t = 6e-3
        cm = CostModel(graph(Op("a", compute={V: t})), make_cluster(8))
        assert cm.part_time(0, 3, n) == pytest.approx(t / n + DEFAULT_SPLIT_OVERHEAD_S, rel=1e-12)

    def test_overhead_is_configurable(self):
        g = graph(Op("a", compute={V: 1.0}))
        assert CostModel(g, make_cluster(2), split_overhead_s=0.25).part_time(0, 0, 2) == 0.75
        assert CostModel(g, make_cluster(2), split_overhead_s=0.0).part_time(0, 0, 4) == 0.25

    @pytest.mark.parametrize("bad", [-1e-6, float("nan"), float("inf")])
    def test_bad_overhead_is_refused(self, bad):
        with pytest.raises(ValueError):
            CostModel(graph(Op("a")), make_cluster(2), split_overhead_s=bad)

    def test_part_on_other_kind_scales_then_divides(self):
        t = 2.0
        g = graph(Op("a", compute={V: t}))
        cm = CostModel(g, mixed_cluster())
        assert cm.part_time(0, 3, 2) == pytest.approx(t / 4.0 / 2 + DEFAULT_SPLIT_OVERHEAD_S)

    def test_measured_part_compute_overrides(self):
        g = graph(Op("a", compute={V: 1.0}, part_compute={2: {V: 0.7}, 4: {V: 0.4}}))
        cm = CostModel(g, make_cluster(4))
        assert cm.part_time(0, 0, 2) == 0.7   # no overhead added to a measurement
        assert cm.part_time(0, 1, 4) == 0.4
        # no measurement for 3 parts: the formula
        assert cm.part_time(0, 2, 3) == pytest.approx(1.0 / 3 + DEFAULT_SPLIT_OVERHEAD_S)

    def test_measured_part_compute_on_another_kind_is_scaled(self):
        g = graph(Op("a", compute={V: 1.0}, part_compute={2: {V: 0.7}}))
        cm = CostModel(g, mixed_cluster())
        assert cm.part_time(0, 0, 2) == 0.7
        assert cm.part_time(0, 1, 2) == pytest.approx(0.35, rel=1e-12)
        assert cm.part_time(0, 3, 2) == pytest.approx(0.175, rel=1e-12)


class TestTransfers:
    def test_latency_plus_bytes_over_bandwidth(self):
        cl = make_cluster(3, bandwidth=2e9, latency=5e-6)
        cm = CostModel(graph(Op("a")), cl)
        assert cm.transfer_time(0, 2, 4e9) == pytest.approx(5e-6 + 2.0, rel=1e-15)
        assert cm.transfer_time(2, 1, 0) == pytest.approx(5e-6, rel=1e-15)

    def test_same_device_is_free(self):
        cm = CostModel(graph(Op("a")), make_cluster(2, bandwidth=1.0, latency=1.0))
        assert cm.transfer_time(1, 1, 10**9) == 0.0

    def test_preset_links(self):
        cl = load_cluster("4xV100-NVLink")
        cm = CostModel(graph(Op("a")), cl)
        nbytes = 96e6
        assert cm.transfer_time(0, 3, nbytes) == pytest.approx(2e-6 + nbytes / 48e9, rel=1e-12)

    def test_each_pair_has_its_own_figures(self):
        cl = load_cluster("2x4xV100-IB100")
        cm = CostModel(graph(Op("a")), cl)
        for i, j in [(0, 1), (0, 5), (7, 2)]:
            want = cl.latency[i, j] + 1e8 / cl.bandwidth[i, j]
            assert cm.transfer_time(i, j, 1e8) == pytest.approx(want, rel=1e-15)
            assert cm.transfer_time(i, j, 1e8) == pytest.approx(cl.transfer_time(i, j, 1e8), rel=1e-15)
        # between servers is slower than inside one
        assert cm.transfer_time(0, 5, 1e8) > cm.transfer_time(0, 1, 1e8)
