"""The testbed: real TensorFlow worker processes, one device each, and strategies run on it.

Starts real `tf.distribute` servers as separate processes (each pinned to its own cores on a
CPU machine). The GPU path runs where at least two GPUs are visible and is skipped otherwise.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import moplace.tf  # noqa: F401  (sets TensorFlow's environment before keras loads)
from moplace import baseline
from moplace.tf.frontend import apply_to_model, profile_model
from moplace.tf.testbed import Testbed, TestbedError

CORES = len(os.sched_getaffinity(0))


@pytest.fixture(scope="module")
def bed():
    with Testbed(2) as testbed:
        yield testbed


@pytest.fixture(scope="module")
def mlp(bed):
    return profile_model("mlp", 16, testbed=bed, steps=3, part_counts=(2,))


def test_workers_are_separate_processes_on_their_own_cores(bed):
    assert len(bed.workers) == 2 and len({w.pid for w in bed.workers}) == 2
    assert os.getpid() not in {w.pid for w in bed.workers}
    assert bed.devices == [f"/job:worker/replica:0/task:{k}/device:CPU:0" for k in range(2)]
    if CORES >= 2:
        assert not set(bed.workers[0].cores) & set(bed.workers[1].cores)
        for w in bed.workers:
            assert set(os.sched_getaffinity(w.pid)) == set(w.cores)
    assert bed.target.startswith("grpc://localhost:")


@pytest.mark.slow  # profiles on two worker processes (about 25 s): the default run keeps under 4 min
def test_profile_measures_on_the_testbed_and_its_links(mlp, bed):
    m = mlp.graph.metadata["measured"]
    assert m["device"] == bed.devices[0] and m["testbed"]["workers"] == 2
    assert m["part_counts"] == [2]
    lat, bw = mlp.cluster.latency, mlp.cluster.bandwidth
    assert lat[0, 1] > 0 and lat[1, 0] > 0  # gRPC between processes costs time
    assert np.isfinite(bw[0, 1]) and bw[0, 1] > 0
    assert [d.name for d in mlp.cluster.devices] == ["w0-cpu", "w1-cpu"]


# all three under slow: they need the model profiled on the testbed first (about 20 s); the
# default run starts the testbed (the test above) and runs a split strategy on logical devices
# (tests/test_tf_flow.py)
@pytest.mark.slow
@pytest.mark.parametrize("name", ["single", "data-parallel", "layer-split"])
def test_strategies_run_on_the_workers_and_train_alike(mlp, bed, name):
    s = baseline(name, mlp.graph, 2)
    result, simulated = apply_to_model(mlp.graph, s, mlp.cluster, steps=3, traced=mlp.traced,
                                       testbed=bed)
    assert result.expressible and result.trained and simulated > 0
    used = {bed.devices[d] for d in s.used_devices}
    assert set(result.peak_memory_bytes) == used
    assert all(v > 0 for v in result.peak_memory_bytes.values())
    lo, hi = result.spread_s
    assert lo <= result.measured_step_s <= hi
    # every strategy trains the same model the same way: the same losses, step by step
    single, _ = apply_to_model(mlp.graph, baseline("single", mlp.graph, 2), mlp.cluster, steps=3,
                               traced=mlp.traced, testbed=bed)
    assert np.allclose(result.losses, single.losses, rtol=1e-5)


def test_a_testbed_that_cannot_be_is_a_clear_error():
    with pytest.raises(TestbedError, match="1 to 64 workers"):
        Testbed(0)
    import tensorflow as tf

    if len(tf.config.list_physical_devices("GPU")) < 2:
        with pytest.raises(TestbedError, match="needs 2 GPUs"):
            Testbed(2, gpus=True)


@pytest.mark.slow  # starts and kills worker processes (about 7 s)
def test_workers_end_with_the_testbed():
    bed = Testbed(1)
    pids = [w.pid for w in bed.workers]
    procs = list(bed._workers.procs)  # the shared room's processes (moplace.testbed.procs)
    bed.close()
    assert all(p.poll() is not None for p in procs) and pids


def test_gpu_workers_run_data_parallel():
    import tensorflow as tf

    if len(tf.config.list_physical_devices("GPU")) < 2:
        pytest.skip("fewer than 2 GPUs visible: the GPU testbed cannot be tested here")
    with Testbed(2) as bed:
        assert bed.gpus and all(d.endswith("GPU:0") for d in bed.devices)
        pm = profile_model("cnn", 16, testbed=bed, steps=3)
        result, _ = apply_to_model(pm.graph, baseline("data-parallel", pm.graph, 2), pm.cluster,
                                   steps=3, traced=pm.traced, testbed=bed)
        assert result.expressible and result.trained


def moplace_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "moplace", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


@pytest.mark.slow
def test_profile_apply_and_fidelity_commands_on_a_testbed(tmp_path):
    out = moplace_cli("profile", "mlp", "--batch", "16", "--testbed", "2", "-o", "g.json",
                      "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "testbed: 2 worker processes" in out.stdout
    # apply runs on the testbed the graph was profiled on, without being told
    out = moplace_cli("apply", "g.json", "--baseline", "data-parallel", "--steps", "3", "--json",
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["testbed"] == 2 and data["expressible"] and data["trained"]
    assert all(d.startswith("/job:worker/") for d in data["devices"])
    out = moplace_cli("fidelity", "mlp", "--batch", "64", "--steps", "3", "--front-points", "1",
                      "--budget", "100", "--calibration", "2", "-o", "fid", "--json",
                      "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["summary"]["strategies"] >= 4 and data["mlflow_run_id"]
    assert {r["strategy"] for r in data["rows"]} >= {"single", "data-parallel"}
    assert all((tmp_path / f"fid{s}").is_file() for s in (".txt", ".json", ".png"))
    # an output that exists is refused before any worker starts
    out = moplace_cli("fidelity", "mlp", "--batch", "64", "-o", "fid", "--no-mlflow", cwd=tmp_path)
    assert out.returncode == 2 and "exists" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_a_strategy_that_cannot_run_exits_non_zero_naming_the_op(tmp_path):
    out = moplace_cli("profile", "mlp", "--batch", "1", "--device-count", "2", "-o", "g.json",
                      "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    out = moplace_cli("apply", "g.json", "--baseline", "data-parallel", "--steps", "2", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "cannot run" in out.stderr and "a batch of 1 cannot be cut into 2 parts" in out.stderr
    out = moplace_cli("apply", "g.json", "--baseline", "data-parallel", "--steps", "2", "--json",
                      cwd=tmp_path)
    assert out.returncode == 1 and json.loads(out.stdout)["expressible"] is False


@pytest.mark.slow  # a TensorFlow process and a worker, ~17 s: the default suite keeps under 4 min
def test_workers_exit_when_the_process_holding_the_testbed_is_killed():
    import signal
    import time

    code = ("import moplace.tf, os, signal, sys\nfrom moplace.tf.testbed import Testbed\n"
            "bed = Testbed(1)\nprint(bed.workers[0].pid, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == -signal.SIGKILL
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    pytest.fail(f"worker {pid} outlived the process that started it")
