"""Where the op times on a cluster come from, said in words: measured on the device kind, a
roofline estimate (`moplace profile --estimate`), or another kind's times scaled by relative
speed (`costmodel.CostModel`). Results computed on estimates say so (`estimated_notes`), and
results on a PyTorch graph say what it assumes of attention, the optimizer's state and, for
a mixture of experts, the routing (`assumption_notes`).
"""

from __future__ import annotations


def estimated_notes(graph, cluster) -> list[str]:
    """One line per device kind of ``cluster`` whose op times on ``graph`` are not measured:
    roofline estimates the graph records (``metadata.estimated``), or no time at all for the
    kind, so the cost model scales another kind's; none when every kind was measured. Then
    the graph's `assumption_notes`."""
    estimated = graph.metadata.get("estimated")
    estimated = estimated if isinstance(estimated, dict) else {}
    timed = set()
    for op in graph.ops:
        timed.update(op.compute)
    reference = graph.metadata.get("profiled_on")
    notes = []
    for kind in dict.fromkeys(cluster.kinds):
        if kind in estimated:
            notes.append(f"op times on {kind} are estimates ({estimated[kind]}), not "
                         f"measurements")
        elif timed and kind not in timed:
            source = reference if reference in timed else "another device kind"
            notes.append(f"no op was measured on {kind}: its times are {source}'s scaled by "
                         f"relative speed, an estimate")
    return notes + assumption_notes(graph)


def assumption_notes(graph) -> list[str]:
    """What a PyTorch graph assumes, one line each: its attention (``metadata.attention``:
    SDPA's kernels or eager, `moplace.torch.attention`) and its optimizer's state (16-bit
    weights with FP32 masters and moments, or the state in the weights' dtype). None for
    other graphs."""
    from ..core.optimizer import OPTIMIZERS, state_words

    meta = graph.metadata
    notes = []
    attention = meta.get("attention")
    if isinstance(attention, dict) and isinstance(attention.get("how"), str):
        notes.append(f"attention: {attention['how']}")
    optimizer = meta.get("optimizer")
    if meta.get("format") == "pytorch" and optimizer in OPTIMIZERS:
        notes.append(f"optimizer state: {state_words(optimizer)}")
    moe = meta.get("moe")
    if isinstance(moe, dict) and moe.get("routing") is not None:
        try:
            notes.append(routing_words(moe))
        except (TypeError, ValueError, AttributeError):  # a graph file edited by hand
            notes.append(f"routing: {str(moe.get('routing'))[:40]} (assumed, not from data; "
                         f"the graph's metadata.moe says no more that can be read)")
    return notes


def routing_words(moe: dict) -> str:
    """The routing a mixture-of-experts graph assumes (``metadata.moe``,
    `moplace.torch.routing`), in one line."""
    loads = [int(n) for n in moe.get("tokens_per_expert") or [0]]
    k, e, tokens = moe.get("top_k"), moe.get("experts"), int(moe.get("tokens") or 0)
    if moe.get("routing") == "skewed":
        how = (f"skewed, the hottest expert {moe.get('imbalance'):g}x the mean: {loads[0]:,} "
               f"tokens, the others {min(loads):,} to {max(loads[1:] or loads):,}")
    else:
        spread = f"{max(loads):,}" if max(loads) == min(loads) else \
            f"{min(loads):,} to {max(loads):,}"
        how = f"balanced, {spread} tokens per expert"
    cf = moe.get("capacity_factor")
    buffers = (f"capacity factor {cf:g}: buffers of {moe.get('capacity'):,} tokens" if cf
               else f"buffers of {moe.get('capacity'):,} tokens (the busiest expert's)")
    dropped = int(moe.get("dropped") or 0)
    shared = int(moe.get("shared_experts") or 0)
    return (f"routing: {how} per layer of {tokens:,} tokens (assumed, not from data), {k} of "
            f"{e} experts per token{f' and {shared} shared' if shared else ''}; {buffers}, "
            f"{f'{dropped:,} choices dropped' if dropped else 'none dropped'}; "
            f"{moe.get('layers')} MoE layer{'' if moe.get('layers') == 1 else 's'}")
