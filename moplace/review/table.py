"""A front as a short table a person reads at a glance, the same for `moplace search` and
`moplace show`.

- At most `ROW_LIMIT` rows unless every point is asked for: each objective's best, the knee,
  then the points farthest from those already shown (objectives scaled to [0, 1] over the
  front), so the rows spread along the front; they are listed in the order of the first
  objective.
- Points equal at the displayed precision are folded into one row (``= #4 #7`` names the
  others), so a row is a distinct choice.
- Each objective in one unit per column (`moplace.review.units.column_unit`), every cell with
  the same significant digits; ``yes``/``no`` for booleans; the memory a point needs beyond the
  devices' capacity, summed over devices, in a column that says so.
- The knee and any point equal to a baseline (at the displayed precision, or within
  `moplace.optimize.archive.RTOL`) named in the notes.
- ``runs``: the runners able to run each point (`moplace.core.runners`; ``titan``, ``mega``,
  ``apply`` for torchtitan, Megatron-LM, ``moplace apply``), when the front records them.

Rows keep the front's point numbers, which ``--point K`` takes.
"""

from __future__ import annotations

import numpy as np

from .units import axis_label, column_unit, kind_of, number

ROW_LIMIT = 10
OVER = "over capacity, summed over devices"


def front_rows(values, knee: int | None, limit: int | None = ROW_LIMIT,
               keys=None) -> tuple[list[int], dict[int, list[int]]]:
    """(the point numbers to show, in the first objective's order; the points each shown one
    stands for). ``keys`` (one hashable per point: its displayed cells) folds equal points
    into the first of them (the knee when it is among them); ``limit`` None shows every
    distinct point."""
    v = np.asarray(values, float).reshape(len(values), -1)
    groups: dict[object, list[int]] = {}
    for k in range(len(v)):
        groups.setdefault(keys[k] if keys is not None else k, []).append(k)
    folded = {}
    for members in groups.values():
        head = knee if knee in members else members[0]
        folded[head] = [k for k in members if k != head]
    heads = list(folded)
    if limit is not None and len(heads) > limit:
        heads = _spread(v, heads, knee, limit)
    heads.sort(key=lambda k: (tuple(v[k]), k))
    return heads, {k: folded[k] for k in heads}


def _spread(v: np.ndarray, candidates: list[int], knee, limit: int) -> list[int]:
    """``limit`` of ``candidates``: each objective's best and the knee first, then greedily
    the candidate farthest from every one chosen (ties: the lowest number)."""
    c = np.array(candidates)
    lo, hi = v[c].min(axis=0), v[c].max(axis=0)
    scaled = (v[c] - lo) / np.where(hi > lo, hi - lo, 1.0)
    chosen = list(dict.fromkeys([int(np.argmin(v[c, j])) for j in range(v.shape[1])]
                                + ([candidates.index(knee)] if knee in candidates else [])))
    chosen = chosen[:limit]
    gap = np.min(np.linalg.norm(scaled[:, None, :] - scaled[None, chosen, :], axis=2), axis=1)
    while len(chosen) < limit:
        nxt = int(np.argmax(gap))
        chosen.append(nxt)
        gap = np.minimum(gap, np.linalg.norm(scaled - scaled[nxt], axis=1))
    return [candidates[i] for i in chosen]


def front_text(data: dict, *, every: bool = False, limit: int = ROW_LIMIT) -> str:
    """The points of a front.json's content (``data``; its least-violating infeasible points
    when none fits) as a table, with a line saying what was left out (module docstring)."""
    from objectives import json_key

    from ..optimize.archive import same_values
    from .marks import front_knee
    from .units import plan_text

    objectives = list(data["objectives"])
    points = data["points"] or data.get("infeasible") or []
    if not points:
        return "no points"
    values = np.array([[p[json_key(o)] for o in objectives] for p in points], float)
    knee = front_knee(data) if data["points"] else None
    units = [column_unit(o, values[:, j]) for j, o in enumerate(objectives)]

    def cells(row) -> tuple[str, ...]:
        return tuple(number(x, kind_of(o), u) for x, o, u in zip(row, objectives, units))

    shown = [cells(row) for row in values]
    rows, folded = front_rows(values, knee, None if every else limit, keys=shown)
    marks = {name: [b[json_key(o)] for o in objectives]
             for name, b in (data.get("baselines") or {}).items()}
    baselines = {name: cells(v) for name, v in marks.items()}
    heads = ["#"] + [axis_label(o, u) for o, u in zip(objectives, units)] + ["feasible"]
    any_over = not all(p["feasible"] for p in points)
    over_unit = column_unit("over", [p["violation_bytes"] for p in points], kind="bytes")
    if any_over:
        heads.append(f"{OVER} ({over_unit[0]})")
    rates = [(p.get("throughput") or {}).get("tflops_per_gpu") for p in points]
    mfus = [(p.get("throughput") or {}).get("mfu") for p in points]
    if any(r is not None for r in rates):  # a transformer's model FLOPs (moplace.core.flops)
        heads.append("TFLOP/s/GPU" + (" (MFU)" if any(m is not None for m in mfus) else ""))
    comparison = any("searcher" in p for p in points)
    if comparison:
        heads.append("searcher")
    runs = any("runs" in p for p in points)  # fronts before runners were recorded: none
    heads += ["notes"] + (["runs"] if runs else []) + ["plan"]
    table = []
    for k in rows:
        p = points[k]
        notes = (["knee"] if k == knee else []) \
            + [f"= {name}" for name, c in baselines.items()
               if c == shown[k] or same_values(marks[name], values[k])] \
            + ([" ".join(["="] + [f"#{j}" for j in folded[k]])] if folded[k] else [])
        row = [str(k), *shown[k], "yes" if p["feasible"] else "no"]
        if any_over:
            row.append(number(p["violation_bytes"], "bytes", over_unit)
                       if not p["feasible"] else "")
        if any(r is not None for r in rates):
            row.append("" if rates[k] is None else f"{rates[k]:,.0f}"
                       + (f" ({mfus[k]:.0%})" if mfus[k] is not None else ""))
        if comparison:
            row.append(str(p.get("searcher", "")))
        plan, regular = p.get("plan"), p.get("regular")
        row += [", ".join(notes)] + ([runs_text(p.get("runs"))] if runs else []) \
            + [plan_text(plan) if isinstance(plan, dict) else
               str(regular.get("text", "")) if isinstance(regular, dict) else ""]
        table.append(row)
    lines = aligned(heads, table, words={"feasible", "searcher", "notes", "runs", "plan"})
    if len(rows) < len(set(shown)):
        lines.append(f"{len(rows)} of {len(set(shown))} distinct points shown: each "
                     f"objective's best, the knee and points spread along the front (--all "
                     f"shows every one)")
    if any(folded.values()):
        lines.append("'= #k' names the points equal to the row at the precision shown")
    if any(r is not None for r in rates):
        from ..core.flops import CONVENTION

        lines.append(f"TFLOP/s/GPU: {CONVENTION}, per GPU of the cluster"
                     + (" (MFU: of its dense BF16 peak)" if any(m is not None for m in mfus)
                        else ""))
    if not data["points"]:
        lines.append("no strategy fits in memory; the rows are the least-violating ones")
    return "\n".join(lines)


#: the runners as the ``runs`` column writes them (`moplace.core.runners.RUNNERS`)
RUNS_SHORT = {"torchtitan": "titan", "megatron": "mega", "moplace-apply": "apply"}


def runs_text(runs) -> str:
    """A point's runners, compact: ``titan+mega+apply``; ``-`` for none."""
    return "+".join(RUNS_SHORT.get(r, r) for r in runs or []) or "-"


def aligned(heads: list[str], rows: list[list[str]], words: set[str]) -> list[str]:
    """Columns of numbers right-aligned, the columns headed ``words`` left-aligned; trailing
    spaces trimmed."""
    widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(heads)]

    def line(cells):
        return "  ".join(c.ljust(w) if h in words else c.rjust(w)
                         for c, w, h in zip(cells, widths, heads)).rstrip()

    return [line(heads)] + [line(r) for r in rows]
