"""Context parallelism's edges (`ContextEdges`): where a traced graph's attention reads or
writes across the sequence, from its ``metadata["context"]`` (`moplace.torch.context`).

A token-wise op cut on ``sequence`` reads its tokens' slice of each input (the unit square's
third axis, `moplace.simulator.holdings`). Attention is not token-wise:

- **Ring attention.** A fused attention kernel's part on ``sequence`` reads every part's keys
  and values, not its slice: each device receives the ``c - 1`` other slices, ``(c - 1) / c``
  of the keys and values, as ring attention passes them round the ring (forward, and again in
  the backward). The backward kernel's part yields the keys' and values' gradients of all
  tokens, partial over its queries: each reader part sums its slice from every part, ``(c - 1)
  / c`` of them received per device (ring attention sends the partial gradients round with
  the blocks). The simulator moves them when the kernel's part starts (it waits for all of
  them) and ends; ring attention overlaps the blocks' transfer with their compute, so the
  simulated kernel runs later by the transfer (a doubt, stated in docs/model.md).
- **Ulysses.** A kernel (and the outputs it keeps apart) cut on ``channel`` is cut by heads:
  it reads its heads' slice of each input, which from parts on ``sequence`` is an all-to-all
  (each device ``(c - 1) / c^2`` of the tensor), and its readers on ``sequence`` read their
  tokens of every part's heads (the all-to-all back).

The balance of causal attention's work among the slices (the zig-zag split Megatron and
torchtitan use: each device two chunks, one early, one late) is assumed: a part costs ``1 / c``
of the kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .holdings import _CHANNEL, _PARTIAL, _SEQUENCE
from .plancache import PlanCache

_KEPT = PlanCache(limit=1)


@dataclass(frozen=True)
class ContextEdges:
    """``heads_wise``: per op, a fused attention kernel or an output it keeps apart (cut on
    channel, it reads its heads); ``kv``, ``kv_grads``: the sorted keys ``src * n_ops + dst``
    of the edges carrying keys or values into a kernel, and their gradients out of one."""

    n_ops: int
    heads_wise: np.ndarray
    kv: np.ndarray
    kv_grads: np.ndarray

    def adjust(self, a, orig, dims, held_e, need):
        """``held_e`` (per edge of ``a``'s graph, what its producer's part holds) and ``need``
        (what its reader's part needs) with attention's exceptions; ``orig``: each op of
        ``a``'s graph's op in the traced graph, ``dims`` its split dimension code."""
        u, v = a.src, a.dst
        key = orig[u] * self.n_ops + orig[v]
        kv = (dims[v] == _SEQUENCE) & _member(key, self.kv)
        need = np.where(kv, -1, need)
        heads = self.heads_wise[orig[v]] & (dims[v] == _CHANNEL) & (need == -1)
        need = np.where(heads, _CHANNEL, need)
        grads = (dims[u] == _SEQUENCE) & _member(key, self.kv_grads)
        return np.where(grads, _PARTIAL, held_e), need


def context_edges(graph) -> ContextEdges | None:
    """The `ContextEdges` of ``graph``, kept per graph; None when its metadata names no
    fused attention (a profile, a Keras graph, eager attention)."""
    meta = graph.metadata.get("context")
    if not isinstance(meta, Mapping) or not meta.get("attention"):
        return None
    return _KEPT.get(graph, "context", lambda: _make(graph, meta))


def _make(graph, meta: Mapping) -> ContextEdges:
    index, n = graph.index, len(graph.ops)
    kernels = [index[x] for x in meta.get("attention") if isinstance(x, str) and x in index]
    heads_wise = np.zeros(n, bool)
    heads_wise[kernels] = True
    a = graph.arrays
    output = np.array([op.type == "Output" for op in graph.ops], bool)
    heads_wise[a.dst[heads_wise[a.src] & output[a.dst]]] = True
    return ContextEdges(n, heads_wise, _keys(meta.get("kv"), index, n),
                        _keys(meta.get("kv_grads"), index, n))


def _keys(pairs, index, n: int) -> np.ndarray:
    keys = [index[p[0]] * n + index[p[1]] for p in pairs or ()
            if isinstance(p, (list, tuple)) and len(p) == 2
            and all(isinstance(x, str) and x in index for x in p)]
    return np.unique(np.array(keys, np.int64))


def _member(key: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    if not sorted_keys.size:
        return np.zeros(key.shape, bool)
    at = np.minimum(np.searchsorted(sorted_keys, key), sorted_keys.size - 1)
    return sorted_keys[at] == key
