"""A sweep's Optuna study: storage, trials handed to workers, heartbeats, the summary.

**Storage.** A SQLite file ``STEM.optuna.db`` (``STEM``: the sweep file's name without
``.toml``) in the working directory, as MLflow's ``mlflow.db``: never beside the sweep file,
which may sit in an installed, read-only examples folder. Running the command again from the
same folder resumes the study; from another folder it starts a new study there. ``--storage``
(or ``[sweep] storage``) names another file or a database server (PostgreSQL, MySQL) that
workers on several machines share. SQLite rather than Optuna's journal file: Optuna's
heartbeat, which finds a dead worker's trial and runs it again, exists only for database
storage (`RDBStorage`), and a sweep's few writes per trial are far from SQLite's limits
(writers wait up to 60 s for its lock).

**Trials as a queue.** Opening the sweep adds one WAITING trial per trial of the sweep
(parameters not drawn yet); a worker takes a WAITING trial (moves it to RUNNING in one
conditional UPDATE, `_move`: Optuna's own move is not atomic on SQLite), draws its parameters
from the sampler at that moment, runs it, and tells the result. So the sweep runs exactly its
number of trials however many workers join, and running the command again with a larger
``--trials`` adds the difference. A worker that dies stops sending heartbeats; after ``4 x
heartbeat_seconds`` another worker marks its trial FAIL (`fail_stale`: one worker does, however
many notice) and Optuna's `RetryHeartbeatStaleTrialCallback` queues a copy with the same
parameters (``retries`` times at most). A Ctrl-C'd trial is queued again the same way. A trial
whose search raises an error is FAIL with the error in its ``error`` attribute, and the sweep
goes on. A worker stops when no trial is WAITING or RUNNING: none is left RUNNING.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from pathlib import Path

from ..errors import MoplaceError

#: the trials' states, as --json names them
STATES = ("complete", "fail", "running", "waiting", "pruned", "retried")
#: front points a trial keeps in its attributes (for the sweep's overlaid fronts)
KEEP_POINTS = 200


def default_storage_file(spec) -> Path:
    """Where a sweep keeps its study unless told otherwise: ``STEM.optuna.db`` in the working
    directory (absolute, so that worker processes and Dask tasks get the same file)."""
    return Path.cwd().resolve() / f"{spec.path.stem}.optuna.db"


def storage_url(spec, given: str | None = None) -> str:
    url = given or spec.storage
    if url:
        return url
    return f"sqlite:///{default_storage_file(spec)}"


def storage_file(url: str) -> Path | None:
    """The SQLite file of a storage URL, absolute (None for a database server or in-memory)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+")[0] != "sqlite" or not rest.startswith("/") or rest == "/":
        return None
    path = rest[1:].split("?", 1)[0]  # sqlite:///rel.db is relative, sqlite:////abs.db absolute
    return Path(path).resolve() if path and path != ":memory:" else None


def open_storage(url: str, spec):
    """The heartbeat-enabled database storage at ``url``; a clear error when it cannot be used."""
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import warnings

    # the heartbeat and its retry callback are marked experimental since Optuna 2.8 (2021)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if "://" not in url:
        raise MoplaceError(f"storage {url!r} is not a database URL (sqlite:///FILE, "
                           f"postgresql://USER@HOST/DB, mysql://...)")
    scheme = url.split("://")[0].split("+")[0]
    if scheme == "sqlite":
        folder = Path(url.split(":///", 1)[-1]).parent
        if not folder.is_dir():
            raise MoplaceError(f"storage {url}: folder {folder} does not exist")
        connect = {"timeout": 60}
    else:
        connect = {"connect_timeout": 5}
    try:
        return RDBStorage(url, engine_kwargs={"connect_args": connect},
                          heartbeat_interval=spec.heartbeat_seconds,
                          grace_period=4 * spec.heartbeat_seconds,
                          heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                              max_retry=spec.retries))
    except ModuleNotFoundError as exc:
        raise MoplaceError(f"storage {url.split('://')[0]}://...: its database driver is not "
                           f"installed ({exc.name}); pip install it") from None
    except Exception as exc:  # noqa: BLE001 - sqlalchemy's many connection errors, named
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MoplaceError(f"storage {hide_password(url)} cannot be used: {first}") from None


def hide_password(url: str) -> str:
    head, sep, tail = url.partition("://")
    if "@" in tail and ":" in tail.split("@")[0]:
        user = tail.split("@")[0].split(":")[0]
        tail = f"{user}:***@" + tail.split("@", 1)[1]
    return head + sep + tail


def make_sampler(spec):
    import optuna.samplers as samplers

    from .spec import SAMPLERS

    cls = getattr(samplers, SAMPLERS.get(spec.sampler, spec.sampler))
    if cls is samplers.GridSampler:
        return _queued_grid(spec.grid(), spec.sampler_seed)
    try:
        return cls(seed=spec.sampler_seed)
    except TypeError:  # a sampler without a seed
        return cls()


def _queued_grid(search_space, seed):
    """Optuna's grid sampler without its stop at the grid's end (`Study.stop` works only inside
    ``optimize``; the sweep's queue says when it is done). The class is made here: optuna is
    imported only when a sweep runs."""
    import optuna.samplers as samplers

    class QueuedGrid(samplers.GridSampler):
        def after_trial(self, study, trial, state, values) -> None:
            pass

    return QueuedGrid(search_space, seed=seed)


def open_study(spec, url: str, *, trials: int | None = None, create: bool = True):
    """The sweep's study (created, or resumed), with ``trials`` trials queued in all."""
    return open_sweep_study(spec, url, trials=trials, create=create)[0]


def open_sweep_study(spec, url: str, *, trials: int | None = None, create: bool = True):
    """`open_study`, and whether the storage held the study already (a resumed sweep)."""
    import optuna

    # the storage as the study holds it (optuna wraps a database storage in a cache, and trial
    # ids must be handed out through that same object)
    storage = optuna.storages.get_storage(open_storage(url, spec))
    resumed = any(s.study_name == spec.name for s in storage.get_all_studies())
    if create:
        study = optuna.create_study(study_name=spec.name, storage=storage, load_if_exists=True,
                                    sampler=make_sampler(spec), directions=list(spec.directions))
    else:
        study = optuna.load_study(study_name=spec.name, storage=storage,
                                  sampler=make_sampler(spec))
    if [d.name.lower() for d in study.directions] != list(spec.directions):
        raise MoplaceError(f"{spec.path}: study {spec.name!r} in {url} returns other values "
                           f"({len(study.directions)} objectives); rename the sweep or its storage")
    if create:
        if study.metric_names is None:
            study.set_metric_names(list(spec.returns))
        _queue(study, trials if trials is not None else spec.trials)
    _STORAGES[study] = storage
    return study, resumed


#: each study opened here -> its heartbeat-enabled storage (optuna keeps it private)
_STORAGES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def storage_of(study):
    """The storage ``study`` was opened on by `open_sweep_study`."""
    try:
        return _STORAGES[study]
    except KeyError:
        raise MoplaceError("this study was not opened by moplace.sweep.study.open_study") from None


def _slots(trials) -> int:
    """Trials that are not a retry of another (each takes one of the sweep's places)."""
    return sum("failed_trial" not in t.system_attrs for t in trials)


def _queue(study, n: int) -> None:
    from optuna.trial import TrialState, create_trial

    for _ in range(n - _slots(study.get_trials(deepcopy=False))):
        study.add_trial(create_trial(state=TrialState.WAITING))


def counts(study) -> dict[str, int]:
    """Trials by state; ``retried``: FAIL trials that were queued again (dead worker, Ctrl-C),
    ``fail`` the others (the search raised an error)."""
    out = dict.fromkeys(STATES, 0)
    for t in study.get_trials(deepcopy=False):
        state = trial_state(t)
        out[state] = out.get(state, 0) + 1
    return out


def trial_state(t) -> str:
    """A trial's state as --json names it: Optuna's, or ``retried`` for a FAIL that was queued
    again (a dead worker, Ctrl-C: no ``error`` attribute)."""
    state = t.state.name.lower()
    return "retried" if state == "fail" and "error" not in t.user_attrs else state


def _pop(study, storage):
    """Take a WAITING trial (`_move`: one worker only gets each); its id or None."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    for t in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.WAITING,)):
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        try:
            if _move(storage, trial_id, TrialState.WAITING, TrialState.RUNNING):
                return trial_id
        except UpdateFinishedTrialError:
            continue
    return None


def fail_stale(study) -> None:
    """Optuna's `fail_stale_trials`, with each stale trial (its worker silent past the grace
    period) failed by one worker only (`_move`) and so queued again once, not once for each
    worker that noticed it."""
    import copy

    from optuna.trial import TrialState

    storage = storage_of(study)
    study_id = storage.get_study_id_from_name(study.study_name)
    retry = storage.get_heartbeat_stale_trial_callback()
    for trial_id in storage._get_stale_trial_ids(study_id):
        if _move(storage, trial_id, TrialState.RUNNING, TrialState.FAIL) and retry is not None:
            retry(study, copy.deepcopy(storage.get_trial(trial_id)))


def _move(storage, trial_id: int, old, new) -> bool:
    """Move trial ``trial_id`` from state ``old`` to ``new``; False when it was not in
    ``old``. One conditional UPDATE, atomic on every database: Optuna's own move reads the
    state, then writes it, under a SELECT ... FOR UPDATE that SQLite ignores, so two workers
    could both take one trial and run it twice (optuna/optuna#4621; seen here as two MLflow
    runs of one trial), or both fail a dead worker's trial and queue it twice. Falls back to
    Optuna's move on a storage without its database models."""
    from datetime import datetime

    from optuna.exceptions import UpdateFinishedTrialError

    backend = getattr(storage, "_backend", storage)  # under optuna's cache
    try:
        from optuna.storages._rdb.models import TrialModel as T
        from optuna.storages._rdb.storage import _create_scoped_session

        sessions = backend.scoped_session
    except (ImportError, AttributeError):
        try:
            return storage.get_trial(trial_id).state == old and \
                storage.set_trial_state_values(trial_id, state=new)
        except UpdateFinishedTrialError:
            return False
    with _create_scoped_session(sessions) as session:
        moved = (session.query(T).filter(T.trial_id == trial_id, T.state == old)
                 .update({T.state: new}, synchronize_session=False))
        if moved == 1:  # the row is this transaction's now: its times as Optuna sets them
            row = session.query(T).filter(T.trial_id == trial_id).one()
            if new.is_finished():
                row.datetime_complete = datetime.now()
            else:
                row.datetime_start = datetime.now()
    return moved == 1


class _Heartbeat:
    """Records a trial's heartbeat every interval while its search runs."""

    def __init__(self, storage, trial_id: int, interval: float):
        self._stop = threading.Event()
        storage.record_heartbeat(trial_id)
        self._thread = threading.Thread(target=self._beat, args=(storage, trial_id, interval),
                                        daemon=True)
        self._thread.start()

    def _beat(self, storage, trial_id, interval):
        while not self._stop.wait(interval):
            storage.record_heartbeat(trial_id)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def work(study, run_one, *, poll: float = 1.0, stop=lambda: False) -> int:
    """A worker: take WAITING trials and run them (``run_one(trial) -> values``, raising on a
    failed search) until none is WAITING or RUNNING; returns the trials it ran."""
    import optuna
    from optuna.trial import TrialState

    storage, ran = storage_of(study), 0
    interval = storage.get_heartbeat_interval()
    while not stop():
        fail_stale(study)
        trial_id = _pop(study, storage)
        if trial_id is None:
            running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))
            if not running:
                break
            time.sleep(poll)
            continue
        trial = optuna.Trial(study, trial_id)
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        beat = _Heartbeat(storage, trial_id, interval)
        try:
            values = run_one(trial)
        except KeyboardInterrupt:
            _requeue(study, storage, trial_id, trial, "interrupted (Ctrl-C)")
            raise
        except Exception as exc:  # noqa: BLE001 - recorded with the trial; the sweep goes on
            trial.set_user_attr("error", _one_line(exc))
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, values)
        finally:
            beat.stop()
        ran += 1
    return ran


def _requeue(study, storage, trial_id: int, trial, why: str) -> None:
    """Fail ``trial`` (id ``trial_id`` in ``storage``) and queue a copy with the same
    parameters (as a retry, not a new place)."""
    from optuna.trial import TrialState, create_trial

    frozen = storage.get_trial(trial_id)
    study.tell(trial, state=TrialState.FAIL)
    history = list(frozen.system_attrs.get("retry_history", [])) + [frozen.number]
    study.add_trial(create_trial(
        state=TrialState.WAITING, params=frozen.params, distributions=frozen.distributions,
        user_attrs={"requeued": why},
        system_attrs={"failed_trial": history[0], "retry_history": history}))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ") or type(exc).__name__
    return text if len(text) < 500 else text[:497] + "..."


def best_trials(study) -> list:
    """The best complete trials: the best one, or with several returns the Pareto-optimal ones."""
    try:
        return list(study.best_trials) if len(study.directions) > 1 else [study.best_trial]
    except ValueError:  # no complete trial
        return []
