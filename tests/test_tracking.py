"""MLflow logging of searches, against a temporary store: what a run carries, how it ends,
and a store that is new, shared or unreachable."""

import json
import subprocess
import sys
import time

import pytest

from moplace.core.synthetic import layered_dag
from moplace.errors import MoplaceError
from moplace.optimize.driver import Callback, search
from moplace.optimize.plugins import make_searcher
from moplace.optimize.problem import Problem
from moplace.review.figures import FILES
from moplace.review.tracking import MLflowCallback

from conftest import make_cluster


def uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.fixture(scope="module")
def problem():
    return Problem(layered_dag(30, width=3, seed=4), make_cluster(2, bandwidth=2e9))


def test_a_search_run_carries_tags_params_metrics_front_and_figures(tmp_path, problem):
    tracker = MLflowCallback(uri(tmp_path), experiment="test")
    result = search(problem, make_searcher("random", batch_size=16), budget=64, seed=5,
                    callbacks=[tracker])
    assert tracker.wait_figures().startswith("ready: 6 files")
    client = tracker.client
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    # the run list shows the name whole; the cluster has a column of its own
    from moplace.review.tracking import NAME_CHARS

    assert run.info.run_name == "random on layered-3…" and NAME_CHARS == 20
    p, tags = run.data.params, run.data.tags
    assert (p["graph"], p["graph_ops"], p["devices"], p["searcher"], p["seed"]) == \
        (problem.graph.name, "30", "2", "random", "5")
    assert p["budget_evaluations"] == "64" and p["searcher.batch_size"] == "16"
    assert (tags["graph"], tags["cluster"], tags["searcher"], tags["status"]) == \
        (problem.graph.name, "test-2", "random", "finished")
    assert len(tags["graph_hash"]) == 12 and tags["moplace_version"]
    assert "**Result:** finished after 64 evaluations" in tags["mlflow.note.content"]
    exp = client.get_experiment(run.info.experiment_id)
    assert exp.name == "test" and exp.tags["mlflow.experimentKind"] == "custom_model_development"
    history = client.get_metric_history(tracker.run_id, "hypervolume")
    assert [m.step for m in history] == [16, 32, 48, 64]
    assert [m.value for m in history] == [h for _, h in result.hypervolume_history]
    best = client.get_metric_history(tracker.run_id, "best_runtime_ms")
    assert [m.value for m in best] == pytest.approx([b[0] * 1e3 for _, b in result.best_history])
    table = json.loads(open(client.download_artifacts(tracker.run_id, "front_table.json")).read())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    runtime = next(c for c in table["columns"] if c.startswith("runtime ("))
    scale = {"runtime (s)": 1, "runtime (ms)": 1e-3, "runtime (µs)": 1e-6}[runtime]
    # MLflow's table artifact keeps 10 significant digits (it goes through pandas)
    assert [r[runtime] * scale for r in rows] == pytest.approx(
        [pt.values[0] for pt in result.front], rel=1e-9)
    assert [r["point"] for r in rows] == list(range(len(result.front)))
    assert [r["knee"] for r in rows].count("knee") == 1
    front = json.loads(open(client.download_artifacts(tracker.run_id, "front.json")).read())
    assert len(front["points"]) == len(result.front) and "strategy" in front["points"][0]
    figures = {a.path: a.file_size for a in client.list_artifacts(tracker.run_id, "figures")}
    assert sorted(figures) == sorted(f"figures/{f}" for f in FILES)
    assert all(size > 5000 for size in figures.values())


def test_only_metrics_that_change_are_series(tmp_path, problem):
    """No chart that says nothing: the evaluation count is the step (a tag says it, not a
    diagonal metric), no one-point ``final_`` copy; a one-off value is logged once, at step 0."""
    tracker = MLflowCallback(uri(tmp_path), experiment="test", figures="off")
    result = search(problem, make_searcher("random", batch_size=16), budget=64, seed=5,
                    callbacks=[tracker])
    client = tracker.client
    run = client.get_run(tracker.run_id)
    assert "evaluations" not in run.data.metrics and "final_hypervolume" not in run.data.metrics
    assert run.data.tags["evaluations"] == "64"
    for key in run.data.metrics:
        history = client.get_metric_history(tracker.run_id, key)
        steps = [m.step for m in history]
        assert len(history) > 1 or steps == [0], (key, steps)
        assert [m.value for m in history] != [float(x) for x in steps], f"{key} is the step"
    assert run.data.metrics["hypervolume"] == result.hypervolume


def test_ui_links_open_the_model_training_view_and_moplaces_columns(tmp_path, problem):
    """Every link is built by ui_link: the model-training query, and on the experiment's run
    list the saved view whose columns are moplace's key figures (an experiment tag)."""
    from moplace.review.mlstore import (VIEW_TAG, connect_client, run_location, ui_link,
                                        view_columns)

    base = "http://127.0.0.1:5000/"
    assert ui_link(base) == "http://127.0.0.1:5000/#/?workflowType=machine_learning"
    assert ui_link(base, "3") == ("http://127.0.0.1:5000/#/experiments/3/runs?"
                                  "workflowType=machine_learning&viewStateShareKey=moplace")
    assert ui_link(base, "3", "abc") == ("http://127.0.0.1:5000/#/experiments/3/runs/abc?"
                                         "workflowType=machine_learning")
    assert run_location(None, uri(tmp_path), "abc") == uri(tmp_path)  # no server: the store
    tracker = MLflowCallback(uri(tmp_path), experiment="test", figures="off")
    search(problem, make_searcher("heft"), budget=5, callbacks=[tracker])
    client = connect_client(uri(tmp_path))
    exp = client.get_experiment_by_name("test")
    view = json.loads(exp.tags[VIEW_TAG])
    assert view["name"] == "moplace" and isinstance(view["createdAt"], int)
    columns = json.loads(view["state"])["selectedColumns"]
    assert columns == view_columns()
    for key in ("metrics.`best_runtime_ms`", "metrics.`best_peak_communication_GiB`",
                "metrics.`best_peak_memory_GiB`", "metrics.`hypervolume`", "tags.`graph`",
                "tags.`cluster`", "tags.`searcher`", "tags.`evaluations`"):
        assert key in columns
    run = client.get_run(tracker.run_id)
    for key in columns:  # each column is one a search run has
        kind, name = key.split(".", 1)
        assert name.strip("`") in getattr(run.data, kind), key


def test_moplace_ui_on_a_server_store_prints_the_experiment_link(tmp_path, problem, monkeypatch):
    import io

    from moplace.review import ui

    tracker = MLflowCallback(uri(tmp_path), figures="off")
    search(problem, make_searcher("heft"), budget=5, callbacks=[tracker])
    monkeypatch.setattr("moplace.review.mlstore._probe", lambda u: None)
    monkeypatch.setattr("moplace.review.mlstore.connect_client",
                        lambda u, **k: tracker.client)  # a server that is this store
    out = io.StringIO()
    assert ui.serve("http://host:5000", "127.0.0.1", 5000, out=out) == 0
    exp = tracker.client.get_run(tracker.run_id).info.experiment_id
    assert out.getvalue().strip().endswith(
        f"http://host:5000/#/experiments/{exp}/runs?workflowType=machine_learning"
        f"&viewStateShareKey=moplace")
    assert run_location_of(tracker, "http://host:5000") == (
        f"http://host:5000/#/experiments/{exp}/runs/{tracker.run_id}"
        f"?workflowType=machine_learning")


def run_location_of(tracker, server):
    from moplace.review.mlstore import run_location

    return run_location(tracker.client, server, tracker.run_id)


def test_interrupted_search_ends_killed_with_what_it_found(tmp_path, problem):
    tracker = MLflowCallback(uri(tmp_path), experiment="test", figures="off")

    class Stop(Callback):
        def on_batch(self, result):
            raise KeyboardInterrupt

    result = search(problem, make_searcher("random"), budget=1000, callbacks=[tracker, Stop()])
    run = tracker.client.get_run(tracker.run_id)
    assert result.status == "interrupted" and run.info.status == "KILLED"
    assert run.data.tags["status"] == "interrupted" and run.data.tags["figures"] == "off"
    assert run.data.metrics["hypervolume"] == result.hypervolume
    assert run.data.tags["evaluations"] == str(result.n_evaluations)


def test_failed_search_ends_failed(tmp_path, problem):
    tracker = MLflowCallback(uri(tmp_path), experiment="test")
    searcher = make_searcher("random")
    searcher.ask = lambda: [][0]
    with pytest.raises(IndexError):
        search(problem, searcher, budget=10, callbacks=[tracker])
    run = tracker.client.get_run(tracker.run_id)
    assert run.info.status == "FAILED" and run.data.tags["status"] == "failed"


def test_a_child_run_names_its_parent(tmp_path, problem):
    parent = MLflowCallback(uri(tmp_path), experiment="test", figures="off")
    search(problem, make_searcher("heft"), budget=5, callbacks=[parent])
    child = MLflowCallback(uri(tmp_path), experiment="test", figures="inline",
                           parent_run_id=parent.run_id)
    search(problem, make_searcher("dpos"), budget=5, callbacks=[child])
    tags = child.client.get_run(child.run_id).data.tags
    assert tags["mlflow.parentRunId"] == parent.run_id
    assert tags["figures"].startswith("ready")


@pytest.mark.parametrize("bad, message", [
    ("http://127.0.0.1:1", "does not answer"),
    ("bogus://x", "unknown scheme 'bogus'"),
    ("sqlite:////nonexistent/dir/mlflow.db", "does not exist"),
])
def test_a_store_that_cannot_be_used_fails_at_once(bad, message, problem, monkeypatch):
    """Refused before the search runs a batch, and without retrying (MLflow's own retries
    sleep with backoff for minutes): checked by what happens, not by a clock."""
    from moplace.optimize.driver import Callback

    batches = []

    class Batches(Callback):
        def on_batch(self, result):
            batches.append(result)

    def no_sleep(seconds):
        raise AssertionError(f"slept {seconds} s: a retry loop")

    monkeypatch.setattr(time, "sleep", no_sleep)
    with pytest.raises(MoplaceError, match=message):
        search(problem, make_searcher("heft"), budget=5,
               callbacks=[MLflowCallback(bad), Batches()])
    assert batches == []


@pytest.mark.slow  # two whole CLI processes: about 20 s
def test_two_searches_started_at_once_on_a_new_store_both_succeed(tmp_path):
    cmd = [sys.executable, "-m", "moplace", "search", "pipedream:alexnet", "--cluster",
           "4xV100-NVLink", "--searcher", "random", "--budget", "10", "--json",
           "--tracking-uri", uri(tmp_path)]
    procs = [subprocess.Popen(cmd + ["--seed", str(k), "--out", str(tmp_path / f"o{k}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    ids = {json.loads(out)["mlflow_run_id"] for out, _ in outs}
    assert len(ids) == 2


def wait_for_figures(client, run_id, timeout=120):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        tag = client.get_run(run_id).data.tags.get("figures", "")
        if not tag.startswith(("drawing", "not drawn")):
            return tag
        time.sleep(0.5)
    return "timed out"


@pytest.mark.parametrize("figures", [
    "off", pytest.param("background", marks=pytest.mark.slow)])  # three runs' figures: slow
def test_compare_is_one_parent_run_with_a_child_per_searcher(tmp_path, capsys, figures):
    from mlflow.tracking import MlflowClient

    from moplace.cli import main

    code = main(["compare", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searchers",
                 "heft,random", "--budget", "30", "--json", "--tracking-uri", uri(tmp_path),
                 "--experiment", "cmp", "--figures", figures])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["tracking_uri"] == uri(tmp_path)
    client = MlflowClient(uri(tmp_path))
    parent = client.get_run(out["mlflow_run_id"])
    children = {r["searcher"]: client.get_run(r["mlflow_run_id"]) for r in out["results"]}
    assert set(children) == {"heft", "random"}
    for name, child in children.items():
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.tags["searcher"] == name
    assert parent.data.params["searchers"] == "heft,random"
    # a name MLflow's run list shows whole; the searchers in the description
    assert parent.info.run_name == "compare heft, random"
    assert "**compare of heft, random** on **alexnet**" in parent.data.tags["mlflow.note.content"]
    assert "final_hypervolume" not in parent.data.metrics
    assert parent.data.metrics["hypervolume"] == pytest.approx(out["combined_hypervolume"])
    combined = json.loads(open(client.download_artifacts(parent.info.run_id, "front.json")).read())
    assert set(combined["histories"]) == {"heft", "random"}
    assert {p["searcher"] for p in combined["points"]} <= {"heft", "random"}
    assert combined["hypervolume"] == pytest.approx(out["combined_hypervolume"])
    assert combined["hypervolume"] >= max(r["hypervolume"] for r in out["results"]) - 1e-12
    if figures == "off":
        assert parent.data.tags["figures"] == "off"
        return
    assert wait_for_figures(client, parent.info.run_id).startswith("ready: 6 files")
    for child in children.values():
        assert wait_for_figures(client, child.info.run_id).startswith("ready")


def test_run_names_fit_the_run_list():
    from moplace.review.tracking import NAME_CHARS, short_name

    assert short_name("compare heft, random", "compare 2 searchers") == "compare heft, random"
    assert short_name("compare nsga2, mcmc, random", "compare 3 searchers") == \
        "compare 3 searchers"
    assert len(short_name("sweep " + "x" * 40, "sweep " + "x" * 40)) == NAME_CHARS
