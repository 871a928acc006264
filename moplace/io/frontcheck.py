"""Check a front.json's fields before anything reads them (`check_front`): what `moplace show`,
its tables and questions, and the commands that take a front alone read besides the
strategies (which `moplace.io.strategies` checks when a point is evaluated). A damaged field
is a `FormatError` naming the file and the field, never a traceback.
"""

from __future__ import annotations

import math

from ..core.runners import RUNNERS
from ..core.strategy import FP8_MODES, SCHEDULES
from ..errors import FormatError, shown
from .strategies import FRONT_VERSION, StrategyError, check_version

#: a point's plan at a glance (`moplace.core.levers.plan_of`): the whole-number fields
PLAN_COUNTS = ("devices", "split_groups", "tensor_groups", "zero_stage", "recomputed_groups",
               "micro_batches")


def check_front(data, path) -> dict:
    """``data`` (a parsed front.json) when its fields hold what they should; else a
    `FormatError` naming the first that does not."""
    from objectives import json_key

    def fail(field, message):
        raise FormatError(path, message, field=field)

    if not isinstance(data, dict) or "points" not in data or "objectives" not in data:
        raise FormatError(path, "not a front written by moplace (no points)")
    try:
        check_version(data.get("version", 1), "front", FRONT_VERSION)
    except StrategyError as exc:
        raise FormatError(path, str(exc)) from None
    objectives = data["objectives"]
    if not (isinstance(objectives, list) and objectives
            and all(isinstance(o, str) and o for o in objectives)):
        fail("objectives", f"must be a non-empty list of objective names, got {shown(objectives)}")
    try:
        keys = [json_key(o) for o in objectives]
    except Exception:  # noqa: BLE001 - an objective not registered here: named by the caller
        return data
    for field in ("points", "infeasible"):
        points = data.get(field) or []
        if not isinstance(points, list):
            fail(field, f"must be a list of points, got {type(points).__name__}")
        for k, p in enumerate(points):
            _point(p, keys, f"{field}[{k}]", fail)
    baselines = data.get("baselines") or {}
    if not isinstance(baselines, dict):
        fail("baselines", f"must be an object of named points, got {shown(baselines)}")
    for name, b in baselines.items():
        if not isinstance(b, dict):
            fail(f"baselines.{name}", f"must be an object, got {shown(b)}")
        for key in keys:
            _number(b.get(key), f"baselines.{name}.{key}", fail)
    notes = data.get("notes") or []
    if not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
        fail("notes", f"must be a list of strings, got {shown(notes)}")
    for field in ("evaluations", "hypervolume", "memory_limit_bytes"):
        if data.get(field) is not None:
            _number(data[field], field, fail)
    for field in ("graph_source", "cluster_source", "optimizer", "status", "searcher", "space"):
        if data.get(field) is not None and not isinstance(data[field], str):
            fail(field, f"must be a string, got {shown(data[field])}")
    by = data.get("micro_batch_graphs")
    if by is not None and not (isinstance(by, dict)
                               and all(isinstance(v, str) for v in by.values())):
        fail("micro_batch_graphs", f"must be an object of graph paths by micro-batch size, got "
                                   f"{shown(by)}")
    if "inplace" in data and not isinstance(data["inplace"], bool):
        fail("inplace", f"must be true or false, got {shown(data['inplace'])}")
    return data


def _point(p, keys, at, fail) -> None:
    if not isinstance(p, dict):
        fail(at, f"must be an object, got {shown(p)}")
    for key in keys:
        _number(p.get(key), f"{at}.{key}", fail)
    if not isinstance(p.get("feasible"), bool):
        fail(f"{at}.feasible", f"must be true or false, got {shown(p.get('feasible'))}")
    _number(p.get("violation_bytes"), f"{at}.violation_bytes", fail)
    if p.get("searcher") is not None and not isinstance(p["searcher"], str):
        fail(f"{at}.searcher", f"must be a string, got {shown(p['searcher'])}")
    runs = p.get("runs")
    if runs is not None and not (isinstance(runs, list) and all(r in RUNNERS for r in runs)):
        fail(f"{at}.runs", f"must be a list of runners ({', '.join(RUNNERS)}), got {shown(runs)}")
    plan = p.get("plan")
    if plan is None:
        return
    if not isinstance(plan, dict):
        fail(f"{at}.plan", f"must be an object, got {shown(plan)}")
    for key in PLAN_COUNTS:
        value = plan.get(key, 0 if key != "devices" else None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            fail(f"{at}.plan.{key}", f"must be a whole number, got {shown(value)}")
    _number(plan.get("bucket_bytes", 0), f"{at}.plan.bucket_bytes", fail)
    if plan.get("micro_batches", 1) > 1 and plan.get("schedule") not in SCHEDULES:
        fail(f"{at}.plan.schedule", f"must be one of {', '.join(SCHEDULES)}, got "
                                    f"{shown(plan.get('schedule'))}")
    if plan.get("fp8", "none") not in FP8_MODES:
        fail(f"{at}.plan.fp8", f"must be one of {', '.join(FP8_MODES)}, got "
                               f"{shown(plan.get('fp8'))}")


def _number(value, field, fail) -> None:
    """A finite, non-negative number (the objectives, bytes and counts a front holds)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        fail(field, f"must be a finite non-negative number, got {shown(value)}")
