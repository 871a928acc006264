"""The testbeds' shared room: worker processes (`moplace.testbed.procs`) and the split
equivalence verdict (`moplace.testbed.equivalence`)."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

from moplace.testbed.equivalence import compare
from moplace.testbed.procs import WorkerDied, Workers, core_shares

PY = sys.executable


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone too
        return f.read().split()[2] == "Z"


def test_a_dying_worker_is_named_with_its_last_words_and_the_others_are_killed():
    commands = [[PY, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                [PY, "-c", "import sys; print('ready', flush=True); "
                           "sys.exit('out of patience: rank 1 gives up')"]]
    ws = Workers(commands, names=["rank 0", "rank 1"])
    pids = [p.pid for p in ws.procs]
    with pytest.raises(WorkerDied, match=r"rank 1 died \(exit status 1\): out of patience"):
        ws.watch(until=lambda k, line: line == "done", timeout=60)
    ws.close()
    assert all(_gone(pid) for pid in pids)


def test_workers_hear_lines_and_overrunning_ones_are_stopped():
    ws = Workers([[PY, "-c", "import sys\nfor line in sys.stdin: print('echo', line.strip(), "
                             "flush=True)"]] * 2)
    heard = []
    ws.tell("job-1")
    ws.watch(on_line=lambda k, line: heard.append((k, line)),
             until=lambda k, line: line == "echo job-1", timeout=60)
    assert sorted(heard) == [(0, "echo job-1"), (1, "echo job-1")]
    t0 = time.monotonic()
    with pytest.raises(WorkerDied, match="did not finish within 1 s"):
        ws.watch(until=lambda k, line: False, timeout=1)
    assert time.monotonic() - t0 < 30
    ws.close()


def test_core_shares_cover_the_cores_once_each():
    cores = sorted(os.sched_getaffinity(0))
    shares = core_shares(len(cores))
    assert sorted(c for share in shares for c in share) == cores
    assert all(share for share in core_shares(len(cores) + 3))  # more workers than cores


def test_the_verdict_holds_losses_and_weights_to_the_tolerances():
    ref = {"w": np.ones(3), "b": np.zeros(2)}
    same = compare([2.0, 1.5], [2.0, 1.5 + 1e-6], ref, {"w": np.ones(3) + 5e-5, "b": np.zeros(2)})
    assert same.equal and same.worst_weight == "w"
    assert not compare([2.0], [2.1], ref, ref).equal
    assert not compare([2.0], [2.0], ref, {"w": ref["w"] + 1e-2, "b": ref["b"]}).equal
    assert not compare([2.0], [2.0], ref, {"w": ref["w"]}).equal  # a weight missing
    assert not compare([2.0], [float("nan")], ref, ref).equal
