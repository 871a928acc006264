"""Where the op times on a cluster come from, said in words: measured on the device kind, a
roofline estimate (`moplace profile --estimate`), or another kind's times scaled by relative
speed (`costmodel.CostModel`). Results computed on estimates say so (`estimated_notes`), and
results on a PyTorch graph say what it assumes of attention and the optimizer's state
(`assumption_notes`).
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
    return notes
