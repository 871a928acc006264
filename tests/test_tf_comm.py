"""Measured transfer costs between TensorFlow devices (moplace.tf.devices, moplace.tf.commprofile).

Logical CPUs must be configured before TensorFlow initialises, once per process, and pytest
runs every test file in one process: so the parts that touch TensorFlow's devices run in a
fresh interpreter, which prints JSON for the assertions here.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import warnings

import pytest
import tensorflow  # noqa: E402,F401  (the test extra installs it; a missing install must fail)

from moplace.errors import MoplaceError  # noqa: E402
from moplace.tf.commprofile import DEFAULT_SIZES, fit_transfers  # noqa: E402
from moplace.tf.devices import DeviceSetupError, gpu_kind  # noqa: E402

N_DEVICES = 3
SIZES = [2**10, 2**14, 2**18, 2**22]

SCRIPT = textwrap.dedent(f"""
    import json, warnings
    from moplace.tf import commprofile, devices
    names = devices.configure_logical_cpus({N_DEVICES})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cluster, fits = commprofile.profile_cluster(names, sizes={SIZES}, repeats=3, inner=5)
    samples = commprofile.measure_transfers(names, sizes={SIZES}, repeats=3, inner=5,
                                            pairs=[(0, 1)], subtract_local=False)
    out = dict(names=names, again=devices.configure_logical_cpus({N_DEVICES}),
               available=devices.available_devices({N_DEVICES}),
               kinds=list(cluster.kinds), memory=cluster.memory.tolist(),
               host=devices.host_memory_bytes(), warned=len(caught),
               raw=samples[0, 1], latency=cluster.latency.tolist(),
               fits={{f"{{i}},{{j}}": [f.latency_s, f.bandwidth_Bps, f.n]
                     for (i, j), f in fits.items()}})
    try:
        devices.configure_logical_cpus({N_DEVICES + 1})
    except devices.DeviceSetupError as exc:
        out["reconfigure_error"] = str(exc)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def measured():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_logical_cpus_are_named_and_reused(measured):
    names = [f"/device:CPU:{k}" for k in range(N_DEVICES)]
    assert measured["names"] == measured["again"] == measured["available"] == names


def test_reconfiguring_to_another_count_is_a_clear_error(measured):
    message = measured.get("reconfigure_error", "")
    assert "already initialised" in message and str(N_DEVICES) in message


def test_raw_samples_are_positive_and_not_much_faster_for_more_bytes(measured):
    raw = measured["raw"]
    assert [b for b, _ in raw] == SIZES
    secs = [s for _, s in raw]
    assert all(math.isfinite(s) and s > 0 for s in secs)
    # a bigger transfer may win by noise (scheduler, timer) but never by much
    for k, small in enumerate(secs):
        for big in secs[k + 1:]:
            assert big >= 0.5 * small - 250e-6


def test_every_pair_is_fitted_with_sane_figures(measured):
    fits = measured["fits"]
    pairs = {f"{i},{j}" for i in range(N_DEVICES) for j in range(N_DEVICES) if i != j}
    assert set(fits) == pairs
    for key, (latency, bandwidth, n) in fits.items():
        i, j = map(int, key.split(","))
        assert 0 <= latency < 0.05 and math.isfinite(latency)
        assert bandwidth > 0 and math.isfinite(bandwidth)
        assert n == len(SIZES)
        assert measured["latency"][i][j] == pytest.approx(latency)


def test_cluster_has_the_devices_as_cpus(measured):
    assert measured["kinds"] == ["cpu"] * N_DEVICES
    share = measured["host"] // N_DEVICES
    assert measured["memory"] == [share] * N_DEVICES


def test_flat_samples_fit_as_a_lower_bound_bandwidth():
    samples = {(0, 1): [(1024, 20e-6), (2**20, 18e-6), (2**26, 19e-6)]}
    with pytest.warns(UserWarning, match="lower bound"):
        fit = fit_transfers(samples)[0, 1]
    assert fit.latency_s == pytest.approx(19e-6)
    assert fit.bandwidth_Bps == pytest.approx(2**26 / 2e-6)
    # noise, not a link of 1e20 B/s (seen in CI on the testbed, whose cluster file then no
    # command could load)
    # time grows by a hair: the relative fit's slope is 4e-28 s/B (a link of 2e27 B/s)
    samples = {(1, 0): [(1024, 100e-6), (2**20, 1000e-6), (2**25, 5.8026711868798836e-05),
                        (2**26, 200e-6)]}
    with pytest.warns(UserWarning, match="lower bound"):
        fit = fit_transfers(samples)[1, 0]
    assert fit.bandwidth_Bps == pytest.approx(2**26 / (1000e-6 - 5.8026711868798836e-05))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # growing samples fit normally, without a warning
        fit = fit_transfers({(1, 0): [(b, 5e-6 + b / 1e9) for b in (1e3, 1e6, 1e8)]})[1, 0]
    assert fit.latency_s == pytest.approx(5e-6) and fit.bandwidth_Bps == pytest.approx(1e9)


def test_gpu_models_map_to_kind_speed_names():
    assert gpu_kind("Tesla V100-SXM2-16GB") == "V100"
    assert gpu_kind("Tesla V100-PCIE-32GB") == "V100-PCIe"
    assert gpu_kind("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert gpu_kind("NVIDIA H100 PCIe") == "H100-PCIe"
    assert gpu_kind("NVIDIA H100 80GB HBM3") == "H100"
    assert gpu_kind("Tesla P100-PCIE-16GB") == "P100-PCIe"
    assert gpu_kind("NVIDIA GeForce RTX 3090") == "GeForce RTX 3090"


def test_default_sizes_and_errors():
    assert len(DEFAULT_SIZES) == 8 and DEFAULT_SIZES[0] == 2**10 and DEFAULT_SIZES[-1] == 2**26
    assert all(s % 4 == 0 for s in DEFAULT_SIZES)
    assert issubclass(DeviceSetupError, MoplaceError)
