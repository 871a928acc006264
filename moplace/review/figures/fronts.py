"""Figures of fronts: each pair of objectives, the 3-D front (PNG, and interactive HTML with
plotly) and how a search progressed (hypervolume and best of each objective over evaluations).
With more than three objectives the pairs wrap onto rows of three, the 3-D front shows the
first three and colours its points by the fourth, and the HTML's hover tells every objective.

Inputs are plain arrays and dicts, so the same figures come from a live search, an MLflow run
or a ``front.json``. Every axis is in the unit its data calls for (see `moplace.review.units`).
"""

from __future__ import annotations

import itertools

import numpy as np

from ..units import axis_label, column_unit, fmt, kind_of
from .common import MARK_STYLE, SERIES, legend_below_and_save, new_figure, save

FRONT_COLOUR = "#1f77b4"
PAIRS_PER_ROW = 3


def _units(objectives, values, marks):
    columns = [list(values[:, k]) + [m.values[k] for m in marks] for k in range(len(objectives))]
    return [column_unit(name, col) for name, col in zip(objectives, columns)]


def front_pairs(values, objectives, path, *, marks=(), knee=None, title="", labels=None) -> None:
    """The front projected on each pair of objectives, the baselines and heuristics marked
    (hollow when they do not fit in memory) and the knee point labelled; ``labels`` (one per
    point: the searcher that found it, in a comparison) colours the points by label."""
    values = np.asarray(values, float).reshape(-1, len(objectives))
    units = _units(objectives, values, marks)
    pairs = list(itertools.combinations(range(len(objectives)), 2)) or [(0, 0)]
    cols = min(len(pairs), PAIRS_PER_ROW)
    rows = -(-len(pairs) // cols)
    fig = new_figure(5.0 * cols, 4.6 * rows)
    for j, (a, b) in enumerate(pairs):
        ax = fig.add_subplot(rows, cols, j + 1)
        ua, ub = units[a][1], units[b][1]
        order = np.argsort(values[:, a], kind="stable")
        ax.plot(values[order, a] / ua, values[order, b] / ub, color=FRONT_COLOUR, alpha=0.25,
                lw=0.8, zorder=1)
        if labels is None:
            ax.scatter(values[:, a] / ua, values[:, b] / ub, s=18, color=FRONT_COLOUR,
                       label=f"front ({len(values)} points)", zorder=3)
        else:
            names = list(dict.fromkeys(labels))
            for k, name in enumerate(names):
                on = np.array([lab == name for lab in labels], bool)
                ax.scatter(values[on, a] / ua, values[on, b] / ub, s=18, zorder=3,
                           color=SERIES[k % len(SERIES)], label=f"{name} ({int(on.sum())} points)")
        for m in marks:
            marker, colour = MARK_STYLE.get(m.name, ("x", "black"))
            ax.scatter(m.values[a] / ua, m.values[b] / ub, marker=marker, s=70, zorder=4,
                       label=m.name + ("" if m.feasible else " (over memory)"),
                       facecolors=colour if m.feasible else "none", edgecolors=colour,
                       linewidths=1.5)
        if knee is not None and len(values):
            ax.scatter(values[knee, a] / ua, values[knee, b] / ub, s=160, facecolors="none",
                       edgecolors="crimson", linewidths=2, zorder=5, label=f"knee (point {knee})")
            ax.annotate(f"knee #{knee}", (values[knee, a] / ua, values[knee, b] / ub),
                        textcoords="offset points", xytext=(8, 8), color="crimson", fontsize=9)
        ax.set_xlabel(axis_label(objectives[a], units[a]))
        ax.set_ylabel(axis_label(objectives[b], units[b]))
        ax.grid(alpha=0.3)
    if rows > 1:  # the legend's room below, the same in inches as on one row
        fig.subplots_adjust(hspace=0.3)
    legend_below_and_save(fig, path, title=title, **({} if rows == 1 else
                                                     {"bottom": 0.25 / rows, "y": -0.02 / rows}))


def front_3d(values, objectives, path, *, marks=(), knee=None, title="") -> None:
    """The front in three dimensions (the first three objectives) as a PNG."""
    values = np.asarray(values, float).reshape(-1, len(objectives))
    if len(objectives) < 3:
        raise ValueError("a 3-D front needs three objectives")
    units = _units(objectives, values, marks)
    fig = new_figure(7.5, 6.5)
    ax = fig.add_subplot(projection="3d")
    scaled = values[:, :3] / [u[1] for u in units[:3]]
    colour = {"color": FRONT_COLOUR}
    if len(objectives) > 3:  # the fourth objective as the points' colour
        colour = {"c": values[:, 3] / units[3][1], "cmap": "viridis"}
    points = ax.scatter(*scaled.T, s=18, depthshade=True, label=f"front ({len(values)} points)",
                        **colour)
    if len(objectives) > 3:
        fig.colorbar(points, ax=ax, shrink=0.6, pad=0.1,
                     label=axis_label(objectives[3], units[3]))
    for m in marks:
        marker, colour = MARK_STYLE.get(m.name, ("x", "black"))
        ax.scatter(*(m.values[:3] / [u[1] for u in units[:3]]), marker=marker, s=70,
                   color=colour, label=m.name + ("" if m.feasible else " (over memory)"))
    if knee is not None and len(values):
        ax.scatter(*scaled[knee], s=160, facecolors="none", edgecolors="crimson", linewidths=2,
                   label=f"knee (point {knee})")
    for setter, k in zip((ax.set_xlabel, ax.set_ylabel, ax.set_zlabel), range(3)):
        setter(axis_label(objectives[k], units[k]))
    ax.legend(fontsize=8, loc="upper left")
    if title:
        ax.set_title(title)
    save(fig, path)


def front_3d_html(values, objectives, path, *, marks=(), knee=None, title="") -> None:
    """The front in three dimensions as an interactive HTML page (plotly, self-contained so
    it opens offline and in MLflow's artifact view): rotate, zoom, hover a point for its
    index and values."""
    import plotly.graph_objects as go

    values = np.asarray(values, float).reshape(-1, len(objectives))
    units = _units(objectives, values, marks)
    scale = [u[1] for u in units[:3]]

    def hover(v, name):
        parts = [f"{o}: {fmt(v[k], kind_of(o))}" for k, o in enumerate(objectives)]
        return name + "<br>" + "<br>".join(parts)

    by = 3 if len(objectives) > 3 else 0  # the colour: the fourth objective, else the first
    bar = dict(colorbar=dict(title=axis_label(objectives[3], units[3]))) if by else {}
    traces = [go.Scatter3d(
        x=values[:, 0] / scale[0], y=values[:, 1] / scale[1], z=values[:, 2] / scale[2],
        mode="markers", name=f"front ({len(values)} points)",
        marker=dict(size=4, color=values[:, by] / (units[by][1] if by else 1.0),
                    colorscale="Viridis", **bar),
        hovertext=[hover(v, f"point {i}") for i, v in enumerate(values)], hoverinfo="text")]
    for m in marks:
        traces.append(go.Scatter3d(
            x=[m.values[0] / scale[0]], y=[m.values[1] / scale[1]], z=[m.values[2] / scale[2]],
            mode="markers", name=m.name + ("" if m.feasible else " (over memory)"),
            marker=dict(size=7, symbol="diamond" if m.kind == "heuristic" else "x"),
            hovertext=[hover(m.values, m.name)], hoverinfo="text"))
    if knee is not None and len(values):
        traces.append(go.Scatter3d(
            x=[values[knee, 0] / scale[0]], y=[values[knee, 1] / scale[1]],
            z=[values[knee, 2] / scale[2]], mode="markers+text", text=[f"knee #{knee}"],
            name="knee", marker=dict(size=9, color="crimson", symbol="circle-open")))
    fig = go.Figure(traces)
    fig.update_layout(title=title, scene=dict(
        xaxis_title=axis_label(objectives[0], units[0]),
        yaxis_title=axis_label(objectives[1], units[1]),
        zaxis_title=axis_label(objectives[2], units[2])), margin=dict(l=0, r=0, t=40, b=0))
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)


def progress(histories, objectives, path, *, title="") -> None:
    """Hypervolume and the best of each objective against evaluations, one line per search
    (``histories``: label -> the ``history`` of a front.json)."""
    from objectives import json_key

    fig = new_figure(4.2 * (1 + len(objectives)), 3.8)
    panels = [("hypervolume", "hypervolume")] + [(name, json_key(name)) for name in objectives]
    for j, (name, key) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), j + 1)
        series = {label: (h["evaluations"], h["hypervolume"] if key == "hypervolume"
                          else h["best"].get(key, [])) for label, h in histories.items()}
        finite = [v for _, ys in series.values() for v in ys if v is not None]
        unit = column_unit(name, finite) if key != "hypervolume" else ("", 1.0)
        for k, (label, (xs, ys)) in enumerate(series.items()):
            y = np.array([np.nan if v is None else v / unit[1] for v in ys], float)
            if len(xs):
                ax.step(xs, y, where="post", label=label, color=SERIES[k % len(SERIES)], lw=1.4,
                        marker="o" if len(xs) == 1 else None)  # a one-shot heuristic: a dot
        ax.set_xlabel("evaluations")
        ax.set_title("hypervolume (higher is better)" if key == "hypervolume"
                     else f"best {axis_label(name, unit)}", fontsize=10)
        ax.grid(alpha=0.3)
    if len(histories) > 1:
        fig.axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.subplots_adjust(wspace=0.35, top=0.82 if title else 0.9)
    save(fig, path)
