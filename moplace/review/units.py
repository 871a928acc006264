"""Units a person reads at a glance: times in ns/µs/ms/s, sizes in B/KiB/MiB/GiB/TiB, any other
unit with SI prefixes (J, kJ, MJ...).

One unit is chosen per column or axis (from its largest value), so numbers in a table or on an
axis compare directly; single values are formatted in the unit that suits them. An objective's
kind, label and short name are those it was registered with (`objectives.Objective`): unit
``"s"`` is a time, ``"B"`` a size, another unit (``"J"``) is shown with SI prefixes and ``""`` as
a plain number. A name that is no objective is a time when it ends in ``_s``, a size when it
ends in ``bytes``, else a plain number.
"""

from __future__ import annotations

import math

from objectives import OBJECTIVES

from ..core.context import CP_COMM_WORDS
from ..core.strategy import SCHEDULE_LABELS

TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
BYTE_UNITS = (("TiB", 2.0 ** 40), ("GiB", 2.0 ** 30), ("MiB", 2.0 ** 20), ("KiB", 2.0 ** 10),
              ("B", 1.0))
SI_PREFIXES = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0),
               ("m", 1e-3), ("µ", 1e-6), ("n", 1e-9))
KINDS = {"s": "time", "B": "bytes", "": "number"}
#: each objective's label and short name (narrow columns), as registered
LABELS = OBJECTIVES.view("label")
SHORT = OBJECTIVES.view("short")


def kind_of(objective: str) -> str:
    """``"time"``, ``"bytes"``, ``"number"`` or the unit (``"J"``, shown with SI prefixes) of
    an objective, as it was registered (a name that is no objective: see the module)."""
    if objective in OBJECTIVES:
        unit = OBJECTIVES[objective].unit
        return KINDS.get(unit, unit)
    if objective.endswith("_s") or objective.endswith("seconds"):
        return "time"
    if objective.endswith("bytes"):
        return "bytes"
    return "number"


def label(name: str) -> str:
    """An objective's label (``peak communication``); another name with spaces for ``_``."""
    return LABELS.get(name) or name.replace("_", " ")


def short(name: str) -> str:
    """An objective's short name for narrow columns (``comm``); another name as it is."""
    return SHORT.get(name) or name


def _units(kind: str):
    if kind in ("time", "bytes"):
        return TIME_UNITS if kind == "time" else BYTE_UNITS
    if kind == "number" or not kind:
        return None
    return tuple((prefix + kind, size) for prefix, size in SI_PREFIXES)


def unit_for(kind: str, largest: float) -> tuple[str, float]:
    """(unit name, its size in base units) for values up to ``largest`` of ``kind``: the
    largest unit in which ``largest`` is at least 1."""
    units = _units(kind)
    if units is None:
        return "", 1.0
    largest = abs(float(largest)) if math.isfinite(largest) else 0.0
    for name, size in units:
        if largest >= size:
            return name, size
    if largest == 0.0 and kind != "bytes":  # a zero time or energy: in s, J
        return next(u for u in units if u[1] == 1.0)
    return units[-1]


def fmt(value: float, kind: str, unit: tuple[str, float] | None = None, digits: int = 4) -> str:
    """``value`` (seconds, bytes, joules...) as text, e.g. ``693.6 ms``, ``15.21 GiB``, ``0 B``,
    ``1.234 kJ``; in ``unit`` when given (a column's), else in the unit that suits the value."""
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


def column_unit(name: str, values, *, kind: str | None = None) -> tuple[str, float]:
    """One unit for a column of an objective's values (chosen from the largest finite one);
    ``kind`` for a column that is no objective's."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    return unit_for(kind or kind_of(name), max(finite, default=0.0))


def axis_label(name: str, unit: tuple[str, float]) -> str:
    """An axis or column title: the objective's name and its unit, e.g. ``runtime (ms)``."""
    text = label(name)
    return f"{text} ({unit[0]})" if unit[0] else text


def fmt_duration(seconds: float) -> str:
    """Wall time for progress displays: ``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def plan_text(plan: dict) -> str:
    """A strategy's plan (`moplace.core.levers.plan_of`) as a line a person reads at a
    glance, in the vocabulary of `show` and `export` (splits in ops, recomputation in groups,
    a regular plan by its degrees) and with only the levers that act: "data parallel ×8,
    25.00 MiB buckets, ZeRO-1", "4 devices, 161 ops split (64 on tensor), 88 groups
    recomputed, 8 micro-batches 1F1B" (buckets and ZeRO left out where no weights are
    replicated). A front written before a field existed reads as it did."""
    n = plan["devices"]
    degrees = plan.get("degrees")
    shape = _degrees_text(degrees) if isinstance(degrees, dict) else None
    parts = [shape or f"{n} device{'s' if n != 1 else ''}"]
    ops, tensor = _whole(plan.get("split_ops")), _whole(plan.get("tensor_ops"))
    if shape is None and ops:
        parts.append(f"{ops} ops split" + (f" ({tensor} on tensor)" if tensor else ""))
    elif shape is None and ops is None and plan.get("split_groups"):  # an older front
        tensor = plan.get("tensor_groups")
        parts.append(f"{plan['split_groups']} groups split"
                     + (f" ({tensor} tensor-parallel)" if tensor else ""))
    acting = plan.get("replicas") is not False  # older fronts: shown as they were
    if acting and plan.get("bucket_bytes"):
        parts.append(f"{fmt(plan['bucket_bytes'], 'bytes')} buckets")
    if acting and plan.get("zero_stage"):
        parts.append(f"ZeRO-{plan['zero_stage']}")
    if plan.get("recomputed_groups"):
        k = plan["recomputed_groups"]
        parts.append(f"{k} group{'s' if k != 1 else ''} recomputed")
    if plan.get("micro_batches", 1) > 1:
        parts.append(f"{plan['micro_batches']} micro-batches "
                     f"{SCHEDULE_NAMES.get(plan['schedule'], plan['schedule'])}")
    if plan.get("fp8") in ("all", "inner"):
        parts.append("FP8 matmuls" + (" (first and last layers BF16)"
                                      if plan["fp8"] == "inner" else ""))
    return ", ".join(parts)


def _whole(value) -> int | None:
    """``value`` when it is a whole number >= 0 (a damaged file's is not), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _degrees_text(degrees: dict) -> str | None:
    """A regular plan's degrees in words: "data parallel ×8", "2 pipeline stages × tensor
    parallel ×4", "data parallel ×8 with expert parallel ×8" (each device of the 8 replicas
    holds 1/8 of the experts), "context parallel ×8 (ring)" or "(all-to-all)"; None when they
    are not whole numbers >= 1."""
    dp, tp, pp = (_whole(degrees.get(k)) for k in ("data", "tensor", "pipeline"))
    if not all((dp, tp, pp)):
        return None
    vp = _whole(degrees.get("virtual")) or 1
    ep = _whole(degrees.get("expert")) or 1
    cp = _whole(degrees.get("context")) or 1
    comm = degrees.get("context_comm")
    comm = CP_COMM_WORDS.get(comm, "ring") if isinstance(comm, str) else "ring"
    parts = ([f"{pp} pipeline stages" + (f" of {vp} virtual" if vp > 1 else "")]
             if pp > 1 else []) \
        + ([f"data parallel ×{dp}" + (f" with expert parallel ×{ep}" if ep > 1 else "")]
           if dp > 1 else []) \
        + ([f"tensor parallel ×{tp}"] if tp > 1 else []) \
        + ([f"context parallel ×{cp} ({comm})"] if cp > 1 else [])
    return " × ".join(parts) or "1 device"


#: how a schedule reads in tables
SCHEDULE_NAMES = SCHEDULE_LABELS
