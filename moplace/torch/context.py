"""What context parallelism needs to know of a traced step (`context_metadata`): which ops mix
tokens and which of their inputs and outputs cross the sequence, as the graph's
``metadata["context"]``.

Context parallelism cuts every token-wise op on ``sequence`` (each device its slice of the
tokens: the ops a batch split may cut, `moplace.torch.convert`), which is only right where no
op mixes tokens but attention, and attention runs as a fused SDPA kernel (flash or
memory-efficient, `moplace.torch.attention`): eager attention's scores are matmuls and a
softmax over the whole sequence that no slice of it computes. For each fused attention the
metadata names, by op name:

- ``attention``: the forward and backward kernels (they mix tokens);
- ``kv``: the edges ``[producer, kernel]`` that carry keys or values into a kernel: a part of
  a kernel cut on ``sequence`` reads them whole (ring attention passes every other part's
  blocks round the ring: ``(c - 1) / c`` of them per device);
- ``kv_grads``: the edges ``[backward kernel, reader]`` that carry the keys' and values'
  gradients out of a backward kernel to their first reader: each part's are partial sums over
  its queries, summed into the owner's slice (ring attention sends them round with the
  blocks: a reduce-scatter), once; a later reader (the value projection's weight gradient
  beside its input gradient) reads the owner's slice;
- ``heads``, ``kv_heads``: the query and key/value heads (Ulysses' all-to-all cuts attention
  by heads, which must divide among the devices).

An edge carries one producer's tensors to one reader: where keys or values share an edge with
the queries (a fused QKV projection, GPT-2's ``c_attn``, viewed into three), the edge is read
whole, queries too. Nothing is named (None) for a graph without fused attention.
"""

from __future__ import annotations

from .attention import FUSED
from .estimate import tensors

#: per fused kernel, the positions of its key and value arguments
_KV_ARGS = {False: (1, 2), True: (2, 3)}  # forward (q, k, v, ...); backward (dout, q, k, v, ...)
#: the outputs of a backward kernel that are the keys' and values' gradients (dq, dk, dv, ...)
_KV_GRAD_OUTPUTS = (1, 2)


def context_metadata(kept, names, rep, tensor, traced) -> dict | None:
    """``metadata["context"]`` of the traced step (module docstring): ``kept`` its ops' nodes
    in order, ``names`` their op names, ``rep`` each node's kept op, ``tensor`` each node's
    (producer, output index) (`moplace.torch.convert`); None without fused attention or when
    some attention is not fused (eager's, or SDPA's math kernel)."""
    kernels = [n for n in kept if n.target in FUSED]
    if not kernels or not _all_fused(traced):
        return None
    attention, kv, grads = [], {}, []  # kv: the (producer, kernel) pairs, in order, once
    heads = kv_heads = None
    for n in kernels:
        backward = FUSED[n.target]
        attention.append(names[n])
        for k in _KV_ARGS[backward]:
            src = rep.get(n.args[k]) if k < len(n.args) else None
            if src is not None and src is not n:
                kv[names[src], names[n]] = None
        if not backward and heads is None:
            heads, kv_heads = _heads(n)
    backwards = {n for n in kernels if FUSED[n.target]}
    summed: set = set()  # (kernel, output) whose first reader sums it
    for m in kept:  # each key or value gradient's first reader, in graph order
        for i in m.all_input_nodes:
            src, which = tensor.get(i) or (None, None)
            if src in backwards and which in _KV_GRAD_OUTPUTS and m is not src \
                    and (src, which) not in summed:
                summed.add((src, which))
                grads.append([names[src], names[m]])
    return {"attention": attention, "kv": [list(p) for p in kv], "kv_grads": grads,
            "heads": heads, "kv_heads": kv_heads}


def _all_fused(traced) -> bool:
    """Whether the step's attention all runs as fused kernels (`graph_attention`'s record)."""
    record = traced.attention or {}
    kernels = record.get("kernels") if isinstance(record, dict) else None
    return bool(kernels) and all(k in ("flash", "memory-efficient", "cpu") for k in kernels)


def _heads(n) -> tuple[int | None, int | None]:
    """The query and key/value heads of a forward kernel (its ``[b, h, s, d]`` arguments)."""
    shapes = [tuple(t.shape) for a in n.args[:2]
              for t in tensors(getattr(a, "meta", {}).get("val"))]
    if len(shapes) == 2 and all(len(s) == 4 for s in shapes):
        return int(shapes[0][1]), int(shapes[1][1])
    return None, None
