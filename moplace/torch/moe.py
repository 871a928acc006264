"""Mixture-of-experts layers traced with static shapes: while a step is traced
(`moplace.torch.trace`), the experts of every MoE layer compute with a routing assumption
(`moplace.torch.routing.Routing`), never with token counts taken from data.

Hugging Face's MoE layers (transformers 5: Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2,
DeepSeek-V3, and every experts module made by ``use_experts_implementation``) route in two
parts: a router (a linear, a softmax or sigmoid, a top-k: static shapes, traced as the model
has it) and an experts module taking ``(hidden_states [T, H], top_k_index [T, k],
top_k_weights [T, k])`` that loops over the experts with per-expert token lists (``nonzero``,
``where``): shapes that depend on the values, which fake tensors do not have. `static_experts`
replaces that module's forward, for the trace only, by `experts_forward`:

1. ``moplace::moe_slots``: each (token, choice) pair's buffer slot, its rank among the pairs
   routed to its expert (a stable sort by expert); a pair ranked C or later is dropped;
2. ``moplace::moe_dispatch``: the tokens copied into per-expert buffers ``[E, C, H]``;
3. the experts' FFNs as grouped GEMMs: ``bmm`` over the stacked ``[E, 2I, H]`` and
   ``[E, H, I]`` weights the module already holds (transposed views, no copy; transformers 5
   stores every MoE model's experts so), the activation and gate between them;
4. ``moplace::moe_combine``: each pair's output weighted by its router weight and added back
   at its token (a scatter-add).

C comes from the routing assumption (`Routing.capacity`). Shared experts and the router stay
the model's own modules, so parameter counts, names and gradients are the model's. The four
custom ops (and their backward ops ``moe_dispatch_backward`` and ``moe_combine_backward``)
carry the MoE layer's ordinal as their last argument, so the graph tells each layer's
dispatch, experts and combine apart (`moplace.torch.moegraph`); where expert parallelism
puts an all-to-all, these are the ops it replaces. On real tensors the ops compute the real
thing: with C at least the tokens (nothing dropped) the layer's output is the model's.

A model file's MoE layer is traced so when its experts module is one of these, or a class
that sets ``moplace_experts = True`` and has the same interface: parameters ``gate_up_proj``
``[E, 2I, H]`` (the gate's rows, then the up projection's) and ``down_proj`` ``[E, H, I]``,
an activation ``act_fn``, and ``forward(hidden_states, top_k_index, top_k_weights)`` as above
(its own forward, with data-dependent shapes, runs when the model runs for real).
"""

from __future__ import annotations

import contextlib

from ..errors import MoplaceError
from ._torch import torch
from .routing import Routing

Tensor = torch.Tensor
#: the transformers experts classes of the models moplace bundles (others made by
#: ``use_experts_implementation`` are taken when their interface is the same)
KNOWN = ("MixtralExperts", "Qwen2MoeExperts", "Qwen3MoeExperts", "DeepseekV2Experts",
         "DeepseekV3Experts")


@torch.library.custom_op("moplace::moe_slots", mutates_args=())
def moe_slots(top_k_index: Tensor, experts: int, capacity: int,
              layer: int) -> tuple[Tensor, Tensor]:
    """(token, slot) per (token, choice) pair, row-major: the pair's token and its row in the
    ``[experts * capacity]`` buffers, ``experts * capacity`` when dropped (over capacity)."""
    e = top_k_index.reshape(-1).long()
    n = e.numel()
    order = torch.argsort(e, stable=True)
    counts = torch.zeros(experts, dtype=torch.long, device=e.device).scatter_add_(
        0, e, torch.ones_like(e))
    start = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(e).scatter_(
        0, order, torch.arange(n, device=e.device) - start.index_select(0, e[order]))
    slot = torch.where(rank < capacity, e * capacity + rank, experts * capacity)
    token = torch.arange(n, device=e.device) // top_k_index.shape[-1]
    return token, slot


@moe_slots.register_fake
def _(top_k_index, experts, capacity, layer):
    n = top_k_index.numel()
    return (top_k_index.new_empty(n, dtype=torch.long),
            top_k_index.new_empty(n, dtype=torch.long))


def _rows(x: Tensor, slot: Tensor, width: int) -> Tensor:
    """Row ``slot[n]`` of ``x`` (``[rows, width]``) per pair, zeros for a dropped pair."""
    padded = torch.cat([x.reshape(-1, width), x.new_zeros(1, width)])
    return padded.index_select(0, slot)


@torch.library.custom_op("moplace::moe_dispatch", mutates_args=())
def moe_dispatch(x: Tensor, token: Tensor, slot: Tensor, experts: int, capacity: int,
                 layer: int) -> Tensor:
    """The buffers ``[experts, capacity, H]``: row ``slot[n]`` holds ``x[token[n]]``."""
    width = x.shape[-1]
    out = x.new_zeros(experts * capacity + 1, width)
    out.index_copy_(0, slot, x.index_select(0, token))  # dropped pairs all land in the last row
    return out[:-1].reshape(experts, capacity, width).clone()


@moe_dispatch.register_fake
def _(x, token, slot, experts, capacity, layer):
    return x.new_empty(experts, capacity, x.shape[-1])


@torch.library.custom_op("moplace::moe_dispatch_backward", mutates_args=())
def moe_dispatch_backward(grad: Tensor, token: Tensor, slot: Tensor, tokens: int,
                          layer: int) -> Tensor:
    """The gradient of `moe_dispatch`'s input: each pair's buffer row added at its token."""
    width = grad.shape[-1]
    out = grad.new_zeros(tokens, width)
    return out.index_add_(0, token, _rows(grad, slot, width))


@moe_dispatch_backward.register_fake
def _(grad, token, slot, tokens, layer):
    return grad.new_empty(tokens, grad.shape[-1])


@torch.library.custom_op("moplace::moe_combine", mutates_args=())
def moe_combine(y: Tensor, weight: Tensor, token: Tensor, slot: Tensor, tokens: int,
                layer: int) -> Tensor:
    """``[tokens, H]``: each pair's expert output (row ``slot[n]`` of ``y``) times its router
    weight, added at its token, as transformers' experts loop adds them."""
    width = y.shape[-1]
    rows = (_rows(y, slot, width) * weight.reshape(-1, 1)).to(y.dtype)
    return y.new_zeros(tokens, width).index_add_(0, token, rows)


@moe_combine.register_fake
def _(y, weight, token, slot, tokens, layer):
    return y.new_empty(tokens, y.shape[-1])


@torch.library.custom_op("moplace::moe_combine_backward", mutates_args=())
def moe_combine_backward(grad: Tensor, y: Tensor, weight: Tensor, token: Tensor, slot: Tensor,
                         layer: int) -> tuple[Tensor, Tensor]:
    """The gradients of `moe_combine`'s expert outputs (each pair's token's gradient times
    its weight, back in its buffer row) and of its router weights (that gradient's dot
    product with the pair's expert output)."""
    width = y.shape[-1]
    flat = weight.reshape(-1)
    picked = grad.index_select(0, token)
    scaled = (picked * flat.reshape(-1, 1)).to(y.dtype)
    grad_y = y.new_zeros(y.numel() // width + 1, width)
    grad_y.index_copy_(0, slot, scaled)
    grad_w = (picked.float() * _rows(y, slot, width).float()).sum(-1).to(weight.dtype)
    return grad_y[:-1].reshape(y.shape).clone(), grad_w.reshape(weight.shape)


@moe_combine_backward.register_fake
def _(grad, y, weight, token, slot, layer):
    return y.new_empty(y.shape), weight.new_empty(weight.shape)


def _dispatch_setup(ctx, inputs, output):
    x, token, slot, _, _, layer = inputs
    ctx.save_for_backward(token, slot)
    ctx.tokens, ctx.layer = x.shape[0], layer


def _dispatch_grad(ctx, grad):
    token, slot = ctx.saved_tensors
    return moe_dispatch_backward(grad, token, slot, ctx.tokens, ctx.layer), None, None, None, \
        None, None


def _combine_setup(ctx, inputs, output):
    y, weight, token, slot, _, layer = inputs
    ctx.save_for_backward(y, weight, token, slot)
    ctx.layer = layer


def _combine_grad(ctx, grad):
    y, weight, token, slot = ctx.saved_tensors
    grad_y, grad_w = moe_combine_backward(grad, y, weight, token, slot, ctx.layer)
    return grad_y, grad_w, None, None, None, None


moe_dispatch.register_autograd(_dispatch_grad, setup_context=_dispatch_setup)
moe_combine.register_autograd(_combine_grad, setup_context=_combine_setup)
#: the ops of an MoE layer, by the part they play (forward ops, then their backward ops)
OPS = {"slots": moe_slots, "dispatch": moe_dispatch, "combine": moe_combine,
       "dispatch_backward": moe_dispatch_backward, "combine_backward": moe_combine_backward}


def grouped_ffn(module, buffers: Tensor) -> Tensor:
    """The experts' FFNs on their buffers ``[E, C, H]``: two batched matmuls over the
    module's stacked weights (transposed views: no copy) and its gate between them."""
    up = module.gate_up_proj
    gate_up = torch.bmm(buffers, up if _transposed(module) else up.transpose(1, 2))
    apply_gate = getattr(module, "_apply_gate", None)
    if apply_gate is not None:
        hidden = apply_gate(gate_up)
    else:
        gate, value = gate_up.chunk(2, dim=-1)
        hidden = module.act_fn(gate) * value
    down = module.down_proj
    return torch.bmm(hidden, down if _transposed(module) else down.transpose(1, 2))


def _transposed(module) -> bool:
    return bool(getattr(module, "is_transposed", False))


def experts_forward(module, routing: Routing, layer: int, record: dict):
    """The static-shape forward of the experts module ``module`` (module docstring), the
    ``layer``-th MoE layer; it notes the layer's sizes in ``record``."""
    def forward(hidden_states, top_k_index, top_k_weights):
        tokens, _ = hidden_states.shape
        experts, top_k = int(module.gate_up_proj.shape[0]), int(top_k_index.shape[-1])
        capacity = routing.capacity(tokens, experts, top_k)
        record.update(routing.summary(tokens, experts, top_k))
        token, slot = moe_slots(top_k_index, experts, capacity, layer)
        buffers = moe_dispatch(hidden_states, token, slot, experts, capacity, layer)
        out = grouped_ffn(module, buffers)
        return moe_combine(out, top_k_weights, token, slot, tokens, layer)

    return forward


def experts_modules(model) -> list:
    """``(qualified name, module)`` of every experts module of ``model`` traced statically
    (module docstring), in the model's order; one whose interface is not ours is refused by
    name."""
    found = []
    for name, m in model.named_modules():
        cls = type(m)
        ours = getattr(cls, "moplace_experts", False) is True
        made = hasattr(m, "is_concatenated") and hasattr(m, "has_gate")  # use_experts_...
        if not (ours or made or cls.__name__ in KNOWN):
            continue
        gate_up, down = getattr(m, "gate_up_proj", None), getattr(m, "down_proj", None)
        shaped = all(isinstance(w, torch.Tensor) and w.dim() == 3 for w in (gate_up, down))
        if not shaped or getattr(m, "has_bias", False) or not getattr(m, "has_gate", True) \
                or getattr(m, "has_post_expert_norm", False) \
                or not getattr(m, "is_concatenated", True):
            raise MoplaceError(
                f"{name} ({cls.__name__}): moplace traces an experts module with stacked "
                f"weights gate_up_proj [E, 2I, H] (gate, then up) and down_proj [E, H, I], no "
                f"bias, no norm after the experts; this one is not (moplace.torch.moe)")
        found.append((name, m))
    return found


@contextlib.contextmanager
def static_experts(model, routing: Routing | None):
    """While inside, every experts module of ``model`` computes as `experts_forward` does
    under ``routing`` (None: balanced); yields the layers found, one dict each: its module
    name, class and routing summary (filled in as the step is traced)."""
    found = experts_modules(model)
    if routing is not None and not found:
        raise MoplaceError("--routing, --capacity-factor, --imbalance: the model has no "
                           "mixture-of-experts layer moplace traces (an experts module of "
                           "transformers', or one that sets moplace_experts = True: "
                           "moplace.torch.moe)")
    routing = routing or Routing()
    layers = []
    for k, (name, m) in enumerate(found):
        shared = _shared(model, name.rpartition(".")[0])
        record = {"module": name, "class": type(m).__name__, "shared": shared,
                  "shared_experts": _shared_count(model, shared)}
        layers.append(record)
        m.forward = experts_forward(m, routing, k, record)  # an instance attribute, undone
    try:
        yield layers
    finally:
        for _, m in found:
            m.__dict__.pop("forward", None)


def _shared(model, block: str) -> list[str]:
    """The shared experts' modules beside the experts of the MoE block named ``block``
    (DeepSeek's ``shared_experts``, Qwen2-MoE's ``shared_expert`` and its gate)."""
    try:
        parent = model.get_submodule(block) if block else model
    except AttributeError:
        return []
    return [f"{block}.{n}" if block else n for n, _ in parent.named_children()
            if n.startswith("shared_expert")]


def _shared_count(model, shared: list[str]) -> int:
    """Shared experts per layer: DeepSeek's ``n_shared_experts`` (one MLP that wide), else
    the shared expert modules (Qwen2-MoE's one; its gate is none)."""
    modules = [m for m in shared if not m.endswith("_gate")]
    count = getattr(getattr(model, "config", None), "n_shared_experts", None)
    return int(count) if modules and isinstance(count, int) else len(modules)
