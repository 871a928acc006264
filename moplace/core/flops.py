"""Model FLOPs of a training step, counted as the published tables count them.

A traced transformer records its shape in ``metadata["transformer"]`` (hidden size, layers,
heads, key/value heads, head size, FFN size, vocabulary, and for a mixture of experts the
experts, the experts per token and their FFN size; `TransformerShape`). `megatron_flops`
counts one step's FLOPs as Megatron-LM's ``num_floating_point_operations``
(``megatron/training/training.py``) did at commit f2e5db4 (July 2024, Megatron-Core r0.8.0,
the commit of its weak-scaling table), written here in our words:

    12 x sequences x s x L x h^2 x ( (1 + g/n + s/h) x (n d / h)        attention
                                     + (f / h) x k x (3/2 if gated)     MLP (k experts a token)
                                     + V / (2 L h) )                    logits

with s the sequence length, L the layers, h the hidden size, n the heads, g the key/value
heads, d the head size, f the FFN size (an expert's in a mixture of experts), k the experts a
token is routed to (1 for a dense model) and V the vocabulary. It counts the forward's and the
backward's matmuls (3 x 2 FLOPs a multiply-add), with the attention scores over the whole
sequence, without causal halving, and no recomputation. Shared experts, MLA attention and
dense layers beside MoE ones (DeepSeek's) are outside that formula: `megatron_flops` refuses
them (None and why) rather than count them another way.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

#: said beside every FLOPs figure
CONVENTION = ("model FLOPs as Megatron-LM's num_floating_point_operations counts them "
              "(training.py at f2e5db4, July 2024): forward and backward matmuls, attention "
              "over the whole sequence (no causal halving), no recomputation")


@dataclass(frozen=True)
class TransformerShape:
    """What a transformer's FLOPs depend on (module docstring)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    gated: bool
    experts: int = 0
    top_k: int = 1
    shared_ffn: int = 0
    dense_layers: int = 0
    attention: str = "mha"

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def of(cls, graph) -> "TransformerShape | None":
        """The shape ``graph`` records (``metadata["transformer"]``), or None."""
        data = graph.metadata.get("transformer")
        if not isinstance(data, dict):
            return None
        try:
            return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})
        except TypeError:
            return None


def megatron_flops(shape: TransformerShape | None, sequences: int, seq_len: int
                   ) -> tuple[float | None, str]:
    """(FLOPs of a step of ``sequences`` sequences of ``seq_len`` tokens, as Megatron-LM
    counts them; the convention), or (None, why not)."""
    if shape is None:
        return None, "the graph records no transformer shape (trace it again to count FLOPs)"
    if shape.shared_ffn or shape.dense_layers or shape.attention != "mha":
        return None, ("Megatron-LM's count at f2e5db4 has no shared experts, dense layers "
                      "beside MoE ones or MLA attention")
    h, L, s = float(shape.hidden), float(shape.layers), float(seq_len)
    attention = (1 + shape.kv_heads / shape.heads + s / h) * (shape.heads * shape.head_dim / h)
    mlp = (shape.ffn / h) * (shape.top_k if shape.experts else 1) * (1.5 if shape.gated else 1.0)
    logits = shape.vocab / (2 * L * h)
    return 12.0 * sequences * s * L * h * h * (attention + mlp + logits), CONVENTION


def traced_seq_len(graph) -> int | None:
    """The tokens of each sequence ``graph`` was traced at (``metadata["source"]["seq_len"]``),
    or None (a profile file's graph, whose ``source`` is a name)."""
    source = graph.metadata.get("source")
    seq = source.get("seq_len") if isinstance(source, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0 else None


def step_throughput(graph, runtime_s: float, gpus: int, peak_flops: float) -> dict | None:
    """What the published tables say of a step of ``graph`` (the whole step: its
    ``batch_size`` sequences of ``metadata["source"]["seq_len"]`` tokens) that takes
    ``runtime_s`` on ``gpus`` GPUs of dense BF16 peak ``peak_flops`` (FLOP/s; 0: unknown):
    ``tokens_per_s_per_gpu``, ``tflops_per_gpu`` and ``mfu`` (None where the FLOPs are not
    counted: ``flops_note`` says why), or None for a graph that records no tokens."""
    seq = traced_seq_len(graph)
    batch = graph.metadata.get("batch_size")
    if not (isinstance(seq, int) and isinstance(batch, int) and seq > 0 and batch > 0
            and runtime_s > 0 and gpus > 0):
        return None
    flops, note = megatron_flops(TransformerShape.of(graph), batch, seq)
    tflops = flops / runtime_s / gpus / 1e12 if flops is not None else None
    return {"tokens_per_s_per_gpu": batch * seq / runtime_s / gpus, "tflops_per_gpu": tflops,
            "mfu": tflops * 1e12 / peak_flops if tflops is not None and peak_flops else None,
            "flops_note": note}
