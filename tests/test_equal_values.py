"""Objective values within float noise of each other are the same value (issue 48, defect 7):
the archive keeps the first of two points 5e-17 s apart, and the front table names a point
equal to a baseline within `RTOL` ("= single") even where rounding shows them apart."""

from __future__ import annotations

import numpy as np

from moplace.optimize.archive import RTOL, ParetoArchive, no_worse, same_values
from moplace.review.table import front_text

GIB = 2.0 ** 30


def test_a_point_float_noise_faster_does_not_push_the_first_out():
    single = np.array([0.4629, 0.0, 18.27 * GIB])
    noise = single - [5e-17, 0.0, 0.0]
    archive = ParetoArchive(3, rtol=RTOL)
    assert archive.add(single, payload="single")
    assert not archive.add(noise, payload="noise")
    assert [e.payload for e in archive.front] == ["single"]
    assert archive.weakly_dominates(noise)
    # the other way round: the first one stays all the same
    archive = ParetoArchive(3, rtol=RTOL)
    assert archive.add(noise, payload="noise") and not archive.add(single, payload="single")
    assert [e.payload for e in archive.front] == ["noise"]
    # beyond the tolerance a faster point is a better point, and the slower one leaves
    faster = single * [1 - 1e-6, 1, 1]
    assert archive.add(faster, payload="faster")
    assert [e.payload for e in archive.front] == ["faster"]
    # a point better in one objective and worse beyond the tolerance in another: both stay
    assert archive.add(faster * [1.01, 1, 0.5], payload="other")
    assert len(archive) == 2


def test_equality_is_relative():
    assert same_values([1e-3, 5e9], [1e-3 * (1 + RTOL / 2), 5e9 - 1])
    assert not same_values([1e-3, 5e9], [1e-3 * (1 + 2 * RTOL), 5e9])
    assert not same_values([0.0], [1e-300])  # zero is zero (no absolute tolerance)
    assert no_worse([1.0, 2.0], [1.0 - RTOL / 2, 3.0]).all()


def _point(rt, comm, mem):
    return {"runtime_s": rt, "peak_comm_bytes": comm, "peak_mem_bytes": mem, "feasible": True,
            "violation_bytes": 0.0}


def test_a_point_equal_to_a_baseline_within_noise_is_named_even_when_rounded_apart():
    base = 0.12345000000000002  # 123.45 ms: shown 123.5
    point = base * (1 - 1e-12)  # shown 123.4, the same value but for float noise
    data = {"objectives": ["runtime", "peak_communication", "peak_memory"],
            "points": [_point(point, 0.0, 2 * GIB), _point(0.2, 0.0, GIB)], "infeasible": [],
            "baselines": {"single": {"runtime_s": base, "peak_comm_bytes": 0.0,
                                     "peak_mem_bytes": 2 * GIB}}}
    text = front_text(data)
    row = next(line for line in text.splitlines() if line.lstrip().startswith("0 "))
    assert "123.4" in row and "= single" in row
    data["baselines"]["single"]["runtime_s"] = point * (1 + 1e-6)  # another value: not named
    assert "= single" not in front_text(data)
