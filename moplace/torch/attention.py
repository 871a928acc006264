"""Attention as a GPU runs it: ``F.scaled_dot_product_attention`` traced as the kernels PyTorch
would pick on the target device kind, not as the CPU kernel the fake CPU tensors would give.

moplace traces a step under fake tensors on the CPU (`moplace.torch.trace`), where PyTorch's
SDPA dispatches to ``_scaled_dot_product_flash_attention_for_cpu``: a kernel no GPU runs,
costed as a CPU kernel. While tracing for a GPU kind, `gpu_attention` puts a function in
SDPA's place (the ``torch.nn.functional`` attribute, which transformers and
``nn.MultiheadAttention`` call, and a torch-function mode for a name bound before the trace)
that calls the aten op the GPU would run, whose meta kernel gives the real shapes:

- **flash** (``_scaled_dot_product_flash_attention``) on Ampere and newer (A100, H100, H200,
  B200; compute capability 8.0+) for fp16 and bf16, a head size that is a multiple of 8 up to
  256, the same for query, key and value (not MLA's 192 and 128), and no attention mask
  (``is_causal`` is no mask); key and value with fewer heads (GQA) as they are, which the
  kernel takes;
- **memory-efficient** (``_scaled_dot_product_efficient_attention``) otherwise where it runs:
  compute capability 5.0+, with an attention mask, fp32 (bf16 on 8.0+ only), no GQA;
- **math** otherwise (``_scaled_dot_product_attention_math``: matmuls and a softmax, as eager
  attention is traced, the s x s scores kept).

That is the order of PyTorch's own choice (``sdp_utils.cpp``: flash, then memory-efficient,
then math; cuDNN's attention is not picked by default), decided from the kind, the dtype, the
head size and the mask without a GPU. Both fused kernels keep only their output and the rows'
log-sum-exp for the backward (no s x s matrix), and both take dropout.

FLOPs (`attention_flops`) follow FlashAttention's convention: forward ``4 b h s_q s_k d``,
halved when causal, backward 2.5 times the forward. (PyTorch's ``flop_counter`` counts a
causal kernel as a full one: twice the work it does.)
"""

from __future__ import annotations

import contextlib

from ._torch import torch

aten = torch.ops.aten
#: what ``--attention`` takes, and the Hugging Face ``attn_implementation`` names it reads
CHOICES = ("sdpa", "eager")
HF_NAMES = {"sdpa": "sdpa", "eager": "eager", "flash_attention_2": "sdpa",
            "flash_attention_3": "sdpa"}
#: compute capability of each GPU kind of `moplace.costs.devicespecs`
CAPABILITY = {"P100": 6.0, "P100-PCIe": 6.0, "V100": 7.0, "V100-PCIe": 7.0, "A100": 8.0,
              "A100-80GB": 8.0, "H100": 9.0, "H100-PCIe": 9.0, "H200": 9.0, "B200": 10.0}
#: a GPU kind moplace has no figures for is taken to be as new as the newest it knows
UNKNOWN_CAPABILITY = 10.0
FLASH, EFFICIENT, MATH, CPU = "flash", "memory-efficient", "math", "cpu"
#: the fused attention ops, forward and backward: (is it a backward op)
FUSED = {
    aten._scaled_dot_product_flash_attention.default: False,
    aten._scaled_dot_product_flash_attention_backward.default: True,
    aten._scaled_dot_product_efficient_attention.default: False,
    aten._scaled_dot_product_efficient_attention_backward.default: True,
    aten._scaled_dot_product_flash_attention_for_cpu.default: False,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: True,
}
#: the kernel each fused op is, as results name it
KERNEL_OF = {op: (CPU if "for_cpu" in op.name() else FLASH if "flash" in op.name()
                  else EFFICIENT) for op in FUSED}


def choose_kernel(kind: str, dtype, head_dim: int, *, masked: bool, gqa: bool,
                  value_dim: int | None = None) -> str:
    """The SDPA kernel PyTorch runs on a GPU of ``kind`` (`FLASH`, `EFFICIENT` or `MATH`;
    `CPU` for kind ``cpu``) for ``dtype`` (a torch dtype), a head size (the query's and key's;
    the value's ``value_dim`` when another, as MLA attention has it: flash takes one size for
    all three), whether an attention mask is given and whether key and value have fewer heads
    than the query (GQA)."""
    if str(kind).lower() == "cpu":
        return CPU
    cc = CAPABILITY.get(kind, UNKNOWN_CAPABILITY)
    half = dtype in (torch.float16, torch.bfloat16)
    value_dim = head_dim if value_dim is None else value_dim
    if cc >= 8.0 and half and head_dim % 8 == 0 and head_dim <= 256 and not masked \
            and value_dim == head_dim:
        return FLASH
    dtype_ok = dtype in (torch.float32, torch.float16) or (dtype == torch.bfloat16 and cc >= 8.0)
    align = 4 if dtype == torch.float32 else 8
    if cc >= 5.0 and dtype_ok and not gqa and head_dim % align == 0 and value_dim % align == 0:
        return EFFICIENT
    return MATH


class _Chosen:
    """SDPA as the kernels of one device kind, and which kernels it ran (for the record)."""

    def __init__(self, kind: str):
        self.kind, self.used = kind, {}

    def __call__(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                 scale=None, enable_gqa=False):
        gqa = bool(enable_gqa) and key.shape[-3] != query.shape[-3]
        kernel = choose_kernel(self.kind, query.dtype, query.shape[-1],
                               masked=attn_mask is not None, gqa=gqa, value_dim=value.shape[-1])
        self.used[kernel] = self.used.get(kernel, 0) + 1
        if kernel == FLASH:
            return aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        if kernel == EFFICIENT:
            return aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, True, dropout_p, is_causal, scale=scale)[0]
        if gqa:  # the math path repeats key and value per query head, as PyTorch's does
            repeat = query.shape[-3] // key.shape[-3]
            key, value = (t.repeat_interleave(repeat, -3) for t in (key, value))
        return aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale)[0]


class _Mode(torch.overrides.TorchFunctionMode):
    """Catches SDPA called through a name bound before the trace (``from torch.nn.functional
    import scaled_dot_product_attention``), which the attribute swap misses."""

    def __init__(self, chosen: _Chosen, original):
        super().__init__()
        self.chosen, self.original = chosen, original

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is self.original:
            return self.chosen(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def gpu_attention(kind: str | None):
    """While tracing, SDPA runs as ``kind``'s kernels (module docstring); yields the record of
    the kernels it ran (kernel -> calls). ``kind`` None or ``cpu``: SDPA as it is."""
    chosen = _Chosen(kind or CPU)
    if kind is None or str(kind).lower() == CPU:
        yield chosen.used
        return
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention
    functional.scaled_dot_product_attention = chosen
    try:
        with _Mode(chosen, original):
            yield chosen.used
    finally:
        functional.scaled_dot_product_attention = original


def attention_sizes(node) -> dict | None:
    """The sizes of a fused attention node, as the cost features keep them
    (`moplace.torch.features`): ``bh`` (batch × heads), ``s_q``, ``s_kv``, ``d``, ``causal``
    and ``bwd``; None when ``node`` is not one."""
    backward = FUSED.get(getattr(node, "target", None))
    if backward is None:
        return None
    from torch.fx.operator_schemas import normalize_function

    args = torch.fx.node.map_arg(node.args, lambda n: n.meta.get("val"))
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: n.meta.get("val"))
    named = normalize_function(node.target, args, kwargs, normalize_to_only_use_kwargs=True)
    q, k = named.kwargs["query"], named.kwargs["key"]
    *lead, s_q, d = (int(x) for x in q.shape)
    bh = 1
    for x in lead:
        bh *= x
    return {"bh": bh, "s_q": s_q, "s_kv": int(k.shape[-2]), "d": d,
            "causal": bool(named.kwargs.get("is_causal", False)), "bwd": backward}


def attention_flops(node) -> float | None:
    """FLOPs of a fused attention node by FlashAttention's convention (module docstring,
    `moplace.costs.calibration.attention_flops`), or None when ``node`` is not one."""
    from ..costs.calibration import attention_flops as flash_flops

    sizes = attention_sizes(node)
    return None if sizes is None else flash_flops(sizes)


def graph_attention(graph, implementation: str, kind: str | None) -> dict:
    """What a traced graph's attention is, for its metadata: the implementation asked for, the
    fused kernels its nodes run and the device kind they were chosen for."""
    kernels = sorted({KERNEL_OF[n.target] for n in graph.nodes
                      if n.op == "call_function" and n.target in FUSED and not FUSED[n.target]})
    if implementation == "eager":
        how = "eager (matmuls and a softmax; the s x s scores kept for the backward)"
    elif kernels:
        words = [{CPU: "the CPU's flash"}.get(k, k) for k in kernels]
        how = (f"SDPA as {' and '.join(words)} attention kernels"
               + (f" (as PyTorch picks them on {kind})" if kind and kind != CPU else ""))
    else:
        how = "no fused attention kernel (the model's own attention, or SDPA's math path)"
    return {"implementation": implementation, "kernels": kernels,
            "for_kind": kind or CPU, "how": how}
