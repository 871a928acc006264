"""What context parallelism (CP) may do with a graph (`context_of`): read once from the graph's
``metadata["context"]`` (`moplace.torch.context`, written where a traced step's attention is
all fused) and its ops' ``sequence`` splits.

Two ways of CP are told apart (`moplace.core.planshape`, `moplace.core.degrees`):

- **ring** (Megatron's ``--cp-comm-type p2p``, torchtitan's ``context_parallel_degree``):
  every group of a stage split on ``sequence`` over its ``c`` devices, each its slice of the
  tokens; the attention kernels' parts read every other part's keys and values;
- **all-to-all** (Ulysses, Megatron's ``--cp-comm-type a2a``): the same, but for the
  co-location groups of the attention kernels, split on ``channel`` (heads) over the same
  devices: tokens and heads swapped by all-to-all around each attention. Only where every
  such group may split on ``channel`` whole (`ContextInfo.ulysses`): a traced Llama's
  kernels share their group with the tensor-parallel block's projections and rotary ops,
  which cannot, so no Ulysses plan is stated for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .graph import SPLIT_DIMS, OpGraph

#: the ways of context parallelism, as `PlanShape.cp_comm` names them (Megatron's names)
CP_COMMS = ("p2p", "a2a")
#: their words in plan text
CP_COMM_WORDS = {"p2p": "ring", "a2a": "all-to-all"}


@dataclass(frozen=True)
class ContextInfo:
    """A graph's facts for CP: ``heads`` and ``kv_heads`` of its attention (None where
    unnamed), ``seq_len`` its sequences' tokens (``metadata["source"]``, None where unnamed),
    ``kernels`` the attention kernels' ops, ``attention_groups`` the co-location groups
    holding them and ``ulysses`` whether each of those may split on ``channel`` (module
    docstring)."""

    heads: int | None
    kv_heads: int | None
    seq_len: int | None
    kernels: tuple[int, ...]
    attention_groups: frozenset[int]
    ulysses: bool

    def ulysses_misfit(self, c: int) -> str | None:
        """Why Ulysses cannot run over ``c`` devices (None: it can)."""
        if not self.ulysses:
            return ("all-to-all (Ulysses) context parallelism: the attention kernels share "
                    "their co-location groups with ops that cannot split on heads")
        for what, n in (("attention", self.heads), ("key/value", self.kv_heads)):
            if not n or n % c:
                return (f"all-to-all (Ulysses) context parallel over {c} devices: the "
                        f"{n or 'unnamed'} {what} heads do not divide among them")
        return None


def _whole(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


@lru_cache(maxsize=8)  # a search asks this of one graph for every plan
def context_of(graph: OpGraph) -> ContextInfo | None:
    """``graph``'s `ContextInfo`; None where it names no context (no fused attention, a graph
    traced before CP) or no op of it may split on ``sequence``."""
    meta = graph.metadata.get("context")
    able = (graph.arrays.split_mask >> SPLIT_DIMS.index("sequence")) & 1
    if not isinstance(meta, dict) or not able.any():
        return None
    names = meta.get("attention")
    ops = [graph.index[n] for n in names if isinstance(n, str) and n in graph.index] \
        if isinstance(names, list) else []
    groups = frozenset(int(graph.arrays.group[i]) for i in ops)
    ulysses = bool(groups) and all("channel" in graph.ops[i].splittable
                                   for g in groups for i in graph.groups[g])
    source = graph.metadata.get("source")
    seq = _whole(source.get("seq_len")) if isinstance(source, dict) else None
    return ContextInfo(_whole(meta.get("heads")), _whole(meta.get("kv_heads")), seq,
                       tuple(ops), groups, ulysses)


def sequence_misfit(info: ContextInfo, c: int, per: int = 1) -> str | None:
    """Why a sequence cannot cut into ``per * c`` equal slices (None: it can, or the graph does
    not name its length): Megatron and torchtitan cut it in ``2c`` for their load-balanced
    causal split (``per`` 2)."""
    if info.seq_len and info.seq_len % (per * c):
        return (f"context parallel over {c} devices: the sequences' {info.seq_len} tokens do "
                f"not cut into {per * c} equal slices"
                + (" (the load-balanced causal split cuts 2 per device)" if per > 1 else ""))
    return None
