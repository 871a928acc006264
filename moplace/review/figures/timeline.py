"""Figures of one strategy's simulated step: a Gantt chart (devices by time, compute and
transfers apart, split parts, recomputed ops and collectives visible; with micro-batches,
each micro-batch in its colour, backward hatched, and each device's pipeline stage) and the
memory each device holds over time against its capacity, beside what it would hold without
the memory levers the strategy pulls (recomputation, ZeRO) or under the other pipeline
schedule (the stash of in-flight micro-batches).

Both take a `Trace` simulated with ``record=True``. Past ``max_bars`` tasks and transfers (a
10,000-op graph), the Gantt chart stops drawing one bar per task, which would be an unreadable
smear, and shows per lane the fraction of each short time slice that is busy; the memory curve
keeps each slice's maximum, so no peak is lost.
"""

from __future__ import annotations

import numpy as np

from ...simulator.collectives import KINDS
from ..units import fmt, unit_for
from .common import SERIES, new_figure, save

COLOURS = {"compute": "#1f77b4", "split part": "#ff7f0e", "recomputed": "#e377c2",
           "transfer in": "#2ca02c",
           "all-reduce": "#d62728", "reduce-scatter": "#9467bd", "all-gather": "#8c564b"}
BINS = 300


def _lanes(trace):
    """(device, lane, category, starts, ends) for every kind of bar; lane 0 compute, 1 links."""
    n_dev = len(trace.capacity)
    dev = trace.task_device
    compute = dev >= 0
    counts = np.bincount(trace.task_op[compute], minlength=1)
    split = np.zeros(len(dev), bool)
    split[compute] = counts[trace.task_op[compute]] > 1
    again = trace.recomputed
    if again.any():  # an op recomputed has two tasks without being split: count its first
        first = np.bincount(trace.task_op[compute & ~again], minlength=counts.size)
        split[compute] = first[trace.task_op[compute]] > 1
    x = trace.transfers
    coll = np.flatnonzero(~compute)  # the c-th collective's task, c in collective_ptr's order
    per = np.diff(trace.collective_ptr)
    members = np.repeat(coll, per)  # one entry per (collective, device)
    kind = trace.collective_kind if trace.collective_kind.size == coll.size \
        else np.zeros(coll.size, np.int64)  # (a trace made before collectives had kinds)
    member_kind = np.repeat(kind, per)
    for d in range(n_dev):
        on = dev == d
        plain, part, rec = on & ~split & ~again, on & split & ~again, on & again
        yield d, 0, "compute", trace.task_start[plain], trace.task_end[plain]
        yield d, 0, "split part", trace.task_start[part], trace.task_end[part]
        yield d, 0, "recomputed", trace.task_start[rec], trace.task_end[rec]
        into = x[:, 2] == d
        yield d, 1, "transfer in", x[into, 4], x[into, 5]
        for k, name in enumerate(KINDS):
            idx = members[(trace.collective_dev == d) & (member_kind == k)]
            yield d, 1, name, trace.task_start[idx], trace.task_end[idx]


#: the micro-batches' colours, in turn
BATCH_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf")


def _micro_batch_bars(ax, trace, n_dev: int, scale: float, backward) -> None:
    """Compute bars by micro-batch (its colour; backward tasks hatched), with a legend of the
    first micro-batches' colours."""
    mb, dev = trace.task_micro_batch, trace.task_device
    back = (np.zeros(dev.size, bool) if backward is None
            else np.asarray(backward, bool)[trace.task_op])
    m = int(mb.max(initial=0)) + 1
    for d in range(n_dev):
        y = 2 * (n_dev - 1 - d) + 1
        for i in range(-1, m):
            for hatch in (False, True):
                k = np.flatnonzero((dev == d) & (mb == i) & (back == hatch))
                if not k.size:
                    continue
                colour = "#bbbbbb" if i < 0 else BATCH_COLOURS[i % len(BATCH_COLOURS)]
                ax.broken_barh(list(zip(trace.task_start[k] / scale,
                                        (trace.task_end[k] - trace.task_start[k]) / scale)),
                               (y - 0.4, 0.8), facecolors=colour, edgecolors="white",
                               linewidths=0.2, hatch="////" if hatch else None)
    for i in range(min(m, len(BATCH_COLOURS))):
        ax.bar(0, 0, color=BATCH_COLOURS[i], label=f"micro-batch {i}")
    if m > len(BATCH_COLOURS):
        ax.bar(0, 0, color="white", label=f"(colours repeat; {m} micro-batches)")
    if backward is not None:
        ax.bar(0, 0, color="white", edgecolor="black", hatch="////", label="backward")
    ax.bar(0, 0, color="#bbbbbb", label="run once (updates)")


def busy_fraction(starts, ends, edges) -> np.ndarray:
    """For each slice [edges[i], edges[i+1]), the busy time of the intervals (start, end)
    inside it divided by its width (overlapping intervals add up, so it can exceed 1)."""
    a, b = np.sort(np.asarray(starts, float)), np.sort(np.asarray(ends, float))
    ca, cb = np.concatenate([[0.0], np.cumsum(a)]), np.concatenate([[0.0], np.cumsum(b)])
    na, nb = np.searchsorted(a, edges, side="right"), np.searchsorted(b, edges, side="right")
    covered = (na * edges - ca[na]) - (nb * edges - cb[nb])  # busy time before each edge
    return np.diff(covered) / np.diff(edges)


def _require_record(trace) -> None:
    if trace.memory.shape[0] == 0 and len(trace.task_start) and trace.makespan > 0:
        raise ValueError("the trace was simulated without record=True: it holds no transfers "
                         "or memory changes to draw")


def gantt(trace, path, *, title="", max_bars=10_000, backward=None) -> None:
    """Devices by time: per device a compute lane (ops; parts of split ops and ops run again
    by recomputation in their own colours) and a link lane (transfers arriving at it, and the
    collectives it takes part in: all-reduces, reduce-scatters and all-gathers, each in its
    own colour). With micro-batches, compute bars take their micro-batch's colour (tasks of
    ops that ``backward``, per op, marks hatched) and each device is labelled with its
    pipeline stage (`Trace.stage`)."""
    _require_record(trace)
    n_dev = len(trace.capacity)
    lanes = list(_lanes(trace))
    n_bars = sum(len(s) for *_, s, _ in lanes)
    end = max(trace.makespan, float(trace.transfers[:, 5].max(initial=0.0)), 1e-12)
    unit = unit_for("time", end)
    aggregate = n_bars > max_bars
    by_batch = trace.task_micro_batch.size > 0 and not aggregate
    edges = np.linspace(0.0, end, BINS + 1)
    fig = new_figure(12.0, 1.0 + 0.75 * n_dev)
    ax = fig.add_subplot(1, 1, 1)
    used, stacked = set(), {}
    for d, lane, category, starts, ends in lanes:
        y = 2 * (n_dev - 1 - d) + (1 - lane)
        if not len(starts) or (by_batch and lane == 0):
            continue
        used.add(category)
        colour = COLOURS[category]
        if aggregate:  # the lane's categories stack: their busy fractions add up to <= 1
            base = stacked.setdefault(y, np.zeros(BINS))
            top = np.minimum(base + busy_fraction(starts, ends, edges), 1.0)
            x = np.append(edges[:-1], edges[-1]) / unit[1]
            ax.fill_between(x, y - 0.4 + 0.8 * np.append(base, base[-1]),
                            y - 0.4 + 0.8 * np.append(top, top[-1]), step="post",
                            color=colour, alpha=0.85, lw=0)
            stacked[y] = top
        else:
            ax.broken_barh(list(zip(starts / unit[1], (ends - starts) / unit[1])), (y - 0.4, 0.8),
                           facecolors=colour, edgecolors="white", linewidths=0.2)
    if by_batch:
        _micro_batch_bars(ax, trace, n_dev, unit[1], backward)
    names = trace.device_names or tuple(f"device {d}" for d in range(n_dev))
    if trace.stage.size:
        names = [f"{n} (stage {k})" if k else n for n, k in zip(names, trace.stage.tolist())]
    ticks = [(2 * (n_dev - 1 - d) + 1 - lane, f"{names[d]} {'compute' if lane == 0 else 'links'}")
             for d in range(n_dev) for lane in (0, 1)]
    ax.set_yticks([t for t, _ in ticks], [label for _, label in ticks], fontsize=8)
    ax.set_ylim(-0.7, 2 * n_dev - 0.3)
    ax.set_xlim(0, end / unit[1])
    ax.set_xlabel(f"time ({unit[0]})")
    for category in COLOURS:
        if category in used:
            ax.bar(0, 0, color=COLOURS[category], label=category)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.3 / n_dev), ncol=4,
              fontsize=8, frameon=False)
    note = (f"busy fraction of each 1/{BINS} of the step ({n_bars:,} bars aggregated)"
            if aggregate else f"{n_bars:,} bars")
    ax.set_title((title + "\n" if title else "") + f"step {fmt(trace.makespan, 'time')}; {note}",
                 fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    save(fig, path)


def memory_over_time(trace, path, *, title="", max_points=5000, without=None,
                     lever="", other="") -> None:
    """Bytes resident on each device over the step (parameters included), with each device's
    capacity as a dashed line and its peak marked. ``without``: the trace of the same strategy
    without its memory ``lever`` (e.g. "recomputation"), or with ``other`` instead of it (e.g.
    "GPipe", for a 1F1B pipeline: the stash each schedule keeps), drawn dotted in each
    device's colour, so what the lever frees shows as the gap between the two."""
    _require_record(trace)
    n_dev = len(trace.capacity)
    end = max(trace.makespan, 1e-12)
    top = max(float(trace.peak_memory.max(initial=0.0)), float(trace.capacity.max(initial=0.0)))
    if without is not None:
        _require_record(without)
        end = max(end, without.makespan)
        top = max(top, float(without.peak_memory.max(initial=0.0)))
    unit, tunit = unit_for("bytes", top), unit_for("time", end)
    fig = new_figure(11.0, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    names = trace.device_names or tuple(f"device {d}" for d in range(n_dev))
    for d in range(n_dev):
        colour = SERIES[d % len(SERIES)]
        if without is not None:
            t, v = _curve(without, d, end, max_points)
            ax.step(t / tunit[1], v / unit[1], where="post", color=colour, lw=0.9, ls=":",
                    alpha=0.9)
        t, v = _curve(trace, d, end, max_points)
        ax.step(t / tunit[1], v / unit[1], where="post", color=colour, lw=1.2,
                label=f"{names[d]} (peak {fmt(trace.peak_memory[d], 'bytes')})")
        if len(set(trace.capacity.tolist())) > 1:
            ax.axhline(trace.capacity[d] / unit[1], color=colour, ls="--", lw=0.9)
    if len(set(trace.capacity.tolist())) == 1 and n_dev:
        ax.axhline(trace.capacity[0] / unit[1], color="black", ls="--", lw=1.0,
                   label=f"capacity {fmt(trace.capacity[0], 'bytes')}")
    ax.set_xlim(0, end / tunit[1])
    ax.set_ylim(0, top * 1.05 / unit[1] if top > 0 else 1)
    ax.set_xlabel(f"time ({tunit[0]})")
    ax.set_ylabel(f"resident memory ({unit[0]})")
    if without is not None:
        before, after = without.peak_memory.max(), trace.peak_memory.max()
        ax.plot([], [], color="grey", ls=":", lw=0.9,
                label=f"dotted: {other or 'without ' + lever} (peak {fmt(before, 'bytes')})")
        dt = trace.makespan - without.makespan
        took = f"{fmt(abs(dt), 'time')} {'more' if dt >= 0 else 'less'} time"
        title = (title + "\n" if title else "") + (
            f"{lever} {'frees' if before >= after else 'holds'} "
            f"{fmt(abs(before - after), 'bytes')} {'of' if before >= after else 'more at'} "
            f"the peak ({fmt(before, 'bytes')} -> {fmt(after, 'bytes')}) for {took}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    save(fig, path)


def _curve(trace, d: int, end: float, max_points: int):
    """Device ``d``'s resident bytes over time, as step points (each slice's maximum past
    ``max_points``: the peak survives)."""
    m = trace.memory
    rows = m[m[:, 1] == d]
    t = np.concatenate([[0.0], rows[:, 0], [end]])
    v = np.concatenate([[trace.static_memory[d]], rows[:, 2], [rows[-1, 2] if len(rows)
                                                               else trace.static_memory[d]]])
    if len(t) > max_points:
        slot = np.minimum((t / end * max_points).astype(np.int64), max_points - 1)
        top_of = np.full(max_points, -np.inf)
        np.maximum.at(top_of, slot, v)
        have = np.isfinite(top_of)
        t = (np.flatnonzero(have) / max_points) * end
        v = top_of[have]
    return t, v
