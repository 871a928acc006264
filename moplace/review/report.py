"""Plain-text renderings of evaluations, for the CLI (the JSON one is `Evaluation.as_dict`).

The same rules as the fronts' tables (`moplace.review.table`): four significant digits,
``yes``/``no``, and the memory beyond capacity said to be summed over devices. Units are
chosen once per report (`report_units`): every time (the runtime in the summary and in each
strategy's details, the devices' busy time) in one unit, every amount sent or received (peak
communication, sent, received) in one, every amount held (peak memory, capacity) in one, so
that numbers anywhere in the report compare at a glance.
"""

from __future__ import annotations

import math

from .table import OVER, aligned
from .units import axis_label, fmt, kind_of, label, number, unit_for

#: which unit each column and objective shares: times, traffic, memory
_SHARED = {"runtime": "time", "busy": "time", "peak_communication": "traffic", "sent": "traffic",
           "received": "traffic", "peak_memory": "held", "peak memory": "held",
           "capacity": "held"}
_KIND = {"time": "time", "traffic": "bytes", "held": "bytes"}


def feasibility(ev) -> str:
    """``feasible: yes``, or ``feasible: no (1.234 GiB over capacity, summed over devices)``."""
    if ev.feasible:
        return "feasible: yes"
    return f"feasible: no ({fmt(ev.violation, 'bytes')} {OVER})"


def _columns(ev, cluster) -> dict:
    t, n = ev.trace, cluster.n_devices
    return {"busy": t.busy[:n], "sent": t.sent[:n], "received": t.received[:n],
            "peak memory": t.peak_memory[:n], "capacity": t.capacity[:n]}


def report_units(results: dict, cluster) -> dict:
    """One unit per quantity for a whole report of ``results`` (name -> Evaluation): each
    objective's and each per-device column's, those that measure the same thing (`_SHARED`)
    in the same unit, chosen from the largest finite value among them."""
    largest: dict[str, float] = {}

    def see(key: str, values) -> None:
        finite = [abs(float(v)) for v in values if v is not None and math.isfinite(v)]
        largest[key] = max([largest.get(key, 0.0), *finite])

    for ev in results.values():
        for name, value in ev.objectives().items():
            see(_SHARED.get(name, name), [value])
        for column, values in _columns(ev, cluster).items():
            see(_SHARED[column], values)
    names = {n for ev in results.values() for n in ev.objectives()} | set(_SHARED)
    shared = {n: _SHARED.get(n, n) for n in names}
    return {n: unit_for(_KIND.get(shared[n]) or kind_of(n), largest.get(shared[n], 0.0))
            for n in names}


def evaluation_table(ev, cluster, units: dict | None = None) -> str:
    """Objectives and a per-device table of one evaluation, in ``units`` (`report_units`;
    by default this evaluation's own)."""
    units = units or report_units({"": ev}, cluster)
    t = ev.trace
    parts = [f"{label(name)} {fmt(v, kind_of(name), units.get(name))}"
             for name, v in ev.objectives().items()]
    lines = ["  " + "   ".join(parts) + "   " + feasibility(ev)]
    columns = _columns(ev, cluster)
    kinds = {c: _KIND[_SHARED[c]] for c in columns}
    heads = ["device", "kind"] + [f"{c} ({units[c][0]})" for c in columns] + ["over"]
    rows = [[d.name, d.kind]
            + [number(values[i], kinds[c], units[c]) for c, values in columns.items()]
            + ["yes" if t.peak_memory[i] > t.capacity[i] else ""]
            for i, d in enumerate(cluster.devices)]
    lines += ["  " + line for line in aligned(heads, rows, words={"device", "kind", "over"})]
    return "\n".join(lines)


def summary_table(results: dict, units: dict | None = None, notes: dict | None = None) -> str:
    """One line per named evaluation: its objectives and feasibility, in ``units``
    (`report_units`; by default the results' own); ``notes``: a word on a row (name ->
    text), in a last column."""
    names = list(dict.fromkeys(n for ev in results.values() for n in ev.names))
    if units is None:
        from .units import column_unit

        units = {n: column_unit(n, [ev.objectives().get(n) for ev in results.values()
                                    if n in ev.objectives()]) for n in names}
    notes = notes or {}
    heads = ["strategy"] + [axis_label(n, units[n]) for n in names] + ["feasible"] \
        + (["note"] if notes else [])
    rows = [[name] + [number(ev.objectives()[n], kind_of(n), units[n])
                      if n in ev.objectives() else "-" for n in names]
            + ["yes" if ev.feasible else "no"] + ([notes.get(name, "")] if notes else [])
            for name, ev in results.items()]
    return "\n".join(aligned(heads, rows, words={"strategy", "feasible", "note"}))
