"""MLflow logging of searches, against a temporary store."""

import pytest

from moplace.core.synthetic import layered_dag
from moplace.optimize.driver import Callback, search
from moplace.optimize.plugins import make_searcher
from moplace.optimize.problem import Problem
from moplace.review.tracking import MLflowCallback

from conftest import make_cluster


@pytest.fixture
def tracker(tmp_path):
    return MLflowCallback(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="test")


@pytest.fixture(scope="module")
def problem():
    return Problem(layered_dag(30, width=3, seed=4), make_cluster(2, bandwidth=2e9))


def test_parameters_metrics_and_front_are_logged(tracker, problem):
    result = search(problem, make_searcher("random", batch_size=16), budget=64, seed=5,
                    callbacks=[tracker])
    run = tracker.client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    p = run.data.params
    assert (p["graph"], p["graph_ops"], p["devices"], p["searcher"], p["seed"]) == \
        (problem.graph.name, "30", "2", "random", "5")
    assert p["budget_evaluations"] == "64" and p["searcher.batch_size"] == "16"
    history = tracker.client.get_metric_history(tracker.run_id, "hypervolume")
    assert [m.step for m in history] == [16, 32, 48, 64]
    assert [m.value for m in history] == [h for _, h in result.hypervolume_history]
    local = tracker.client.download_artifacts(tracker.run_id, "front_table.json")
    import json
    table = json.loads(open(local).read())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    # MLflow's table artifact keeps 10 significant digits (it goes through pandas)
    assert [r["runtime_s"] for r in rows] == pytest.approx([pt.values[0] for pt in result.front], rel=1e-9)
    assert [r["peak_comm_bytes"] for r in rows] == pytest.approx([pt.values[1] for pt in result.front], rel=1e-9)
    assert [r["peak_mem_bytes"] for r in rows] == pytest.approx([pt.values[2] for pt in result.front], rel=1e-9)
    assert [r["feasible"] for r in rows] == [True] * len(result.front)
    front = json.loads(open(tracker.client.download_artifacts(tracker.run_id, "front.json")).read())
    assert len(front["points"]) == len(result.front) and "strategy" in front["points"][0]


def test_interrupted_search_ends_killed_with_what_it_found(tracker, problem):
    class Stop(Callback):
        def on_batch(self, result):
            raise KeyboardInterrupt

    result = search(problem, make_searcher("random"), budget=1000, callbacks=[tracker, Stop()])
    run = tracker.client.get_run(tracker.run_id)
    assert result.status == "interrupted" and run.info.status == "KILLED"
    assert run.data.metrics["final_hypervolume"] == result.hypervolume


def test_failed_search_ends_failed(tracker, problem):
    searcher = make_searcher("random")
    searcher.ask = lambda: [][0]
    with pytest.raises(IndexError):
        search(problem, searcher, budget=10, callbacks=[tracker])
    assert tracker.client.get_run(tracker.run_id).info.status == "FAILED"
