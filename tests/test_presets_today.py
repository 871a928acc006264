"""Presets of today's hardware (issue 35): 8-GPU A100-80GB, H100, H200 and B200 servers.

Each preset's figures are cited in its file's header comment; here: they load as the cited
machines (devices, kind, memory, speed, NICs per server, link figures), `moplace clusters` lists
them, their kinds keep the one FP32 rule shared by `KIND_SPEED` and `DEVICE_SPECS`, and a
data-parallel baseline runs on each, faster on newer GPUs.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import moplace
from moplace.cli import main
from moplace.core.cluster import KIND_SPEED, kind_speed
from moplace.core.presets import list_presets, load_cluster
from moplace.costs.devicespecs import DEVICE_SPECS, device_spec

GiB = 2**30
GB = 1e9
DOC = Path(__file__).resolve().parents[1] / "docs" / "cluster-format.md"

# name -> (servers, GPUs per server, kind, memory GiB, FP32 TFLOPS, NICs per server,
#          NVLink GB/s per direction used, network GB/s per NIC or None)
PRESETS = {
    "8xA100-80GB-NVLink": (1, 8, "A100-80GB", 80, 19.5, 1, 246, None),
    "2x8xA100-80GB-8xIB200": (2, 8, "A100-80GB", 80, 19.5, 8, 246, 24),
    "8xH100-80GB-NVLink": (1, 8, "H100", 80, 67, 1, 370, None),
    "2x8xH100-80GB-8xIB400": (2, 8, "H100", 80, 67, 8, 370, 48),
    "8xH200-141GB-NVLink": (1, 8, "H200", 141, 67, 1, 370, None),
    "2x8xH200-141GB-8xIB400": (2, 8, "H200", 141, 67, 8, 370, 48),
    "8xB200-180GB-NVLink": (1, 8, "B200", 180, 75, 1, 740, None),
    "2x8xB200-180GB-8xIB400": (2, 8, "B200", 180, 75, 8, 740, 48),
}
NEW_KINDS = ("A100-80GB", "H200", "B200")


def nics_per_server(c) -> list[int]:
    """NICs of each server, counted from the resource names (`S.nic.tx`, `S.nic0.tx`, ...)."""
    counts = [0] * c.n_servers
    for name in c.resource_names:
        m = re.fullmatch(r"server(\d+)\.nic\d*\.tx", name)
        if m:
            counts[int(m.group(1))] += 1
    return counts


def test_presets_listed():
    assert set(PRESETS) <= set(list_presets())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_devices(name):
    servers, per, kind, mem, tflops, nics, nvlink, net = PRESETS[name]
    c = load_cluster(name)
    n = servers * per
    assert c.name == name and c.n_devices == n and c.n_servers == servers
    assert c.kinds == (kind,) * n
    assert np.all(c.memory == mem * GiB)
    # speed in the file is the FP32 rule rounded to 3 decimals
    assert c.speed == pytest.approx(np.full(n, tflops / 15.7), abs=5e-4)
    assert kind_speed(kind) == pytest.approx(tflops / 15.7, rel=1e-12)
    assert np.bincount(c.server).tolist() == [per] * servers
    if servers > 1:
        assert nics_per_server(c) == [nics] * servers


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_links(name):
    servers, per, _, _, _, nics, nvlink, net = PRESETS[name]
    c = load_cluster(name)
    same = c.server[:, None] == c.server[None, :]
    off = ~np.eye(c.n_devices, dtype=bool)
    assert np.all(c.bandwidth[same & off] == nvlink * GB)
    assert np.all(c.latency[same & off] == pytest.approx(2e-6))
    # NVSwitch: a GPU's sends share its port, so two sends from gpu0 wait for each other
    assert set(c.route(0, 1)) & set(c.route(0, 2))
    assert not set(c.route(0, 1)) & set(c.route(2, 3))
    if net is None:
        return
    assert np.all(c.bandwidth[~same] == net * GB)
    assert np.all(c.latency[~same] == pytest.approx(5e-6))
    # one NIC per GPU: GPU k of server 0 -> server 1 and GPU k' -> server 1 use disjoint NICs
    assert nics == per
    assert not set(c.route(0, per)) & set(c.route(1, per + 1))
    for i in range(c.n_devices):
        for j in range(c.n_devices):
            if i != j:
                assert c.bandwidth[i, j] == c.resource_bandwidth[c.route(i, j)].min()


def test_clusters_command_lists_them(capsys):
    assert main(["clusters"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    for name in PRESETS:  # one line per preset, its name first
        assert any(line.split()[:1] == [name] for line in out.splitlines()), name


def test_cluster_format_table_lists_them():
    rows = {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", DOC.read_text(), re.M)}
    assert set(PRESETS) <= rows


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_device_specs_keep_the_fp32_rule(kind):
    spec = DEVICE_SPECS[kind]
    assert kind in KIND_SPEED and device_spec(kind.lower()) is spec
    assert spec.peak_flops["float32"] / 15.7e12 == pytest.approx(kind_speed(kind), rel=1e-9)
    # dense tensor-core peaks, not the "with sparsity" datasheet figures
    assert spec.peak("float16") == spec.peak("bfloat16") > spec.peak("tfloat32") > \
        spec.peak("float32")
    assert spec.source.strip()


def test_device_spec_figures():
    a100, a100_80 = DEVICE_SPECS["A100"], DEVICE_SPECS["A100-80GB"]
    assert dict(a100_80.peak_flops) == dict(a100.peak_flops)  # same GA100 compute
    assert a100_80.mem_bandwidth_Bps == 2039e9 > a100.mem_bandwidth_Bps
    h100, h200 = DEVICE_SPECS["H100"], DEVICE_SPECS["H200"]
    assert dict(h200.peak_flops) == dict(h100.peak_flops)  # same GH100 compute
    assert h200.mem_bandwidth_Bps == 4.8e12
    b200 = DEVICE_SPECS["B200"]
    assert b200.peak("float32") == 75e12 and b200.peak("bfloat16") == 2250e12
    assert b200.mem_bandwidth_Bps == 7.7e12


@pytest.fixture(scope="module")
def vgg16():
    return moplace.load_graph("pipedream:vgg16")


@pytest.fixture(scope="module")
def dp_runtimes(vgg16):
    runtimes = {}
    for name in PRESETS:
        c = load_cluster(name)
        e = moplace.evaluate(vgg16, c, moplace.baseline("data-parallel", vgg16, c.n_devices))
        assert e.violation == 0.0 and np.all(np.isfinite(e.values))
        runtimes[name] = e.values[e.names.index("runtime")]
    return runtimes


def test_data_parallel_runs_on_each(dp_runtimes):
    assert all(t > 0 for t in dp_runtimes.values())


def test_data_parallel_orders_the_generations(dp_runtimes):
    r = dp_runtimes
    assert r["8xB200-180GB-NVLink"] < r["8xH100-80GB-NVLink"] < r["8xA100-80GB-NVLink"]
    assert r["2x8xB200-180GB-8xIB400"] < r["2x8xA100-80GB-8xIB200"]
    # H200 computes as H100 under the FP32 rule, with the same links: no slower
    assert r["8xH200-141GB-NVLink"] <= r["8xH100-80GB-NVLink"]
