"""A sweep's trial queue on SQLite: workers that start together each take different trials.

Optuna moves a WAITING trial to RUNNING by reading its state, then writing it, under a
``SELECT ... FOR UPDATE`` that SQLite ignores (optuna/optuna#4621): two workers could both
take one trial and run it twice, or both fail a dead worker's trial and queue it twice.
`moplace.sweep.study._move` makes each move one conditional UPDATE instead. Here four
processes empty one queue, or fail one sweep's stale trials, at the same moment."""

import collections
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SWEEP = """
[sweep]
name = "queue"
trials = {trials}
sampler = "random"
returns = ["best_runtime"]
heartbeat_seconds = 1

[fixed]
graph = "pipedream:alexnet"
searcher = "random"
budget = 10

[space]
devices = [1, 2, 4]
"""

#: how every worker script starts (see `_at_once`): open the sweep's study, then wait until
#: every worker has and the time ``argv[6]`` has come
START = """
import json, os, sys, time
sys.path.insert(0, sys.argv[4])
from moplace.sweep.spec import load_spec
from moplace.sweep.study import _pop, fail_stale, open_study, storage_of
study = open_study(load_spec(sys.argv[1]), sys.argv[2], create=False)
storage = storage_of(study)
open(f"{sys.argv[3]}/ready-{os.getpid()}", "w").close()
while len(os.listdir(sys.argv[3])) < int(sys.argv[5]) or time.time() < float(sys.argv[6]):
    time.sleep(0.001)
"""
#: one worker: take trials until none is left (without running them), print the ids it took
POPPER = START + """
taken = []
while (trial_id := _pop(study, storage)) is not None:
    taken.append(trial_id)
print(json.dumps(taken))
"""


#: one worker of a sweep whose workers all died: fail the stale trials and queue their
#: retries, as every worker does before taking a trial
FAILER = START + """
fail_stale(study)
"""


def _at_once(script, path, url, n_workers, not_before=0.0):
    """Run ``script`` in ``n_workers`` processes that start its work together (once all have
    imported and opened the study, and not before the time ``not_before``); their outputs."""
    ready = path.parent / "ready"
    ready.mkdir()
    workers = [subprocess.Popen([sys.executable, "-c", script, str(path), url, str(ready),
                                 str(ROOT), str(n_workers), str(not_before)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(n_workers)]
    outs = []
    for w in workers:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
        outs.append(out)
    return outs


def _queue(folder, n_trials):
    """A sweep file in ``folder``, its storage's URL and its study of ``n_trials`` WAITING
    trials."""
    from moplace.sweep.spec import load_spec
    from moplace.sweep.study import open_study

    path = folder / "queue.toml"
    path.write_text(SWEEP.format(trials=n_trials))
    url = f"sqlite:///{folder / 'queue.optuna.db'}"
    return path, url, open_study(load_spec(path), url)


def test_workers_starting_together_never_take_the_same_trial(tmp_path):
    n_trials, n_workers = 80, 4
    path, url, _ = _queue(tmp_path, n_trials)
    outs = _at_once(POPPER, path, url, n_workers)
    taken = [trial_id for out in outs for trial_id in json.loads(out)]
    twice = sorted(t for t, n in collections.Counter(taken).items() if n > 1)
    assert not twice, f"trials taken by two workers: {twice}"
    assert len(taken) == n_trials

    import optuna

    study = optuna.load_study(study_name="queue", storage=url)
    assert all(t.state.name == "RUNNING" and t.datetime_start is not None for t in study.trials)


def test_a_dead_workers_trial_is_queued_again_once_however_many_workers_notice(tmp_path):
    """Every trial RUNNING with a stale heartbeat (their workers died); four workers notice at
    once: each trial is failed by one of them and queued again once, not once per worker."""
    from moplace.sweep.study import _pop, storage_of

    n_trials = 40
    path, url, study = _queue(tmp_path, n_trials)
    storage = storage_of(study)
    while (trial_id := _pop(study, storage)) is not None:
        storage.record_heartbeat(trial_id)  # then silence: stale after 4 heartbeats
    # stale after 4 heartbeats of 1 s, as the database's clock (whole seconds) tells
    _at_once(FAILER, path, url, 4, time.time() + 6)

    import optuna

    trials = optuna.load_study(study_name="queue", storage=url).trials
    states = collections.Counter(t.state.name for t in trials)
    assert states == {"FAIL": n_trials, "WAITING": n_trials}, states
    retried = collections.Counter(t.system_attrs["failed_trial"] for t in trials
                                  if t.state.name == "WAITING")
    assert sorted(retried) == list(range(n_trials)) and set(retried.values()) == {1}
