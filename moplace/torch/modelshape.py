"""A Hugging Face model's transformer shape, recorded in its traced graph's
``metadata["transformer"]`` for counting its FLOPs (`moplace.core.flops`)."""

from __future__ import annotations

from ..core.flops import TransformerShape

#: activations whose MLP is gated (SwiGLU/GeGLU: three matrices, Megatron's 3/2)
GATED = ("silu", "swish", "swiglu", "geglu")


def transformer_shape(config) -> dict | None:
    """``TransformerShape.as_dict()`` of a Hugging Face ``config`` (Llama, Mistral, Mixtral,
    Qwen, DeepSeek, GPT-2 and their kin), or None when it is not one of those."""
    get = lambda *names, default=None: next(  # noqa: E731
        (getattr(config, n) for n in names if getattr(config, n, None) is not None), default)
    hidden, layers = get("hidden_size", "n_embd"), get("num_hidden_layers", "n_layer")
    heads = get("num_attention_heads", "n_head")
    vocab = get("vocab_size")
    if not all(isinstance(v, int) and v > 0 for v in (hidden, layers, heads, vocab)):
        return None
    experts = get("num_local_experts", "num_experts", "n_routed_experts", default=0) or 0
    act = str(get("hidden_act", "activation_function", default="")).lower()
    gated = any(a in act for a in GATED)
    dense_ffn = get("intermediate_size", "n_inner") or 4 * hidden
    shared = get("n_shared_experts", default=0) or 0
    shared_ffn = get("shared_expert_intermediate_size", default=0) or 0
    moe_ffn = get("moe_intermediate_size", default=None)
    if experts and shared and not shared_ffn:
        shared_ffn = shared * (moe_ffn or dense_ffn)
    dense_layers = get("first_k_dense_replace", default=0) or 0
    mlp_only = get("mlp_only_layers", default=[]) or []
    shape = TransformerShape(
        hidden=hidden, layers=layers, heads=heads,
        kv_heads=get("num_key_value_heads", default=heads) or heads,
        head_dim=get("head_dim", default=hidden // heads) or hidden // heads,
        ffn=(moe_ffn or dense_ffn) if experts else dense_ffn, vocab=vocab, gated=gated,
        experts=int(experts), top_k=int(get("num_experts_per_tok", default=1) or 1),
        shared_ffn=int(shared_ffn), dense_layers=int(dense_layers) + len(mlp_only),
        attention="mla" if get("kv_lora_rank") else "mha")
    return shape.as_dict()
