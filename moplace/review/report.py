"""Plain-text renderings of evaluations, for the CLI (the JSON one is `Evaluation.as_dict`)."""

from __future__ import annotations

GIB = 2.0 ** 30


def evaluation_table(ev, cluster) -> str:
    """Objectives and a per-device table of one evaluation."""
    t = ev.trace
    v = ev.objectives()
    lines = [f"  runtime {v['runtime'] * 1e3:.3f} ms   peak communication "
             f"{v['peak_communication'] / GIB:.3f} GiB   peak memory {v['peak_memory'] / GIB:.3f} GiB   "
             + ("feasible" if ev.feasible else f"INFEASIBLE: {ev.violation / GIB:.3f} GiB over memory")]
    lines.append(f"  {'device':<10} {'kind':<10} {'busy ms':>9} {'sent GiB':>9} {'recv GiB':>9} "
                 f"{'peak GiB':>9} {'cap GiB':>8}")
    for i, d in enumerate(cluster.devices):
        over = " over" if t.peak_memory[i] > t.capacity[i] else ""
        lines.append(f"  {d.name:<10} {d.kind:<10} {t.busy[i] * 1e3:9.3f} {t.sent[i] / GIB:9.3f} "
                     f"{t.received[i] / GIB:9.3f} {t.peak_memory[i] / GIB:9.3f} "
                     f"{t.capacity[i] / GIB:8.2f}{over}")
    return "\n".join(lines)


def summary_table(results: dict) -> str:
    """One line per named evaluation: the three objectives and feasibility."""
    lines = [f"{'strategy':<16} {'runtime ms':>11} {'peak comm GiB':>14} {'peak mem GiB':>13}  feasible"]
    for name, ev in results.items():
        v = ev.objectives()
        lines.append(f"{name:<16} {v['runtime'] * 1e3:11.3f} {v['peak_communication'] / GIB:14.3f} "
                     f"{v['peak_memory'] / GIB:13.3f}  {'yes' if ev.feasible else 'NO'}")
    return "\n".join(lines)
