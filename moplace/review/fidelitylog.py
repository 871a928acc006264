"""A fidelity report in MLflow, for either front end: one run with its table as the run's note,
its parameters, its finite figures as metrics, its rows as a table (``fidelity_table.json``),
the whole report (``fidelity.json``) and the scatter figure (``figures/fidelity.png``).

`moplace.testbed.fidelitylog` (a testbed's strategies) and `moplace.torch.fidelity`'s report (one
GPU's plans) each say what goes in; this module logs it. mlflow is imported only when logging.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Callable

EXPERIMENT = "moplace-fidelity"


def log_report(*, run_name: str, tags: dict, text: str, params: dict, metrics: dict,
               table: dict, data: dict, figure: Callable[[Path], object],
               tracking_uri: str | None = None, experiment: str = EXPERIMENT) -> str:
    """Log one report as a run (tag ``kind=fidelity``, ``text`` as its note); ``metrics``
    that are not finite numbers are left out; ``figure(path)`` draws the scatter to ``path``.
    Returns the run id."""
    from mlflow.entities import Metric, Param

    from .mlstore import connect
    from .tracking import resolve_uri

    client, exp_id = connect(resolve_uri(tracking_uri), experiment)
    run_id = client.create_run(exp_id, run_name=run_name, tags={
        "kind": "fidelity", **tags, "mlflow.note.content": "```\n" + text + "\n```"}).info.run_id
    client.log_batch(run_id, params=[Param(n, str(v)[:6000]) for n, v in params.items()],
                     metrics=[Metric(n, float(v), 0, 0) for n, v in metrics.items()
                              if isinstance(v, (int, float)) and math.isfinite(v)])
    client.log_table(run_id, data=table, artifact_file="fidelity_table.json")
    client.log_dict(run_id, data, "fidelity.json")
    with tempfile.TemporaryDirectory() as tmp:
        path = figure(Path(tmp) / "fidelity.png")
        client.log_artifact(run_id, str(path), "figures")
    client.set_terminated(run_id, status="FINISHED")
    return run_id


def flat_metrics(summary: dict, keys) -> dict:
    """``{"KEY.NAME": value}`` of each section ``KEY`` of ``keys`` in ``summary``."""
    return {f"{key}.{name}": value for key in keys for name, value in summary[key].items()}
