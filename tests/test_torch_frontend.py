"""The PyTorch front end (issue 35): a model file's training step traced at aten level under
fake tensors into an op graph (roles, parameters and their updates, batch dimensions,
optimizer state, roofline costs said to be estimates), through `moplace profile`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch "
                                            "(pip install 'moplace[torch]')")

from moplace.cli import main  # noqa: E402
from moplace.io import load_graph  # noqa: E402

GPT = Path(__file__).resolve().parents[1] / "experiments" / "models" / "gpt.py"
MLP = """import torch

def build(batch_size):
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    x, y = torch.randn(batch_size, 16), torch.randint(0, 10, (batch_size,))
    return model, torch.nn.CrossEntropyLoss(), torch.optim.{opt}(model.parameters(){args}), (x, y)
"""


def traced(path, batch=8, kinds=("H100",)):
    from moplace.torch.frontend import profile_torch_model

    return profile_torch_model(path, batch, list(kinds)).graph


def mlp_file(tmp_path, opt="Adam", args=""):
    path = tmp_path / "mlp.py"
    path.write_text(MLP.format(opt=opt, args=args))
    return path


def test_an_mlp_step_is_forward_backward_and_one_update_per_parameter(tmp_path):
    g = traced(mlp_file(tmp_path), batch=8)
    by = {op.name: op for op in g.ops}
    params = {n: op for n, op in by.items() if op.type == "Parameter"}
    assert sorted(params) == ["param/0.bias", "param/0.weight", "param/2.bias", "param/2.weight"]
    assert sum(op.param_bytes for op in params.values()) == 4 * (16 * 64 + 64 + 64 * 10 + 10)
    for name, op in params.items():  # each weight with its update, which keeps Adam's state
        update = by["update/" + name.removeprefix("param/")]
        assert update.role == "update" and update.colocation == op.colocation
        assert update.param_bytes == 2 * op.param_bytes
    roles = {op.name: op.role for op in g.ops}
    assert roles["addmm"] == roles["relu"] == roles["nll_loss_forward"] == "forward"
    assert roles["nll_loss_backward"] == roles["threshold_backward"] == "backward"
    # the gradients: one producer per parameter, of the parameter's size
    assert sum(op.grad_bytes for op in g.ops) == sum(op.param_bytes for op in params.values())
    assert by["input/arg4_1"].output_bytes == 8 * 16 * 4
    assert "batch" in by["relu"].splittable
    # linear, relu, linear: a Megatron MLP block, which may also split on tensor
    assert by["addmm"].splittable == ("batch", "channel", "tensor")
    assert by["addmm_1"].partial_sums and not by["addmm"].partial_sums
    # the scalar loss: each part its samples' loss, as each data-parallel rank computes its own
    assert by["nll_loss_forward"].splittable == ("batch",)
    assert g.metadata["loss"][0] == "nll_loss_forward"
    assert set(g.metadata["estimated"]) == {"H100"} and g.metadata["optimizer"] == "adam"
    assert all(op.compute["H100"] >= 0 for op in g.ops)
    assert g.metadata["folded_views"] > 0 and not any(op.type == "t.default" for op in g.ops)


@pytest.mark.parametrize("opt, args, name, factor", [
    ("SGD", "", "sgd", 0), ("SGD", ", momentum=0.9", "momentum", 1), ("AdamW", "", "adam", 2)])
def test_the_optimizer_sets_the_state_each_update_keeps(tmp_path, opt, args, name, factor):
    g = traced(mlp_file(tmp_path, opt, args))
    weights = sum(op.param_bytes for op in g.ops if op.type == "Parameter")
    state = sum(op.param_bytes for op in g.ops if op.role == "update")
    assert g.metadata["optimizer"] == name and state == factor * weights


@pytest.mark.parametrize("dtype, per_param", [("fp32", 4 + 4 + 8), ("bf16", 2 + 2 + 12)])
def test_weights_gradients_and_adam_state_are_16_bytes_per_parameter(monkeypatch, dtype,
                                                                      per_param):
    """The ZeRO paper's 16 bytes: FP32 Adam (4 + 4 + 8), or 16-bit weights and gradients with
    FP32 master weights and moments (2 + 2 + 12)."""
    monkeypatch.setenv("GPT_DIMS", f"64,4,2,32,500,{dtype}")
    g = traced(GPT, batch=2)
    n = g.metadata["parameters"]
    weights = sum(op.param_bytes for op in g.ops if op.type == "Parameter")
    grads = sum(op.grad_bytes for op in g.ops)
    state = sum(op.param_bytes for op in g.ops if op.role == "update")
    assert per_param == 16 and (weights + grads + state) / n == pytest.approx(16, rel=0.01)
    assert g.metadata["optimizer"] == ("adam" if dtype == "fp32" else "adam-mixed")


def test_every_op_the_batch_flows_through_is_split_on_batch_and_data_parallelism_pays(
        monkeypatch):
    import moplace

    monkeypatch.setenv("GPT_DIMS", "1024,16,2,512,1000")  # compute to share out
    g = traced(GPT, batch=16)
    # the attention's q, k, v (one packed tensor: the batch is not its first dimension)
    sb = [op for op in g.ops if op.type == "select_backward.default"]
    assert sb and all("batch" in op.splittable for op in sb)
    unsplit = {op.type for op in g.ops if not op.splittable and op.role != "update"
               and op.type != "Parameter"}
    # (and the outputs of those that live apart: the loss's total weight)
    assert unsplit <= {"arange.default", "embedding.default", "nll_loss_forward.default",
                       "ones_like.default", "sum.dim_IntList", "Input", "Output"}, unsplit
    assert all(op.splittable == g.ops[g.index[op.name.rsplit(".", 1)[0]]].splittable
               for op in g.ops if op.type == "Output")
    cluster = moplace.load_cluster("8xH100-80GB-NVLink")
    single, dp = (moplace.evaluate(g, cluster, moplace.baseline(b, g, 8)).objectives()
                  for b in ("single", "data-parallel"))
    assert dp["runtime"] < single["runtime"] / 2 and dp["peak_memory"] < single["peak_memory"]


def test_a_billions_of_parameters_model_traces_without_its_memory(tmp_path):
    """2 layers of hidden 8192 and a 128k vocabulary: 3.7 G parameters, 15 GB in FP32, traced
    in a fresh process that never holds them."""
    code = ("import resource, sys; from moplace.torch.frontend import profile_torch_model; "
            f"t = profile_torch_model({str(GPT)!r}, 2, ['H100']); "
            "print(t.parameters, len(t.graph.ops), "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    env = {**os.environ, "GPT_DIMS": "8192,64,2,4096,128000"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    params, ops, rss_kib = map(int, out.stdout.split())
    assert params > 3.5e9 and ops > 50
    assert rss_kib * 1024 < 3e9  # far below the 15 GB its weights would take


def test_profile_writes_a_pytorch_graph_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GPT_DIMS", "64,4,2,32,500")  # a tiny one
    out = tmp_path / "gpt.json"
    assert main(["profile", str(GPT), "--batch", "4", "--estimate", "H100,A100", "-o",
                 str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "a PyTorch model" in text and "roofline estimates, not measurements" in text
    g = load_graph(str(out))
    assert g.metadata["format"] == "pytorch" and set(g.metadata["estimated"]) == {"H100", "A100"}
    assert g.metadata["source"] == {"model": str(GPT), "batch_size": 4, "framework": "pytorch"}
    assert main(["evaluate", str(out), "--cluster", "8xH100-80GB-NVLink", "--baseline",
                 "data-parallel", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["cost_notes"] and "estimates" in result["cost_notes"][0]



def test_profile_coarsens_on_request_and_a_keras_model_is_told_it_cannot(tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.setenv("GPT_DIMS", "64,4,2,32,500")
    out = tmp_path / "gpt.json"
    assert main(["profile", str(GPT), "--batch", "4", "--coarsen", "yes", "-o", str(out),
                 "--quiet"]) == 0
    text = capsys.readouterr().out
    fine = int(text.split("coarsened: ")[1].split(" ops")[0])
    g = load_graph(str(out))
    assert len(g.ops) < fine == g.metadata["coarsened"]["ops"]
    assert main(["profile", str(GPT), "--batch", "4", "-o", str(tmp_path / "auto.json"),
                 "--quiet"]) == 0  # auto: 20,000 ops or fewer stay as traced
    assert "coarsened" not in capsys.readouterr().out
    keras = tmp_path / "keras_model.py"
    keras.write_text("def build(batch_size):\n    pass\n")
    code = main(["profile", str(keras), "--batch", "2", "--coarsen", "yes", "-o",
                 str(tmp_path / "k.json")])
    err = capsys.readouterr().err
    assert code == 2 and "coarsening is for PyTorch and hf: models" in err

BAD = {
    "no build": ("import torch\nx = 1\n", "defines no build(batch_size) function"),
    "build fails": ("import torch\n\ndef build(b):\n    raise ValueError('nope')\n",
                    "line 4: ValueError: nope"),
    "wrong return": ("import torch\n\ndef build(b):\n    return 1, 2\n",
                     "must return (model, loss, optimizer, (x, y))"),
    "not a module": ("import torch\n\ndef build(b):\n    return 1, 2, 3, (4, 5)\n",
                     "model must be a torch.nn.Module"),
    "lbfgs": (MLP.format(opt="LBFGS", args=""), "optimizer LBFGS is not one moplace models"),
    "syntax": ("import torch\ndef build(b:\n", ":2: SyntaxError: '(' was never closed"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_model_file_is_one_line_naming_it(tmp_path, capsys, case):
    source, says = BAD[case]
    path = tmp_path / "bad.py"
    path.write_text(source)
    code = main(["profile", str(path), "--batch", "2", "-o", str(tmp_path / "g.json")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and str(path) in err and says in err, err


@pytest.mark.parametrize("argv, says", [
    (["--device-count", "2"], "a PyTorch model is measured on --testbed K processes"),
    (["--testbed", "2", "--device", "cuda"], "the PyTorch testbed's processes share"),
    (["--estimate", "H1000"], "no device spec for kind 'H1000'"),
])
def test_options_that_need_tensorflow_or_a_known_device_are_refused(tmp_path, capsys, argv,
                                                                     says):
    code = main(["profile", str(mlp_file(tmp_path)), "--batch", "2", "-o",
                 str(tmp_path / "g.json"), *argv])
    assert code == 2 and says in capsys.readouterr().err


def test_measure_times_every_op_on_this_cpu_and_holds_the_simulator_against_a_real_step(
        tmp_path, capsys, monkeypatch):
    import re

    import moplace

    monkeypatch.setenv("GPT_DIMS", "256,4,2,128,1000")
    out = tmp_path / "gpt.json"
    assert main(["profile", str(GPT), "--batch", "8", "--measure", "--device", "cpu",
                 "--steps", "3", "-o", str(out), "--quiet"]) == 0
    text, err = capsys.readouterr()
    assert "USDT" not in err and "profiler_start" not in err  # the profiler's native lines
    g = load_graph(str(out))
    assert g.metadata["profiled_on"] == "cpu" and g.metadata["measured"]["steps"] == 3
    assert "cpu" not in g.metadata["estimated"]
    timed = [op for op in g.ops if op.type not in ("Parameter", "Buffer", "Input")]
    assert all("cpu" in op.compute for op in g.ops)
    assert sum(op.compute["cpu"] > 0 for op in timed) > 0.9 * len(timed)
    cluster = moplace.load_cluster(str(out.with_suffix(".cluster.toml")))
    assert cluster.kinds == ("cpu",) and cluster.n_devices == 1
    real, simulated = (float(v) for v in re.search(
        r"a real step ([\d.]+) ms; the simulator's one-device step on the measured op times "
        r"([\d.]+) ms", text).groups())
    assert real > 0 and simulated > 0  # how close they are is a figure of
    # experiments/torch_cpu_fidelity.py: tests check behaviour, not timings
    assert main(["evaluate", str(out), "--cluster", str(out.with_suffix(".cluster.toml")),
                 "--baseline", "single", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert not [n for n in result["cost_notes"] if "estimate" in n]  # measured, all of it
    assert "attention: SDPA as the CPU's flash attention kernels" in result["cost_notes"]
    assert result["runtime_s"] == pytest.approx(simulated / 1e3, rel=1e-3)


def test_a_trace_is_kept_and_read_back_per_model_and_batch(tmp_path, monkeypatch, capsys):
    from moplace.torch.cache import TraceCache
    from moplace.torch.frontend import profile_torch_model

    monkeypatch.setenv("MOPLACE_CACHE", str(tmp_path / "cache"))
    path = mlp_file(tmp_path)
    first = profile_torch_model(path, 8, ["H100"])
    assert first.cached is None
    again = profile_torch_model(path, 8, ["H100"])
    assert again.cached is not None and again.cached.parent == tmp_path / "cache" / "traces"
    assert again.graph.ops == first.graph.ops and again.graph.edges == first.graph.edges
    assert again.parameters == first.parameters
    assert profile_torch_model(path, 4, ["H100"]).cached is None  # another batch
    assert profile_torch_model(path, 8, ["H100", "A100"]).cached is None  # other kinds
    assert profile_torch_model(path, 8, ["H100"], cache=False).cached is None
    again.cached.write_text("{ damaged")  # traced again, and kept again
    assert profile_torch_model(path, 8, ["H100"]).cached is None
    assert TraceCache().load(again.cached.stem) is not None
    path.write_text(path.read_text().replace("64", "32"))  # another model: traced again
    assert profile_torch_model(path, 8, ["H100"]).cached is None
    # a model file whose sizes come from elsewhere (the environment) is told apart by what
    # it builds, not by its bytes
    monkeypatch.setenv("GPT_DIMS", "64,4,1,32,500")
    assert profile_torch_model(GPT, 2, ["H100"]).cached is None
    assert profile_torch_model(GPT, 2, ["H100"]).cached is not None
    monkeypatch.setenv("GPT_DIMS", "64,4,2,32,500")
    assert profile_torch_model(GPT, 2, ["H100"]).cached is None
    out = tmp_path / "g.json"
    assert main(["profile", str(path), "--batch", "8", "-o", str(out), "--quiet"]) == 0
    assert "read from the trace cache" in capsys.readouterr().out
    assert main(["profile", str(path), "--batch", "8", "-o", str(out), "--quiet", "--force",
                 "--no-cache"]) == 0
    assert "traced in" in capsys.readouterr().out
