"""`moplace fidelity` for PyTorch models (`moplace.torch.fidelity`): one device's plans run for
real against the simulator. On a CPU here, with a tiny model; on a GPU in test_torch_gpu.py."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from moplace.cli import main  # noqa: E402
from moplace.torch.fidelity import (TorchFidelityReport, TorchFidelityRow,  # noqa: E402
                                    report_table)

TINY = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
        "vocab_size": 500}


def tiny_config(folder):
    path = folder / "tiny" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(TINY))
    return f"hf:{path}"


def made_report(kind="H100") -> TorchFidelityReport:
    """A report of known numbers: measured 10, 20, 40 ms; simulated 11, 18, 40 (errors +10%,
    -10%, 0); estimated 5, 30, 20 (errors -50%, +50%, -50%, order broken once)."""
    rows = [TorchFidelityRow(8, 256, k, measured_s=m, spread_s=(m * 0.9, m * 1.1),
                             measured_peak_bytes=1000 * 2**20, simulated_s=s,
                             simulated_peak_bytes=p * 2**20, estimated_s=e,
                             estimated_peak_bytes=1000 * 2**20)
            for k, m, s, e, p in ((1, 0.010, 0.011, 0.005, 1040), (2, 0.020, 0.018, 0.030, 980),
                                  (4, 0.040, 0.040, 0.020, 1000))]
    rows.append(TorchFidelityRow(8, 256, 16, reason="a batch of 8 does not make 16 equal "
                                                     "micro-batches"))
    return TorchFidelityReport("hf:gpt2", kind, "NVIDIA H100 80GB HBM3", "bf16", "adam",
                               "roofline from aten ops' FLOPs and bytes", 10, "2.11.0", rows)


def test_the_summary_holds_each_prediction_against_the_real_steps_apart():
    s = made_report().summary()
    assert s["runs"] == 3 and s["not_run"] == 1
    m, e = s["measured"], s["estimated"]
    assert m["step_median_abs_error"] == pytest.approx(0.10)
    assert m["step_worst_abs_error"] == pytest.approx(0.10)
    assert m["kendall_tau"] == pytest.approx(1.0)
    assert m["peak_median_abs_error"] == pytest.approx(0.02)
    assert m["peak_worst_abs_error"] == pytest.approx(0.04)
    assert e["step_median_abs_error"] == pytest.approx(0.5)
    assert e["kendall_tau"] == pytest.approx(1 / 3)
    text = report_table(made_report())
    assert "not run: a batch of 8 does not make 16" in text
    assert "steps median |err| 10.0%, worst 10.0%, Kendall tau 1.00 over 3 runs" in text
    again = TorchFidelityReport.from_dict(json.loads(json.dumps(made_report().as_dict())))
    assert again.summary() == s


def test_on_a_cpu_no_peak_is_compared():
    report = made_report("cpu")
    for r in report.rows:
        r.measured_peak_bytes = None
    s = report.summary()
    assert math.isnan(s["measured"]["peak_median_abs_error"])
    assert "CPU: none measured" in report_table(report)


def test_a_tiny_hf_model_runs_its_plans_on_the_cpu_end_to_end(tmp_path, capsys):
    stem = tmp_path / "fid"
    assert main(["fidelity", tiny_config(tmp_path), "--batch", "4", "--seq-len", "16",
                 "--device", "cpu", "--micro-batches", "1,2,8", "--steps", "3", "--no-mlflow",
                 "-o", str(stem), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "cpu" and data["optimizer"] == "adam" and data["mlflow_run_id"] is None
    rows = {r["micro_batches"]: r for r in data["rows"]}
    assert set(rows) == {1, 2, 8} and "does not make 8" in rows[8]["reason"]
    for k in (1, 2):
        r = rows[k]
        assert r["measured_s"] > 0 and r["simulated_s"] > 0 and r["estimated_s"] > 0
        assert r["measured_peak_bytes"] is None and r["simulated_peak_bytes"] > 0
    # the simulator holds less activation memory for smaller micro-batches
    assert rows[2]["simulated_peak_bytes"] < rows[1]["simulated_peak_bytes"]
    assert data["summary"]["runs"] == 2 and data["estimate"].startswith(("roofline", "calib"))
    assert all(stem.with_suffix(s).stat().st_size > 0 for s in (".txt", ".json", ".png"))
    # a report saved by -o logs later: refused without mlflow's logging
    code = main(["fidelity", str(stem.with_suffix(".json")), "--no-mlflow"])
    assert code == 2 and "a saved report" in capsys.readouterr().err


@pytest.mark.slow  # MLflow's store and the figure: seconds; the CPU run stays
def test_a_saved_report_is_logged_to_mlflow_with_its_table_and_figure(tmp_path, capsys):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from moplace import strictjson

    saved = tmp_path / "fid.json"
    saved.write_text(strictjson.dumps(made_report().as_dict()))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["fidelity", str(saved), "--tracking-uri", uri, "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["mlflow_run_id"]
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.data.tags["kind"] == "fidelity" and run.data.tags["framework"] == "pytorch"
    assert run.data.params["kind"] == "H100" and run.data.params["optimizer"] == "adam"
    assert run.data.metrics["measured.step_median_abs_error"] == pytest.approx(0.1)
    paths = {a.path for a in client.list_artifacts(run_id)}
    assert {"fidelity_table.json", "fidelity.json", "figures"} <= paths


@pytest.mark.parametrize("argv, says", [
    (["--front-points", "2"], "--front-points: hf:"),  # a testbed's option, not one device's
    (["--rounds", "3"], "--rounds: hf:"),
    (["--testbed", "2", "--batch", "4,8"], "--testbed: one --batch size"),
    (["--testbed", "2", "--device", "cuda"], "a testbed of 2 processes needs 2 GPUs, one each"),
    (["--device", "cuda"], "--device cuda: no CUDA device is visible"),
])
def test_options_a_pytorch_model_cannot_take_are_one_line(tmp_path, capsys, argv, says):
    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    code = main(["fidelity", tiny_config(tmp_path), "--batch", "4", "--no-mlflow", *argv])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err


def test_without_mlflow_the_report_must_be_kept_by_hand(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    code = main(["fidelity", tiny_config(tmp_path), "--batch", "4"])
    assert code == 2 and "pass --no-mlflow (with -o STEM" in capsys.readouterr().err


def test_a_keras_model_takes_one_batch(capsys):
    code = main(["fidelity", "mlp", "--batch", "4,8"])
    assert code == 2 and "--batch with one size" in capsys.readouterr().err
