"""Figures of a search (moplace.review.figures): every file drawn and not empty, the knee,
the units, the aggregation of large schedules."""

import numpy as np
import pytest

from moplace import load_cluster, load_graph
from moplace.core.baselines import baseline
from moplace.errors import MoplaceError
from moplace.io.fronts import result_json
from moplace.optimize.driver import search
from moplace.optimize.plugins import make_searcher
from moplace.optimize.problem import Problem
from moplace.review.figures import FILES, draw_search, front_values
from moplace.review.figures.timeline import busy_fraction, gantt
from moplace.review.marks import knee_index, reference_marks
from moplace.review.units import axis_label, column_unit, fmt, fmt_duration, number
from moplace.simulator.engine import simulate

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def gnmt_search():
    problem = Problem(load_graph("pipedream:gnmt"), load_cluster("4xV100-NVLink"))
    result = search(problem, make_searcher("random"), budget=60, seed=0)
    return problem, result_json(result)


def test_every_figure_is_drawn_and_is_an_image(gnmt_search, tmp_path):
    problem, data = gnmt_search
    drawn = draw_search(data, problem, tmp_path)
    assert sorted(drawn) == sorted(FILES)
    for name, (path, seconds) in drawn.items():
        content = path.read_bytes()
        assert seconds >= 0
        if name.endswith(".png"):
            assert content.startswith(PNG) and len(content) > 10_000, name
        else:  # self-contained and small: no library, nothing from a network
            text = content.decode()
            assert "<html>" in text and 'id="front-data"' in text and len(text) < 100_000
            assert "runtime (ms)" in text and "<script src" not in text and "http" not in text


def test_a_chosen_point_out_of_range_is_refused(gnmt_search, tmp_path):
    problem, data = gnmt_search
    n = len(data["points"])
    with pytest.raises(MoplaceError, match=f"front has {n} points"):
        draw_search(data, problem, tmp_path, point=n, html=False)


def test_front_values_follow_the_objectives(gnmt_search):
    _, data = gnmt_search
    values = front_values(data)
    assert values.shape == (len(data["points"]), 3)
    assert values[0, 0] == data["points"][0]["runtime_s"]


def test_knee_is_the_balanced_point():
    front = np.array([[1.0, 10.0, 5.0], [4.0, 4.0, 5.0], [10.0, 1.0, 5.0]])
    assert knee_index(front) == 1
    assert knee_index(np.zeros((0, 3))) is None
    assert knee_index(front[:1]) == 0


def test_reference_marks_are_the_baselines_and_heuristics(gnmt_search):
    problem, _ = gnmt_search
    marks = {m.name: m for m in reference_marks(problem)}
    assert set(marks) == {"single", "data-parallel", "round-robin", "layer-split", "heft", "dpos"}
    single = problem.evaluate(baseline("single", problem.graph, problem.n_devices))
    np.testing.assert_array_equal(marks["single"].values, single.values)
    assert marks["dpos"].kind == "heuristic" and marks["single"].kind == "baseline"


def test_busy_fraction_integrates_intervals():
    edges = np.array([0.0, 1.0, 2.0, 3.0])
    frac = busy_fraction([0.5, 1.5], [1.0, 3.0], edges)  # 0.5 in slice 0, 0.5 + 1 after
    np.testing.assert_allclose(frac, [0.5, 0.5, 1.0])
    np.testing.assert_allclose(busy_fraction([], [], edges), [0, 0, 0])


def test_large_schedules_are_aggregated_not_drawn_bar_by_bar(tmp_path):
    graph, cluster = load_graph("pipedream:resnet50"), load_cluster("4xV100-NVLink")
    trace = simulate(graph, cluster, baseline("data-parallel", graph, 4), record=True)
    gantt(trace, tmp_path / "bars.png")
    gantt(trace, tmp_path / "strips.png", max_bars=100)
    assert (tmp_path / "bars.png").read_bytes().startswith(PNG)
    assert (tmp_path / "strips.png").read_bytes().startswith(PNG)


def test_a_trace_without_its_record_is_refused(tmp_path):
    graph, cluster = load_graph("pipedream:alexnet"), load_cluster("4xV100-NVLink")
    trace = simulate(graph, cluster, baseline("round-robin", graph, 4))
    with pytest.raises(ValueError, match="record=True"):
        gantt(trace, tmp_path / "g.png")


@pytest.mark.parametrize("value, text", [
    (0.6936, "693.6 ms"), (6.936e-4, "693.6 µs"), (12.5, "12.50 s"), (3.2e-7, "320.0 ns"),
    (0.0, "0 s")])
def test_times_read_at_a_glance(value, text):
    assert fmt(value, "time") == text


@pytest.mark.parametrize("value, text", [
    (0, "0 B"), (512, "512 B"), (1536, "1.500 KiB"), (15.21 * 2 ** 30, "15.21 GiB")])
def test_sizes_read_at_a_glance(value, text):
    assert fmt(value, "bytes") == text


def test_a_column_shares_one_unit():
    unit = column_unit("runtime", [0.0004, 0.09, 0.2])
    assert unit == ("ms", 1e-3)
    assert fmt(0.0004, "time", unit) == "0.4000 ms" and number(0.0004, "time", unit) == "0.4000"
    assert axis_label("peak_memory", column_unit("peak_memory", [3e9])) == "peak memory (GiB)"
    assert fmt(float("nan"), "time") == "–" and fmt(float("inf"), "bytes") == "inf"
    assert fmt_duration(185) == "3 min 05 s"
