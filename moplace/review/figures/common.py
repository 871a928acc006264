"""What every figure shares: a headless matplotlib figure, saving it, and the colours."""

from __future__ import annotations

from pathlib import Path

# the baselines and heuristics keep one marker and colour in every figure
MARK_STYLE = {
    "single": ("s", "#7f7f7f"), "data-parallel": ("^", "#2ca02c"),
    "round-robin": ("v", "#8c564b"), "layer-split": ("<", "#e377c2"),
    "heft": ("D", "#ff7f0e"), "dpos": ("P", "#d62728"),
}
# one line per searcher in comparisons
SERIES = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")


def new_figure(width: float, height: float):
    """A matplotlib Figure on the Agg canvas: no display, no global pyplot state (figures are
    drawn while a search's other threads run)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def legend_below_and_save(fig, path, *, title="", ncol=5, fontsize=9, y=-0.02, bottom=0.25):
    """One legend under the panels (from the first panel's labels), the title, and save: the
    finish of the figures with one panel per pair of objectives."""
    if fig.axes:
        handles, labels = fig.axes[0].get_legend_handles_labels()
        if labels:
            fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), ncol),
                       fontsize=fontsize, frameon=False, bbox_to_anchor=(0.5, y))
    if title:
        fig.suptitle(title)
    fig.subplots_adjust(bottom=bottom, wspace=0.3)
    return save(fig, path)


def save(fig, path) -> Path:
    """Write ``fig`` to ``path`` (PNG by its suffix) and free it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    fig.clear()
    return path
