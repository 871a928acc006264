"""Log a search to MLflow, as a driver callback.

One MLflow run per search, in a classic (not GenAI) experiment, ``moplace`` unless told (one
experiment for everything, so a comparison or sweep over several graphs keeps its parent and
children together; filter by the ``graph`` tag to see one graph's runs):

- **tags:** graph, cluster, searcher, moplace version, ``graph_hash`` (git-style short hash of
  the graph's content), ``status`` (running, finished, interrupted, failed), ``figures``
  (drawing, ready or failed), ``evaluations`` (so far) and a description (MLflow's note,
  shown on the run page);
- **parameters:** the graph and its size, the cluster, the searcher and its settings, the
  budget, the seed, the objectives and limits;
- **metrics by step** (step = evaluations so far; the count itself is no metric, its chart
  would be a diagonal): hypervolume, front size and the best value of each objective in a
  unit named in the metric (``best_runtime_ms``, ``best_peak_memory_GiB``, an objective
  registered in joules ``best_energy_J``...), and what a learning searcher reports of itself
  after each batch (`Searcher.progress`, logged as ``searcher.<name>``); the last value of
  each is the search's result (no one-point ``final_`` copies);
- **at the end:** the front as a table in units chosen for it (``front_table.json``, readable
  in the UI's artifact view), as JSON with every strategy (``front.json``, the file
  `moplace search` writes), and the figures (``figures/``, see `moplace.review.figures`).

Figures are drawn by a separate process (`moplace.review.figurejob`) once the search ends, so
the search and the command return at once; the run's ``figures`` tag says when they are
there. (An objective registered at run time is unknown to that process: such a run's figures
are drawn in the search's process.) The run ends FINISHED, KILLED (Ctrl-C) or FAILED, with what the search had found either
way. The store is a SQLite file ``mlflow.db`` in the working directory unless a tracking URI is
given (argument, or ``MLFLOW_TRACKING_URI``); telemetry is off. A server that does not answer
fails within seconds, not minutes.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..errors import MoplaceError
from ..optimize.driver import Callback
# the metrics' names and units live with the store (its saved view names them too)
from .mlstore import METRIC_UNITS, metric_name, metric_unit, metric_value

__all__ = ["DEFAULT_TRACKING_URI", "DEFAULT_EXPERIMENT", "STATUS", "METRIC_UNITS", "metric_unit",
           "metric_name", "metric_value", "MLflowCallback", "ComparisonRun", "resolve_uri",
           "open_run", "close_run", "short_name", "NAME_CHARS", "FLUSH_EVERY"]

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
DEFAULT_EXPERIMENT = "moplace"
STATUS = {"finished": "FINISHED", "interrupted": "KILLED", "failed": "FAILED"}


class _Tracked:
    """What a search run and a comparison run share: where they log, how figures are drawn,
    the command line and where the graph and cluster came from (`moplace.io.fronts.sources`;
    the graph's hash is taken from its file when it has one)."""

    def __init__(self, tracking_uri: str | None = None, experiment: str | None = None, *,
                 figures: str = "background", command: str | None = None,
                 sources: dict | None = None):
        if figures not in ("background", "inline", "off"):
            raise MoplaceError(f"figures must be background, inline or off, got {figures!r}")
        self.tracking_uri = resolve_uri(tracking_uri)
        self.experiment = experiment or DEFAULT_EXPERIMENT
        self.figures, self.command, self.sources = figures, command, sources or {}
        self.client = self.run_id = self.figure_job = None

    def _open(self, name, problem, searcher_name, budget, seed, extra_params,
              parent_run_id=None) -> None:
        self.client, self.run_id = open_run(
            self.tracking_uri, self.experiment, name, problem, searcher_name, budget, seed,
            extra_params, parent_run_id=parent_run_id, source=self.sources.get("graph_source"),
            command=self.command, figures=self.figures)

    def _close(self, data, problem, status) -> None:
        self.figure_job = close_run(self.client, self.run_id, {**self.sources, **data}, problem,
                                    self.tracking_uri, status, self.figures)

    @property
    def where(self) -> str:
        """The run's page in the UI when the store is a server, else the store's URI."""
        from .mlstore import run_location

        return run_location(self.client, self.tracking_uri, self.run_id)

    def wait_figures(self, timeout: float = 120.0) -> str:
        """Wait for the figures of this run (background drawing); returns the ``figures`` tag."""
        from .figurejob import wait

        return wait(self.figure_job, self.client, self.run_id, timeout)


#: seconds between two writes of the per-batch metrics (MLflow's UI refreshes no faster)
FLUSH_EVERY = 1.0

class MLflowCallback(_Tracked, Callback):
    """Logs one search as one MLflow run (see module docstring).

    ``parent_run_id`` makes it a child run (`moplace compare`); ``figures``: "background" (a
    separate process draws them after the search), "inline" (drawn before `on_end` returns)
    or "off"; ``command`` the command line, shown as the run's source; ``sources`` what the
    run's front.json records besides the result, as the command line's own file does: where
    the graph and cluster came from (the graph file's hash is tagged, else the hash of the
    graph's content), the levers searched with, the baselines' points, notes on the costs.
    """

    def __init__(self, tracking_uri: str | None = None, experiment: str | None = None,
                 run_name: str | None = None, *, parent_run_id: str | None = None, **options):
        super().__init__(tracking_uri, experiment, **options)
        self.run_name, self.parent_run_id, self.searcher = run_name, parent_run_id, None
        self.log_seconds = 0.0  # time spent logging (the overhead a benchmark reports)
        self._pending, self._flushed = [], 0.0  # metrics not yet sent, and when we last sent
        self._step = self._hypervolume = None  # the last batch's, as logged

    def on_start(self, problem, searcher, budget, seed) -> None:
        t0 = time.perf_counter()
        self.searcher = searcher
        name = self.run_name or short_name(  # the cluster has a column of its own
            f"{searcher.name} on {problem.graph.name} / {problem.cluster.name}",
            f"{searcher.name} on {problem.graph.name}")
        self._open(name, problem, searcher.name, budget, seed,
                   {f"searcher.{k}": v for k, v in searcher.settings().items()},
                   parent_run_id=self.parent_run_id)
        self.log_seconds += time.perf_counter() - t0

    def on_batch(self, result) -> None:
        from mlflow.entities import Metric

        t0 = time.perf_counter()
        step, stamp = result.n_evaluations, int(time.time() * 1000)
        self._step, self._hypervolume = step, result.hypervolume
        metrics = {"hypervolume": result.hypervolume, "front_size": float(len(result.front))}
        if result.best_history and result.front:
            for name, v in zip(result.problem.objectives, result.best_history[-1][1]):
                metrics[metric_name(name)] = metric_value(name, v)
        own = self.searcher.progress() if self.searcher is not None else {}
        metrics.update({f"searcher.{k}": float(v) for k, v in own.items()
                        if isinstance(v, (int, float)) and np.isfinite(v)})
        self._pending += [Metric(k, v, stamp, step) for k, v in metrics.items() if np.isfinite(v)]
        if time.perf_counter() - self._flushed >= FLUSH_EVERY:
            self._flush()
        self.log_seconds += time.perf_counter() - t0

    def _flush(self) -> None:
        """Send the metrics gathered since the last send: every batch's values, each at its own
        step, so the curves are complete; one store write per second at most, not per batch.
        The ``evaluations`` tag says how far the search is."""
        from mlflow.entities import RunTag

        for k in range(0, len(self._pending), 1000):  # MLflow takes 1000 metrics per call
            tags = [RunTag("evaluations", str(self._step))] if self._step is not None else []
            self.client.log_batch(self.run_id, metrics=self._pending[k:k + 1000], tags=tags)
        self._pending, self._flushed = [], time.perf_counter()

    def on_end(self, result) -> None:
        from ..io.fronts import result_json

        if self.run_id is None:
            return
        t0 = time.perf_counter()
        self._flush()
        if (self._step, self._hypervolume) != (result.n_evaluations, result.hypervolume):
            # the result differs from the last batch logged (none, or stopped within one)
            self.client.log_metric(self.run_id, "hypervolume", result.hypervolume,
                                   step=result.n_evaluations)
        self.client.set_tag(self.run_id, "evaluations", str(result.n_evaluations))
        notes = [*self.searcher.notes(), *self.sources.get("notes", [])]  # as the CLI's file
        self._close({**result_json(result), "notes": notes}, result.problem, result.status)
        self.log_seconds += time.perf_counter() - t0


def resolve_uri(tracking_uri: str | None) -> str:
    """The tracking URI: the argument, else ``MLFLOW_TRACKING_URI``, else ``mlflow.db`` here."""
    return tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def open_run(uri, experiment, name, problem, searcher_name, budget, seed, extra_params, *,
             parent_run_id=None, source=None, command=None, figures="background"):
    """Create a run with moplace's tags, description and parameters; (client, run id)."""
    from mlflow.entities import Param

    from .mlstore import connect, graph_hash, run_tags

    client, exp_id = connect(uri, experiment)
    tags = run_tags(problem, searcher_name, graph_hash(problem.graph, source),
                    parent_run_id, command)
    tags["figures"] = "not drawn yet" if figures != "off" else "off"
    tags["mlflow.note.content"] = _description(problem, searcher_name, budget, seed,
                                               extra_params)
    run_id = client.create_run(exp_id, run_name=name, tags=tags).info.run_id
    params = {
        "graph": problem.graph.name, "graph_ops": len(problem.graph.ops),
        "graph_edges": len(problem.graph.edges), "cluster": problem.cluster.name,
        "devices": problem.cluster.n_devices, "searcher": searcher_name,
        "budget_evaluations": budget.evaluations, "budget_seconds": budget.seconds,
        "seed": seed, "objectives": ",".join(problem.objectives),
        "limit_peak_comm_bytes": problem.limits.peak_comm_bytes,
        "limit_peak_mem_bytes": problem.limits.peak_mem_bytes, **extra_params}
    client.log_batch(run_id, params=[Param(k, "" if v is None else str(v)[:6000])
                                     for k, v in params.items()])
    return client, run_id


def close_run(client, run_id, data, problem, uri, status, figures):
    """Log the front (table and JSON), the outcome in tags and description, start the figures
    and end the run; returns the drawing process (None when drawn inline or off)."""
    from .mlstore import front_table, summary_note

    client.log_table(run_id, data=front_table(data), artifact_file="front_table.json")
    client.log_dict(run_id, data, "front.json")
    client.set_tag(run_id, "status", status)
    note = client.get_run(run_id).data.tags.get("mlflow.note.content", "")
    client.set_tag(run_id, "mlflow.note.content", note + summary_note(data))
    job = None
    if figures != "off" and status != "failed":
        from objectives import BUILT_IN

        from .figurejob import start_figures

        # an objective registered at run time is unknown to a drawing process: draw here
        inline = figures == "inline" or not set(problem.objectives) <= BUILT_IN
        job = start_figures(data, problem, uri, run_id, inline=inline)
    client.set_terminated(run_id, status=STATUS.get(status, "FINISHED"))
    return job


class ComparisonRun(_Tracked):
    """A `moplace compare` in MLflow: one parent run holding the combined front and the
    comparison figures, each searcher's search a child run (`child` gives its callback).
    Takes the options of `MLflowCallback` but ``run_name`` and ``parent_run_id``."""

    problem = None

    def start(self, problem, names, budget, seed) -> str:
        """Open the parent run, named so that MLflow's run list shows it whole (`short_name`;
        the searchers are in its description and ``searchers`` param, graph and cluster in
        their columns)."""
        self.problem = problem
        self._open(short_name(f"compare {', '.join(names)}", f"compare {len(names)} searchers"),
                   problem, "compare", budget, seed, {"searchers": ",".join(names)})
        return self.run_id

    def child(self) -> MLflowCallback:
        return MLflowCallback(self.tracking_uri, self.experiment, parent_run_id=self.run_id,
                              figures=self.figures, command=self.command, sources=self.sources)

    def end(self, results: dict) -> dict:
        """Log the combined front of ``results`` (name -> SearchResult); returns it."""
        from .comparison import comparison_json

        data = comparison_json(results)
        # one value each, no series: the searchers' own curves are their child runs'
        self.client.log_metric(self.run_id, "hypervolume", data["hypervolume"])
        self.client.set_tag(self.run_id, "evaluations", str(data["evaluations"]))
        self._close(data, self.problem, data["status"])
        return data

    def fail(self, status: str = "failed") -> None:
        if self.run_id is not None:
            self.client.set_tag(self.run_id, "status", status)
            self.client.set_terminated(self.run_id, status=STATUS.get(status, "FAILED"))


#: the most characters of a run name MLflow's run list shows whole (its default column width)
NAME_CHARS = 20


def short_name(name: str, shorter: str) -> str:
    """``name`` when the run list shows it whole, else ``shorter`` (cut if still too long)."""
    if len(name) <= NAME_CHARS:
        return name
    return shorter if len(shorter) <= NAME_CHARS else shorter[:NAME_CHARS - 1] + "…"


def _description(problem, searcher, budget, seed, extra) -> str:
    budget_text = (f"{budget.evaluations} evaluations" if budget.evaluations is not None
                   else f"{budget.seconds:g} s")
    if searcher == "compare":
        searcher = f"compare of {', '.join(extra['searchers'].split(','))}"
    return (f"**{searcher}** on **{problem.graph.name}** ({len(problem.graph.ops)} ops) / "
            f"**{problem.cluster.name}** ({problem.cluster.n_devices} devices), budget "
            f"{budget_text}{' each' if searcher == 'compare' else ''}, seed {seed}; objectives "
            f"{', '.join(problem.objectives)} (all minimized).\n\n")
