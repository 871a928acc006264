"""Units a person reads at a glance: times in ns/µs/ms/s, sizes in B/KiB/MiB/GiB/TiB.

One unit is chosen per column or axis (from its largest value), so numbers in a table or on an
axis compare directly; single values are formatted in the unit that suits them. Objectives are
mapped to their kind by name: ``runtime`` is a time, the others (``peak_communication``,
``peak_memory``) are sizes; an objective moplace does not know is shown as a plain number.
"""

from __future__ import annotations

import math

TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
BYTE_UNITS = (("TiB", 2.0 ** 40), ("GiB", 2.0 ** 30), ("MiB", 2.0 ** 20), ("KiB", 2.0 ** 10),
              ("B", 1.0))
LABELS = {"runtime": "runtime", "peak_communication": "peak communication",
          "peak_memory": "peak memory"}
SHORT = {"runtime": "runtime", "peak_communication": "comm", "peak_memory": "mem"}  # narrow columns


def kind_of(objective: str) -> str:
    """``"time"``, ``"bytes"`` or ``"number"`` for an objective's name."""
    if objective == "runtime" or objective.endswith("_s") or objective.endswith("seconds"):
        return "time"
    if objective.startswith("peak_") or objective.endswith("bytes"):
        return "bytes"
    return "number"


def unit_for(kind: str, largest: float) -> tuple[str, float]:
    """(unit name, its size in base units) for values up to ``largest`` of ``kind``: the
    largest unit in which ``largest`` is at least 1."""
    units = {"time": TIME_UNITS, "bytes": BYTE_UNITS}.get(kind)
    if units is None:
        return "", 1.0
    largest = abs(float(largest)) if math.isfinite(largest) else 0.0
    for name, size in units:
        if largest >= size:
            return name, size
    if largest == 0.0 and kind == "time":
        return TIME_UNITS[0]
    return units[-1]


def fmt(value: float, kind: str, unit: tuple[str, float] | None = None, digits: int = 4) -> str:
    """``value`` (seconds or bytes) as text, e.g. ``693.6 ms``, ``15.21 GiB``, ``0 B``; in
    ``unit`` when given (a column's), else in the unit that suits the value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if not math.isfinite(value):
        return "inf"
    name, size = unit if unit is not None else unit_for(kind, value)
    if value == 0:
        return f"0 {name}".rstrip() if kind != "time" else "0 s"
    x = value / size
    if kind == "bytes" and name == "B":
        return f"{x:.0f} B"
    decimals = max(digits - 1 - int(math.floor(math.log10(abs(x)))), 0) if x else 0
    return f"{x:.{decimals}f} {name}".rstrip()


def number(value: float, kind: str, unit: tuple[str, float]) -> str:
    """``value`` in ``unit`` without the unit's name: a table cell under a header that names it."""
    return fmt(value, kind, unit).rsplit(" ", 1)[0]


def column_unit(name: str, values) -> tuple[str, float]:
    """One unit for a column of an objective's values (chosen from the largest finite one)."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    return unit_for(kind_of(name), max(finite, default=0.0))


def axis_label(name: str, unit: tuple[str, float]) -> str:
    """An axis or column title: the objective's name and its unit, e.g. ``runtime (ms)``."""
    label = LABELS.get(name, name.replace("_", " "))
    return f"{label} ({unit[0]})" if unit[0] else label


def fmt_duration(seconds: float) -> str:
    """Wall time for progress displays: ``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
