"""Measuring a PyTorch step for real (`moplace.torch.measure`, `device`, `realstep`,
`onedevice`): the parts a GPU needs, checked on a CPU. The GPU runs themselves are in
tests/test_torch_gpu.py (marker ``gpu``)."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from moplace.cli import main  # noqa: E402
from moplace.costs.devicespecs import kind_of_gpu  # noqa: E402
from moplace.io import load_graph  # noqa: E402

TINY = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
        "vocab_size": 500}
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")


def tiny_config(folder):
    path = folder / "tiny" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(TINY))
    return path


@pytest.mark.parametrize("name, memory, kind", [
    ("NVIDIA H100 80GB HBM3", 85e9, "H100"), ("NVIDIA H100 PCIe", 85e9, "H100-PCIe"),
    ("NVIDIA H100 NVL", 100e9, "H100 NVL"),  # neither the SXM's figures nor the PCIe's
    ("NVIDIA A100-SXM4-40GB", 42e9, "A100"), ("NVIDIA A100-SXM4-80GB", 85e9, "A100-80GB"),
    ("NVIDIA A100 80GB PCIe", 85e9, "A100-80GB"), ("NVIDIA A100-PCIE-40GB", None, "A100"),
    ("NVIDIA A100-SXM4", 85e9, "A100-80GB"),  # no size in the name: the memory tells
    ("NVIDIA H200", 150e9, "H200"), ("NVIDIA H200 NVL", 150e9, "H200"),
    ("NVIDIA B200", 190e9, "B200"), ("NVIDIA GB200", 190e9, "GB200"),
    ("Tesla V100-SXM2-16GB", None, "V100"), ("Tesla V100-PCIE-32GB", None, "V100-PCIe"),
    ("NVIDIA GeForce RTX 4090", 25e9, "GeForce RTX 4090")])
def test_a_gpu_name_is_a_device_kind(name, memory, kind):
    assert kind_of_gpu(name, memory) == kind


def test_an_unknown_gpu_kind_is_a_cluster_of_its_own_with_its_memory(tmp_path):
    from moplace.core.presets import load_cluster
    from moplace.torch.device import DeviceInfo, cluster_toml

    for kind in ("GeForce RTX 4090", "H100"):
        info = DeviceInfo("cuda:0", kind, f"NVIDIA {kind}", 24 * 2**30)
        path = tmp_path / f"{kind}.toml"
        path.write_text(cluster_toml("m", info))
        cluster = load_cluster(str(path))
        assert cluster.kinds == (kind,) and cluster.devices[0].memory_bytes == 24 * 2**30


@pytest.fixture(scope="module")
def traced_tiny(tmp_path_factory):
    from moplace.torch.hf import load_hf_setup
    from moplace.torch.trace import trace_step

    config = tiny_config(tmp_path_factory.mktemp("tiny"))
    setup = load_hf_setup(str(config), 2, 16, "fp32")
    return setup, trace_step(setup)


def test_factory_ops_traced_on_the_cpu_are_pointed_at_the_device(traced_tiny):
    """The traced graph makes a causal mask and constants with device=cpu: run on another
    device as it is, it mixes devices; rewritten, every op runs there (the meta device stands
    in for a GPU)."""
    from moplace.torch.device import on_device, rewrite_devices

    _, traced = traced_tiny
    args = [torch.empty(n.meta["val"].shape, dtype=n.meta["val"].dtype, device="meta")
            for n in traced.graph.nodes if n.op == "placeholder"]
    with pytest.raises(RuntimeError, match="device"):
        traced.module(*args)
    moved = on_device(traced.module, "meta")
    assert [n.name for n in moved.graph.nodes] == [n.name for n in traced.graph.nodes]
    assert rewrite_devices(moved.graph, "meta") == 0  # nothing left on the CPU
    assert rewrite_devices(traced.module.graph.__class__(), "meta") == 0
    out = moved(*args)
    assert all(t.device.type == "meta" for t in out if isinstance(t, torch.Tensor))
    assert any(isinstance(v, torch.device) and v.type == "cpu"  # the traced graph is untouched
               for n in traced.graph.nodes for v in n.kwargs.values())


def test_a_node_time_counts_the_ranges_cpu_side_event_only():
    """The profiler may record a range twice (its CPU-side event, whose device time sums the
    kernels it launched, and a GPU-side copy): only the first counts, averaged over runs."""
    from torch.autograd import DeviceType

    from moplace.torch.measure import PREFIX, _node_seconds

    def event(name, device_type, device_us, cpu_us):
        return types.SimpleNamespace(name=name, device_type=device_type,
                                     device_time_total=device_us, cpu_time_total=cpu_us)

    events = [event(PREFIX + "mm", DeviceType.CPU, 100.0, 30.0),
              event(PREFIX + "mm", DeviceType.CUDA, 100.0, 0.0),
              event(PREFIX + "mm", DeviceType.CPU, 300.0, 50.0),
              event("aten::mm", DeviceType.CPU, 300.0, 20.0)]
    assert _node_seconds(events, True) == {"mm": pytest.approx(200e-6)}
    assert _node_seconds(events, False) == {"mm": pytest.approx(40e-6)}


def test_out_of_memory_says_what_it_held_and_asked_for():
    from moplace.torch.device import DeviceInfo, oom_message, requested_bytes

    torch_says = ("CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity "
                  "of 79.19 GiB of which 1.2 GiB is free.")
    assert requested_bytes(torch_says) == int(3.5 * 2**30)
    assert requested_bytes("Tried to allocate 20.00 MiB") == 20 * 2**20
    assert requested_bytes("something else") is None
    info = DeviceInfo("cuda:0", "H100", "NVIDIA H100 80GB HBM3", 80 * 2**30)
    line = oom_message("hf:llama-3-8b at batch 8", info, "the real training step", 78 * 2**30,
                       requested_bytes(torch_says), simulated=120 * 2**30)
    assert "\n" not in line
    assert ("hf:llama-3-8b at batch 8 does not fit the NVIDIA H100 80GB HBM3 (H100, 80.00 GiB): "
            "the real training step held 78.00 GiB and asked for 3.50 GiB more: it needs at "
            "least 81.50 GiB; the simulator puts its step's peak at 120.00 GiB") in line


@no_cuda
def test_device_cuda_without_one_is_one_line_before_any_work(tmp_path, capsys):
    out = tmp_path / "g.json"
    code = main(["profile", f"hf:{tiny_config(tmp_path)}", "--batch", "2", "--measure",
                 "--device", "cuda", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "--device cuda: no CUDA device is visible" in err
    assert "Traceback" not in err and not out.exists()


def test_device_without_measure_is_refused(tmp_path, capsys):
    code = main(["profile", f"hf:{tiny_config(tmp_path)}", "--batch", "2", "--device", "cpu",
                 "-o", str(tmp_path / "g.json")])
    assert code == 2 and "--device: the device --measure runs" in capsys.readouterr().err


def test_an_hf_model_is_measured_on_the_cpu_end_to_end(tmp_path, capsys):
    """hf: models are built for real (random weights) and measured: the graph's times are
    the cpu kind's, the cluster file is this machine, and the real step stands beside the
    simulated one; the estimate for H100 stays apart and says so."""
    import moplace

    out = tmp_path / "g.json"
    assert main(["profile", f"hf:{tiny_config(tmp_path)}", "--batch", "2", "--seq-len", "16",
                 "--measure", "--device", "cpu", "--steps", "2", "-o", str(out),
                 "--quiet"]) == 0
    text = capsys.readouterr().out
    g = load_graph(str(out))
    measured = g.metadata["measured"]
    assert g.metadata["profiled_on"] == "cpu" and measured["kind"] == "cpu"
    assert measured["steps"] == 2 and measured["torch"] == torch.__version__
    assert "cpu" not in g.metadata["estimated"] and "H100" in g.metadata["estimated"]
    timed = [op for op in g.ops if op.type not in ("Parameter", "Buffer", "Input", "Output")]
    assert sum(op.compute["cpu"] > 0 for op in timed) > 0.9 * len(timed)
    cluster = moplace.load_cluster(str(out.with_suffix(".cluster.toml")))
    assert cluster.kinds == ("cpu",) and cluster.n_devices == 1
    real = float(re.search(r"a real step ([\d.]+) ms", text).group(1))
    assert real > 0 and "peak memory: not measured on a CPU" in text
    assert "H100 " in text and ", not measurements" in text  # the estimate, said apart


@pytest.mark.parametrize("case, dtype", [("gpt2-b8-s1024-bf16", "bf16"),
                                         ("gpt2-b4-s1024-fp32", "fp32")])
def test_the_shared_h200_steps_are_simulated_within_5_percent_as_torch_keeps_adamw(
        tmp_path, case, dtype):
    """GPT-2 small measured by hand on an H200 (../shared/gpu-profiles, copied to tests/data:
    its kernel times under kind ``cpu``, the slot of that day): on them the simulator's
    one-device step is within 5% of the real one (CUDA events) and its peak within 5% of
    ``max_memory_allocated`` with AdamW's state as torch keeps it; for bf16 weights moplace's
    default (FP32 masters and moments) would be about 1 GiB over, which the lines say."""
    import gzip

    from moplace.core.presets import parse_cluster
    from moplace.torch.measure import Measured
    from moplace.torch.onedevice import as_torch_keeps_it, measured_lines, one_device

    data = Path(__file__).resolve().parent / "data" / "gpu-profiles"
    path = tmp_path / f"{case}.graph.json"
    path.write_bytes(gzip.decompress((data / f"{case}.graph.json.gz").read_bytes()))
    real = json.loads((data / f"{case}.step.json").read_text())["real"]
    graph = load_graph(str(path))
    cluster = parse_cluster('name = "h200"\n[[servers]]\ncount = 1\nkind = "cpu"\n'
                            'memory = "141GiB"\n')
    kept, optimizer = as_torch_keeps_it(graph)
    assert optimizer == "adam"
    step, peak = one_device(kept, cluster)
    assert abs(step / real["step_s"] - 1) < 0.05
    assert abs(peak / real["peak_bytes"] - 1) < 0.05
    mixed = one_device(graph, cluster)[1]
    assert mixed - peak == pytest.approx(124_439_808 * 8 if dtype == "bf16" else 0, rel=0.01)
    measured = Measured({}, real["optimizer_s"], real["step_s"], 3, 1, "H200", "NVIDIA H200",
                        141 * 2**30, real["peak_bytes"])
    text = "\n".join(measured_lines(graph, measured, cluster, "c.toml"))
    assert "measured on the NVIDIA H200 (kind H200" in text
    assert re.search(r"peak memory: real 15\.12 GiB .*simulated 1[45]\.\d\d GiB \([-+]0\.\d%\) "
                     r"with the optimizer state as torch keeps it \(adam", text) or dtype != "bf16"
    assert ("the graph written keeps adam-mixed's state" in text) == (dtype == "bf16")
