"""Model FLOPs and throughput beside every point of a front (issue 50, part 4): front.json's
``throughput`` (tokens/s, model TFLOP/s and MFU per GPU of the cluster, counted as
Megatron-LM counts them), the table ``search`` and ``show`` print, and the front table logged
to MLflow."""

from __future__ import annotations

import json

import pytest

from moplace.cli import main
from moplace.core.flops import TransformerShape, megatron_flops, step_throughput
from moplace.io import load_graph
from moplace.review.mlstore import front_table


def test_step_throughput_counts_the_whole_step(tiny_llama_file):
    g = load_graph(str(tiny_llama_file))
    shape = TransformerShape.of(g)
    assert shape is not None
    flops, _ = megatron_flops(shape, 1, 128)
    rate = step_throughput(g, 0.5, 4, 989e12)
    assert rate["tokens_per_s_per_gpu"] == pytest.approx(128 / 0.5 / 4)
    assert rate["tflops_per_gpu"] == pytest.approx(flops / 0.5 / 4 / 1e12)
    assert rate["mfu"] == pytest.approx(rate["tflops_per_gpu"] * 1e12 / 989e12)
    assert step_throughput(g, 0.5, 4, 0.0)["mfu"] is None
    assert step_throughput(load_graph("pipedream:vgg16"), 0.5, 4, 989e12) is None


def test_a_front_of_a_transformer_says_its_throughput(tiny_llama_file, tmp_path, capsys):
    out = tmp_path / "f"
    assert main(["search", str(tiny_llama_file), "--cluster", "8xH100-80GB-NVLink",
                 "--searcher", "random", "--budget", "12", "--out", str(out), "--quiet",
                 "--no-mlflow"]) == 0
    printed = capsys.readouterr().out
    data = json.loads((out / "front.json").read_text())
    g = load_graph(str(tiny_llama_file))
    for p in data["points"]:
        rate = p["throughput"]
        want = step_throughput(g, p["runtime_s"], 8, 989.5e12)
        assert rate["tflops_per_gpu"] == pytest.approx(want["tflops_per_gpu"])
        assert 0 < rate["mfu"] < 1
    assert "TFLOP/s/GPU (MFU)" in printed and "num_floating_point_operations" in printed
    table = front_table(data)
    assert table["model TFLOP/s per GPU"] == [p["throughput"]["tflops_per_gpu"]
                                             for p in data["points"]]
    assert main(["show", str(out / "front.json")]) == 0
    assert "TFLOP/s/GPU (MFU)" in capsys.readouterr().out
