"""Strict JSON out: what moplace prints with ``--json`` and writes to its JSON files.

Python's `json` writes ``NaN`` and ``Infinity``, which are not JSON: other readers (jq,
JavaScript, Go) refuse the whole document. `dumps` writes a value that is not a finite
number (a best value while nothing is feasible, an unbounded ratio) as ``null``, numpy
scalars and arrays as plain numbers and lists, and checks the result with
``allow_nan=False``.
"""

from __future__ import annotations

import json
import math

import numpy as np


def plain(value):
    """``value`` with non-finite floats as None, numpy scalars and arrays as Python values,
    tuples as lists; recursive through dicts and lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(value, **kw) -> str:
    """`json.dumps` of `plain` ``value``, strict (``allow_nan=False``)."""
    return json.dumps(plain(value), allow_nan=False, **kw)
