"""A sweep in MLflow: one parent run, each trial a child run (a search run, see
`moplace.review.tracking`) with the trial's swept parameters as ``sweep.<name>`` params and its
returned values as metrics, so MLflow's compare view and parallel-coordinates plot work
across trials. The parent holds the sweep's settings, a table of the trials
(``trials_table.json``), the best values as metrics, and two figures: each returned value
against each swept parameter, and the fronts of the best trials overlaid.

The parent run's id is kept in the study (user attribute ``mlflow_run_id``), so a resumed
sweep and workers joining from other machines log into the same parent. Its tags say what
`moplace runs` and `moplace show` need: ``searcher`` sweep, the trials' graph and cluster,
their evaluations in all, ``trials`` (the planned count), the best trial and its run; its
metrics are the best of each objective over every trial, one value each. Run names are short
enough for MLflow's run list (`moplace.review.tracking.short_name`): the sweep's whole name is
its ``sweep`` tag, a trial's swept values are its params and description.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from .study import best_trials, counts, hide_password, trial_state

#: most best trials whose fronts the parent's figure overlays
OVERLAID = 6


class SweepRun:
    """The sweep's parent run (``tracking_uri``/``experiment`` as `moplace search` takes them)."""

    def __init__(self, tracking_uri: str | None, experiment: str | None, figures: str = "inline"):
        from ..review.tracking import DEFAULT_EXPERIMENT, resolve_uri

        self.tracking_uri = resolve_uri(tracking_uri)
        self.experiment = experiment or DEFAULT_EXPERIMENT
        self.figures = figures
        self.client = self.run_id = None

    def open(self, spec, study, storage: str, command: str | None = None,
             trials: int | None = None) -> str:
        """Create the parent run, or take the study's (set running again); ``trials``: the
        trials the sweep runs in all (default: the file's)."""
        from mlflow.entities import Param

        from ..review.mlstore import connect
        from ..review.tracking import short_name

        trials = spec.trials if trials is None else trials
        self.client, exp_id = connect(self.tracking_uri, self.experiment)
        known = study.user_attrs.get("mlflow_run_id")
        if known and study.user_attrs.get("tracking_uri") == self.tracking_uri:
            try:
                self.client.update_run(known, status="RUNNING")
                for key, value in (("status", "running"), ("trials", str(trials)),
                                   ("mlflow.note.content", _description(spec, storage, trials))):
                    self.client.set_tag(known, key, value)
                self.run_id = known
                return known
            except Exception:  # noqa: BLE001 - deleted meanwhile: a new parent run
                pass
        tags = {"kind": "sweep", "sweep": spec.name, "status": "running", "searcher": "sweep",
                "trials": str(trials), "optuna_study": spec.name,
                "optuna_storage": hide_password(storage),
                "mlflow.note.content": _description(spec, storage, trials)}
        if command:
            tags["mlflow.source.name"] = command
        name = short_name(f"sweep {spec.name}", f"sweep {spec.name}")
        self.run_id = self.client.create_run(exp_id, run_name=name, tags=tags).info.run_id
        params = {"sampler": spec.sampler, **({"grid_points": grid_size(spec)}
                                               if grid_size(spec) else {}),
                  "returns": ",".join(spec.returns), "swept": ",".join(spec.space),
                  **{f"fixed.{k}": v for k, v in spec.fixed.items()},
                  **{f"space.{k}": space_text(d) for k, d in spec.space.items()}}
        self.client.log_batch(self.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        study.set_user_attr("mlflow_run_id", self.run_id)
        study.set_user_attr("tracking_uri", self.tracking_uri)
        return self.run_id

    @property
    def where(self) -> str:
        """The parent run's page in the UI when the store is a server, else the store's URI."""
        from ..review.mlstore import run_location

        return run_location(self.client, self.tracking_uri, self.run_id)

    def child(self, trial_number: int, params: dict):
        """The MLflow callback of one trial's search, a child of this run."""
        from ..review.tracking import MLflowCallback, short_name

        swept = ", ".join(f"{k}={v}" for k, v in params.items())
        return MLflowCallback(self.tracking_uri, self.experiment,
                              run_name=short_name(f"trial {trial_number}: {swept}",
                                                  f"trial {trial_number}"),
                              parent_run_id=self.run_id, figures=self.figures)

    def mark_lost(self, run_id: str, trial_number: int) -> None:
        """End the child run a dead worker left (its trial runs again as ``trial_number``). A
        worker killed after its search ended but before the study heard of it left the run
        FINISHED: it is marked lost too, so each complete trial has one finished run."""
        try:
            if self.client.get_run(run_id).info.status in ("RUNNING", "FINISHED"):
                self.client.set_tag(run_id, "status", f"worker lost; run again as trial {trial_number}")
                self.client.set_terminated(run_id, status="KILLED")
        except Exception:  # noqa: BLE001 - a run deleted meanwhile: nothing to end
            pass

    def end_lost_runs(self, study) -> None:
        """Every run of a requeued trial (its worker died, or was stopped) ends lost, also
        where its retry could not mark it: the store was busy at that moment, or the worker
        died after ending its run and before telling the study. Run once by the sweep's first
        command after every worker stopped, so each complete trial has one finished run."""
        trials = study.get_trials(deepcopy=False)
        retry_of = {n: t.number for t in trials for n in t.system_attrs.get("retry_history", [])}
        for t in trials:
            run_id = t.user_attrs.get("mlflow_run_id")
            if t.state.name == "FAIL" and "error" not in t.user_attrs and run_id \
                    and t.number in retry_of:
                self.mark_lost(run_id, retry_of[t.number])

    @staticmethod
    def log_trial(callback, trial_number: int, params: dict, values: dict) -> None:
        """The trial's swept parameters and returned values on its child run."""
        from mlflow.entities import Metric, Param

        if callback.run_id is None:
            return
        callback.client.log_batch(
            callback.run_id,
            params=[Param(f"sweep.{k}", str(v)[:6000]) for k, v in params.items()]
            + [Param("sweep.trial", str(trial_number))],
            metrics=[Metric(f"sweep.{k}", float(v), 0, 0) for k, v in values.items()
                     if math.isfinite(v)])
        callback.client.set_tag(callback.run_id, "sweep_trial", str(trial_number))
        note = callback.client.get_run(callback.run_id).data.tags.get("mlflow.note.content", "")
        swept = ", ".join(f"{k}={v}" for k, v in params.items())
        callback.client.set_tag(callback.run_id, "mlflow.note.content",
                                f"**Sweep trial {trial_number}**: {swept or 'nothing swept'}."
                                f"\n\n{note}")

    def close(self, spec, study, status: str = "finished") -> list[str]:
        """The trials table, best values and figures on the parent; ends it. Returns the
        figures' artifact paths."""
        from ..review.tracking import STATUS

        self.end_lost_runs(study)
        rows = trial_rows(study, spec.returns)
        self.client.log_table(self.run_id, data=_table(rows, spec), artifact_file="trials_table.json")
        self.client.log_dict(self.run_id, {"trials": rows, "counts": counts(study)}, "trials.json")
        for key, value in _summary_tags(study, spec).items():
            self.client.set_tag(self.run_id, key, value)
        best = best_trials(study)
        for name, v in zip(spec.returns, best[0].values if best else ()):
            if math.isfinite(v):  # one value each (step 0): no series
                self.client.log_metric(self.run_id, f"best_{name}", float(v))
        for key, value in _best_of_trials(study).items():
            self.client.log_metric(self.run_id, key, value)
        drawn = []
        if self.figures != "off":
            with tempfile.TemporaryDirectory() as tmp:
                for path in draw_sweep(rows, spec, study, Path(tmp)):
                    self.client.log_artifact(self.run_id, str(path), "figures")
                    drawn.append(f"figures/{path.name}")
        self.client.set_tag(self.run_id, "figures", f"ready: {len(drawn)} files" if drawn
                            else "off")
        self.client.set_tag(self.run_id, "status", status)
        self.client.set_terminated(self.run_id, status=STATUS.get(status, "FINISHED"))
        return drawn


def best_trial(study, spec):
    """The sweep's best trial: of the best (Pareto-optimal) ones, the best in the first
    returned value; None before a trial completes."""
    best = best_trials(study)
    if not best:
        return None
    sign = 1.0 if spec.directions[0] == "minimize" else -1.0
    return min(best, key=lambda t: (sign * t.values[0], t.number))


def _summary_tags(study, spec) -> dict:
    """The parent's tags at the end: trial counts, the trials' graph, cluster and evaluations,
    the best trial and its run."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    tags = {f"trials_{state}": str(n) for state, n in counts(study).items()}
    for key in ("graph", "cluster"):
        names = sorted({str(t.user_attrs.get(key)) for t in trials if t.user_attrs.get(key)})
        if names:
            tags[key] = names[0] if len(names) == 1 else f"{len(names)} {key}s"
    tags["evaluations"] = str(sum(int(t.user_attrs.get("evaluations") or 0) for t in trials))
    best = best_trial(study, spec)
    if best is not None:
        tags["best_trial"] = str(best.number)
        if best.user_attrs.get("mlflow_run_id"):
            tags["best_trial_run_id"] = best.user_attrs["mlflow_run_id"]
    return tags


def _best_of_trials(study) -> dict:
    """The best of each objective over every complete trial's front, as the search runs' metrics
    name it (``best_runtime_ms``...)."""
    from ..review.tracking import metric_name, metric_value

    best = {}
    for t in study.get_trials(deepcopy=False):
        objectives = t.user_attrs.get("objectives") or []
        for point in t.user_attrs.get("front") or []:
            for name, v in zip(objectives, point):
                best[name] = min(best.get(name, math.inf), v)
    return {metric_name(k): metric_value(k, v) for k, v in best.items() if math.isfinite(v)}


def grid_size(spec) -> int | None:
    """How many points a grid sweep walks through (None for another sampler)."""
    from .spec import SAMPLERS

    if SAMPLERS.get(spec.sampler, spec.sampler) != "GridSampler":
        return None
    return math.prod(len(v) for v in spec.grid().values())


def plan_text(spec, trials: int) -> str:
    """How many trials the sweep runs, against the grid's size: "4 of the grid's 12 points"."""
    size = grid_size(spec)
    if size is None or trials == size:
        return f"{trials} trials" + (" (the whole grid)" if size else "")
    if trials < size:
        return f"{trials} of the grid's {size} points"
    return f"{trials} trials (the grid has {size} points)"


def trial_rows(study, returns) -> list[dict]:
    """One plain dict per trial: number, state (``retried`` for a requeued FAIL), swept
    parameters, returned values (all of them, from the trial's attributes), evaluations,
    seconds, MLflow run, error."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        state = trial_state(t)
        values = dict(t.user_attrs.get("returns", {}))
        if t.values is not None:
            values.update(zip(returns, t.values))
        rows.append({"number": t.number, "state": state, "params": dict(t.params),
                     "values": values, "evaluations": t.user_attrs.get("evaluations"),
                     "seconds": t.user_attrs.get("search_seconds"),
                     "mlflow_run_id": t.user_attrs.get("mlflow_run_id"),
                     "error": t.user_attrs.get("error"),
                     "retry_of": t.system_attrs.get("failed_trial")})
    return rows


def return_text(name: str, value) -> str:
    """A returned value as a person reads it: hypervolume as a number, times in their unit,
    inf (no feasible strategy) as "none fits", a missing one as "-"."""
    from ..review.figures.sweep import RETURN_KINDS
    from ..review.units import fmt

    if value is None:
        return "-"
    if value == float("inf"):
        return "none fits"
    kind = RETURN_KINDS[name]
    return f"{value:.4f}" if kind == "number" else fmt(value, kind)


def _table(rows, spec) -> dict:
    from ..review.figures.sweep import RETURN_KINDS

    cols = {"trial": [], "state": []}
    for name in spec.space:
        cols[name] = []
    for name in RETURN_KINDS:
        cols[name] = []
    cols["evaluations"], cols["mlflow_run_id"], cols["error"] = [], [], []
    for r in rows:
        cols["trial"].append(r["number"])
        cols["state"].append(r["state"])
        for name in spec.space:
            cols[name].append(str(r["params"].get(name, "")))
        for name in RETURN_KINDS:
            cols[name].append(return_text(name, r["values"].get(name)))
        cols["evaluations"].append(r["evaluations"] or 0)
        cols["mlflow_run_id"].append(r["mlflow_run_id"] or "")
        cols["error"].append(r["error"] or "")
    return cols


def draw_sweep(rows, spec, study, folder: Path) -> list[Path]:
    """The parent's figures, written to ``folder``; their paths."""
    from ..review.figures.sweep import best_fronts, values_by_parameter

    out = [folder / "values_by_parameter.png"]
    values_by_parameter(rows, spec.returns, spec.directions, list(spec.space), out[0],
                        title=f"sweep {spec.name}: {sum(r['state'] == 'complete' for r in rows)} "
                              f"trials")
    fronts, objectives = {}, None
    for t in best_trials(study)[:OVERLAID]:
        if t.user_attrs.get("front"):
            objectives = t.user_attrs.get("objectives")
            swept = ", ".join(f"{k}={v}" for k, v in t.params.items())
            fronts[f"trial {t.number}: {swept}"[:60]] = t.user_attrs["front"]
    if fronts and objectives:
        out.append(folder / "best_fronts.png")
        best_fronts(fronts, objectives, out[-1], title=f"sweep {spec.name}: fronts of the best trials")
    return out


def space_text(d) -> str:
    if d.choices:
        return "[" + ", ".join(map(str, d.choices)) + "]"
    return f"{d.low:g}..{d.high:g}" + (f" step {d.step:g}" if d.step else "") + (" log" if d.log else "")


def _description(spec, storage, trials) -> str:
    return (f"**Sweep {spec.name}**: {plan_text(spec, trials)}, sampler {spec.sampler}, returns "
            f"{', '.join(spec.returns)}. Swept: "
            + ", ".join(f"{k} {space_text(d)}" for k, d in spec.space.items())
            + f". Optuna study {spec.name!r} in {hide_password(storage)} (open it with "
            f"`optuna-dashboard {hide_password(storage)}`).\n\n")
