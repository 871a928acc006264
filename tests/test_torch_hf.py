"""Hugging Face models by configuration (issue 35): `moplace profile hf:NAME` builds the model
with transformers from a bundled or given configuration (no weights, no network), traced
without memory as a PyTorch model file is."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch", reason="the PyTorch front end needs torch")
pytest.importorskip("transformers", reason="hf: models need transformers ('moplace[torch]')")

from moplace.cli import main  # noqa: E402
from moplace.io import load_graph  # noqa: E402

TINY = {"gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                 "n_positions": 64, "vocab_size": 500},
        "llama": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "vocab_size": 500, "max_position_embeddings": 64}}


def config_file(tmp_path, kind, **extra):
    path = tmp_path / kind / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**TINY[kind], **extra}))
    return path


@pytest.mark.parametrize("kind, dtype, optimizer, per_param", [
    ("gpt2", "fp32", "adam", 4 + 4 + 8), ("llama", "bf16", "adam-mixed", 2 + 2 + 12)])
def test_a_config_json_is_built_traced_and_converted(tmp_path, capsys, kind, dtype, optimizer,
                                                     per_param):
    """GPT-2 at --dtype fp32; Llama at the bf16 its config.json names (issue 48: the dtype
    and the optimizer state assumed are said, in --json too)."""
    out = tmp_path / "g.json"
    config = config_file(tmp_path, kind, **({"torch_dtype": "bfloat16"} if kind == "llama"
                                            else {}))
    assert main(["profile", f"hf:{config}", "--batch", "2", "--seq-len", "16", "-o", str(out),
                 "--quiet", "--json", *(["--dtype", dtype] if kind == "gpt2" else [])]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lines"][0].startswith(f"{kind}: a Hugging Face model (transformers, sdpa "
                                       f"attention)")
    said = ("dtype: fp32 (--dtype)" if kind == "gpt2"
            else "dtype: bf16, from the configuration's torch_dtype (bfloat16)")
    assert data["dtype"] == dtype and data["notes"][0] == said and said in data["lines"]
    state = {"adam": "optimizer state: adam: two moments (Adam) in the weights' dtype",
             "adam-mixed": "optimizer state: adam-mixed: two moments (Adam) and a master copy "
                           "of the weights, in FP32 beside 16-bit weights"}[optimizer]
    assert data["optimizer"] == optimizer and any(n.startswith(state) for n in data["notes"])
    g = load_graph(str(out))
    assert g.name == kind and g.metadata["optimizer"] == optimizer
    assert g.metadata["source"]["seq_len"] == 16 and g.metadata["source"]["dtype"] == dtype
    n = g.metadata["parameters"]
    # every weight once (GPT-2's head shares the embedding's), each with its update (the
    # layer norms' weight and bias come out of one backward op: both are updated)
    weights = [op for op in g.ops if op.type == "Parameter"]
    assert sum(op.param_bytes for op in weights) == n * (4 if dtype == "fp32" else 2)
    assert sum(op.role == "update" for op in g.ops) == len(weights)
    held = sum(op.param_bytes for op in g.ops if op.type == "Parameter") \
        + sum(op.grad_bytes for op in g.ops) \
        + sum(op.param_bytes for op in g.ops if op.role == "update")
    assert held / n == pytest.approx(per_param, rel=0.01)
    inputs = [op for op in g.ops if op.type == "Input"]
    assert sorted(op.output_bytes for op in inputs) == [2 * 16 * 8] * 2  # int64 tokens
    assert sum("batch" in op.splittable for op in g.ops) > len(g.ops) / 3


def test_the_bundled_configurations_are_the_published_sizes():
    import torch
    from transformers import AutoModelForCausalLM

    from moplace.torch.hf import CONFIGS, hf_config

    published = {"gpt2": 124_439_808, "llama-3-8b": 8_030_261_248}
    for name, n in published.items():
        config, _ = hf_config(name)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        assert sum(p.numel() for p in model.parameters()) == n, name
    assert {"gpt2", "gpt3-1.3b", "llama-3-8b", "llama-3-70b"} <= set(CONFIGS)


@pytest.mark.parametrize("argv, says", [
    (["hf:gtp2"], "did you mean 'gpt2'?"),
    (["hf:gpt2", "--seq-len", "5000"], "hf:gpt2 takes 1 to 1024 tokens"),
    (["hf:{bad}"], "not a Hugging Face config.json (no model_type)"),
    (["hf:{missing}"], "cannot be read"),
    (["hf:gpt2", "--device", "cpu"], "--device: the device --measure runs the model on"),
])
def test_a_bad_hf_model_is_one_line(tmp_path, capsys, argv, says):
    bad = tmp_path / "bad.json"
    bad.write_text('{"n_embd": 8}')
    argv = [a.format(bad=bad, missing=tmp_path / "none.json") for a in argv]
    code = main(["profile", *argv, "--batch", "2", "-o", str(tmp_path / "g.json")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err, err
