"""Finding and summarizing the searches logged to an MLflow store (for `moplace runs / show /
plot`): each run as a plain dict of its key figures, in SI units (seconds, bytes)."""

from __future__ import annotations

import json
from pathlib import Path

from objectives import DEFAULT

from ..errors import MoplaceError
from .mlstore import connect_client
from .tracking import METRIC_UNITS, metric_name


def list_runs(uri: str, *, graph: str | None = None, experiment: str | None = None,
              limit: int = 50) -> list[dict]:
    """The searches in the store, newest first (``graph``: only that graph's; ``experiment``:
    only that experiment's)."""
    client = connect_client(uri, must_exist=True)
    experiments = client.search_experiments()
    if experiment is not None:
        experiments = [e for e in experiments if e.name == experiment]
        if not experiments:
            raise MoplaceError(f"no MLflow experiment {experiment!r} in {uri}")
    ids = [e.experiment_id for e in experiments]
    if not ids:
        return []
    names = {e.experiment_id: e.name for e in experiments}
    query = "tags.graph = '{}'".format(graph.replace("'", "")) if graph else ""
    runs = client.search_runs(ids, filter_string=query, max_results=limit,
                              order_by=["attributes.start_time DESC"])
    return [summary(r, names.get(r.info.experiment_id, "")) for r in runs]


def summary(run, experiment: str = "") -> dict:
    """A run's key figures: ids, what was searched, status, evaluations, hypervolume and the
    best of each objective (seconds / bytes / the objective's unit): the default objectives
    (None when the run had not one of them) and the run's others. A sweep's parent run has
    ``sweep`` (its name, trials, best trial), a sweep's trial ``trial`` (number, swept values);
    other runs have None there."""
    m, tags, params = run.data.metrics, run.data.tags, run.data.params
    searched = [o for o in params.get("objectives", "").split(",") if o]
    best = {name: _best(m, name) for name in dict.fromkeys([*DEFAULT, *searched])}
    evaluations = tags.get("evaluations", m.get("evaluations"))  # a metric in older runs
    return {"run_id": run.info.run_id, "run_name": run.info.run_name, "experiment": experiment,
            "parent_run_id": tags.get("mlflow.parentRunId"), "graph": tags.get("graph"),
            "cluster": tags.get("cluster"), "searcher": tags.get("searcher"),
            "status": tags.get("status", run.info.status.lower()),
            "mlflow_status": run.info.status, "figures": tags.get("figures"),
            "started": run.info.start_time, "evaluations": _int(evaluations),
            "hypervolume": m.get("final_hypervolume", m.get("hypervolume")),
            "best": best, "artifact_uri": run.info.artifact_uri,
            "sweep": _sweep(tags, params), "trial": _trial(tags, params)}


def _sweep(tags: dict, params: dict) -> dict | None:
    if tags.get("kind") != "sweep":
        return None
    best = tags.get("best_trial")
    return {"name": tags.get("sweep"), "trials": _int(tags.get("trials")),
            "swept": [k for k in params.get("swept", "").split(",") if k],
            "best_trial": _int(best), "best_trial_run_id": tags.get("best_trial_run_id")}


def _trial(tags: dict, params: dict) -> dict | None:
    if "sweep_trial" not in tags:
        return None
    swept = {k[len("sweep."):]: v for k, v in params.items()
             if k.startswith("sweep.") and k != "sweep.trial"}
    return {"number": _int(tags["sweep_trial"]), "swept": swept}


def sweep_best(client, run):
    """The best trial's run of a sweep's parent ``run``, and a line saying so; (run, None)
    for a run that is no sweep."""
    from mlflow.exceptions import MlflowException

    info = _sweep(run.data.tags, run.data.params)
    if info is None:
        return run, None
    name = f"sweep {info['name']} (run {run.info.run_id[:8]})"
    if not info["best_trial_run_id"]:
        raise MoplaceError(f"{name} has no best trial yet (it is running, or none of its "
                           f"trials completed): `moplace runs` lists its trials")
    try:
        best = client.get_run(info["best_trial_run_id"])
    except MlflowException:
        raise MoplaceError(f"{name}: its best trial's run {info['best_trial_run_id']} is not "
                           f"in the store") from None
    swept = (_trial(best.data.tags, best.data.params) or {}).get("swept", {})
    values = ", ".join(f"{k}={v}" for k, v in swept.items())
    return best, (f"{name}, its best trial {info['best_trial']}"
                  + (f" ({values})" if values else "") + f": run {best.info.run_id}")


def _best(metrics: dict, name: str) -> float | None:
    """The best value of objective ``name`` in its base unit, from the run's metric (its unit
    read from the metric's name, so an objective this process does not know is found too)."""
    key, prefix = metric_name(name), f"best_{name}_"
    if key not in metrics:  # logged where the objective had another unit, or is not registered
        key = next((k for k in metrics if k.startswith(prefix) and "_" not in k[len(prefix):]),
                   key)
    value = metrics.get(key)
    if value is None:
        return None
    scale = dict(METRIC_UNITS.values()).get(key[len(prefix):], 1.0) \
        if key.startswith(prefix) else 1.0
    return value * scale


def _int(value):
    try:
        return None if value is None else int(float(value))
    except ValueError:
        return None


def find_run(uri: str, run_id: str):
    """The run whose id is ``run_id`` or starts with it (at least 6 characters, unique)."""
    from mlflow.exceptions import MlflowException

    client = connect_client(uri, must_exist=True)
    text = run_id.strip().lower()
    if len(text) == 32:
        try:
            return client, client.get_run(text)
        except MlflowException:
            raise MoplaceError(f"no MLflow run {run_id!r} in {uri}") from None
    if len(text) < 6 or any(c not in "0123456789abcdef" for c in text):
        raise MoplaceError(f"{run_id!r} is not a run id (32 hex digits, or the first 6 or more "
                           f"of them; `moplace runs` lists them)")
    ids = [e.experiment_id for e in client.search_experiments()]
    found = [r for r in client.search_runs(ids, max_results=50000) if r.info.run_id.startswith(text)]
    if not found:
        raise MoplaceError(f"no MLflow run starts with {run_id!r} in {uri}")
    if len(found) > 1:
        raise MoplaceError(f"{len(found)} runs start with {run_id!r}: give more of the id")
    return client, found[0]


def run_front(client, run) -> dict:
    """The front.json a run logged."""
    from mlflow.exceptions import MlflowException

    try:
        local = client.download_artifacts(run.info.run_id, "front.json")
    except (MlflowException, OSError):
        raise MoplaceError(f"run {run.info.run_id} has no front.json (it is not a moplace "
                           f"search, or it failed before its end)") from None
    return json.loads(Path(local).read_text())


def figure_paths(client, run) -> list[str]:
    """Where the run's figures are: local file paths for a local store, else artifact URIs."""
    from mlflow.exceptions import MlflowException

    try:
        files = client.list_artifacts(run.info.run_id, "figures")
    except (MlflowException, OSError):
        return []
    base = run.info.artifact_uri
    out = []
    for f in files:
        uri = f"{base}/{f.path}"
        out.append(uri[len("file://"):] if uri.startswith("file://") else uri)
    return out
