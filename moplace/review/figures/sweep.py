"""Figures of a sweep: each returned value against each swept parameter, and the fronts of the
best trials overlaid.

Inputs are plain rows (one dict per trial: ``params``, ``values``, ``state``, ``number``) so the
figures come from the study alone. A categorical parameter (a graph, a searcher) is drawn at
evenly spaced positions with its values as tick labels.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..units import axis_label, column_unit
from .common import SERIES, legend_below_and_save, new_figure, save

#: the kind of each value a trial returns (its unit follows)
RETURN_KINDS = {"hypervolume": "number", "best_runtime": "time",
                "best_runtime_within_memory": "time", "search_seconds": "time"}


def _label(name: str, unit) -> str:
    text = name.replace("_", " ")
    return f"{text} ({unit[0]})" if unit[0] else text


def _positions(values):
    """x positions for a parameter's values: numbers as they are, anything else by category."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values], None
    cats = sorted({repr(v) for v in values})
    shown = {repr(v): str(v) for v in values}
    return [float(cats.index(repr(v))) for v in values], [shown[c] for c in cats]


def values_by_parameter(rows, returns, directions, params, path, *, title="") -> None:
    """One panel per (returned value, swept parameter): each complete trial a point, the best
    trial ringed; log x when the parameter spans two decades or more."""
    done = [r for r in rows if r["state"] == "complete"]
    params = list(params) or ["trial"]
    fig = new_figure(4.2 * len(params), 3.4 * len(returns))
    for i, (name, direction) in enumerate(zip(returns, directions)):
        ys = [r["values"].get(name) for r in done]
        ok = [y is not None and math.isfinite(y) for y in ys]
        unit = column_unit("x", [y for y, good in zip(ys, ok) if good]) \
            if RETURN_KINDS.get(name) == "number" else _unit(name, ys, ok)
        best = None
        if any(ok):
            pick = min if direction == "minimize" else max
            best = pick((k for k in range(len(done)) if ok[k]), key=lambda k: ys[k])
        for j, p in enumerate(params):
            ax = fig.add_subplot(len(returns), len(params), i * len(params) + j + 1)
            xs_raw = [r["params"].get(p, r["number"]) if p != "trial" else r["number"] for r in done]
            xs, ticks = _positions(xs_raw)
            good_x = [x for x, g in zip(xs, ok) if g]
            good_y = [y / unit[1] for y, g in zip(ys, ok) if g]
            ax.scatter(good_x, good_y, s=28, color=SERIES[0], zorder=3)
            if best is not None:
                ax.scatter([xs[best]], [ys[best] / unit[1]], s=150, facecolors="none",
                           edgecolors="crimson", linewidths=2, zorder=4,
                           label=f"best: trial {done[best]['number']}")
                ax.legend(fontsize=8, loc="best")
            if ticks is not None:
                ax.set_xticks(range(len(ticks)), ticks, rotation=20, fontsize=8)
            elif good_x and min(good_x) > 0 and max(good_x) / min(good_x) >= 100:
                ax.set_xscale("log")
            ax.set_xlabel(p)
            ax.set_ylabel(_label(name, unit))
            ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save(fig, path)


def _unit(name, ys, ok):
    from ..units import unit_for

    finite = [y for y, g in zip(ys, ok) if g]
    return unit_for(RETURN_KINDS.get(name, "number"), max(finite) if finite else 0.0)


def best_fronts(fronts: dict, objectives, path, *, title="") -> None:
    """The fronts of the best trials (label -> [points x objectives]) overlaid, on each pair
    of objectives."""
    objectives = list(objectives)
    arrays = {k: np.asarray(v, float).reshape(-1, len(objectives)) for k, v in fronts.items()}
    everything = np.vstack(list(arrays.values())) if arrays else np.zeros((0, len(objectives)))
    units = [column_unit(o, list(everything[:, k])) for k, o in enumerate(objectives)]
    pairs = list(itertools.combinations(range(len(objectives)), 2)) or [(0, 0)]
    fig = new_figure(5.0 * len(pairs), 4.6)
    for j, (a, b) in enumerate(pairs):
        ax = fig.add_subplot(1, len(pairs), j + 1)
        for k, (label, v) in enumerate(arrays.items()):
            order = np.argsort(v[:, a], kind="stable")
            colour = SERIES[k % len(SERIES)]
            ax.plot(v[order, a] / units[a][1], v[order, b] / units[b][1], color=colour,
                    alpha=0.35, lw=0.8)
            ax.scatter(v[:, a] / units[a][1], v[:, b] / units[b][1], s=16, color=colour,
                       label=f"{label} ({len(v)} points)")
        ax.set_xlabel(axis_label(objectives[a], units[a]))
        ax.set_ylabel(axis_label(objectives[b], units[b]))
        ax.grid(alpha=0.3)
    legend_below_and_save(fig, path, title=title, ncol=3, fontsize=8, y=-0.04, bottom=0.28)
