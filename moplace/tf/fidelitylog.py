"""A fidelity report in MLflow: one run per model, with its table and its scatter plot.

The run (tag ``kind=fidelity``) holds the testbed and the corrections as parameters, the
per-model figures as metrics (median and worst |error| and Kendall tau, as measured and
corrected; memory errors), the strategies as a table (``fidelity_table.json``, one row per
strategy), the whole report (``fidelity.json``) and the figure ``figures/fidelity.png``.
mlflow is imported only when logging.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from .fidelity import FidelityReport, report_table

EXPERIMENT = "moplace-fidelity"


def log_fidelity(report: FidelityReport, tracking_uri: str | None = None,
                 experiment: str = EXPERIMENT) -> str:
    """Log ``report``; returns the run id."""
    from mlflow.entities import Metric, Param

    from ..review.figures.fidelity import fidelity_scatter
    from ..review.mlstore import connect
    from ..review.tracking import resolve_uri

    client, exp_id = connect(resolve_uri(tracking_uri), experiment)
    data = report.as_dict()
    run_id = client.create_run(exp_id, run_name=f"fidelity {report.model} (batch {report.batch})",
                               tags={"kind": "fidelity", "model": report.model,
                                     "mlflow.note.content": "```\n" + report_table(report) + "\n```"}
                               ).info.run_id
    k = report.corrections
    params = {"model": report.model, "batch": report.batch, "testbed": report.testbed,
              "ops": report.ops, "steps_per_strategy": report.steps,
              "correction.latency_s": k.get("latency_s"), "correction.worker_s": k.get("worker_s"),
              "correction.step_s": k.get("step_s"),
              "calibration_strategies": k.get("calibration_strategies")}
    metrics = []
    summary = data["summary"]
    for key in ("as_measured", "corrected"):
        for name, value in summary[key].items():
            if isinstance(value, float) and math.isfinite(value):
                metrics.append(Metric(f"{key}.{name}", value, 0, 0))
    metrics.append(Metric("strategies", summary["strategies"], 0, 0))
    client.log_batch(run_id, params=[Param(n, str(v)[:6000]) for n, v in params.items()],
                     metrics=metrics)
    rows = [r for r in data["rows"] if r["measured_s"]]
    client.log_table(run_id, data={
        "strategy": [r["strategy"] for r in rows], "source": [r["source"] for r in rows],
        "splits": [r["splits"] for r in rows], "measured_ms": [r["measured_s"] * 1e3 for r in rows],
        "simulated_ms": [r["simulated_s"] * 1e3 for r in rows],
        "corrected_ms": [r["corrected_s"] * 1e3 for r in rows],
        "error": [(r["simulated_s"] - r["measured_s"]) / r["measured_s"] for r in rows],
        "corrected_error": [(r["corrected_s"] - r["measured_s"]) / r["measured_s"] for r in rows]},
        artifact_file="fidelity_table.json")
    client.log_dict(run_id, data, "fidelity.json")
    with tempfile.TemporaryDirectory() as tmp:
        path = fidelity_scatter(data["rows"], Path(tmp) / "fidelity.png",
                                title=f"{report.model}: simulated vs measured step")
        client.log_artifact(run_id, str(path), "figures")
    client.set_terminated(run_id, status="FINISHED")
    return run_id
