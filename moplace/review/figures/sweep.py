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
from .fronts import pareto_steps, plural

#: the kind of each value a trial returns (its unit follows)
RETURN_KINDS = {"hypervolume": "number", "best_runtime": "time",
                "best_runtime_within_memory": "time", "search_seconds": "time"}


def _label(name: str, unit) -> str:
    text = name.replace("_", " ")
    return f"{text} ({unit[0]})" if unit[0] else text


def _positions(values):
    """x positions for a parameter's values: numbers as they are, anything else by category."""
    if all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values], None
    cats = sorted({repr(v) for v in values})
    shown = {repr(v): str(v) for v in values}
    return [float(cats.index(repr(v))) for v in values], [shown[c] for c in cats]


def return_unit(name: str, values) -> tuple[str, float]:
    """The unit of a returned value's axis: `column_unit` over its finite values, of the kind
    `RETURN_KINDS` gives it (as the sweep's table reads)."""
    return column_unit(name, values, kind=RETURN_KINDS.get(name, "number"))


def values_by_parameter(rows, returns, directions, params, path, *, title="") -> dict:
    """One panel per (returned value, swept parameter): each complete trial a point, the best
    trial ringed; a trial where nothing fits (its value inf) a hollow grey triangle at the
    panel's worse edge, "nothing fits"; parameters of whole numbers get integer ticks; log x
    when the parameter spans two decades or more. Returns, per returned value, the trials drawn
    (``drawn``) and those where nothing fits (``nothing_fits``), by trial number."""
    from matplotlib.ticker import MaxNLocator

    done = [r for r in rows if r["state"] == "complete"]
    params = list(params) or ["trial"]
    fig = new_figure(4.2 * len(params), 3.4 * len(returns))
    marked = {}
    for i, (name, direction) in enumerate(zip(returns, directions)):
        ys = [r["values"].get(name) for r in done]
        ok = [y is not None and math.isfinite(y) for y in ys]
        none_fits = [y is not None and math.isinf(y) for y in ys]
        unit = return_unit(name, [y for y, good in zip(ys, ok) if good])
        marked[name] = {"drawn": [r["number"] for r, g in zip(done, ok) if g],
                        "nothing_fits": [r["number"] for r, n in zip(done, none_fits) if n]}
        best = None
        if any(ok):
            pick = min if direction == "minimize" else max
            best = pick((k for k in range(len(done)) if ok[k]), key=lambda k: ys[k])
        for j, p in enumerate(params):
            ax = fig.add_subplot(len(returns), len(params), i * len(params) + j + 1)
            xs_raw = [r["number"] if p == "trial" else r["params"].get(p, r["number"])
                      for r in done]
            xs, ticks = _positions(xs_raw)
            good_x = [x for x, g in zip(xs, ok) if g]
            good_y = [y / unit[1] for y, g in zip(ys, ok) if g]
            ax.scatter(good_x, good_y, s=28, color=SERIES[0], zorder=3)
            if any(none_fits):
                _nothing_fits(ax, [x for x, n in zip(xs, none_fits) if n], good_y,
                              direction, len(done))
            if best is not None:
                ax.scatter([xs[best]], [ys[best] / unit[1]], s=150, facecolors="none",
                           edgecolors="crimson", linewidths=2, zorder=4,
                           label=f"best: trial {done[best]['number']}")
            if (best is not None or any(none_fits)) and j == 0:  # one legend a row
                ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2,
                          frameon=False, borderaxespad=0.2)
            if ticks is not None:
                ax.set_xticks(range(len(ticks)), ticks, rotation=20, fontsize=8)
            else:
                _number_axis(ax, xs_raw, MaxNLocator)
            ax.set_xlabel(p)
            ax.set_ylabel(_label(name, unit))
            ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save(fig, path)
    return marked


def _nothing_fits(ax, xs, good_y, direction, trials) -> None:
    """The trials where nothing fits as hollow grey triangles in a row at the panel's worse
    edge (the top when minimizing), a count beside a position several share."""
    lo, hi = (min(good_y), max(good_y)) if good_y else (0.0, 1.0)
    pad = (hi - lo) * 0.3 or abs(hi) * 0.15 or 1.0
    low, high = lo - pad * 0.3, hi + pad * 0.3
    minimize = direction == "minimize"
    row = high + pad * 0.5 if minimize else low - pad * 0.5
    ax.set_ylim(low - (0 if minimize else pad), high + (pad if minimize else 0))
    ax.scatter(xs, [row] * len(xs), marker="^" if minimize else "v", s=50, zorder=3,
               facecolors="none", edgecolors="#7f7f7f", linewidths=1.3,
               label=f"nothing fits ({len(xs)} of {plural(trials, 'trial')})")
    for x in sorted(set(xs)):
        if xs.count(x) > 1:
            ax.annotate(f"×{xs.count(x)}", (x, row), textcoords="offset points",
                        xytext=(6, -3), fontsize=7, color="#555555")
    if not good_y:
        ax.set_yticks([])


def _number_axis(ax, values, locator) -> None:
    """Log x for a parameter spanning two decades or more; a parameter of whole numbers gets
    its values as ticks (up to 12 of them), else integer ticks; room at both ends."""
    values = [float(v) for v in values if v is not None]
    if not values:
        return
    log = min(values) > 0 and max(values) / min(values) >= 100
    if log:
        ax.set_xscale("log")
    if all(v == int(v) for v in values):
        distinct = sorted(set(values))
        if len(distinct) <= 12:
            ax.set_xticks(distinct, [f"{v:g}" for v in distinct])
            ax.minorticks_off()
        else:
            ax.xaxis.set_major_locator(locator(integer=True))
    lo, hi = min(values), max(values)
    if log:
        ax.set_xlim(lo / 1.3, hi * 1.3)
    else:
        pad = (hi - lo) * 0.06 or max(abs(hi) * 0.1, 0.5)
        ax.set_xlim(lo - pad, hi + pad)


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
            steps = pareto_steps(v[:, a], v[:, b])  # each front's own on this pair
            colour = SERIES[k % len(SERIES)]
            ax.step(v[steps, a] / units[a][1], v[steps, b] / units[b][1], where="post",
                    color=colour, alpha=0.6, lw=0.9)
            ax.scatter(v[:, a] / units[a][1], v[:, b] / units[b][1], s=16, color=colour,
                       label=f"{label} ({plural(len(v), 'point')})")
        ax.set_xlabel(axis_label(objectives[a], units[a]))
        ax.set_ylabel(axis_label(objectives[b], units[b]))
        ax.grid(alpha=0.3)
    legend_below_and_save(fig, path, title=title, ncol=3, fontsize=8, y=-0.04, bottom=0.28)
