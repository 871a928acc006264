"""A quick fixed-seed fuzz of every input format moplace reads and of its command line.

Each format gets a few dozen mutated inputs (``arguments``: every named case of
`formats.Arguments` plus some random ones), run through `moplace.cli.main` in process; any
failure (an exception other than a clean user error, a hang, non-strict ``--json`` output)
fails the test with the failures grouped by class. The long run is ``experiments/fuzz.py``.
Run alone: ``python3 -m pytest -q -n0 tests/fuzz/test_fuzz_quick.py``.
"""

from __future__ import annotations

import pytest

from .formats import FORMATS
from .harness import failure_report, fuzz

SEED = 0
#: inputs per format; "arguments" covers all its 589 named cases (mostly instant errors) first
N = {"pipedream": 25, "dnn-partitioning": 50, "native": 50, "cluster": 50, "strategy": 50,
     "front": 50, "sweep": 50, "arguments": 589, "torch-model": 8,
     "hf-config": 30}
#: the slow run (``pytest -m slow``, also run by .ci/run): other inputs, ten times as many
N_SLOW = 500
#: seconds per input: the valid runs here take well under 1 s
TIME_LIMIT = 5.0
#: a PyTorch model file is traced twice (the first trace of a process takes seconds more)
TIME_LIMITS = {"torch-model": 30.0}


@pytest.mark.parametrize("fmt", FORMATS)
def test_fuzz_quick(fmt, tmp_path):
    results = fuzz(fmt, N[fmt], SEED, tmp_path, time_limit=TIME_LIMITS.get(fmt, TIME_LIMIT))
    assert len(results) == N[fmt]
    assert all(o.ok for _, o in results), failure_report(results, limit=10)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_fuzz_more(fmt, tmp_path):
    start = N[fmt]  # the inputs after the quick run's
    results = fuzz(fmt, N_SLOW // (10 if fmt == "torch-model" else 1), SEED, tmp_path,
                   time_limit=TIME_LIMITS.get(fmt, TIME_LIMIT), start=start)
    assert len(results) == N_SLOW // (10 if fmt == "torch-model" else 1)
    assert all(o.ok for _, o in results), failure_report(results, limit=10)


def test_harness_judges_outcomes(tmp_path):
    """The judge itself: success, clean errors (ours and argparse's), strict JSON."""
    from .harness import _strict_json, run_one

    assert run_one(["clusters"]).kind == "ok"
    assert run_one(["evaluate", "pipedream:nosuch", "--cluster", "1xV100",
                    "--baseline", "single"]).kind == "clean-error"
    assert run_one(["evaluate", "--no-such-flag"]).kind == "clean-error"
    assert run_one(["--help"]).ok
    assert _strict_json('{"a": 1}') is None
    assert _strict_json('{"a": NaN}') and _strict_json('{"a": -Infinity}')
    assert _strict_json('{"a": 1}\n{"b": 2}')


def test_mutations_are_deterministic():
    import random

    from . import mutate

    seed = b'{"a": [1, 2.5, {"b": "x"}], "c": 1e3}\nline two 42\n'
    for fn in mutate.TEXT_MUTATIONS + mutate.TOML_MUTATIONS:
        assert fn(seed, random.Random(7)) == fn(seed, random.Random(7)), fn.__name__
    for k in range(20):
        assert (mutate.mutate_json(seed.split(b"\n")[0], random.Random(k))
                == mutate.mutate_json(seed.split(b"\n")[0], random.Random(k)))
