"""What the front, progress and sweep figures draw (moplace.review.figures): each pair's own
front as a step line, far-off marks at the edge, the devices' memory, one unit per axis as the
CLI's table, no panel for an objective that never changed, trials where nothing fits, and the
small self-contained 3-D page."""

import json
import re

import numpy as np
import pytest

from moplace.review.figures import fronts, sweep
from moplace.review.figures.fronts import (axis_window, front_3d_html, front_pairs,
                                           front_units, pareto_steps, progress)
from moplace.review.figures.sweep import values_by_parameter
from moplace.review.marks import Mark
from moplace.review.units import column_unit

GIB = 2.0 ** 30
OBJECTIVES = ["runtime", "peak_communication", "peak_memory"]
#: a front of five points: runtime (s), communication and memory (bytes)
FRONT = np.array([[0.30, 4 * GIB, 2.0 * GIB], [0.40, 2 * GIB, 3.0 * GIB],
                  [0.50, 1 * GIB, 1.5 * GIB], [0.60, 3 * GIB, 1.0 * GIB],
                  [0.69, 0.5 * GIB, 2.5 * GIB]])


def mark(name, values, feasible=True):
    return Mark(name, "baseline", np.array(values, float), feasible)


@pytest.fixture
def legends(monkeypatch):
    """The labels of each saved figure's shared legend, by file name."""
    seen = {}
    original = fronts.legend_below_and_save

    def record(fig, path, **kw):
        seen[path.name] = fig.axes[0].get_legend_handles_labels()[1]
        return original(fig, path, **kw)

    monkeypatch.setattr(fronts, "legend_below_and_save", record)
    return seen


def test_pareto_steps_are_the_pairs_own_front_by_increasing_x():
    x = [3.0, 1.0, 2.0, 4.0, 2.0, 1.0]
    y = [1.0, 5.0, 2.0, 0.5, 3.0, 5.0]  # point 4 dominated by 2; point 5 equals point 1
    assert pareto_steps(x, y).tolist() == [1, 2, 0, 3]
    assert pareto_steps([], []).tolist() == []


def test_each_pair_draws_its_own_front_and_clips_far_marks(tmp_path, legends):
    far = mark("single", [30.0, 0.0, 3.5 * GIB])  # 30 s: ~75x the front's runtime span
    near = mark("data-parallel", [0.45, 2.5 * GIB, 2.2 * GIB])
    panels = front_pairs(FRONT, OBJECTIVES, tmp_path / "p.png", marks=[far, near], knee=2,
                         capacity=16 * GIB)
    assert [p["pair"] for p in panels] == [(0, 1), (0, 2), (1, 2)]
    for p in panels:
        a, b = p["pair"]
        assert p["steps"] == pareto_steps(FRONT[:, a], FRONT[:, b]).tolist()
    assert panels[0]["steps"] == [0, 1, 2, 4]  # point 3 is dominated on runtime/comm
    # the far baseline is clipped where runtime is an axis, drawn where it is not
    assert [p["clipped"] for p in panels] == [["single"], ["single"], []]
    assert panels[0]["limits"][0][1] < 1.0  # the runtime axis stays on the front
    # 16 GiB is far above memories of 1..3.5 GiB: an arrow at the edge, not a line
    assert [p["capacity"] for p in panels] == [None, "edge", "edge"]
    assert "front (5 points)" in legends["p.png"] and "knee (point 2)" in legends["p.png"]
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")


def test_capacity_near_the_front_is_a_line_and_one_point_reads_1_point(tmp_path, legends):
    panels = front_pairs(FRONT, OBJECTIVES, tmp_path / "near.png", capacity=4 * GIB)
    assert [p["capacity"] for p in panels] == [None, "line", "line"]
    assert panels[1]["limits"][1][1] >= 4 * GIB  # the line is inside the memory axis
    front_pairs(FRONT[:1], OBJECTIVES, tmp_path / "one.png")
    assert "front (1 point)" in legends["one.png"]


def test_axis_window_keeps_near_values_and_drops_far_ones():
    assert axis_window([1.0, 2.0], [2.5, 100.0]) == (1.0, 2.5)
    assert axis_window([1.0, 2.0], [-2.0]) == (-2.0, 2.0)  # 3 spans below: kept
    assert axis_window([1.0, 2.0], [-2.1]) == (1.0, 2.0)


def test_units_are_the_cli_tables_over_the_front_not_the_marks():
    slow = mark("single", [1.2, 0.0, 3 * GIB])
    units = front_units(OBJECTIVES, FRONT, [slow])
    assert units[0] == ("ms", 1e-3) == column_unit("runtime", FRONT[:, 0])
    assert units[1] == ("GiB", GIB)
    assert front_units(OBJECTIVES, np.zeros((0, 3)), [slow])[0] == ("s", 1.0)


def history(best):
    n = len(next(iter(best.values())))
    return {"evaluations": list(range(10, 10 * n + 1, 10)),
            "hypervolume": list(np.linspace(0.1, 0.5, n)), "best": best}


def test_progress_leaves_out_an_objective_that_never_changed(tmp_path, monkeypatch):
    notes = []
    original = fronts.save

    def save(fig, path):
        notes.extend(t.get_text() for t in fig.texts)
        titles = [ax.get_title() for ax in fig.axes]
        notes.extend(titles)
        return original(fig, path)

    monkeypatch.setattr(fronts, "save", save)
    h = history({"runtime_s": [None, 0.9, 0.7, 0.69], "peak_comm_bytes": [None, 0, 0, 0],
                 "peak_mem_bytes": [None, 2 * GIB, 2 * GIB, 1 * GIB]})
    drawn = progress({"nsga2": h}, OBJECTIVES, tmp_path / "progress.png")
    assert drawn == ["hypervolume", "runtime", "peak_memory"]
    assert "best runtime (ms)" in notes and "best peak memory (GiB)" in notes
    assert not any("(B)" in t for t in notes)
    assert "unchanged over the search: best peak communication 0 B" in notes
    # in a comparison, searchers that differ count as a change
    other = history({"runtime_s": [0.7, 0.7], "peak_comm_bytes": [GIB, GIB],
                     "peak_mem_bytes": [GIB, GIB]})
    one = history({"runtime_s": [0.7, 0.7], "peak_comm_bytes": [0.0, 0.0],
                   "peak_mem_bytes": [GIB, GIB]})
    assert progress({"a": one, "b": other}, OBJECTIVES, tmp_path / "c.png") == \
        ["hypervolume", "peak_communication"]
    # a search of one batch could not change: every objective keeps its panel (a dot)
    single = history({"runtime_s": [0.7], "peak_comm_bytes": [0.0], "peak_mem_bytes": [GIB]})
    assert progress({"a": single}, OBJECTIVES, tmp_path / "s.png") == ["hypervolume"] + OBJECTIVES


def sweep_rows():
    rows, runtime = [], {1: None, 2: 0.235, 4: 0.120, 8: 0.062}
    for n, (devices, limit) in enumerate([(d, m) for d in (1, 2, 4, 8) for m in (4.0, 16.0)]):
        fits = runtime[devices] is not None and (limit > 4 or devices == 8)
        rows.append({"number": n, "state": "complete",
                     "params": {"devices": devices, "memory_limit_gib": limit},
                     "values": {"best_runtime_within_memory":
                                runtime[devices] if fits else float("inf")}})
    rows.append({"number": 8, "state": "fail", "params": {"devices": 8}, "values": {}})
    return rows


def test_the_sweep_figure_shows_trials_where_nothing_fits(tmp_path, monkeypatch):
    seen = []
    original = sweep.save

    def save(fig, path):  # what the first panel drew, before the figure is freed
        ax = fig.axes[0]
        seen.append((list(ax.get_xticks()), [t.get_text() for t in ax.get_xticklabels()],
                     ax.get_ylabel(), ax.get_legend_handles_labels()[1],
                     [c.get_offsets()[:, 0].tolist() for c in ax.collections
                      if "nothing fits" in c.get_label()]))
        return original(fig, path)

    monkeypatch.setattr(sweep, "save", save)
    marked = values_by_parameter(sweep_rows(), ["best_runtime_within_memory"], ["minimize"],
                                 ["devices", "memory_limit_gib"], tmp_path / "v.png")
    assert marked == {"best_runtime_within_memory": {"drawn": [3, 5, 6, 7],
                                                      "nothing_fits": [0, 1, 2, 4]}}
    ticks, tick_labels, ylabel, labels, hollow = seen[0]  # the devices panel
    assert ticks == [1, 2, 4, 8] and tick_labels == ["1", "2", "4", "8"]  # integer ticks
    assert ylabel == "best runtime within memory (ms)"
    assert "nothing fits (4 of 8 trials)" in labels
    assert "best: trial 6" in labels  # the first of a tie
    assert sorted(hollow[0]) == [1, 1, 2, 4]


def page_data(path):
    text = path.read_text()
    found = re.search(r'<script id="front-data" type="application/json">(.*?)</script>',
                      text, re.S)
    return text, json.loads(found.group(1))


def test_the_3d_page_is_small_self_contained_and_marks_what_it_draws(tmp_path):
    values = np.vstack([FRONT] * 13)  # 65 points
    far = mark("single", [30.0, 0.0, 3.5 * GIB], feasible=False)
    front_3d_html(values, OBJECTIVES, tmp_path / "f.html", marks=[far], knee=2, title="t")
    text, data = page_data(tmp_path / "f.html")
    assert len(text.encode()) < 60_000
    assert "<script src" not in text and "http" not in text and "import(" not in text
    assert data["axes"] == ["runtime (ms)", "peak communication (GiB)", "peak memory (GiB)"]
    front, single, knee = data["groups"]
    assert front["name"] == "front (65 points)" and len(front["points"]) == 65
    assert front["text"][0].splitlines() == ["point 0", "runtime: 300.0 ms",
                                             "peak communication: 4.000 GiB",
                                             "peak memory: 2.000 GiB"]
    assert single["name"] == "single (over memory) (at the edge: far off)" and single["hollow"]
    assert single["points"][0][0] == pytest.approx(data["ranges"][0][1])  # at the box's edge
    assert "runtime: 30.00 s" in single["text"][0]
    assert knee["tag"] == "knee #2" and knee["points"][0][0] == pytest.approx(500.0)


def test_a_fourth_objective_colours_the_3d_page(tmp_path):
    four = OBJECTIVES + ["spill_bytes"]
    values = np.hstack([FRONT, [[10.0], [20.0], [30.0], [40.0], [50.0]]])
    front_3d_html(values, four, tmp_path / "f.html")
    _, data = page_data(tmp_path / "f.html")
    assert data["groups"][0]["colour"] is None and data["crange"] == [10.0, 50.0]
    assert data["colour_axis"] == "spill bytes (B)" and len(data["groups"][0]["points"][0]) == 4
