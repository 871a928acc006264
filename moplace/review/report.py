"""Plain-text renderings of evaluations, for the CLI (the JSON one is `Evaluation.as_dict`).

Times are in ms and sizes in GiB, three decimals, as the per-device table beside them; an
objective of another unit in the unit that suits it (`moplace.review.units`).
"""

from __future__ import annotations

from objectives import OBJECTIVES

from .units import column_unit, fmt, kind_of

GIB = 2.0 ** 30
FIXED = {"time": ("ms", 1e-3), "bytes": ("GiB", GIB)}  # the per-device table's units


def _unit(name: str, values) -> tuple[str, float]:
    return FIXED.get(kind_of(name)) or column_unit(name, values)


def _value(value: float, name: str, unit: tuple[str, float], width: int = 0) -> str:
    if kind_of(name) in FIXED:  # times the reciprocal: ms as value * 1e3, bit for bit
        return f"{value * (1.0 / unit[1]):{width}.3f}"
    text = fmt(value, kind_of(name), unit)
    return f"{text.rsplit(' ', 1)[0] if unit[0] else text:>{width}}"


def _label(name: str, field: str) -> str:
    return getattr(OBJECTIVES[name], field) if name in OBJECTIVES else name.replace("_", " ")


def evaluation_table(ev, cluster) -> str:
    """Objectives and a per-device table of one evaluation."""
    t = ev.trace
    parts = []
    for name, v in ev.objectives().items():
        unit = _unit(name, [v])
        parts.append(f"{_label(name, 'label')} {_value(v, name, unit)} {unit[0]}".rstrip())
    lines = ["  " + "   ".join(parts) + "   "
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
    """One line per named evaluation: its objectives and feasibility."""
    names = list(dict.fromkeys(n for ev in results.values() for n in ev.names))
    units = {n: _unit(n, [ev.objectives().get(n) for ev in results.values()]) for n in names}
    heads = {n: f"{_label(n, 'column')} {units[n][0]}".rstrip() for n in names}
    width = max([16, *map(len, results)])  # the names column fits the longest name
    lines = [f"{'strategy':<{width}} " + " ".join(f"{heads[n]:>{len(heads[n]) + 1}}"
                                                   for n in names) + "  feasible"]
    for name, ev in results.items():
        v = ev.objectives()
        cells = [_value(v[n], n, units[n], len(heads[n]) + 1) if n in v
                 else f"{'-':>{len(heads[n]) + 1}}" for n in names]
        lines.append(f"{name:<{width}} " + " ".join(cells)
                     + f"  {'yes' if ev.feasible else 'NO'}")
    return "\n".join(lines)
