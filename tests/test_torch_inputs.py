"""A PyTorch user's inputs (issue 48): model files wrapping transformers models trace as hf:
ones do; a config.json leaving a size field to transformers' default is refused naming it;
torch logs nothing on a shape error; a missing model file or a syntax error is one line
whichever front end would read it; the dtype and optimizer state profile assumes are said;
and the help says which options are whose."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch", reason="the PyTorch front end needs torch")

from moplace.cli import _parser, main  # noqa: E402

WRAPPED = """\
import torch
import transformers


class Step(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(input_ids=x).logits


def build(batch_size):
    config = transformers.{config}(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   vocab_size=128, max_position_embeddings=32, use_cache=False)
    model = Step(transformers.{model}(config))
    x = torch.randint(0, 128, (batch_size, 8))
    y = torch.randint(0, 128, (batch_size * 8,))

    def loss(out, y):
        return torch.nn.functional.cross_entropy(out.flatten(0, 1), y)

    return model, loss, torch.optim.AdamW(model.parameters()), (x, y)
"""


@pytest.mark.parametrize("config, model", [
    ("LlamaConfig", "LlamaForCausalLM"),
    pytest.param("Qwen2Config", "Qwen2ForCausalLM", marks=pytest.mark.slow)])
def test_a_model_file_wrapping_a_transformers_model_traces(tmp_path, config, model):
    """Without a key-value cache transformers reads the position ids' values to find packed
    sequences, which fake tensors do not have: every trace answers "one sequence per row", as
    hf: always did, and the function is given back after the trace."""
    pytest.importorskip("transformers")
    from transformers import masking_utils

    from moplace.torch.modelfile import load_setup
    from moplace.torch.trace import trace_step

    path = tmp_path / "wrapped.py"
    path.write_text(WRAPPED.format(config=config, model=model))
    original = masking_utils.find_packed_sequence_indices
    setup = load_setup(path, 2)
    traced = trace_step(setup)
    assert masking_utils.find_packed_sequence_indices is original
    # every weight (Llama: embedding, q k v o, gate up down, two norms, the final norm, the
    # head; Qwen2's q, k and v have biases too), each with its gradient
    weights = {name for name, _ in setup.model.named_parameters()}
    assert len(weights) == (12 if config == "LlamaConfig" else 15)
    assert traced.optimizer == "adam" and traced.trainable == weights
    assert set(traced.gradients.values()) == traced.trainable
    assert any(str(n.target) == "aten.mm.default" for n in traced.graph.nodes)


SHAPE_ERROR = """\
import torch

def build(batch_size):
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    x, y = torch.randn(batch_size, 16), torch.randint(0, 10, (batch_size,))
    return model, torch.nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()), (x, y)
"""


def test_a_shape_error_is_our_one_line_and_no_log_of_torch(tmp_path, capfd):
    """PyTorch logs a traceback of its own (through logging, on file descriptor 2) before it
    raises on a shape error under fake tensors; only moplace's line is printed."""
    import logging

    path = tmp_path / "shape.py"
    path.write_text(SHAPE_ERROR)
    code = main(["profile", str(path), "--batch", "2", "--no-cache", "-o",
                 str(tmp_path / "g.json"), "--quiet"])
    err = capfd.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "a and b must have same reduction dim" in err and str(path) in err
    fake = logging.getLogger("torch._subclasses.fake_tensor")  # given back after the trace
    assert not fake.disabled and logging.getLogger("torch").level < logging.CRITICAL


LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 500, "max_position_embeddings": 64}
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
        "vocab_size": 500}
QWEN2 = {**LLAMA, "model_type": "qwen2"}


@pytest.mark.parametrize("config, drop, says", [
    (LLAMA, "hidden_size", "`hidden_size` is not set (transformers would use its default 4096)"),
    (LLAMA, "num_attention_heads", "`num_attention_heads` is not set (transformers would use "
                                   "its default 32)"),
    (LLAMA, "num_hidden_layers", "`num_hidden_layers` is not set"),
    (LLAMA, "vocab_size", "`vocab_size` is not set (transformers would use its default 32000)"),
    (QWEN2, "intermediate_size", "`intermediate_size` is not set (transformers would use its "
                                 "default 22016)"),
    # GPT-2's names, through its attribute_map: n_head is num_attention_heads
    (GPT2, "n_head", "`n_head` (attention heads) is not set (transformers would use its "
                     "default 12)"),
    (GPT2, "n_embd", "`n_embd` (hidden size) is not set"),
    ({**LLAMA, "intermediate_size": -3}, None, "`intermediate_size` must be a whole number "
                                               "from 1 to 4,194,304, got -3"),
    ({**LLAMA, "num_hidden_layers": 2.5}, None, "`num_hidden_layers` must be a whole number"),
    ({**LLAMA, "hidden_size": True}, None, "`hidden_size` must be a whole number"),
    ({**GPT2, "n_layer": 10**6}, None, "`n_layer` (layers) must be a whole number from 1 to "
                                       "1,024"),
    ({**LLAMA, "torch_dtype": "float64"}, None, "`torch_dtype` 'float64' is not one moplace "
                                                "traces"),
    ({**LLAMA, "attn_implementation": ["sdpa"]}, None, "attn_implementation ['sdpa'] is not a "
                                                       "name"),
    ({**LLAMA, "max_position_embeddings": 10**9}, None, "max_position_embeddings 1000000000 "
                                                        "is not a context length"),
    ({**LLAMA, "max_position_embeddings": "long"}, None, "transformers cannot make a 'llama' "
                                                         "configuration"),
])
def test_a_config_json_leaving_a_size_to_transformers_is_refused_naming_it(tmp_path, capsys,
                                                                             config, drop, says):
    pytest.importorskip("transformers")
    data = {k: v for k, v in config.items() if k != drop}
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    code = main(["profile", f"hf:{path}", "--batch", "2", "-o", str(tmp_path / "g.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and says in err and str(path) in err, err
    assert not (tmp_path / "g.json").exists()


def test_the_bundled_configurations_and_derived_sizes_pass_the_check():
    """A default of None is derived from other fields (GPT-2's n_inner is 4 x n_embd): not
    required; every bundled configuration gives every size field."""
    pytest.importorskip("transformers")
    from moplace.torch.hf import CONFIGS, check_sizes

    for name, (kind, options, _) in CONFIGS.items():
        check_sizes(name, kind, dict(options))
    check_sizes("gpt2.json", "gpt2", {k: v for k, v in GPT2.items() if k != "model_type"})


@pytest.mark.parametrize("named, option, dtype, words", [
    (None, None, "fp32", "dtype: fp32, the default (the configuration names none; --dtype "
                         "chooses)"),
    ("bfloat16", None, "bf16", "dtype: bf16, from the configuration's torch_dtype (bfloat16)"),
    ("torch.float16", None, "fp16", "from the configuration's torch_dtype (torch.float16)"),
    ("auto", None, "fp32", "the configuration names none"),
    ("bfloat16", "bf16", "bf16", "dtype: bf16 (--dtype)"),
    ("bfloat16", "fp32", "fp32", "dtype: fp32 (--dtype; the configuration's torch_dtype says "
                                 "'bfloat16')"),
])
def test_the_dtype_is_the_configurations_unless_dtype_says_otherwise(tmp_path, named, option,
                                                                     dtype, words):
    from moplace.torch.hf import resolve_dtype

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **({"torch_dtype": named} if named else {})}))
    got, said = resolve_dtype(str(path), option)
    assert got == dtype and words in said
    assert resolve_dtype("gpt2", None)[0] == "fp32"  # the bundled ones name none
    path.write_text(json.dumps({**LLAMA, "dtype": "bfloat16"}))  # transformers 5's key
    assert resolve_dtype(str(path), None) == ("bf16", "dtype: bf16, from the configuration's "
                                                      "dtype (bfloat16)")


KERAS_SYNTAX = "import keras\n\ndef build(batch_size:\n    pass\n"
TORCH_SYNTAX = "import torch\n\ndef build(batch_size:\n    pass\n"


def test_model_files_are_refused_before_either_front_end_loads(tmp_path):
    """A missing file, a syntax error in a Keras or a PyTorch file, a folder and a mistyped
    zoo name: one line naming it from profile and fidelity, with neither TensorFlow nor torch
    imported (so whether they are installed does not matter); `moplace zoo` lists names
    without TensorFlow too."""
    (tmp_path / "k.py").write_text(KERAS_SYNTAX)
    (tmp_path / "t.py").write_text(TORCH_SYNTAX)
    cases = {str(tmp_path / "nosuch.py"): f"{tmp_path / 'nosuch.py'}: no such file",
             str(tmp_path / "k.py"): f"{tmp_path / 'k.py'}:3: SyntaxError: '(' was never closed",
             str(tmp_path / "t.py"): f"{tmp_path / 't.py'}:3: SyntaxError: '(' was never closed",
             str(tmp_path): f"{tmp_path}: a folder, not a model file",
             "mlpp": "unknown model 'mlpp' (did you mean 'mlp'?)"}
    script = textwrap.dedent(f"""
        import contextlib, io, json, sys
        from moplace.cli import main
        out = {{}}
        for model in {list(cases)!r}:
            for argv in (["profile", model, "--batch", "2", "-o", {str(tmp_path / 'g.json')!r}],
                         ["fidelity", model, "--batch", "2", "--no-mlflow"]):
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    code = main(argv)
                out[argv[0] + " " + model] = [code, err.getvalue()]
        with contextlib.redirect_stdout(io.StringIO()) as zoo:
            out["zoo"] = [main(["zoo"]), zoo.getvalue()]
        out["loaded"] = sorted(m for m in ("tensorflow", "torch", "keras") if m in sys.modules)
        print(json.dumps(out))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert out.pop("loaded") == []
    code, listed = out.pop("zoo")
    assert code == 0 and listed.split() == ["resnet50", "inception_v3", "vgg19", "mobilenet_v2",
                                            "nasnet_mobile", "mlp", "cnn", "transformer", "gnmt"]
    for model, says in cases.items():
        for command in ("profile", "fidelity"):
            code, err = out[f"{command} {model}"]
            assert code == 2 and len(err.splitlines()) == 1 and says in err, (command, err)


def test_the_help_says_what_profile_reads_and_whose_each_option_is(capsys):
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert "Keras model's training step" not in top and "hf:NAME" in top
    choices = _parser()._subparsers._group_actions[0].choices

    def help_of(command, option):
        return next(a.help for a in choices[command]._actions
                    if option in a.option_strings or option == a.dest)

    for option in ("--device-count", "--parts"):
        assert help_of("profile", option).startswith("(Keras only)"), option
    assert "PyTorch: K gloo processes" in help_of("profile", "--testbed")  # both front ends
    for option in ("--measure", "--device", "--optimizer", "--calibration", "--no-cache",
                   "--coarsen", "--json"):
        assert help_of("profile", option).startswith("(PyTorch only)"), option
    for option in ("--seq-len", "--dtype", "--attention"):
        assert help_of("profile", option).startswith("(hf:NAME only)"), option
    assert "default: the configuration's torch_dtype, else fp32" in help_of("profile", "--dtype")
    assert "hf:PATH/config.json" in help_of("profile", "model")
    assert "PATH.json" not in help_of("profile", "model")
    for option in ("--testbed", "--front-points", "--budget", "--calibration", "--seed"):
        assert help_of("fidelity", option).startswith("(Keras, or PyTorch with --testbed)"), \
            option
