"""Questions asked of a front (issue 34): constraints (absolute, or relative to the front's best
feasible value before any filter) and a goal, in Python and with `moplace show --where
--best` on a front.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

import moplace
from moplace.cli import main
from moplace.errors import MoplaceError
from moplace.io.fronts import save_result, sources
from moplace.review.select import Front, parse_constraint, select

OBJ = ["runtime", "peak_communication", "peak_memory"]
GIB, GB = 2.0**30, 1e9
#: runtime s, communication B, memory B: a front of five points
VALUES = np.array([[1.00, 9e9, 20 * GIB],    # 0 the fastest, too big for 16 GB
                   [1.04, 5e9, 15.5 * GIB],  # 1 within 5%, fits 16 GiB but not 16 GB
                   [1.05, 2e9, 14.0 * GIB],  # 2 within 5%, least traffic there, fits 16 GB
                   [1.20, 1e9, 10.0 * GIB],  # 3
                   [2.00, 0.0, 5.0 * GIB]])  # 4
FEASIBLE = np.ones(5, bool)


def test_units_follow_the_objective_and_gb_is_not_gib():
    c = parse_constraint("peak_memory<=16GB", OBJ)
    assert (c.op, c.value, c.relative) == ("<=", 16e9, False)
    assert parse_constraint("peak_memory <= 16GiB", OBJ).value == 16 * GIB
    assert parse_constraint("runtime<12.5ms", OBJ).value == pytest.approx(0.0125)
    assert parse_constraint("runtime<=1.05x", OBJ).relative
    assert parse_constraint("peak_communication>=3e9", OBJ).value == 3e9
    assert parse_constraint("runtime<=2min", OBJ).value == 120.0  # as cluster files read
    assert parse_constraint("peak_memory<=1PiB", OBJ).value == 2.0**50


@pytest.mark.parametrize("text, message", [
    ("peak_memory=16GB", "write OBJECTIVE OP VALUE"),
    ("runtim<=1s", "did you mean 'runtime'"),
    ("peak_memory<=16GHz", "cannot read '16GHz' as a size"),
    ("runtime<=16GiB", "cannot read '16GiB' as a time"),
    ("runtime<=-1", "cannot read '-1'"),
])
def test_bad_constraints_are_named(text, message):
    with pytest.raises(MoplaceError, match=message):
        parse_constraint(text, OBJ)


def test_the_fastest_that_fits_in_16_gb():
    s = select(VALUES, FEASIBLE, OBJ, ["peak_memory<=16GB"], "runtime")
    assert s.index == 2  # 16 GB = 14.9 GiB: point 1 (15.5 GiB) does not fit
    assert select(VALUES, FEASIBLE, OBJ, ["peak_memory<=16GiB"], "runtime").index == 1


def test_least_traffic_within_5_percent_of_the_fastest():
    s = select(VALUES, FEASIBLE, OBJ, ["runtime<=1.05x"], "peak_communication")
    assert s.index == 2 and s.left == (0, 1, 2)
    assert s.bounds[0][1] == pytest.approx(1.05)


def test_relative_bounds_use_the_whole_front_before_other_filters():
    """The memory filter drops the fastest point; "1.05x" still means 1.05 x its runtime."""
    s = select(VALUES, FEASIBLE, OBJ, ["peak_memory<=16GiB", "runtime<=1.05x"], "runtime")
    assert s.index == 1 and s.bounds[1][1] == pytest.approx(1.05)
    # ... and the best feasible: an infeasible faster point does not count
    feasible = np.array([False, True, True, True, True])
    s = select(VALUES, feasible, OBJ, ["runtime<=1.01x"], "runtime")
    assert s.index == 1 and s.bounds[0][1] == pytest.approx(1.04 * 1.01)


def test_the_knee_of_what_is_left_and_nothing_left():
    assert select(VALUES, FEASIBLE, OBJ, ["runtime>=1.1"], "knee").index in (3, 4)
    none = select(VALUES, FEASIBLE, OBJ, ["peak_memory<1GiB"], "runtime")
    assert none.index is None and none.left == ()
    with pytest.raises(MoplaceError, match="did you mean 'knee'"):
        select(VALUES, FEASIBLE, OBJ, [], "knees")


@pytest.fixture(scope="module")
def front_file(tmp_path_factory):
    g, c = moplace.load_graph("pipedream:vgg16"), moplace.load_cluster("4xV100-NVLink")
    result = moplace.search(moplace.Problem(g, c), moplace.make_searcher("nsga2"), budget=200,
                            seed=0)
    folder = tmp_path_factory.mktemp("front")
    return save_result(result, folder, extra=sources("pipedream:vgg16", "4xV100-NVLink")), result


def test_a_front_object_answers_in_python(front_file):
    path, result = front_file
    front = Front.load(path)
    assert front.objectives == OBJ and len(front.points) == len(result.front)
    fastest = front.select(best="runtime")
    assert front.values[fastest.index, 0] == front.values[:, 0].min()
    answer = front.select(["runtime<=1.05x"], "peak_communication")
    left = front.values[list(answer.left)]
    assert np.all(left[:, 0] <= 1.05 * front.values[:, 0].min())
    assert front.values[answer.index, 1] == left[:, 1].min()
    assert Front.of_result(result).select(["runtime<=1.05x"], "peak_communication").index == \
        answer.index
    assert "least peak communication" in front.describe(answer)


def test_show_answers_on_a_front_json(front_file, capsys):
    path, _ = front_file
    front = Front.load(path)
    want = front.select(["runtime<=1.05x"], "peak_communication").index
    assert main(["show", str(path), "--where", "runtime<=1.05x", "--best",
                 "peak_communication"]) == 0
    out = capsys.readouterr().out
    assert f"point {want}:" in out and "runtime <= " in out
    assert f"moplace evaluate {path} --point {want}" in out
    assert f"moplace plot {path} --point {want}" in out
    assert main(["show", str(path), "--where", "peak_memory<=1kB", "--json"]) == 2
    err = capsys.readouterr().err
    assert "no point of the" in err and "peak_memory<=1kB (bound 1000 B)" in err
    assert main(["show", str(path), "--best", "runtime", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["point"]["runtime_s"] == pytest.approx(front.values[:, 0].min())
    assert set(data["commands"]) == {"draw", "evaluate"}


def test_show_refuses_a_bad_question_with_a_message(front_file, capsys):
    path, _ = front_file
    assert main(["show", str(path), "--where", "latency<=3ms"]) != 0
    assert "'latency' is not an objective" in capsys.readouterr().err
