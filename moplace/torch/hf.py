"""Hugging Face models by configuration: ``moplace profile hf:NAME`` builds a causal language
model with the ``transformers`` package from a configuration, never from weights: one bundled
here (`CONFIGS`, written from the published architecture numbers; gated models' files cannot
be downloaded, and no network is used) or a ``config.json`` given as ``hf:PATH.json``. The
model is built on the meta device, cast to ``--dtype``, trained with AdamW on next-token
cross-entropy over ``--seq-len`` tokens, and traced as a model file is (`moplace.torch.trace`).

Attention (`attention_of`): ``--attention`` if given, else the configuration's
``attn_implementation``, else ``sdpa``, what transformers trains with; SDPA is traced as the
GPU's kernels (`moplace.torch.attention`), eager as matmuls and a softmax.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import FormatError, MoplaceError, did_you_mean
from .modelfile import TorchSetup, _fake, _make_fake

#: name -> (model type, configuration, where the numbers come from)
CONFIGS = {
    "gpt2": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024,
                          vocab_size=50257), "GPT-2 small (Radford et al. 2019; HF gpt2)"),
    "gpt2-medium": ("gpt2", dict(n_embd=1024, n_layer=24, n_head=16, n_positions=1024,
                                 vocab_size=50257), "GPT-2 medium (HF gpt2-medium)"),
    "gpt2-xl": ("gpt2", dict(n_embd=1600, n_layer=48, n_head=25, n_positions=1024,
                             vocab_size=50257), "GPT-2 XL, 1.5 B (HF gpt2-xl)"),
    "gpt3-1.3b": ("gpt2", dict(n_embd=2048, n_layer=24, n_head=16, n_positions=2048,
                               vocab_size=50257),
                  "GPT-3 XL, 1.3 B (Brown et al. 2020, table 2.1: d_model 2048, 24 layers, 16 "
                  "heads, context 2048) in GPT-2's architecture"),
    "llama-3-8b": ("llama", dict(hidden_size=4096, intermediate_size=14336,
                                 num_hidden_layers=32, num_attention_heads=32,
                                 num_key_value_heads=8, vocab_size=128256,
                                 max_position_embeddings=8192, rope_theta=500000.0,
                                 rms_norm_eps=1e-5, tie_word_embeddings=False),
                   "Llama 3 8B (Meta's model card and config.json)"),
    "llama-3-70b": ("llama", dict(hidden_size=8192, intermediate_size=28672,
                                  num_hidden_layers=80, num_attention_heads=64,
                                  num_key_value_heads=8, vocab_size=128256,
                                  max_position_embeddings=8192, rope_theta=500000.0,
                                  rms_norm_eps=1e-5, tie_word_embeddings=False),
                    "Llama 3 70B (Meta's model card and config.json)"),
}
DTYPES = ("fp32", "bf16", "fp16")


def hf_config(spec: str, attention: str | None = None):
    """The ``transformers`` configuration of ``spec`` (a bundled name, or a config.json path)
    with its attention (`attention_of`), and its name."""
    try:
        from transformers import AutoConfig
    except ImportError:
        raise MoplaceError(f"hf:{spec} needs the transformers package: pip install "
                           f"'moplace[torch]'") from None
    if spec.endswith(".json"):
        path = Path(spec)
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise FormatError(path, f"cannot be read ({exc.strerror})") from None
        except ValueError as exc:
            raise FormatError(path, f"not JSON ({exc})") from None
        if not isinstance(data, dict) or "model_type" not in data:
            raise FormatError(path, "not a Hugging Face config.json (no model_type)")
        kind = data.pop("model_type")
        asked = data.pop("attn_implementation", None) or data.pop("_attn_implementation", None)
        name = path.stem if path.stem != "config" else path.parent.name or "model"
        options = data
    else:
        if spec not in CONFIGS:
            raise MoplaceError(f"unknown Hugging Face model hf:{spec}{did_you_mean(spec, CONFIGS)}"
                               f" (bundled: {', '.join(CONFIGS)}; or hf:PATH/config.json)")
        kind, options, _ = CONFIGS[spec]
        name, asked = spec, None
    try:
        config = AutoConfig.for_model(kind, **options)
    except (ValueError, TypeError, KeyError) as exc:
        raise MoplaceError(f"hf:{spec}: transformers cannot make a {kind!r} configuration: "
                           f"{exc}") from None
    config._attn_implementation = attention_of(spec, attention, asked)
    config.use_cache = False  # training keeps no key-value cache
    return config, name


def attention_of(spec: str, option: str | None, configured) -> str:
    """``sdpa`` or ``eager``: ``option`` (``--attention``) if given, else the configuration's
    ``attn_implementation`` (FlashAttention's names are SDPA's flash kernels here), else
    ``sdpa``. A name moplace does not model is one `MoplaceError`."""
    from .attention import CHOICES, HF_NAMES

    if option is not None:
        if option not in CHOICES:
            raise MoplaceError(f"--attention {option}: one of {', '.join(CHOICES)}")
        return option
    if configured is None:
        return "sdpa"
    if configured not in HF_NAMES:
        raise MoplaceError(f"hf:{spec}: attn_implementation {configured!r} is not one moplace "
                           f"models ({', '.join(HF_NAMES)}); --attention sdpa|eager chooses")
    return HF_NAMES[configured]


def load_hf_setup(spec: str, batch_size: int, seq_len: int | None, dtype: str,
                  attention: str | None = None) -> TorchSetup:
    """The training step of ``hf:spec`` at ``batch_size`` sequences of ``seq_len`` tokens (its
    longest context when None), built without memory (`moplace.torch.modelfile`), with
    ``attention`` (`attention_of`)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM

    from ._torch import torch

    config, name = hf_config(spec, attention)
    _one_sequence_per_row()
    longest = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions")
    seq_len = int(seq_len or longest)
    if not 1 <= seq_len <= longest:
        raise MoplaceError(f"--seq-len {seq_len}: hf:{spec} takes 1 to {longest} tokens")
    if dtype not in DTYPES:
        raise MoplaceError(f"--dtype {dtype}: one of {', '.join(DTYPES)}")
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config).to(torch_dtype)
        optimizer = torch.optim.AdamW(model.parameters())
        x = torch.randint(0, config.vocab_size, (batch_size, seq_len))
        y = torch.randint(0, config.vocab_size, (batch_size, seq_len))
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    _make_fake(model, mode)
    return TorchSetup(name, model, _next_token_loss, optimizer, (_fake(x, mode),),
                      _fake(y, mode), int(batch_size), mode, f"hf:{spec}",
                      attention=config._attn_implementation)


def _one_sequence_per_row() -> None:
    """Without a key-value cache (training keeps none) transformers looks for sequences packed
    into one row by reading the position ids' values, which fake tensors do not have: the
    steps moplace traces hold one sequence per row, so the answer is none."""
    from transformers import masking_utils

    masking_utils.find_packed_sequence_indices = lambda position_ids: None


def _next_token_loss(output, y):
    """Cross-entropy of the logits (in FP32, as training does) against the next tokens."""
    from ._torch import torch

    logits = output.logits if hasattr(output, "logits") else output
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
