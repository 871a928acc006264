"""Hugging Face models by configuration: ``moplace profile hf:NAME`` builds a causal language
model with the ``transformers`` package from a configuration, never from weights: one bundled
here (`CONFIGS`, written from the published architecture numbers; gated models' files cannot
be downloaded, and no network is used) or a ``config.json`` given as ``hf:PATH/config.json``
(every size field of its model type given: `check_sizes`). The model is built on the meta
device, cast to ``--dtype`` (else the configuration's ``torch_dtype``: `resolve_dtype`),
trained with AdamW on next-token cross-entropy over ``--seq-len`` tokens, and traced as a model
file is (`moplace.torch.trace`).

Attention (`attention_of`): ``--attention`` if given, else the configuration's
``attn_implementation``, else ``sdpa``, what transformers trains with; SDPA is traced as the
GPU's kernels (`moplace.torch.attention`), eager as matmuls and a softmax. A mixture of
experts (Mixtral, Qwen3-MoE, DeepSeek) traces its experts under a stated routing assumption
(`moplace.torch.moe`, `moplace.torch.routing`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import FormatError, MoplaceError, did_you_mean, shown
from .modelfile import TorchSetup, _fake, _make_fake

#: what the Llama 3 models share (Meta's config.json files)
_LLAMA3 = dict(num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
               rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
#: what the Llama 3.1 models add: the 131,072-token context and its llama3 RoPE scaling
_LLAMA31 = {**_LLAMA3, "max_position_embeddings": 131072,
            "rope_scaling": dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                 high_freq_factor=4.0, original_max_position_embeddings=8192)}
#: what the Mixtral models share (Mistral AI's config.json files)
_MIXTRAL = dict(num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
                vocab_size=32000, rope_theta=1e6, rms_norm_eps=1e-5, sliding_window=None,
                tie_word_embeddings=False)
#: what DeepSeek-V2 and V3 share (DeepSeek's config.json files): MLA attention's sizes
_DEEPSEEK = dict(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                 max_position_embeddings=163840, rope_theta=10000, rms_norm_eps=1e-6,
                 tie_word_embeddings=False)


def _yarn(mscale: float) -> dict:
    """DeepSeek's YaRN RoPE scaling: 40 times the 4,096 positions it was trained at."""
    return dict(type="yarn", factor=40, original_max_position_embeddings=4096, beta_fast=32,
                beta_slow=1, mscale=mscale, mscale_all_dim=mscale)


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
                                 num_hidden_layers=32, num_attention_heads=32, **_LLAMA3),
                   "Llama 3 8B (Meta's model card and config.json)"),
    "llama-3-70b": ("llama", dict(hidden_size=8192, intermediate_size=28672,
                                  num_hidden_layers=80, num_attention_heads=64, **_LLAMA3),
                    "Llama 3 70B (Meta's model card and config.json)"),
    "llama-3.1-8b": ("llama", dict(hidden_size=4096, intermediate_size=14336,
                                   num_hidden_layers=32, num_attention_heads=32, **_LLAMA31),
                     "Llama 3.1 8B, 131,072-token context, llama3 RoPE scaling (Meta's "
                     "config.json)"),
    "llama-3.1-405b": ("llama", dict(hidden_size=16384, intermediate_size=53248,
                                     num_hidden_layers=126, num_attention_heads=128, **_LLAMA31),
                       "Llama 3.1 405B, 405.85 B: 126 layers, hidden 16,384, 128 heads, 8 "
                       "key/value heads, FFN 53,248 (Meta's config.json; Dubey et al. 2024, "
                       "table 3)"),
    # mixtures of experts (moplace.torch.moe traces their experts under a routing assumption)
    "mixtral-8x7b": ("mixtral", dict(hidden_size=4096, intermediate_size=14336,
                                     num_hidden_layers=32, num_attention_heads=32,
                                     max_position_embeddings=32768, **_MIXTRAL),
                     "Mixtral 8x7B, 46.7 B (Mistral AI's config.json, Mixtral-8x7B-v0.1)"),
    "mixtral-8x22b": ("mixtral", dict(hidden_size=6144, intermediate_size=16384,
                                      num_hidden_layers=56, num_attention_heads=48,
                                      max_position_embeddings=65536,
                                      **{**_MIXTRAL, "vocab_size": 32768}),
                      "Mixtral 8x22B, 141 B (Mistral AI's config.json, Mixtral-8x22B-v0.1)"),
    "qwen3-30b-a3b": ("qwen3_moe", dict(
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], vocab_size=151936, max_position_embeddings=40960,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
        use_sliding_window=False, sliding_window=None),
        "Qwen3-30B-A3B, 30.5 B, 3.3 B active (Qwen's config.json)"),
    "deepseek-v2-lite": ("deepseek_v2", dict(
        hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16,
        n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6,
        first_k_dense_replace=1, topk_method="greedy", n_group=1, topk_group=1,
        norm_topk_prob=False, routed_scaling_factor=1.0, q_lora_rank=None, vocab_size=102400,
        rope_scaling=_yarn(0.707), **_DEEPSEEK),
        "DeepSeek-V2-Lite, 15.7 B, 2.4 B active: MLA attention, 2 shared and 64 routed "
        "experts, 6 per token (DeepSeek's config.json)"),
    "deepseek-v3": ("deepseek_v3", dict(
        hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
        num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
        n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=8,
        first_k_dense_replace=3, n_group=8, topk_group=4, norm_topk_prob=True,
        routed_scaling_factor=2.5, q_lora_rank=1536, vocab_size=129280,
        rope_scaling=_yarn(1.0), **_DEEPSEEK),
        "DeepSeek-V3, 671 B without its multi-token-prediction layer, 37 B active: 1 shared "
        "and 256 routed experts, 8 per token in 4 of 8 groups (DeepSeek's config.json)"),
}
DTYPES = ("fp32", "bf16", "fp16")


def hf_config(spec: str, attention: str | None = None):
    """The ``transformers`` configuration of ``spec`` (a bundled name, or a config.json path)
    with its attention (`attention_of`), and its name; a config.json that leaves a size field
    to transformers' default is refused (`check_sizes`)."""
    try:
        from transformers import AutoConfig
    except ImportError:
        raise MoplaceError(f"hf:{spec} needs the transformers package: pip install "
                           f"'moplace[torch]'") from None
    kind, options, name, asked = _read(spec)
    if spec.endswith(".json"):
        check_sizes(Path(spec), kind, options)
    from ._torch import quiet_logs

    try:
        with quiet_logs():  # transformers' remarks on the values: our lines say what matters
            config = AutoConfig.for_model(kind, **options)
    except Exception as exc:  # noqa: BLE001 - transformers' checks of the values, many kinds
        raise MoplaceError(f"hf:{_cut(spec)}: transformers cannot make a {shown(kind)} "
                           f"configuration: {_cut(exc)}") from None
    config._attn_implementation = attention_of(spec, attention, asked)
    config.use_cache = False  # training keeps no key-value cache
    return config, name


def _read(spec: str):
    """(model type, options, name, attention asked for) of a bundled name or a config.json."""
    if not spec.endswith(".json"):
        if spec not in CONFIGS:
            raise MoplaceError(f"unknown Hugging Face model hf:{spec}{did_you_mean(spec, CONFIGS)}"
                               f" (bundled: {', '.join(CONFIGS)}; or hf:PATH/config.json)")
        kind, options, _ = CONFIGS[spec]
        return kind, dict(options), spec, None
    path = Path(spec)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise FormatError(path, f"cannot be read ({exc.strerror or exc})") from None
    except (ValueError, RecursionError) as exc:
        raise FormatError(path, f"not JSON ({str(exc)[:200]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise FormatError(path, "not a Hugging Face config.json (no model_type)")
    kind = data.pop("model_type")
    asked = data.pop("attn_implementation", None) or data.pop("_attn_implementation", None)
    if asked is not None and not isinstance(asked, str):
        raise FormatError(path, f"attn_implementation {shown(asked)} is not a name")
    name = path.stem if path.stem != "config" else path.parent.name or "model"
    return kind, data, name, asked


#: the size fields of a model, each by the names configuration classes give it (resolved
#: through a class's ``attribute_map``), and the largest value moplace traces
SIZE_FIELDS = {"hidden size": (("hidden_size", "n_embd", "d_model"), 2**20),
               "layers": (("num_hidden_layers", "n_layer", "num_layers"), 1024),
               "attention heads": (("num_attention_heads", "n_head", "num_heads"), 4096),
               "vocabulary": (("vocab_size",), 2**24),
               "FFN size": (("intermediate_size", "ffn_dim", "ffn_hidden_size", "n_inner",
                             "d_ff"), 2**22)}


def check_sizes(path: Path, kind: str, options: dict) -> None:
    """Refuse a config.json that leaves a size field of its model type (`SIZE_FIELDS`) to the
    configuration class's default (one derived from other fields, a default of None, is
    fine), or gives one that is not a whole number in range; `FormatError` naming it."""
    import inspect

    from transformers import CONFIG_MAPPING

    if kind not in CONFIG_MAPPING:
        return  # transformers names the unknown model type
    cls = CONFIG_MAPPING[kind]
    aliases = dict(getattr(cls, "attribute_map", {}) or {})
    try:
        defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()}
    except (TypeError, ValueError):  # pragma: no cover - every class has a signature
        return
    given = {aliases.get(k, k): k for k in options}
    for what, (names, most) in SIZE_FIELDS.items():
        field = next((aliases.get(n, n) for n in names if aliases.get(n, n) in defaults), None)
        if field is None:
            continue
        default = defaults[field]
        if field not in given:
            if default is None or default is inspect.Parameter.empty:
                continue  # derived from the other fields (GPT-2's n_inner: 4 x n_embd)
            raise FormatError(path, f"`{field}`{_what(field, what)} is not set (transformers "
                                    f"would use its default {shown(default)}); give it")
        value = options[given[field]]
        if value is None and default is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise FormatError(path, f"`{given[field]}`{_what(given[field], what)} must be a "
                                    f"whole number from 1 to {most:,}, got {shown(value)}")


def _what(field: str, what: str) -> str:
    """`` (hidden size)`` after a field whose name does not say it (GPT-2's ``n_embd``)."""
    return "" if field in [names[0] for names, _ in SIZE_FIELDS.values()] else f" ({what})"


#: a configuration's ``torch_dtype`` (or ``dtype``) -> the --dtype it means
CONFIG_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def resolve_dtype(spec: str, option: str | None) -> tuple[str, str]:
    """The dtype an ``hf:`` model is traced at and where it comes from, in words: ``option``
    (``--dtype``) if given (said when the configuration names another), else the
    configuration's ``torch_dtype`` (or ``dtype``), else FP32."""
    _, options, _, _ = _read(spec)
    key = next((k for k in ("torch_dtype", "dtype") if options.get(k) not in (None, "auto")),
               None)
    named = options.get(key) if key else None
    ours = (CONFIG_DTYPES.get(named.removeprefix("torch."))
            if isinstance(named, str) else None)
    if option is not None:
        if option not in DTYPES:
            raise MoplaceError(f"--dtype {option}: one of {', '.join(DTYPES)}")
        if key and ours != option:
            return option, (f"dtype: {option} (--dtype; the configuration's {key} says "
                            f"{shown(named, 40)})")
        return option, f"dtype: {option} (--dtype)"
    if key is None:
        return "fp32", "dtype: fp32, the default (the configuration names none; --dtype chooses)"
    if ours is None:
        raise FormatError(spec, f"`{key}` {shown(named, 40)} is not one moplace traces "
                                f"({', '.join(CONFIG_DTYPES)}); --dtype chooses")
    return ours, f"dtype: {ours}, from the configuration's {key} ({named})"


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


def load_hf_setup(spec: str, batch_size: int, seq_len: int | None, dtype: str | None,
                  attention: str | None = None, routing=None) -> TorchSetup:
    """The training step of ``hf:spec`` at ``batch_size`` sequences of ``seq_len`` tokens (its
    longest context when None), built without memory (`moplace.torch.modelfile`), with
    ``attention`` (`attention_of`), at ``dtype`` (None: the configuration's, `resolve_dtype`);
    its mixture-of-experts layers traced under ``routing`` (`moplace.torch.routing`)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM

    from ._torch import quiet_logs, torch

    config, name = hf_config(spec, attention)
    seq_len = check_seq_len(spec, config, seq_len)
    dtype, _ = resolve_dtype(spec, dtype)
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    try:
        with torch.device("meta"), quiet_logs():
            model = AutoModelForCausalLM.from_config(config).to(torch_dtype)
            optimizer = torch.optim.AdamW(model.parameters())
            x = torch.randint(0, config.vocab_size, (batch_size, seq_len))
            y = torch.randint(0, config.vocab_size, (batch_size, seq_len))
    except Exception as exc:  # noqa: BLE001 - transformers' model code, many kinds
        raise MoplaceError(f"hf:{_cut(spec)}: transformers cannot build the model: "
                           f"{type(exc).__name__}: {_cut(exc)}") from None
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    _make_fake(model, mode)
    return TorchSetup(name, model, _next_token_loss, optimizer, (_fake(x, mode),),
                      _fake(y, mode), int(batch_size), mode, f"hf:{spec}",
                      attention=config._attn_implementation, routing=routing)


def check_seq_len(spec: str, config, seq_len: int | None) -> int:
    """``seq_len`` (``--seq-len``), else the configuration's longest context; refused beyond
    it."""
    longest = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions",
                                                                          None)
    if isinstance(longest, bool) or not isinstance(longest, int) or not 1 <= longest <= 2**22:
        raise MoplaceError(f"hf:{_cut(spec)}: max_position_embeddings {shown(longest)} is "
                           f"not a context length from 1 to {2**22:,} tokens")
    seq_len = int(seq_len or longest)
    if not 1 <= seq_len <= longest:
        raise MoplaceError(f"--seq-len {seq_len}: hf:{spec} takes 1 to {longest} tokens")
    return seq_len


#: the configuration fields of a mixture of experts: experts per layer, chosen per token
EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")


def check_routing(spec: str, config, routing, tokens: int) -> None:
    """Refuse a routing assumption (``routing``, None: none stated) for a model without
    mixture-of-experts layers, or one its sizes rule out (an imbalance beyond experts / top-k:
    `moplace.torch.routing.Routing.loads`), before any work."""
    if routing is None:
        return
    experts = next((getattr(config, f) for f in EXPERTS
                    if isinstance(getattr(config, f, None), int)), None)
    top_k = getattr(config, "num_experts_per_tok", None)
    if not experts or not isinstance(top_k, int):
        raise MoplaceError(f"--routing, --capacity-factor, --imbalance: hf:{_cut(spec)} has no "
                           f"mixture-of-experts layers (the options are for MoE models)")
    routing.loads(tokens, experts, top_k)


def _cut(text, width: int = 200) -> str:
    """``text`` (a path, or an exception's message of several lines) as one short line."""
    one = " ".join(str(text).split()) or type(text).__name__
    return one if len(one) <= width else one[:width] + "..."


def _next_token_loss(output, y):
    """Cross-entropy of the logits (in FP32, as training does) against the next tokens."""
    from ._torch import torch

    logits = output.logits if hasattr(output, "logits") else output
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
