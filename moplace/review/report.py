"""Plain-text renderings of evaluations, for the CLI (the JSON one is `Evaluation.as_dict`).

The same rules as the fronts' tables (`moplace.review.table`): one unit per column chosen from
its values (`moplace.review.units.column_unit`), four significant digits, ``yes``/``no``, and
the memory beyond capacity said to be summed over devices.
"""

from __future__ import annotations

from .table import OVER, aligned
from .units import axis_label, column_unit, fmt, kind_of, label, number


def feasibility(ev) -> str:
    """``feasible: yes``, or ``feasible: no (1.234 GiB over capacity, summed over devices)``."""
    if ev.feasible:
        return "feasible: yes"
    return f"feasible: no ({fmt(ev.violation, 'bytes')} {OVER})"


def evaluation_table(ev, cluster) -> str:
    """Objectives and a per-device table of one evaluation."""
    t = ev.trace
    parts = [f"{label(name)} {fmt(v, kind_of(name))}" for name, v in ev.objectives().items()]
    lines = ["  " + "   ".join(parts) + "   " + feasibility(ev)]
    n = cluster.n_devices
    columns = {"busy": ("time", t.busy[:n]), "sent": ("bytes", t.sent[:n]),
               "received": ("bytes", t.received[:n]), "peak memory": ("bytes", t.peak_memory[:n]),
               "capacity": ("bytes", t.capacity[:n])}
    units = {c: column_unit(c, values, kind=kind) for c, (kind, values) in columns.items()}
    heads = ["device", "kind"] + [f"{c} ({units[c][0]})" for c in columns] + ["over"]
    rows = [[d.name, d.kind]
            + [number(values[i], kind, units[c]) for c, (kind, values) in columns.items()]
            + ["yes" if t.peak_memory[i] > t.capacity[i] else ""]
            for i, d in enumerate(cluster.devices)]
    lines += ["  " + line for line in aligned(heads, rows, words={"device", "kind", "over"})]
    return "\n".join(lines)


def summary_table(results: dict) -> str:
    """One line per named evaluation: its objectives and feasibility."""
    names = list(dict.fromkeys(n for ev in results.values() for n in ev.names))
    units = {n: column_unit(n, [ev.objectives().get(n) for ev in results.values()
                                if n in ev.objectives()]) for n in names}
    heads = ["strategy"] + [axis_label(n, units[n]) for n in names] + ["feasible"]
    rows = [[name] + [number(ev.objectives()[n], kind_of(n), units[n])
                      if n in ev.objectives() else "-" for n in names]
            + ["yes" if ev.feasible else "no"] for name, ev in results.items()]
    return "\n".join(aligned(heads, rows, words={"strategy", "feasible"}))
