"""Fronts as short tables (`moplace.review.table`): which rows, folded how, marked how, in
which units; and `moplace search` / `moplace show` printing them."""

import json
import re

import numpy as np
import pytest

from moplace.review.table import ROW_LIMIT, front_rows, front_text

MS, GIB = 1e-3, 2.0 ** 30


def _point(rt, comm, mem, feasible=True, over=0.0, **extra):
    return {"runtime_s": rt, "peak_comm_bytes": comm, "peak_mem_bytes": mem,
            "feasible": feasible, "violation_bytes": over, **extra}


def _front(points, **extra):
    return {"objectives": ["runtime", "peak_communication", "peak_memory"], "points": points,
            "infeasible": [], **extra}


def _line_front(n):
    """``n`` points along a trade-off: runtime up, memory down, communication a bump."""
    return [_point((100 + 10 * k) * MS, (1 + (k % 3)) * GIB, (20 - k * 15 / n) * GIB)
            for k in range(n)]


def _rows(text):
    return [line for line in text.splitlines() if re.match(r"\s*\d+\s+[\d.]+\s", line)]


def test_a_long_front_shows_ten_rows_with_each_best_and_the_knee():
    values = np.array([[p["runtime_s"], p["peak_comm_bytes"], p["peak_mem_bytes"]]
                       for p in _line_front(61)])
    rows, folded = front_rows(values, knee=30)
    assert len(rows) == ROW_LIMIT and not any(folded.values())
    for j in range(3):  # each objective's best is among the rows
        assert int(np.argmin(values[:, j])) in rows
    assert 30 in rows
    assert rows == sorted(rows, key=lambda k: tuple(values[k]))  # in runtime order
    # spread: the rows do not bunch at one end of the front
    assert max(rows) - min(rows) == 60 and len({k // 10 for k in rows}) >= 5
    every, _ = front_rows(values, knee=30, limit=None)
    assert every == list(range(61))


def test_points_equal_at_the_shown_precision_fold_into_one_row():
    same = [_point(0.1000001, GIB, 2 * GIB), _point(0.1, GIB, 2 * GIB + 1),
            _point(0.2, 0.5 * GIB, GIB)]
    text = front_text(_front(same))
    rows = _rows(text)
    assert len(rows) == 2 and "= #1" in rows[0]
    assert "equal to the row at the precision shown" in text
    # the knee stands for its group when it is in one
    rows, folded = front_rows(np.zeros((3, 2)), knee=2, keys=["a", "a", "a"])
    assert rows == [2] and folded == {2: [0, 1]}


def test_the_table_marks_the_knee_and_a_point_equal_to_a_baseline():
    points = _line_front(5)
    b = points[4]
    data = _front(points, baselines={
        "single": {k: b[k] for k in ("runtime_s", "peak_comm_bytes", "peak_mem_bytes")},
        "data-parallel": {"runtime_s": 1.0, "peak_comm_bytes": 1.0, "peak_mem_bytes": 1.0}})
    rows = _rows(front_text(data))
    assert "= single" in rows[4] and "data-parallel" not in "".join(rows)
    from moplace.review.marks import front_knee

    knee = front_knee(data)
    assert [r.split()[0] for r in rows if "knee" in r] == [str(knee)]


def test_one_unit_per_column_same_significant_digits_and_yes_no():
    points = [_point(0.6936, 3 * GIB, 15.2 * GIB, plan={"devices": 4}),
              _point(0.01234, 0.0, 0.5 * GIB, feasible=False, over=1.5 * GIB)]
    text = front_text(_front(points))
    head, second, first = text.splitlines()[:3]  # in runtime order
    assert "runtime (ms)" in head and "peak memory (GiB)" in head
    assert "over capacity, summed over devices (GiB)" in head
    assert first.split()[1:4] == ["693.6", "3.000", "15.20"]
    assert second.split()[1:6] == ["12.34", "0", "0.5000", "no", "1.500"]
    assert " yes " in first and "True" not in text and "False" not in text
    assert "4 devices" in first


def test_a_front_where_nothing_fits_shows_its_least_violating_points():
    data = _front([], infeasible=[_point(0.5, GIB, 50 * GIB, False, 10 * GIB)])
    text = front_text(data)
    assert len(_rows(text)) == 1 and "no strategy fits in memory" in text


@pytest.mark.parametrize("every", [False, True])
def test_show_prints_the_short_table_and_all_on_request(tmp_path, every, capsys):
    from moplace.cli import main

    path = tmp_path / "front.json"
    path.write_text(json.dumps(_front(_line_front(25), status="finished", evaluations=25,
                                      hypervolume=0.5, notes=["op times on H100 are estimates"])))
    assert main(["show", str(path)] + (["--all"] if every else [])) == 0
    out = capsys.readouterr().out
    assert len(_rows(out)) == (25 if every else ROW_LIMIT)
    assert ("10 of 25 distinct points shown" in out) != every
    assert "note: op times on H100 are estimates" in out


@pytest.mark.parametrize("damage, field", [
    (lambda d: d["points"][0].update(runtime_s="fast"), "points[0].runtime_s"),
    (lambda d: d["points"][1].update(feasible=1), "points[1].feasible"),
    (lambda d: d["points"][0].update(plan={"devices": 2, "micro_batches": 4}),
     "points[0].plan.schedule"),
    (lambda d: d.update(baselines={"single": {"runtime_s": 1.0}}),
     "baselines.single.peak_comm_bytes"),
    (lambda d: d.update(notes="not a list"), "notes"),
    (lambda d: d.update(objectives=[3]), "objectives"),
])
def test_show_refuses_a_damaged_front_by_field(tmp_path, capsys, damage, field):
    """What show reads of a front.json besides its strategies is checked first (the fuzz
    suite found a traceback for each of these)."""
    from moplace.cli import main

    data = _front(_line_front(3), status="finished", evaluations=3, hypervolume=0.5)
    damage(data)
    path = tmp_path / "front.json"
    path.write_text(json.dumps(data))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"field '{field}'" in err and "Traceback" not in err, err
