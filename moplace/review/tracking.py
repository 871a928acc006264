"""Log a search to MLflow, as a driver callback.

One MLflow run per search:
- **parameters:** the graph and its size, the cluster, the searcher and its settings, the budget,
  the seed, the objectives and limits;
- **metrics by step** (step = evaluations so far): hypervolume, front size and the best value of
  each objective, and what a learning searcher reports of itself after each batch
  (`Searcher.progress`, logged as ``searcher.<name>``: the RL searchers' mean and best reward,
  loss, entropy and sampled weights per policy update);
- **at the end:** the front as a table (``front_table.json``) and as JSON with every strategy
  (``front.json``, the same file `moplace search` writes).

The run ends FINISHED, KILLED (Ctrl-C) or FAILED, with what the search had found either way.
The store is MLflow's embedded default, a SQLite file ``mlflow.db`` in the working directory,
unless a tracking URI is given (argument, or ``MLFLOW_TRACKING_URI``). Telemetry is off.
"""

from __future__ import annotations

import os

import numpy as np

from ..optimize.driver import Callback

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
_STATUS = {"finished": "FINISHED", "interrupted": "KILLED", "failed": "FAILED"}


class MLflowCallback(Callback):
    """Logs one search as one MLflow run (see module docstring)."""

    def __init__(self, tracking_uri: str | None = None, experiment: str = "moplace",
                 run_name: str | None = None):
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
        self.experiment, self.run_name = experiment, run_name
        self.client = self.run_id = self.searcher = None

    def on_start(self, problem, searcher, budget, seed) -> None:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("DO_NOT_TRACK", "true")
        from mlflow.tracking import MlflowClient

        self.searcher = searcher
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        exp = self.client.get_experiment_by_name(self.experiment)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(self.experiment)
        name = self.run_name or f"{searcher.name} on {problem.graph.name} / {problem.cluster.name}"
        self.run_id = self.client.create_run(exp_id, run_name=name).info.run_id
        params = {
            "graph": problem.graph.name, "graph_ops": len(problem.graph.ops),
            "graph_edges": len(problem.graph.edges), "cluster": problem.cluster.name,
            "devices": problem.cluster.n_devices, "searcher": searcher.name,
            "budget_evaluations": budget.evaluations, "budget_seconds": budget.seconds,
            "seed": seed, "objectives": ",".join(problem.objectives),
            "limit_peak_comm_bytes": problem.limits.peak_comm_bytes,
            "limit_peak_mem_bytes": problem.limits.peak_mem_bytes,
            **{f"searcher.{k}": v for k, v in searcher.settings().items()}}
        for key, value in params.items():
            self.client.log_param(self.run_id, key, "" if value is None else value)

    def on_batch(self, result) -> None:
        from mlflow.entities import Metric

        step, stamp = result.n_evaluations, _now_ms()
        metrics = {"evaluations": float(step), "hypervolume": result.hypervolume,
                   "front_size": float(len(result.front))}
        if result.front:
            best = np.min([p.values for p in result.front], axis=0)
            metrics.update({f"best_{name}": float(v) for name, v in zip(result.problem.objectives, best)})
        own = self.searcher.progress() if self.searcher is not None else {}
        metrics.update({f"searcher.{k}": float(v) for k, v in own.items()
                        if isinstance(v, (int, float)) and np.isfinite(v)})
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, stamp, step) for k, v in metrics.items()])

    def on_end(self, result) -> None:
        from ..io.fronts import point_json, result_json

        if self.run_id is None:
            return
        rows = [point_json(p, result.problem) for p in result.front]
        table = {key: [row[key] for row in rows] for key in rows[0] if key != "strategy"} if rows else {}
        self.client.log_table(self.run_id, data=table, artifact_file="front_table.json")
        self.client.log_dict(self.run_id, result_json(result), "front.json")
        self.client.log_metric(self.run_id, "final_hypervolume", result.hypervolume,
                               step=result.n_evaluations)
        self.client.set_terminated(self.run_id, status=_STATUS.get(result.status, "FINISHED"))


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
