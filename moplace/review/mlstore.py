"""Opening an MLflow store the way moplace needs it, and what a run carries besides metrics.

- `connect`: a client and the experiment's id. A tracking server that does not answer fails
  within a few seconds with a message saying what to do (MLflow itself retries for minutes);
  a SQLite store is opened under a file lock, so two searches started at once on a new
  ``mlflow.db`` do not both run MLflow's schema migration (one of them would crash); the
  experiment is created as a classic ML experiment (MLflow's UI otherwise opens the GenAI view).
- `run_tags`, `graph_hash`: the tags of a search run.
- `front_table`, `summary_note`: the front in units chosen for it, and the run's description.
- `ui_link`, `run_location`, `install_view`: the UI's address of an experiment or a run (every
  link moplace prints), and the experiment's saved view that the experiment link opens
  (moplace's key figures as the run list's columns).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from urllib.parse import urlparse

from ..errors import MoplaceError
from .units import axis_label, column_unit, fmt, fmt_duration, kind_of

EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
SCHEMES = {"", "file", "sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks"}
PROBE_SECONDS = 3.0
#: the query of every UI link: MLflow's model-training view (MLflow 3.17 opens the GenAI
#: navigation on a link without it); a parameter of the hash route (``#/...?workflowType=``)
ML_VIEW = "workflowType=machine_learning"
#: the experiment's saved view of the run list (MLflow 3.17's "Views" menu): an experiment tag
#: ``mlflow.sharedViewState.<key>`` the link names with ``viewStateShareKey=<key>``. Column
#: choices are otherwise kept per browser, none of ours shown
VIEW_KEY = "moplace"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
#: the run list's columns in the view, (kind, key), then each objective's best (`view_columns`)
VIEW_COLUMNS = (("tags", "searcher"), ("tags", "graph"), ("tags", "cluster"),
                ("tags", "evaluations"), ("metrics", "hypervolume"))


METRIC_UNITS = {"time": ("ms", 1e-3), "bytes": ("GiB", 2.0 ** 30)}


def metric_unit(objective: str) -> tuple[str, float] | None:
    """The unit of an objective's metrics: ms, GiB, or the unit it was registered with
    (``J``; characters MLflow refuses in a metric's name made ``_``); None for a number."""
    kind = kind_of(objective)
    if kind in METRIC_UNITS:
        return METRIC_UNITS[kind]
    return None if kind == "number" else (re.sub(r"[^A-Za-z0-9.\-/]", "_", kind), 1.0)


def metric_name(objective: str) -> str:
    """The MLflow metric of an objective's best value, its unit in the name (fixed per
    objective, so runs compare in MLflow's charts)."""
    unit = metric_unit(objective)
    return f"best_{objective}_{unit[0]}" if unit else f"best_{objective}"


def metric_value(objective: str, value: float) -> float:
    unit = metric_unit(objective)
    return float(value) / unit[1] if unit else float(value)


def _store_error(uri: str, exc: Exception) -> Exception:
    """What to raise for ``exc``, met opening the store at ``uri``: MLflow's errors and the
    database driver's (sqlalchemy's OperationalError, DatabaseError, IntegrityError) as one
    line naming the store; anything else as it is."""
    from mlflow.exceptions import MlflowException

    if isinstance(exc, MlflowException):
        return MoplaceError(f"MLflow store {uri}: {str(exc).splitlines()[0]}")
    if type(exc).__name__ not in ("OperationalError", "DatabaseError", "IntegrityError"):
        return exc
    # e.g. "table _alembic_tmp_experiments already exists": a schema creation or upgrade that
    # was killed part-way left the file half made
    return MoplaceError(f"MLflow store {uri} cannot be opened ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:200]}); if a command making it was "
                        f"stopped part-way, remove the file or give another --tracking-uri")


def connect(uri: str, experiment: str):
    """(MlflowClient, experiment id) for ``uri``, the experiment created if new."""
    client = connect_client(uri)
    try:
        with _store_lock(uri):
            exp = client.get_experiment_by_name(experiment)
            if exp is None:
                exp_id = client.create_experiment(experiment, tags=dict([EXPERIMENT_KIND]),
                                                  artifact_location=_artifact_root(uri))
            elif exp.lifecycle_stage == "deleted":
                raise MoplaceError(f"MLflow experiment {experiment!r} is deleted: restore it in "
                                   f"the UI or pick another with --experiment")
            else:
                exp_id = exp.experiment_id
                if EXPERIMENT_KIND[0] not in exp.tags:
                    client.set_experiment_tag(exp_id, *EXPERIMENT_KIND)
            install_view(client, exp_id, {} if exp is None else exp.tags)
    except Exception as exc:  # noqa: BLE001 - MLflow's and the database driver's errors
        raise _store_error(uri, exc) from None
    return client, exp_id


def connect_client(uri: str, *, must_exist: bool = False):
    """An MlflowClient for ``uri`` whose store is ready (a new SQLite file gets its schema
    under the lock); ``must_exist``: a SQLite file that is not there is an error (reading
    commands), not a new store."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DO_NOT_TRACK", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # MLflow's own retries on a dead server take minutes: a few tries within seconds instead
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    scheme = urlparse(uri).scheme.split("+")[0]
    if scheme not in SCHEMES and len(scheme) > 1:  # one letter: a Windows drive
        raise MoplaceError(f"tracking URI {uri!r}: unknown scheme {scheme!r} (use sqlite:///FILE, "
                           f"a directory, http(s)://HOST:PORT or a database URL)")
    if scheme in ("http", "https"):
        _probe(uri)
    db = sqlite_file(uri)
    if db is not None and not db.parent.is_dir():  # before importing mlflow: fail at once
        raise MoplaceError(f"tracking URI {uri}: directory {db.parent} does not exist")
    if must_exist and db is not None and not db.is_file():
        raise MoplaceError(f"no MLflow store at {db} (tracking URI {uri}): run a search first, "
                           f"or give --tracking-uri")
    import logging

    for noisy in ("mlflow.store.db.utils", "alembic"):  # "Creating initial tables..." on stderr
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from mlflow.tracking import MlflowClient

    try:
        with _store_lock(uri):
            client = MlflowClient(tracking_uri=uri)
            client.search_experiments(max_results=1)  # a new store's schema, under the lock
    except Exception as exc:  # noqa: BLE001 - MLflow's and the database driver's errors
        raise _store_error(uri, exc) from None
    return client


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other stores or in-memory)."""
    parsed = urlparse(uri)
    if parsed.scheme != "sqlite" or not parsed.path or parsed.path == "/:memory:":
        return None
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else Path(parsed.path)


def _artifact_root(uri: str) -> str | None:
    """Artifacts of a SQLite store go in ``mlartifacts/`` beside its file, wherever the search
    was started (MLflow's default is ``./mlruns`` of the current directory)."""
    db = sqlite_file(uri)
    return (db.parent.resolve() / "mlartifacts").as_uri() if db is not None else None


def _probe(uri: str) -> None:
    import urllib.error
    import urllib.request

    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_SECONDS) as reply:
            reply.read(64)
    except urllib.error.HTTPError:
        return  # it answers; an older server may not have /health
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MoplaceError(f"the MLflow tracking server {uri} does not answer ({reason}); start "
                           f"one with `moplace ui`, give another --tracking-uri, or pass "
                           f"--no-mlflow") from None


@contextlib.contextmanager
def _store_lock(uri: str):
    """An exclusive lock beside a SQLite store while it is opened (no-op for other stores)."""
    db = sqlite_file(uri)
    if db is None:
        yield
        return
    if not db.parent.is_dir():
        raise MoplaceError(f"tracking URI {uri}: directory {db.parent} does not exist")
    try:
        import fcntl
    except ImportError:  # Windows: no flock; MLflow's own handling
        yield
        return
    lock = db.parent / f".{db.name}.lock"
    try:
        handle = open(lock, "a")
    except OSError as exc:
        raise MoplaceError(f"tracking URI {uri}: cannot write in {db.parent} "
                           f"({exc.strerror or exc})") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def graph_hash(graph, source=None) -> str:
    """Git-style short hash (blob SHA-1, 12 digits) of the graph's file, or of its content in
    moplace's JSON format when it has no file."""
    data = None
    if source is not None:
        from ..io.bundled import bundled_path, is_bundled_spec

        path = bundled_path(source) if is_bundled_spec(source) else Path(source)
        if path.is_file():
            data = path.read_bytes()
    if data is None:
        from ..io.native import graph_to_dict

        data = json.dumps(graph_to_dict(graph), sort_keys=True).encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:12]


def run_tags(problem, searcher: str, ghash: str, parent_run_id=None, command=None) -> dict:
    """The tags of a search run (status starts as running)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        __version__ = version("moplace")
    except PackageNotFoundError:  # run from a source tree that was never installed
        __version__ = "unknown"
    tags = {"graph": problem.graph.name, "cluster": problem.cluster.name, "searcher": searcher,
            "moplace_version": __version__, "graph_hash": ghash, "status": "running",
            "mlflow.source.name": command or "moplace (Python API)",
            "mlflow.source.type": "LOCAL"}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    return tags


def _front_rows(data: dict):
    from objectives import json_key

    points = data["points"] or data.get("infeasible") or []
    units = {name: column_unit(name, [p[json_key(name)] for p in points])
             for name in data["objectives"]}
    return points, units


def front_table(data: dict) -> dict:
    """The front of a front.json as table columns, each objective in the unit chosen for its
    column (named in the header), plus feasibility and the knee (the infeasible points when
    nothing fits)."""
    from objectives import json_key

    from .marks import front_knee

    points, units = _front_rows(data)
    knee = front_knee(data)
    table = {"point": list(range(len(points)))}
    if any("searcher" in p for p in points):  # a comparison's combined front
        table["searcher"] = [p.get("searcher", "") for p in points]
    for name, unit in units.items():
        table[axis_label(name, unit)] = [p[json_key(name)] / unit[1] for p in points]
    rates = [(p.get("throughput") or {}).get("tflops_per_gpu") for p in points]
    if any(r is not None for r in rates):  # a transformer's model FLOPs (moplace.core.flops)
        table["model TFLOP/s per GPU"] = rates
        table["MFU"] = [(p.get("throughput") or {}).get("mfu") for p in points]
    table["feasible"] = [bool(p["feasible"]) for p in points]
    over = column_unit("violation", [p["violation_bytes"] for p in points], kind="bytes")
    table[f"over memory ({over[0]})"] = [p["violation_bytes"] / over[1] for p in points]
    table["knee"] = ["knee" if k == knee else "" for k in range(len(points))]
    return table


def summary_note(data: dict) -> str:
    """Markdown saying how a search ended: evaluations, time, hypervolume, the best of each
    objective and the knee, and where the figures are."""
    from objectives import json_key

    from .figures import FILES
    from .marks import front_knee

    lines = [f"**Result:** {data['status']} after {data['evaluations']} evaluations in "
             f"{fmt_duration(data['seconds'])}; hypervolume {data['hypervolume']:.4f}; "
             f"{len(data['points'])} front points."]
    if data["points"]:
        best = ", ".join(f"{name} {fmt(min(p[json_key(name)] for p in data['points']), kind_of(name))}"
                         for name in data["objectives"])
        knee = front_knee(data)
        at = ", ".join(f"{name} {fmt(data['points'][knee][json_key(name)], kind_of(name))}"
                       for name in data["objectives"])
        lines.append(f"Best of each: {best}. Knee (point {knee}): {at}.")
    else:
        lines.append("No strategy fits in memory; `front.json` keeps the least-violating ones.")
    lines.append("Figures (artifacts): " + ", ".join(f"`figures/{f}`" for f in FILES)
                 + "; the front as a table: `front_table.json`.")
    for note in data.get("notes") or []:  # the searcher's, and costs nobody measured
        lines.append(f"Note: {note}.")
    return "\n\n".join(lines) + "\n"


def ui_link(base: str, experiment_id: str | None = None, run_id: str | None = None) -> str:
    """The UI's page at ``base`` (a server's address) in the model-training view: the run
    list of an experiment (its moplace view, see `install_view`), a run's page, or the home."""
    base = base.rstrip("/")
    if experiment_id is None:
        return f"{base}/#/?{ML_VIEW}"
    if run_id is None:  # the runs tab itself: /experiments/<id> redirects, dropping the view
        return f"{base}/#/experiments/{experiment_id}/runs?{ML_VIEW}&viewStateShareKey={VIEW_KEY}"
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{ML_VIEW}"


def run_location(client, uri: str, run_id: str | None) -> str:
    """Where a run is, as a person opens it: its page in the UI when the store is a server
    (model-training view), else the store's URI (`moplace ui` serves it)."""
    if run_id is None or not uri.startswith(("http://", "https://")):
        return uri
    try:
        experiment_id = client.get_run(run_id).info.experiment_id
    except Exception:  # noqa: BLE001 - the server went away meanwhile: its address
        return uri
    return ui_link(uri, experiment_id, run_id)


def view_columns() -> list[str]:
    """The run list's columns of the moplace view, as MLflow names them (``metrics.`key```):
    searcher, graph, cluster, evaluations, hypervolume and the best of each registered
    objective (`moplace.review.tracking.metric_name`)."""
    from objectives import OBJECTIVES

    keys = [*VIEW_COLUMNS, *(("metrics", metric_name(o)) for o in OBJECTIVES)]
    return [f"{kind}.`{key}`" for kind, key in keys]


def install_view(client, experiment_id: str, tags: dict | None = None) -> None:
    """Make the experiment's saved view ``moplace`` (the run list with moplace's columns, newest
    first), or bring it up to date; ``tags``: the experiment's tags when known."""
    import time

    if tags is None:
        tags = client.get_experiment(experiment_id).tags
    state = json.dumps({"selectedColumns": view_columns(), "orderByKey": "attributes.start_time",
                        "orderByAsc": False})
    old = tags.get(VIEW_TAG)
    try:
        if old is not None and json.loads(old).get("state") == state:
            return
    except (ValueError, AttributeError):
        pass
    now = int(time.time() * 1000)
    client.set_experiment_tag(experiment_id, VIEW_TAG, json.dumps(
        {"name": "moplace", "createdAt": now, "updatedAt": now, "state": state}))
