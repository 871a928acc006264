"""PyTorch measurement and fidelity on a real GPU (marker ``gpu``: skipped without CUDA, see
tests/conftest.py). experiments/gpu_checks.sh runs them on a GPU machine, under pytest where
it is installed, else as a plain script (``python3 tests/test_torch_gpu.py``: each test
function in turn, with a temporary folder and captured output of its own).

What they hold: the measured kind is the GPU's; the traced graph runs there with its factory
ops moved; the simulator's one-device step on the measured kernel times is within 25% of the
real step, and its peak within 5% of ``max_memory_allocated`` with the optimizer state as torch
keeps it (``--optimizer adam``: AdamW on bf16 weights, bf16 moments, no master copy); a model
that does not fit is one line; ``moplace fidelity`` runs its plans there, and the PyTorch
testbed of one process on the GPU (NCCL) runs the one-device plans, recomputation among them.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

try:
    import pytest
except ImportError:  # the plain runner below: marks are no-ops
    pytest = None

torch = pytest.importorskip("torch") if pytest is not None else __import__("torch")

from moplace.cli import main
from moplace.costs.devicespecs import kind_of_gpu
from moplace.io import load_graph

if pytest is not None:
    pytestmark = pytest.mark.gpu

#: three layers of 2^34 FP32 weights each (64 GiB): more than any one GPU holds
TOO_BIG = '''import torch

def build(batch_size):
    model = torch.nn.Sequential(*[torch.nn.Linear(2**17, 2**17, bias=False) for _ in range(3)])
    x, y = torch.randn(batch_size, 2**17), torch.randn(batch_size, 2**17)
    return model, torch.nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), (x, y)
'''


def gpu_kind() -> str:
    props = torch.cuda.get_device_properties(0)
    return kind_of_gpu(torch.cuda.get_device_name(0), props.total_memory)


def test_the_measured_kind_is_the_gpus_and_its_cluster_holds_its_memory(tmp_path, capsys):
    from moplace.torch.device import device_info, resolve_device

    assert resolve_device(None) == "cuda"  # the GPU by default where one is visible
    info = device_info("cuda")
    assert info.kind == gpu_kind() and info.memory_bytes > 8 * 2**30
    assert info.device.startswith("cuda:")


def test_hf_gpt2_measured_on_the_gpu_against_its_real_step_and_peak(tmp_path, capsys):
    out = tmp_path / "gpt2.json"
    assert main(["profile", "hf:gpt2", "--batch", "4", "--seq-len", "512", "--dtype", "bf16",
                 "--optimizer", "adam", "--measure", "--steps", "3", "-o", str(out),
                 "--quiet"]) == 0
    text = capsys.readouterr().out
    print(text)
    kind = gpu_kind()
    g = load_graph(str(out))
    measured = g.metadata["measured"]
    assert g.metadata["profiled_on"] == kind and measured["kind"] == kind
    assert measured["device"] == torch.cuda.get_device_name(0)
    assert kind not in (g.metadata.get("estimated") or {})  # measured, not estimated
    timed = [op for op in g.ops if op.type not in ("Parameter", "Buffer", "Input", "Output")]
    assert sum(op.compute[kind] > 0 for op in timed) > 0.9 * len(timed)
    assert measured["peak_bytes"] > 0 and measured["stream_sum_s"] >= measured["kernel_sum_s"] * 0.5
    real, simulated = (float(v) for v in re.search(
        r"a real step ([\d.]+) ms; the simulator's one-device step on the measured op times "
        r"([\d.]+) ms", text).groups())
    assert abs(simulated / real - 1) < 0.25, (simulated, real)
    peak = re.search(r"peak memory: real ([\d.]+) (GiB|MiB).*?simulated ([\d.]+) (GiB|MiB) "
                     r"\(([-+][\d.]+)%\)", text)
    assert peak is not None and abs(float(peak.group(5))) < 5.0, text
    import moplace

    cluster = moplace.load_cluster(str(out.with_suffix(".cluster.toml")))
    assert cluster.kinds == (kind,) and cluster.devices[0].memory_bytes == measured["memory_bytes"]


def test_a_model_that_does_not_fit_the_gpu_is_one_line(tmp_path, capsys):
    path = tmp_path / "huge.py"
    path.write_text(TOO_BIG)
    code = main(["profile", str(path), "--batch", "2", "--measure", "--device", "cuda",
                 "-o", str(tmp_path / "g.json"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "does not fit the" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1
    assert torch.cuda.memory_allocated() < 2**30  # what it built was let go


def test_fidelity_runs_the_plans_on_the_gpu(tmp_path, capsys):
    stem = tmp_path / "fid"
    assert main(["fidelity", "hf:gpt2", "--batch", "8", "--seq-len", "256", "--dtype", "bf16",
                 "--micro-batches", "1,2,4", "--steps", "5", "--no-mlflow", "-o", str(stem),
                 "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    print(stem.with_suffix(".txt").read_text())
    assert data["kind"] == gpu_kind() and data["optimizer"] == "adam"
    rows = {r["micro_batches"]: r for r in data["rows"]}
    assert all(rows[k]["measured_s"] > 0 and rows[k]["measured_peak_bytes"] > 0 for k in rows)
    assert rows[4]["measured_peak_bytes"] < rows[1]["measured_peak_bytes"]
    assert data["summary"]["runs"] == 3


def test_the_testbed_runs_the_recomputed_plans_on_the_gpu(tmp_path, capsys):
    """The PyTorch testbed on one GPU (NCCL): the one-device plans, recomputation among them,
    run for real beside the simulator on the kernel times measured there."""
    stem = tmp_path / "testbed"
    assert main(["fidelity", "hf:gpt2", "--batch", "8", "--seq-len", "256", "--dtype", "bf16",
                 "--testbed", "1", "--device", "cuda", "--steps", "5", "--front-points", "0",
                 "--calibration", "0", "--no-mlflow", "-o", str(stem), "--json",
                 "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    print(stem.with_suffix(".txt").read_text())
    rows = {r["strategy"]: r for r in data["rows"] if r["measured_s"]}
    single, again = rows["single"], rows["single, every other group recomputed"]
    assert again["measured_s"] > single["measured_s"] > 0
    assert 0 < again["measured_peak_bytes"][0] < single["measured_peak_bytes"][0]
    for row in rows.values():  # the simulator on the measured kernel times
        assert abs(row["corrected_s"] / row["measured_s"] - 1) < 0.5, row


def test_apply_on_the_gpu_prints_its_peak(tmp_path, capsys):
    out = tmp_path / "gpt2.json"
    assert main(["profile", "hf:gpt2", "--batch", "4", "--seq-len", "256", "--dtype", "bf16",
                 "--measure", "--steps", "2", "-o", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["apply", str(out), "--baseline", "single", "--steps", "3", "--device",
                 "cuda", "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["expressible"] and data["trained"] and data["device"] == "cuda"
    assert list(data["peak_memory_bytes"].values())[0] > 0


def _run_plainly() -> int:
    """Each test function in turn without pytest (a GPU machine may not have it)."""
    import contextlib
    import io
    import tempfile
    import traceback

    class Capture:
        def __init__(self):
            self.out, self.err = io.StringIO(), io.StringIO()

        def readouterr(self):
            out = (self.out.getvalue(), self.err.getvalue())
            self.out.seek(0), self.out.truncate(), self.err.seek(0), self.err.truncate()
            return out

    failed = 0
    for name, test in list(globals().items()):
        if not (name.startswith("test_") and callable(test)):
            continue
        capture = Capture()
        with tempfile.TemporaryDirectory() as tmp:
            try:
                with contextlib.redirect_stdout(capture.out), \
                        contextlib.redirect_stderr(capture.err):
                    test(Path(tmp), capture)
                print(f"PASSED {name}")
            except Exception:  # noqa: BLE001 - report every test, then the count
                failed += 1
                print(f"FAILED {name}\n{traceback.format_exc()}")
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: nothing to check")
    sys.exit(_run_plainly())
