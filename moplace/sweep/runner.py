"""A sweep worker: take the study's waiting trials and run their searches until none is left.

`run_worker` is what every worker runs, whichever way it was started: the ``moplace sweep``
process itself, a worker process it started (``--workers``), the same command on another
machine, or a Dask task (`dask_worker`, ``--on-dask``). Each trial's search is logged as a
child of the sweep's MLflow run when there is one (``tracker``), and the trial keeps what the
sweep's summary needs: every returned value, evaluations, seconds, the front (at most
`KEEP_POINTS` points), graph and cluster.
"""

from __future__ import annotations

from ..optimize.driver import Callback
from .study import KEEP_POINTS, work
from .trial import returns, run_trial


class _Started(Callback):
    """Keeps the trial's MLflow run id in the trial as soon as the run exists (a retry of the
    trial then finds the run its dead worker left open)."""

    def __init__(self, trial, child):
        self.trial, self.child = trial, child

    def on_start(self, *args) -> None:
        self.trial.set_user_attr("mlflow_run_id", self.child.run_id)


def short(params: dict) -> str:
    text = ", ".join(f"{k}={v}" for k, v in params.items())
    return text if len(text) <= 60 else text[:57] + "..."


def run_worker(spec, study, tracker=None, *, evaluator=None, progress=None) -> int:
    """Run waiting trials until none is waiting or running; returns the trials run here.
    ``tracker``: the sweep's `SweepRun` (None: no MLflow); ``evaluator``: where searches
    evaluate (None: here); ``progress(label)``: a search callback showing one trial."""

    def run_one(trial):
        params = spec.suggest(trial)
        swept = {k: params[k] for k in trial.params}
        label = f"trial {trial.number}" + (f" ({short(swept)})" if swept else "")
        callbacks = [progress(label)] if progress is not None else []
        child = tracker.child(trial.number, swept) if tracker is not None and tracker.run_id else None
        if child is not None:
            dead = trial.user_attrs.get("mlflow_run_id")  # a retry: its dead worker's run
            if dead:
                tracker.mark_lost(dead, trial.number)
            callbacks += [child, _Started(trial, child)]
        problem, _, result = run_trial(params, spec.folder, callbacks=callbacks, evaluator=evaluator)
        if result.status == "interrupted":
            raise KeyboardInterrupt
        values = returns(result, params)
        for key, value in (("returns", values), ("evaluations", result.n_evaluations),
                           ("search_seconds", result.seconds),
                           ("objectives", list(problem.objectives)),
                           ("front", [[float(x) for x in p.values]
                                      for p in result.front[:KEEP_POINTS]]),
                           ("graph", problem.graph.name), ("cluster", problem.cluster.name)):
            trial.set_user_attr(key, value)
        if child is not None:
            tracker.log_trial(child, trial.number, swept, values)
        return [values[r] if values[r] == values[r] else float("inf") for r in spec.returns]

    return work(study, run_one)


def join(tracker, study) -> None:
    """A worker logs into the parent run the sweep's first command made."""
    from ..review.mlstore import connect

    tracker.client, _ = connect(tracker.tracking_uri, tracker.experiment)
    tracker.run_id = study.user_attrs.get("mlflow_run_id")


def dask_worker(file: str, storage: str, tracking_uri: str | None, experiment: str | None,
                figures: str) -> int:
    """A Dask task (``moplace sweep --on-dask``): one worker of the sweep ``file`` on
    ``storage``, logging to ``tracking_uri`` (None: no MLflow); returns the trials it ran."""
    from .spec import load_spec
    from .study import open_study

    spec = load_spec(file)
    study = open_study(spec, storage, create=False)
    tracker = None
    if tracking_uri is not None:
        from .tracking import SweepRun

        tracker = SweepRun(tracking_uri, experiment, figures)
        join(tracker, study)
    return run_worker(spec, study, tracker)
