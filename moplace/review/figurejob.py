"""Drawing a search run's figures and logging them to MLflow, off the search's critical path.

`start_figures` writes what the drawing needs (the front.json content, the graph in moplace's
JSON format, the cluster, objectives and limits) to a temporary job folder and starts
``python -m moplace.review.figurejob FOLDER`` in its own session, so the search command returns
at once (and a Ctrl-C in the shell afterwards does not stop the drawing). That process draws
every figure (`moplace.review.figures.draw_search`), logs them under ``figures/`` and sets the
run's ``figures`` tag: ``drawing`` while it works, then ``ready: N files in T s`` or
``failed: ...`` (the job folder and its log are kept then). ``inline`` draws in this process
instead (used when the cost model was given rather than derived, since it cannot be rebuilt).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import strictjson
from .mlstore import connect_client


def start_figures(data: dict, problem, tracking_uri: str, run_id: str, *, inline=False):
    """Draw and log the figures of run ``run_id``; returns the drawing process (None inline)."""
    if inline or problem.costs_given:
        _draw_and_log(data, problem, tracking_uri, run_id)
        return None
    from ..io.native import save_graph

    folder = Path(tempfile.mkdtemp(prefix="moplace-figures-"))
    (folder / "front.json").write_text(strictjson.dumps(data))
    save_graph(problem.graph, folder / "graph.json")
    with open(folder / "problem.pkl", "wb") as f:
        pickle.dump({"cluster": problem.cluster, "objectives": problem.objectives,
                     "limits": problem.limits, "inplace": problem.costs.inplace,
                     "tracking_uri": tracking_uri,
                     "run_id": run_id}, f)
    connect_client(tracking_uri).set_tag(run_id, "figures", "drawing")
    log = open(folder / "log.txt", "w")
    return subprocess.Popen([sys.executable, "-m", "moplace.review.figurejob", str(folder)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def wait(job, client, run_id: str, timeout: float = 120.0) -> str:
    """Wait for a drawing process (if any); returns the run's ``figures`` tag."""
    if job is not None:
        job.wait(timeout)
    return client.get_run(run_id).data.tags.get("figures", "")


def _draw_and_log(data: dict, problem, tracking_uri: str, run_id: str) -> bool:
    from .figures import draw_search

    client = connect_client(tracking_uri)
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="moplace-figures-") as tmp:
            drawn = draw_search(data, problem, tmp)
            client.log_artifacts(run_id, tmp, "figures")
    except Exception as exc:  # a figure must never cost the run: say so on the run
        message = f"failed: {type(exc).__name__}: {exc}"
        client.set_tag(run_id, "figures", message[:4000])
        print(f"moplace: figures of MLflow run {run_id} {message}", file=sys.stderr)
        return False
    client.set_tag(run_id, "figures", f"ready: {len(drawn)} files in "
                                      f"{time.perf_counter() - t0:.1f} s")
    return True


def main(folder: str) -> int:
    try:  # drawn in the background: the user's search or next command goes first
        os.nice(10)
    except (AttributeError, OSError):
        pass
    from ..io.native import load_native
    from ..optimize.problem import Problem

    folder = Path(folder)
    with open(folder / "problem.pkl", "rb") as f:
        job = pickle.load(f)
    try:
        problem = Problem(load_native(folder / "graph.json"), job["cluster"],
                          objectives=job["objectives"], limits=job["limits"],
                          inplace=job.get("inplace", True))
        data = json.loads((folder / "front.json").read_text())
        if not _draw_and_log(data, problem, job["tracking_uri"], job["run_id"]):
            return 1
    except Exception as exc:
        print(f"figures of run {job['run_id']} failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        try:
            connect_client(job["tracking_uri"]).set_tag(
                job["run_id"], "figures", f"failed: {type(exc).__name__}: {exc} "
                                          f"(log: {folder / 'log.txt'})"[:4000])
        except Exception:
            pass
        return 1
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
