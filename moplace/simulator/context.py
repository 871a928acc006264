"""Context parallelism's edges (`ContextEdges`): where a traced graph's attention reads or
writes across the sequence, from its ``metadata["context"]`` (`moplace.torch.context`).

A token-wise op cut on ``sequence`` reads its tokens' slice of each input (the unit square's
third axis, `moplace.simulator.holdings`). Attention is not token-wise:

- **Ring attention.** A fused forward attention kernel's part on ``sequence`` reads every
  part's keys and values, not its slice: each device receives the ``c - 1`` other slices,
  ``(c - 1) / c`` of the keys and values, as ring attention passes them round the ring, and
  holds them until the kernel's part ends (ring attention keeps only its own block for the
  backward). The backward kernel's part yields the keys' and values' gradients of all tokens,
  partial over its queries: each reader part sums its slice from every part. In the backward
  ring attention passes the keys and values round again, with the partial gradients: the
  simulator moves both with the gradients (each gradient edge twice its bytes, ``2 (c - 1) /
  c`` of the tensor received per device) when the backward kernel's part ends, and the
  backward kernel reads its own keys and values. The forward kernel's part waits for all its
  blocks; ring attention overlaps the blocks' transfer with their compute, so the simulated
  kernel runs later by the transfer (a doubt, stated in docs/model.md).
- **Ulysses.** A kernel (and the outputs it keeps apart) cut on ``channel`` is cut by heads:
  it reads its heads' slice of each input, which from parts on ``sequence`` is an all-to-all
  (each device ``(c - 1) / c^2`` of the tensor), and its readers on ``sequence`` read their
  tokens of every part's heads (the all-to-all back).

The balance of causal attention's work among the slices (the zig-zag split Megatron and
torchtitan use: each device two chunks, one early, one late) is assumed: a part costs ``1 / c``
of the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.context import context_of
from ..core.graph import ROLES
from .holdings import _CHANNEL, _PARTIAL, _SEQUENCE
from .plancache import PlanCache

_KEPT = PlanCache(limit=1)


@dataclass(frozen=True)
class ContextEdges:
    """``heads_wise``: per op, a fused attention kernel or an output it keeps apart (cut on
    channel, it reads its heads); ``forward``: per op, a forward kernel; ``kv``,
    ``kv_grads``: the sorted keys ``src * n_ops + dst`` of the edges carrying keys or values
    into a kernel, and their gradients out of one."""

    n_ops: int
    heads_wise: np.ndarray
    forward: np.ndarray
    kv: np.ndarray
    kv_grads: np.ndarray

    def adjust(self, a, orig, dims, held_e, need):
        """``held_e`` (per edge of ``a``'s graph, what its producer's part holds) and ``need``
        (what its reader's part needs) with attention's exceptions, and the factor of each
        edge's bytes (None: all 1); ``orig``: each op of ``a``'s graph's op in the traced
        graph, ``dims`` its split dimension code."""
        seq, chan = dims == _SEQUENCE, dims == _CHANNEL
        if not (seq.any() or (chan & self.heads_wise[orig]).any()):
            return held_e, need, None  # nothing of the plan crosses the sequence
        u, v = a.src, a.dst
        key = orig[u] * self.n_ops + orig[v]
        kv = _member(key, self.kv)
        need = np.where(seq[v] & kv & self.forward[orig[v]], -1, need)
        # its heads from a part on sequence (Ulysses' all-to-all) or a whole tensor; from
        # channel parts (a packed projection's columns need not be its heads) all of them
        heads = self.heads_wise[orig[v]] & chan[v] & (need == -1) & (
            (dims[u] == _SEQUENCE) | (dims[u] < 0))
        need = np.where(heads, _CHANNEL, need)
        grads = seq[u] & _member(key, self.kv_grads)
        scale = np.where(grads, 2.0, 1.0) if grads.any() else None  # the keys and values too
        return np.where(grads, _PARTIAL, held_e), need, scale


def context_edges(graph) -> ContextEdges | None:
    """The `ContextEdges` of ``graph``, kept per graph; None when it names no fused attention
    (`moplace.core.context.context_of`: a profile, a Keras graph, eager attention)."""
    info = context_of(graph)
    if info is None or not info.kernels:
        return None
    return _KEPT.get(graph, "context", lambda: _make(graph, info.kernels))


def _make(graph, kernels) -> ContextEdges:
    meta, index, n = graph.metadata["context"], graph.index, len(graph.ops)
    heads_wise = np.zeros(n, bool)
    heads_wise[list(kernels)] = True
    a = graph.arrays
    forward = heads_wise & (a.role == ROLES.index("forward"))
    output = np.array([op.type == "Output" for op in graph.ops], bool)
    heads_wise[a.dst[heads_wise[a.src] & output[a.dst]]] = True
    return ContextEdges(n, heads_wise, forward, _keys(meta.get("kv"), index, n),
                        _keys(meta.get("kv_grads"), index, n))


def _keys(pairs, index, n: int) -> np.ndarray:
    keys = [index[p[0]] * n + index[p[1]] for p in (pairs if isinstance(pairs, list) else ())
            if isinstance(p, (list, tuple)) and len(p) == 2
            and all(isinstance(x, str) and x in index for x in p)]
    return np.unique(np.array(keys, np.int64))


def _member(key: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    if not sorted_keys.size:
        return np.zeros(key.shape, bool)
    at = np.minimum(np.searchsorted(sorted_keys, key), sorted_keys.size - 1)
    return sorted_keys[at] == key
