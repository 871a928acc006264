"""`moplace sweep`: the sweep file's checks, a sweep's trials on worker processes with a
killed worker retried, resuming, failed trials, MLflow parent and child runs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moplace.cli import main

SWEEP = """
[sweep]
name = "{name}"
sampler = "grid"
returns = ["best_runtime_within_memory", "hypervolume"]
heartbeat_seconds = 1

[fixed]
graph = "pipedream:alexnet"
searcher = "random"
budget = {budget}

[space]
devices = [1, 2, 4]
memory_limit_gib = [2, 8]
"""


@pytest.fixture(autouse=True)
def _in_a_folder_of_its_own(tmp_path, monkeypatch):
    """Every test runs in its temporary folder: a sweep's study goes to the working directory."""
    monkeypatch.chdir(tmp_path)


def _write(folder: Path, text: str, name="s.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def _bad(tmp_path, capsys, text, *extra):
    path = _write(tmp_path, text)
    assert main(["sweep", str(path), "--no-mlflow", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("moplace: error: "), err
    assert not list(tmp_path.glob("*.db")), "nothing is started: no storage made"
    return err


def test_a_settings_range_beyond_its_bounds_is_refused_before_any_trial(tmp_path, capsys):
    text = SWEEP.format(name="s", budget=40).replace('searcher = "random"', 'searcher = "mcmc"') \
        .replace("memory_limit_gib = [2, 8]", '"mcmc.neighbour_prob" = { low = 0.5, high = 2 }')
    err = _bad(tmp_path, capsys, text)
    assert "[space] mcmc.neighbour_prob" in err and "must be in [0, 1], got 2.0" in err


@pytest.mark.parametrize("change, words", [
    (("devices = [1, 2, 4]", "gpus = [1, 2]"), ["[space] gpus", "unknown parameter"]),
    (("devices = [1, 2, 4]", "devices = []"), ["[space] devices", "empty list"]),
    (("devices = [1, 2, 4]", "devices = { low = 8, high = 2 }"), ["[space] devices", "empty range"]),
    (('sampler = "grid"', 'sampler = "annealing"'), ["[sweep] sampler", "unknown sampler"]),
    (('searcher = "random"', 'searcher = "hill"'), ["[fixed] searcher", "unknown searcher"]),
    (("budget = 40", 'budget = 40\n"random.size" = 3'), ["random.size", "no setting 'size'"]),
    (("budget = 40", 'budget = 40\n"nsga2.pop_size" = 3'), ["nsga2.pop_size", "not one this sweep runs"]),
    (("budget = 40", "budget = -4"), ["[fixed] budget", "above 0"]),
    (("memory_limit_gib = [2, 8]", '"random.batch_size" = [0, 10]'),
     ["[space] random.batch_size", "batch_size must be at least 1, got 0"]),
    (('budget = 40', 'budget = 40\n"random.batch_size" = -2'),
     ["[fixed] random.batch_size", "batch_size must be at least 1"]),
    (("memory_limit_gib = [2, 8]", "memory_limit_gib = [2, 8]\ncluster = [\"4xV100-NVLink\"]"),
     ["cannot go with cluster"]),
    (('heartbeat_seconds = 1', 'heartbeat_seconds = 1\nstorage = "sqlite:////nonexistent/dir/x.db"'),
     ["[sweep] storage", "/nonexistent/dir", "does not exist"]),
    (('heartbeat_seconds = 1', 'heartbeat_seconds = 1\nstorage = "mysql://u@127.0.0.1:1/db"'),
     ["[sweep] storage", "mysql"]),
    (("[space]", "[spaces]"), ["spaces", "unknown table"]),
])
def test_a_bad_sweep_file_is_one_line_naming_file_and_key(tmp_path, capsys, change, words):
    text = SWEEP.format(name="bad", budget=40).replace(*change)
    err = _bad(tmp_path, capsys, text)
    assert "s.toml" in err
    for w in words:
        assert w in err


def test_an_unreachable_storage_flag_is_named(tmp_path, capsys):
    err = _bad(tmp_path, capsys, SWEEP.format(name="x", budget=40), "--storage",
               "sqlite:////nonexistent/x.db")
    assert "--storage" in err


def _trials(storage, name):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def test_a_sweep_in_process_resumes_and_records_failed_trials(tmp_path, capsys, monkeypatch):
    from searchers.random_search import RandomSearcher

    ask = RandomSearcher.ask

    def failing_ask(self):  # a search that fails inside its trial (settings are checked before)
        if self.config.batch_size == 5:
            raise RuntimeError("batch_size 5 fails on purpose")
        return ask(self)

    monkeypatch.setattr(RandomSearcher, "ask", failing_ask)
    text = SWEEP.format(name="small", budget=30).replace(
        "memory_limit_gib = [2, 8]", '"random.batch_size" = [5, 10]')
    path = _write(tmp_path, text)
    assert main(["sweep", str(path), "--no-mlflow", "--json", "--trials", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trials"]["complete"] + out["trials"]["fail"] == 4 and out["trials"]["running"] == 0
    storage = out["storage"]
    trials = _trials(storage, "small")
    for t in trials:  # batch_size 5's search failed: recorded, the sweep went on
        if t.params["random.batch_size"] == 5:
            assert t.state.name == "FAIL" and "batch_size" in t.user_attrs["error"]
        else:
            assert t.state.name == "COMPLETE" and t.user_attrs["evaluations"] == 30
    # the same command again: nothing to do; a larger --trials adds the difference
    assert main(["sweep", str(path), "--no-mlflow", "--json", "--trials", "4"]) == 0
    assert len(_trials(storage, "small")) == 4
    assert main(["sweep", str(path), "--no-mlflow", "--json"]) == 0  # the grid's 6
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["trials"]["complete"] + out["trials"]["fail"] == 6
    params = [tuple(sorted(t.params.items())) for t in _trials(storage, "small")]
    assert len(set(params)) == 6  # the grid, each point once


@pytest.mark.slow
def test_six_trials_on_two_workers_one_killed_mid_trial(tmp_path):
    """--workers 2 on the default storage; one worker gets SIGKILL while it runs a trial: the
    other takes the trial again after the heartbeat's grace period. Exactly 6 complete trials,
    none duplicated, none left RUNNING, and 6 finished child runs under one parent in MLflow."""
    path = _write(tmp_path, SWEEP.format(name="killed", budget=1500).replace(
        'graph = "pipedream:alexnet"', 'graph = "pipedream:resnet50"'))
    db = tmp_path / "mlflow.db"
    proc = subprocess.Popen([sys.executable, "-m", "moplace", "sweep", str(path), "--workers", "2",
                             "--json", "--quiet", "--tracking-uri", f"sqlite:///{db}",
                             "--figures", "off"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    storage = f"sqlite:///{tmp_path / 's.optuna.db'}"
    killed = None
    deadline = time.time() + 120
    while killed is None and time.time() < deadline:
        time.sleep(0.3)
        try:
            trials = _trials(storage, "killed")
        except Exception:  # noqa: BLE001 - the study is not made yet
            continue
        running = [t for t in trials if t.state.name == "RUNNING" and "worker" in t.user_attrs
                   and "mlflow_run_id" in t.user_attrs]
        if running and sum(t.state.name == "COMPLETE" for t in trials) >= 1:
            killed = int(running[0].user_attrs["worker"].rsplit(":", 1)[1])
            os.kill(killed, signal.SIGKILL)
    assert killed is not None, "no trial was seen running"
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    data = json.loads(out)
    trials = _trials(storage, "killed")
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 6 and data["trials"]["complete"] == 6
    assert len({tuple(sorted(t.params.items())) for t in complete}) == 6
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    assert data["trials"]["retried"] == 1
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("moplace")
    children = client.search_runs([exp.experiment_id],
                                  f"tags.mlflow.parentRunId = '{data['mlflow_run_id']}'")
    finished = [r for r in children if r.info.status == "FINISHED"]
    assert len(finished) == 6
    assert [r.info.status for r in children if r.info.status != "FINISHED"] == ["KILLED"]
    assert {r.data.params["sweep.devices"] for r in finished} == {"1", "2", "4"}
    parent = client.get_run(data["mlflow_run_id"])
    assert parent.info.status == "FINISHED"
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"trials_table.json", "trials.json"} <= names


@pytest.mark.slow
def test_a_sweep_runs_its_workers_on_a_dask_cluster(tmp_path):
    """--on-dask: the workers are tasks on a real Dask cluster (scheduler and two workers as
    separate processes), on the same storage; each trial ran in a Dask worker's process."""
    from daskprocs import DaskProcesses, dask_command

    if dask_command() is None:
        pytest.skip("Dask distributed is not installed")
    (tmp_path / "dask").mkdir()
    procs = DaskProcesses(tmp_path / "dask")
    try:
        path = _write(tmp_path, SWEEP.format(name="ondask", budget=300))
        done = subprocess.run([sys.executable, "-m", "moplace", "sweep", str(path), "--workers",
                               "2", "--on-dask", "--dask", procs.address, "--json", "--no-mlflow"],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        assert data["trials"]["complete"] == 6 and data["trials"]["running"] == 0
        pids = {int(t.user_attrs["worker"].rsplit(":", 1)[1])
                for t in _trials(data["storage"], "ondask")}
        assert pids and pids <= {p.pid for p in procs.workers}
    finally:
        procs.stop()


@pytest.mark.slow
def test_optuna_dashboard_reads_the_sweeps_storage(tmp_path, capsys):
    """The command the README gives, `optuna-dashboard STORAGE`, serves the sweep's study."""
    import shutil
    import socket
    import urllib.request

    exe = shutil.which("optuna-dashboard")
    if exe is None:
        pytest.skip("optuna-dashboard is not installed (the test extra installs it)")
    path = _write(tmp_path, SWEEP.format(name="dashboard", budget=20))
    assert main(["sweep", str(path), "--no-mlflow", "--json", "--trials", "2"]) == 0
    storage = json.loads(capsys.readouterr().out)["storage"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([exe, storage, "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, body = time.time() + 60, None
        while body is None and time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as r:
                    body = json.loads(r.read())
            except OSError:
                time.sleep(0.5)
        assert body is not None, "optuna-dashboard did not answer"
        studies = {s["study_name"]: s for s in body["study_summaries"]}
        assert "dashboard" in studies
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.slow
def test_a_sweep_over_a_zoo_models_batch_size(tmp_path, capsys):
    """``graph = "zoo:mlp"`` with ``batch`` in the space: each batch size is profiled once with
    TensorFlow (kept in graphs/ beside the sweep file) and searched."""
    pytest.importorskip("tensorflow")
    text = """
[sweep]
name = "zoo"
sampler = "grid"
returns = ["best_runtime"]

[fixed]
graph = "zoo:mlp"
cluster = "4xV100-NVLink"
searcher = "random"
budget = 20

[space]
batch = [8, 32]
"""
    path = _write(tmp_path, text)
    assert main(["sweep", str(path), "--no-mlflow", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trials"]["complete"] == 2
    graphs = sorted(p.name for p in (tmp_path / "graphs").glob("*.json"))
    assert graphs == ["zoo-mlp-batch32-V100.json", "zoo-mlp-batch8-V100.json"]
    trials = _trials(out["storage"], "zoo")
    runtimes = {t.params["batch"]: t.values[0] for t in trials}
    assert runtimes[32] > runtimes[8] > 0  # a larger batch takes longer


ROOT = Path(__file__).resolve().parents[1]
BUNDLED = sorted((ROOT / "experiments" / "sweeps").glob("*.toml"))


def test_there_are_bundled_sweep_files():
    assert len(BUNDLED) >= 2, "experiments/sweeps/ holds the README's worked examples"


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.name)
def test_every_bundled_sweep_file_passes_check(path, tmp_path, monkeypatch, capsys):
    """`moplace sweep FILE --check` on each file in experiments/sweeps/ (the README's worked
    examples): the file, its graphs and clusters load, and the plan names the study."""
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", str(path), "--check", "--json"]) == 0, capsys.readouterr().err
    plan = json.loads(capsys.readouterr().out)
    assert plan["trials"] >= 1 and plan["space"]
    assert not list(path.parent.glob("*.optuna.db")), "--check makes no storage"


def test_the_study_goes_to_the_working_directory_not_beside_the_file(tmp_path, monkeypatch, capsys):
    """A sweep run from another folder keeps its SQLite study in the working directory (as
    mlflow.db), says where on stderr and in --json; the file's folder gets nothing. The same
    folder resumes it; --storage still chooses."""
    files, here = tmp_path / "examples", tmp_path / "work"
    files.mkdir()
    here.mkdir()
    path = _write(files, SWEEP.format(name="where", budget=20))
    monkeypatch.chdir(here)
    assert main(["sweep", str(path), "--no-mlflow", "--json", "--quiet", "--trials", "1"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    db = here / "s.optuna.db"
    assert db.is_file() and not list(files.glob("*.db"))
    assert out["storage"] == f"sqlite:///{db}"
    assert out["storage_file"] == str(db)
    assert str(db) in captured.err and captured.err.count("\n") == 1, captured.err
    # the plan says the same, and that another folder starts a new study
    assert main(["sweep", str(path), "--check"]) == 0
    plan = capsys.readouterr()
    assert str(db) in plan.out + plan.err
    # the same folder resumes: still one trial; a larger --trials adds one
    assert main(["sweep", str(path), "--no-mlflow", "--json", "--quiet", "--trials", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trials"]["complete"] == 2 and len(_trials(out["storage"], "where")) == 2
    # --storage overrides the default
    other = tmp_path / "elsewhere.db"
    assert main(["sweep", str(path), "--no-mlflow", "--json", "--quiet", "--trials", "1",
                 "--storage", f"sqlite:///{other}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["storage"] == f"sqlite:///{other}" and other.is_file()
    assert out["storage_file"] == str(other)
    assert sorted(p.name for p in here.glob("*.db")) == ["s.optuna.db"]
    assert not list(files.glob("*.db"))


def test_a_requeued_trials_finished_run_ends_lost_when_the_sweep_closes(tmp_path):
    """A worker killed after ending its trial's run but before telling the study leaves the run
    FINISHED; if its retry could not mark it (the store busy), the sweep's close does: each
    complete trial keeps one finished run (the race behind a flaky slow check)."""
    import optuna
    from mlflow import MlflowClient
    from optuna.distributions import IntDistribution
    from optuna.trial import TrialState, create_trial

    from moplace.sweep.tracking import SweepRun

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("lost")
    dead = client.create_run(exp).info.run_id
    client.set_terminated(dead, status="FINISHED")
    kept = client.create_run(exp).info.run_id
    client.set_terminated(kept, status="FINISHED")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    dist = {"x": IntDistribution(0, 3)}
    study.add_trial(create_trial(state=TrialState.FAIL, params={"x": 1}, distributions=dist,
                                 user_attrs={"mlflow_run_id": dead}))
    study.add_trial(create_trial(state=TrialState.COMPLETE, params={"x": 1}, distributions=dist,
                                 value=1.0, user_attrs={"mlflow_run_id": kept},
                                 system_attrs={"failed_trial": 0, "retry_history": [0]}))
    tracker = SweepRun(uri, "lost")
    tracker.client = client
    tracker.end_lost_runs(study)
    assert client.get_run(dead).info.status == "KILLED"
    assert "run again as trial 1" in client.get_run(dead).data.tags["status"]
    assert client.get_run(kept).info.status == "FINISHED"


def test_a_sweep_in_mlflow_reads_in_runs_and_show(tmp_path, capsys):
    """--trials 2 on a 6-point grid says so (stderr and the run's description); the parent
    reads in `moplace runs` (its name, the trials' graph, evaluations, the best of each
    objective) and `moplace show` shows its best trial's front; each trial row shows its swept
    values; run names fit MLflow's run list."""
    from mlflow import MlflowClient

    from moplace.review.tracking import NAME_CHARS

    path = _write(tmp_path, SWEEP.format(name="a-sweep-with-a-long-name", budget=20))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["sweep", str(path), "--trials", "2", "--json", "--quiet", "--figures", "off",
                 "--tracking-uri", uri]) == 0
    captured = capsys.readouterr()
    assert "runs 2 of the grid's 6 points" in captured.err
    out = json.loads(captured.out)
    client = MlflowClient(uri)
    parent = client.get_run(out["mlflow_run_id"])
    assert "2 of the grid's 6 points" in parent.data.tags["mlflow.note.content"]
    assert main(["runs", "--tracking-uri", uri, "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert len(runs) == 3 and all(len(r["run_name"]) <= NAME_CHARS for r in runs)
    top = next(r for r in runs if r["run_id"] == parent.info.run_id)
    assert top["sweep"]["name"] == "a-sweep-with-a-long-name" and top["sweep"]["trials"] == 2
    assert (top["searcher"], top["graph"], top["evaluations"]) == ("sweep", "alexnet", 40)
    assert top["best"]["runtime"] == pytest.approx(min(
        r["best"]["runtime"] for r in runs if r["trial"]))
    trials = {r["trial"]["number"]: r for r in runs if r["trial"]}
    assert set(trials) == {0, 1} and set(trials[0]["trial"]["swept"]) == {"devices",
                                                                          "memory_limit_gib"}
    assert main(["runs", "--tracking-uri", uri]) == 0
    text = capsys.readouterr().out
    assert not [line for line in text.splitlines()[1:-1] if " ? " in line], text
    assert "sweep a-sweep-with-a-long-name " in text  # whole, not cut
    for r in trials.values():
        swept = ", ".join(f"{k}={v}" for k, v in r["trial"]["swept"].items())
        assert f"trial {r['trial']['number']}: {swept}" in text
    best = top["sweep"]["best_trial"]
    assert main(["show", parent.info.run_id[:8], "--tracking-uri", uri]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"sweep a-sweep-with-a-long-name (run {parent.info.run_id[:8]}), "
                            f"its best trial {best} (")
    assert trials[best]["run_id"] in shown.splitlines()[0]
    assert main(["show", parent.info.run_id[:8], "--tracking-uri", uri, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == trials[best]["run_id"]
