"""A testbed's fidelity report (either front end's) in MLflow: one run per model, with its table
and its scatter plot.

The run (tag ``kind=fidelity``) holds the testbed and the corrections as parameters, the
per-model figures as metrics (median and worst |error| and Kendall tau, as measured and
corrected; memory errors), the strategies as a table (``fidelity_table.json``, one row per
strategy), the whole report (``fidelity.json``) and the figure ``figures/fidelity.png``
(`moplace.review.fidelitylog`, which the PyTorch report logs through too). mlflow is imported
only when logging.
"""

from __future__ import annotations

from ..review.fidelitylog import EXPERIMENT, flat_metrics, log_report
from ..testbed.fidelity import FidelityReport, report_table

__all__ = ["EXPERIMENT", "log_fidelity"]


def log_fidelity(report: FidelityReport, tracking_uri: str | None = None,
                 experiment: str = EXPERIMENT) -> str:
    """Log ``report``; returns the run id."""
    from ..review.figures.fidelity import fidelity_scatter

    data = report.as_dict()
    k = report.corrections
    params = {"model": report.model, "batch": report.batch, "testbed": report.testbed,
              "ops": report.ops, "steps_per_strategy": report.steps,
              "correction.latency_s": k.get("latency_s"), "correction.worker_s": k.get("worker_s"),
              "correction.step_s": k.get("step_s"),
              "correction.messages_s": k.get("messages_s", 0.0),
              "correction.collectives_s": k.get("collectives_s", 0.0),
              "calibration_strategies": k.get("calibration_strategies")}
    summary = data["summary"]
    metrics = {**flat_metrics(summary, ("as_measured", "corrected")),
               "strategies": summary["strategies"]}
    rows = [r for r in data["rows"] if r["measured_s"]]
    table = {
        "strategy": [r["strategy"] for r in rows], "source": [r["source"] for r in rows],
        "splits": [r["splits"] for r in rows], "measured_ms": [r["measured_s"] * 1e3 for r in rows],
        "simulated_ms": [r["simulated_s"] * 1e3 for r in rows],
        "corrected_ms": [r["corrected_s"] * 1e3 for r in rows],
        "error": [(r["simulated_s"] - r["measured_s"]) / r["measured_s"] for r in rows],
        "corrected_error": [(r["corrected_s"] - r["measured_s"]) / r["measured_s"] for r in rows]}
    return log_report(
        run_name=f"fidelity {report.model} (batch {report.batch})",
        tags={"model": report.model}, text=report_table(report), params=params,
        metrics=metrics, table=table, data=data,
        figure=lambda path: fidelity_scatter(data["rows"], path,
                                             title=f"{report.model}: simulated vs measured step"),
        tracking_uri=tracking_uri, experiment=experiment)
