"""The fidelity scatter: each strategy's simulated step against its measured step.

Two panels share the axes: the simulator as measured, and with the testbed's fitted
corrections (see `moplace.tf.fidelity`); for PyTorch's one-device report (`moplace.torch.
fidelity`), the simulator on measured op costs and on estimated ones (``panels``). The diagonal is a perfect prediction, the band around
it +-15% (the goal); each point is a strategy, marked by where it came from (a baseline, a list
scheduler, a point of NSGA-II's front), with the measured p10-p90 spread as a horizontal bar.
Inputs are plain rows (`FidelityReport.as_dict()["rows"]`), so a saved report draws again.
"""

from __future__ import annotations

from ..units import unit_for
from .common import MARK_STYLE, SERIES, legend_below_and_save, new_figure

_SOURCE_STYLE = {"baseline": ("s", SERIES[0]), "heuristic": ("D", SERIES[1]),
                 "nsga2": ("o", SERIES[4]),
                 # the one-device plans of the PyTorch report (moplace.torch.fidelity)
                 "single": ("s", SERIES[0]), "2 micro-batches": ("^", SERIES[1]),
                 "4 micro-batches": ("D", SERIES[2]), "8 micro-batches": ("v", SERIES[3])}
#: the panels: the key of each row's simulated step, and the axis' name
PANELS = (("simulated_s", "simulated, as measured"), ("corrected_s", "simulated, corrected"))


def fidelity_scatter(rows: list[dict], path, *, title: str = "", goal: float = 0.15,
                     panels=PANELS, annotate: bool = True):
    """Draw ``rows`` (measured ones only) to ``path``, one panel per ``(key, name)`` of
    ``panels``; ``annotate``: name each point that is not an NSGA-II one. Returns the path."""
    rows = [r for r in rows if r.get("measured_s")]
    fig = new_figure(5.25 * len(panels), 4.8)
    largest = max([r["measured_s"] for r in rows] + [r[key] or 0.0 for r in rows
                                                     for key, _ in panels] + [1e-6])
    unit = unit_for("time", largest)
    top = largest / unit[1] * 1.15
    for k, (key, name) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        ax.plot([0, top], [0, top], color="#444444", lw=1, label="prediction = measurement")
        ax.fill_between([0, top], [0, top * (1 - goal)], [0, top * (1 + goal)], color="#999999",
                        alpha=0.2, lw=0, label=f"within {goal:.0%}")
        seen = set()
        for r in rows:
            marker, colour = MARK_STYLE.get(r["strategy"], _SOURCE_STYLE.get(r["source"], ("o", "k")))
            x, y = r["measured_s"] / unit[1], r[key] / unit[1]
            label = r["source"] if r["source"] not in seen else None
            seen.add(r["source"])
            if r.get("spread_s"):
                lo, hi = (v / unit[1] for v in r["spread_s"])
                ax.plot([lo, hi], [y, y], color=colour, lw=1, alpha=0.6)
            ax.scatter([x], [y], marker=marker, color=colour, s=36, zorder=3, label=label)
            if annotate and r["source"] != "nsga2":
                ax.annotate(r["strategy"], (x, y), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel(f"measured step ({unit[0]})")
        ax.set_ylabel(f"{name} ({unit[0]})")
        ax.set_aspect("equal")
        ax.grid(alpha=0.3)
    return legend_below_and_save(fig, path, title=title, ncol=5, bottom=0.2, y=-0.04)
