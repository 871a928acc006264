"""Where the op times on a cluster come from, said in words: measured on the device kind, a
roofline estimate (`moplace profile --estimate`), or another kind's times scaled by relative
speed (`costmodel.CostModel`). Results computed on estimates say so (`estimated_notes`).
"""

from __future__ import annotations


def estimated_notes(graph, cluster) -> list[str]:
    """One line per device kind of ``cluster`` whose op times on ``graph`` are not measured:
    roofline estimates the graph records (``metadata.estimated``), or no time at all for the
    kind, so the cost model scales another kind's; none when every kind was measured."""
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
    return notes
