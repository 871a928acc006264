"""`Cluster.uniform`: the one constructor of a cluster whose every pair has a dedicated link
(sweeps' generated clusters, `moplace apply`'s placeholder, the tiny problems, the testbed)."""

import math

import numpy as np
import pytest

from moplace.core.cluster import Cluster, Device, kind_speed
from moplace.errors import ClusterError


def same(a: Cluster, b: Cluster) -> bool:
    if a.__dict__.keys() != b.__dict__.keys():
        return False
    for key, x in a.__dict__.items():
        y = b.__dict__[key]
        if isinstance(x, np.ndarray):
            if x.dtype != y.dtype or x.tobytes() != y.tobytes():
                return False
        elif x != y:
            return False
    return True


def test_as_if_built_from_devices():
    n, bw, lat = 3, 24e9, 2e-6
    devices = [Device(f"gpu{i}", "A100", 40 * 2**30, kind_speed("A100")) for i in range(n)]
    bandwidth, latency = np.full((n, n), bw), np.full((n, n), lat)
    by_hand = Cluster("3xA100", devices, bandwidth, latency)
    made = Cluster.uniform(3, kind="A100", memory_bytes=40 * 2**30, bandwidth=bw, latency=lat)
    assert same(made, by_hand)
    assert made.name == "3xA100" and made.n_resources == 6


def test_per_device_values_names_and_matrices():
    bw = np.array([[math.inf, 5.0], [7.0, math.inf]])
    c = Cluster.uniform(["a", "b"], kind=["V100", "weird"], memory_bytes=[1.0e9, 2e9],
                        bandwidth=bw, latency=[[0, 1e-3], [2e-3, 0]], name="mixed")
    assert c.device_names == ("a", "b") and c.kinds == ("V100", "weird")
    assert [d.memory_bytes for d in c.devices] == [10**9, 2 * 10**9]
    assert list(c.speed) == [1.0, 1.0]  # an unknown kind runs at speed 1
    assert c.bandwidth[0, 1] == 5.0 and c.latency[1, 0] == 2e-3
    assert Cluster.uniform(3, kind=["V100", "P100", "V100"], bandwidth=1.0).name == "2xV100+1xP100"
    assert Cluster.uniform(2, prefix="d", speed=2.5, bandwidth=1.0).device_names == ("d0", "d1")


def test_single_is_uniform_of_one():
    assert same(Cluster.single("P100"), Cluster.uniform(1, kind="P100"))
    assert Cluster.single().name == "1xV100"


def test_refusals():
    with pytest.raises(ClusterError, match="bandwidth"):
        Cluster.uniform(2)
    with pytest.raises(ClusterError, match="one per device"):
        Cluster.uniform(2, kind=["V100"], bandwidth=1.0)
    with pytest.raises(ClusterError, match="memory"):
        Cluster.uniform(2, memory_bytes=0, bandwidth=1.0)
    with pytest.raises(ClusterError, match="at least one device"):
        Cluster.uniform(0)
