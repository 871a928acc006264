"""Figures of fronts: each pair of objectives, the 3-D front (PNG, and an interactive page of
our own, `page3d`) and how a search progressed (hypervolume and best of each objective over
evaluations). With more than three objectives the pairs wrap onto rows of three, the 3-D front
shows the first three and colours its points by the fourth, and the HTML's hover tells every
objective.

Inputs are plain arrays and dicts, so the same figures come from a live search, an MLflow run
or a ``front.json``. Every objective's axis is in the unit the CLI's front table gives its
column (`moplace.review.units.column_unit` over the front's values, `front_units`).
"""

from __future__ import annotations

import itertools
import re

import numpy as np

from ..units import axis_label, column_unit, fmt, kind_of
from ..units import label as label_of
from .common import MARK_STYLE, SERIES, legend_below_and_save, new_figure, save

FRONT_COLOUR = "#1f77b4"
PAIRS_PER_ROW = 3
#: a mark or capacity beyond this many times the front's span is drawn at the axis's edge
FAR = 3.0


def front_units(objectives, values, marks=()) -> list[tuple[str, float]]:
    """Each objective's unit: the one the CLI's front table gives the same column
    (`column_unit` over the front's values); the marks, drawn on the same axes, follow it. With
    no front, the marks' values choose."""
    values = np.asarray(values, float).reshape(-1, len(objectives))
    columns = [list(values[:, k]) if len(values) else [m.values[k] for m in marks]
               for k in range(len(objectives))]
    return [column_unit(name, col) for name, col in zip(objectives, columns)]


def plural(n: int, word: str) -> str:
    """``1 point``, ``61 points``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def pareto_steps(x, y) -> np.ndarray:
    """Indices of the points not dominated on (x, y) (both minimized), by increasing x: the
    corners of the pair's own front, drawn as a step line. Of equal points, the first."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    kept, best = [], np.inf
    for i in np.lexsort((y, x)):
        if y[i] < best:
            kept.append(int(i))
            best = y[i]
    return np.array(kept, int)


def axis_window(front, others=(), far: float = FAR) -> tuple[float, float]:
    """The range one axis shows: the front's values, and each of ``others`` (marks, the
    devices' capacity) lying within ``far`` times the front's span of it; a value outside
    is drawn at the edge with its true value instead of squashing the front."""
    front = np.asarray(front, float)
    front = front[np.isfinite(front)]
    if not len(front):
        front = np.asarray([v for v in others if np.isfinite(v)] or [0.0, 1.0], float)
    lo, hi = float(front.min()), float(front.max())
    span = hi - lo if hi > lo else max(abs(hi) * 0.1, 1e-12)
    near = [v for v in others if np.isfinite(v) and lo - far * span <= v <= hi + far * span]
    return min([lo, *near]), max([hi, *near])


def _limits(window) -> tuple[float, float]:
    lo, hi = window
    pad = (hi - lo) * 0.06 if hi > lo else max(abs(hi) * 0.05, 1e-12)
    return lo - pad, hi + pad


def front_pairs(values, objectives, path, *, marks=(), knee=None, title="", labels=None,
                capacity: float | None = None) -> list[dict]:
    """The front projected on each pair of objectives: the pair's own non-dominated points as
    a step line, the others as hollow points; the baselines and heuristics marked (hollow when
    they do not fit in memory), one far beyond the front as a triangle at the axis's edge with
    its value; the knee ringed; on a peak-memory axis the devices' ``capacity`` (bytes) as a
    line, or an arrow at the edge when it lies far beyond the front. ``labels`` (one per
    point: the searcher that found it, in a comparison) colours the points by label.

    Returns what each panel drew: ``pair`` (objective indices), ``steps`` (the points on its
    step line, by increasing x), ``clipped`` (the marks drawn at an edge), ``capacity``
    (``"line"``, ``"edge"`` or None) and ``limits`` (the axes' ranges, in base units)."""
    values = np.asarray(values, float).reshape(-1, len(objectives))
    units = front_units(objectives, values, marks)
    pairs = list(itertools.combinations(range(len(objectives)), 2)) or [(0, 0)]
    cols = min(len(pairs), PAIRS_PER_ROW)
    rows = -(-len(pairs) // cols)
    fig = new_figure(5.0 * cols, 4.6 * rows)
    memory = [capacity if capacity and name == "peak_memory" else None for name in objectives]
    windows = [axis_window(values[:, k], [m.values[k] for m in marks]
                           + ([memory[k]] if memory[k] else [])) for k in range(len(objectives))]
    panels = []
    for j, (a, b) in enumerate(pairs):
        ax = fig.add_subplot(rows, cols, j + 1)
        limits = [_limits(windows[a]), _limits(windows[b])]
        panel = {"pair": (a, b), "limits": limits, "clipped": [], "capacity": None}
        panel["steps"] = _draw_front(ax, values, (a, b), units, labels)
        for i, m in enumerate(marks):  # later marks smaller: equal points all show
            if _draw_mark(ax, m, (a, b), units, limits, objectives, size=110 - 12 * (i % 6)):
                panel["clipped"].append(m.name)
        for axis, k in (("x", a), ("y", b)):
            if memory[k]:
                panel["capacity"] = _draw_capacity(ax, axis, memory[k], units[k], limits)
        if knee is not None and len(values):
            ax.scatter(values[knee, a] / units[a][1], values[knee, b] / units[b][1], s=230,
                       facecolors="none", edgecolors="crimson", linewidths=1.8, zorder=6,
                       label=f"knee (point {knee})")
            ax.annotate(f"knee #{knee}", (values[knee, a] / units[a][1],
                                          values[knee, b] / units[b][1]),
                        textcoords="offset points", xytext=(9, 9), color="crimson", fontsize=9,
                        zorder=7)
        ax.set_xlim(*(v / units[a][1] for v in limits[0]))
        ax.set_ylim(*(v / units[b][1] for v in limits[1]))
        ax.set_xlabel(axis_label(objectives[a], units[a]))
        ax.set_ylabel(axis_label(objectives[b], units[b]))
        ax.grid(alpha=0.3)
        panels.append(panel)
    if rows > 1:  # the legend's room below, the same in inches as on one row
        fig.subplots_adjust(hspace=0.3)
    legend_below_and_save(fig, path, title=title, **({} if rows == 1 else
                                                     {"bottom": 0.25 / rows, "y": -0.02 / rows}))
    return panels


def _draw_front(ax, values, pair, units, labels) -> list[int]:
    """The pair's own front as a step line over filled points, the other points hollow;
    returns the step line's points."""
    a, b = pair
    x, y = values[:, a] / units[a][1], values[:, b] / units[b][1]
    steps = pareto_steps(values[:, a], values[:, b]) if len(values) else np.zeros(0, int)
    if len(steps):
        ax.step(x[steps], y[steps], where="post", color="#555555", lw=1.1, alpha=0.8, zorder=2,
                label="each pair's own front")
    on = np.zeros(len(values), bool)
    on[steps] = True
    groups = [("front", np.ones(len(values), bool), FRONT_COLOUR)]
    if labels is not None:
        names = list(dict.fromkeys(labels))
        groups = [(name, np.array([lab == name for lab in labels], bool),
                   SERIES[k % len(SERIES)]) for k, name in enumerate(names)]
    for k, (name, member, colour) in enumerate(groups):
        ax.scatter(x[member & on], y[member & on], s=22, color=colour, zorder=3,
                   label=f"{name} ({plural(int(member.sum()), 'point')})")
        ax.scatter(x[member & ~on], y[member & ~on], s=16, facecolors="none", zorder=3,
                   edgecolors=colour, linewidths=0.8, alpha=0.6,
                   label="dominated on this pair (hollow)" if k == 0 and (~on).any() else None)
    return [int(i) for i in steps]


def _draw_mark(ax, mark, pair, units, limits, objectives, size=64) -> bool:
    """A baseline's or heuristic's point; one beyond the axes' limits as a triangle at the
    edge, pointing out, with its true value. True when it was clipped so."""
    from matplotlib.colors import to_rgba

    marker, colour = MARK_STYLE.get(mark.name, ("x", "black"))
    name = mark.name + ("" if mark.feasible else " (over memory)")
    shown = [float(np.clip(mark.values[k], *lim)) for k, lim in zip(pair, limits)]
    out = [k for k, s in zip(pair, shown) if s != mark.values[k]]
    xy = (shown[0] / units[pair[0]][1], shown[1] / units[pair[1]][1])
    face = to_rgba(colour, 0.85) if mark.feasible else "none"
    ax.scatter(*(xy if not out else (np.nan, np.nan)), marker=marker, s=size, zorder=4,
               label=name, facecolors=face, edgecolors=colour, linewidths=1.4)
    if not out:
        return False
    dx = np.sign(mark.values[pair[0]] - shown[0])
    dy = np.sign(mark.values[pair[1]] - shown[1])
    arrow = {(1, 0): ">", (-1, 0): "<", (0, 1): "^", (0, -1): "v"}.get((dx, dy), "^" if dy
                                                                           else ">")
    ax.scatter(*xy, marker=arrow, s=size, zorder=4, facecolors=face, edgecolors=colour,
               linewidths=1.4, clip_on=False)
    text = ", ".join(fmt(mark.values[k], kind_of(objectives[k])) for k in out)
    ax.annotate(f"{mark.name} {text}", xy, textcoords="offset points", fontsize=7,
                color=colour, xytext=(-6 if dx > 0 else 6, -10 if dy > 0 else 8),
                ha="right" if dx > 0 else "left", zorder=4, annotation_clip=False)
    return True


def _draw_capacity(ax, axis, capacity, unit, limits) -> str:
    """The devices' memory as a line on a memory axis, or an arrow at the edge when it lies
    beyond the axis."""
    text = "device memory " + re.sub(r"\.0+ ", " ", fmt(capacity, "bytes"))
    lo, hi = limits[0 if axis == "x" else 1]
    if lo <= capacity <= hi:
        line = ax.axvline if axis == "x" else ax.axhline
        line(capacity / unit[1], color="#b22222", ls="--", lw=1.0, zorder=1)
        ax.annotate(text, (capacity / unit[1], 0.02) if axis == "x" else (0.02, capacity / unit[1]),
                    xycoords=ax.get_xaxis_transform() if axis == "x" else ax.get_yaxis_transform(),
                    rotation=90 if axis == "x" else 0, fontsize=7, color="#b22222",
                    ha="right" if axis == "x" else "left", va="bottom")
        return "line"
    where = (0.98, 0.5) if axis == "x" else (0.5, 0.98)
    ax.annotate(text + (" →" if axis == "x" else " ↑"), where, xycoords="axes fraction",
                ha="right" if axis == "x" else "center", va="top", fontsize=7, color="#b22222",
                rotation=90 if axis == "x" else 0)
    return "edge"


def front_3d(values, objectives, path, *, marks=(), knee=None, title="") -> None:
    """The front in three dimensions (the first three objectives) as a PNG."""
    values = np.asarray(values, float).reshape(-1, len(objectives))
    if len(objectives) < 3:
        raise ValueError("a 3-D front needs three objectives")
    units = front_units(objectives, values, marks)
    windows = [axis_window(values[:, k], [m.values[k] for m in marks]) for k in range(3)]
    fig = new_figure(7.5, 6.5)
    ax = fig.add_subplot(projection="3d")
    scaled = values[:, :3] / [u[1] for u in units[:3]]
    colour = {"color": FRONT_COLOUR}
    if len(objectives) > 3:  # the fourth objective as the points' colour
        colour = {"c": values[:, 3] / units[3][1], "cmap": "viridis"}
    points = ax.scatter(*scaled.T, s=18, depthshade=True,
                        label=f"front ({plural(len(values), 'point')})",
                        **colour)
    if len(objectives) > 3:
        fig.colorbar(points, ax=ax, shrink=0.6, pad=0.1,
                     label=axis_label(objectives[3], units[3]))
    for m in marks:
        marker, colour = MARK_STYLE.get(m.name, ("x", "black"))
        name = m.name + ("" if m.feasible else " (over memory)")
        far = [k for k in range(3) if not windows[k][0] <= m.values[k] <= windows[k][1]]
        if far:  # far beyond the front: named with its values, not drawn
            ax.scatter([], [], [], marker=marker, color=colour, label=name + " (off the axes: "
                       + ", ".join(fmt(m.values[k], kind_of(objectives[k])) for k in far) + ")")
            continue
        ax.scatter(*(m.values[:3] / [u[1] for u in units[:3]]), marker=marker, s=70,
                   color=colour, label=name)
    if knee is not None and len(values):
        ax.scatter(*scaled[knee], s=160, facecolors="none", edgecolors="crimson", linewidths=2,
                   label=f"knee (point {knee})")
    for setter, k in zip((ax.set_xlabel, ax.set_ylabel, ax.set_zlabel), range(3)):
        setter(axis_label(objectives[k], units[k]))
    ax.legend(fontsize=8, loc="upper left")
    if title:
        ax.set_title(title)
    save(fig, path)


def front_3d_html(values, objectives, path, *, marks=(), knee=None, title="") -> dict:
    """The front in three dimensions (the first three objectives; a fourth colours the
    points) as a small self-contained interactive page (`page3d`): rotate, zoom, hover a point
    for its index and every objective's value. A mark far beyond the front sits at the edge
    of the box, its hover telling its true values. Returns the page's data."""
    from .page3d import write_page

    values = np.asarray(values, float).reshape(-1, len(objectives))
    units = front_units(objectives, values, marks)
    windows = [_limits(axis_window(values[:, k], [m.values[k] for m in marks]))
               for k in range(3)]
    scale = [u[1] for u in units]

    def hover(v, name):
        return "\n".join([name] + [f"{label_of(o)}: {fmt(v[k], kind_of(o))}"
                                    for k, o in enumerate(objectives)])

    def at(v):  # in the axes' units, clamped to the box
        return [float(np.clip(v[k], *windows[k]) / scale[k]) for k in range(3)]

    coloured = len(objectives) > 3
    front = [at(v) + ([float(v[3] / scale[3])] if coloured else []) for v in values]
    groups = [{"name": f"front ({plural(len(values), 'point')})", "points": front,
               "text": [hover(v, f"point {i}") for i, v in enumerate(values)],
               "colour": None if coloured else FRONT_COLOUR, "symbol": "circle", "size": 4,
               "hollow": False}]
    symbols = {"s": "square", "D": "diamond", "^": "triangle", "v": "triangle",
               "<": "triangle", "P": "cross"}
    for m in marks:
        marker, colour = MARK_STYLE.get(m.name, ("x", "black"))
        edge = any(not lo <= m.values[k] <= hi for k, (lo, hi) in enumerate(windows))
        groups.append({"name": m.name + ("" if m.feasible else " (over memory)")
                       + (" (at the edge: far off)" if edge else ""), "points": [at(m.values)],
                       "text": [hover(m.values, m.name + (" (drawn at the edge)" if edge
                                                          else ""))],
                       "colour": colour, "symbol": symbols.get(marker, "cross"), "size": 7,
                       "hollow": not m.feasible, "edge": colour, "width": 2})
    if knee is not None and len(values):
        groups.append({"name": f"knee (point {knee})", "points": [at(values[knee])],
                       "text": [hover(values[knee], f"knee, point {knee}")], "colour": "crimson",
                       "symbol": "circle", "size": 10, "hollow": True, "edge": "crimson",
                       "width": 2.5, "tag": f"knee #{knee}"})
    colour_range = (float(values[:, 3].min() / scale[3]), float(values[:, 3].max() / scale[3])) \
        if coloured and len(values) else (0.0, 1.0)
    data = dict(title=title, axes=[axis_label(o, u) for o, u in zip(objectives[:3], units)],
                ranges=[(lo / scale[k], hi / scale[k]) for k, (lo, hi) in enumerate(windows)],
                groups=groups, colour_axis=axis_label(objectives[3], units[3]) if coloured else "",
                colour_range=colour_range)
    write_page(path, **data)
    return data


def changed(series) -> bool:
    """Whether the values of ``series`` (lists, None where no value) take more than one value,
    or could not have changed (no series has two values: a search of one batch)."""
    present = [[v for v in ys if v is not None] for ys in series]
    return len({float(v) for ys in present for v in ys}) > 1 or max(map(len, present),
                                                                    default=0) < 2


def progress(histories, objectives, path, *, title="") -> list[str]:
    """Hypervolume and the best of each objective against evaluations, one line per search
    (``histories``: label -> the ``history`` of a front.json). An objective whose best never
    changed gets no panel, only a note of its value. Returns the panels drawn
    (``hypervolume`` and objective names)."""
    from objectives import json_key

    best = {name: {label: h["best"].get(json_key(name), []) for label, h in histories.items()}
            for name in objectives}
    shown = [name for name in objectives if changed(best[name].values())]
    fig = new_figure(4.2 * (1 + len(shown)), 3.8)
    panels = ["hypervolume"] + shown
    for j, name in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), j + 1)
        series = {label: h["hypervolume"] for label, h in histories.items()} \
            if name == "hypervolume" else best[name]
        finite = [v for ys in series.values() for v in ys if v is not None]
        unit = column_unit(name, finite) if name != "hypervolume" else ("", 1.0)
        for k, (label, ys) in enumerate(series.items()):
            xs = histories[label]["evaluations"]
            y = np.array([np.nan if v is None else v / unit[1] for v in ys], float)
            if len(xs):
                ax.step(xs, y, where="post", label=label, color=SERIES[k % len(SERIES)], lw=1.4,
                        marker="o" if len(xs) == 1 else None)  # a one-shot heuristic: a dot
        ax.set_xlabel("evaluations")
        ax.set_title("hypervolume (higher is better)" if name == "hypervolume"
                     else f"best {axis_label(name, unit)}", fontsize=10)
        ax.grid(alpha=0.3)
    steady = [name for name in objectives if name not in shown]
    if steady:
        fig.text(0.5, -0.04, "unchanged over the search: " + "; ".join(
            f"best {label_of(name)} " + _steady_value(best[name].values(), name)
            for name in steady), ha="center", fontsize=9, color="#444444")
    if len(histories) > 1:
        fig.axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.subplots_adjust(wspace=0.35, top=0.82 if title else 0.9)
    save(fig, path)
    return panels


def _steady_value(series, name) -> str:
    values = [v for ys in series for v in ys if v is not None]
    return fmt(values[0], kind_of(name)) if values else "none (nothing fits)"
