"""The search driver, front files and the `moplace search` command."""

import json

import numpy as np
import pytest

from moplace.cli import main
from moplace.core.synthetic import layered_dag
from moplace.errors import MoplaceError
from moplace.optimize.driver import Budget, Callback, search
from moplace.optimize.plugins import make_searcher
from moplace.optimize.problem import Limits, Problem

from conftest import make_cluster


@pytest.fixture(scope="module")
def problem():
    return Problem(layered_dag(40, width=4, seed=2), make_cluster(2, bandwidth=2e9, latency=5e-6))


def test_front_is_non_dominated_and_hypervolume_never_drops(problem):
    result = search(problem, make_searcher("random"), budget=200, seed=1)
    values = np.array([p.values for p in result.front])
    for i, v in enumerate(values):
        others = np.delete(values, i, axis=0)
        assert not np.any(np.all(others <= v, axis=1) & np.any(others < v, axis=1))
    hv = [h for _, h in result.hypervolume_history]
    assert hv == sorted(hv) and result.hypervolume == hv[-1]
    assert [n for n, _ in result.hypervolume_history][-1] == result.n_evaluations == 200


def test_limits_make_strategies_infeasible(problem):
    free = search(problem, make_searcher("single"), budget=1).front[0]
    limited = Problem(problem.graph, problem.cluster,
                      limits=Limits(peak_mem_bytes=free.values[2] / 2))
    result = search(limited, make_searcher("single"), budget=1)
    assert not result.front and result.infeasible[0].evaluation.violation == pytest.approx(free.values[2] / 2)


def test_time_budget_stops_the_search(problem):
    result = search(problem, make_searcher("random"), budget=Budget(evaluations=None, seconds=0.3))
    assert result.seconds < 5 and result.n_evaluations > 0


class Interrupt(Callback):
    def __init__(self):
        self.ended = None

    def on_batch(self, result):
        if result.n_evaluations >= 64:
            raise KeyboardInterrupt

    def on_end(self, result):
        self.ended = result


def test_interrupted_search_keeps_what_it_found(problem):
    cb = Interrupt()
    result = search(problem, make_searcher("random"), budget=10_000, callbacks=[cb])
    assert result.status == "interrupted" and result.front and result.n_evaluations == 64
    assert cb.ended is result or cb.ended.n_evaluations == 64


def test_failing_searcher_reports_failed_and_raises(problem):
    class Broken(Callback):
        status = None

        def on_end(self, result):
            Broken.status = result.status

    searcher = make_searcher("random")
    searcher.ask = lambda: 1 / 0
    with pytest.raises(ZeroDivisionError):
        search(problem, searcher, budget=10, callbacks=[Broken()])
    assert Broken.status == "failed"


def test_cli_search_writes_a_front_that_evaluate_reads(tmp_path, capsys):
    args = ["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher", "random",
            "--budget", "60", "--out", str(tmp_path), "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["evaluations"] == 60 and out["front"] and 0 <= out["hypervolume"] <= 1
    assert {"runtime_s", "peak_comm_bytes", "peak_mem_bytes", "feasible"} <= set(out["front"][0])
    front = json.loads((tmp_path / "front.json").read_text())
    assert front["format"] == "moplace-front" and len(front["points"]) == len(out["front"])
    assert main(["evaluate", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--strategy",
                 str(tmp_path / "front.json"), "--point", "0", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["runtime_s"] == pytest.approx(out["front"][0]["runtime_s"], rel=1e-12)


def test_cli_front_without_point_lists_the_choice(tmp_path, capsys):
    main(["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher", "random",
          "--budget", "40", "--out", str(tmp_path), "--json"])
    n = len(json.loads(capsys.readouterr().out)["front"])
    code = main(["evaluate", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--strategy",
                 str(tmp_path / "front.json")])
    err = capsys.readouterr().err
    assert (code, n > 1) == (2, True) and "--point" in err or n == 1


@pytest.mark.parametrize("args, message", [
    (["--searcher", "nope"], "unknown searcher 'nope'"),
    (["--searcher", "random", "--budget", "0"], "argument --budget: must be from 1 to"),
    (["--searcher", "random", "--time", "soon"], "--time must look like"),
])
def test_cli_bad_input(capsys, args, message):
    code = main(["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_limits_must_be_positive():
    with pytest.raises(MoplaceError, match="peak_mem_bytes"):
        Limits(peak_mem_bytes=0)


def test_cli_compare_runs_every_searcher_on_the_same_budget(capsys):
    code = main(["compare", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--searchers",
                 "data-parallel,heft,random", "--budget", "20", "--no-mlflow", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["searcher"] for r in out["results"]] == ["data-parallel", "heft", "random"]
    by = {r["searcher"]: r for r in out["results"]}
    assert by["random"]["evaluations"] == 20 and by["heft"]["evaluations"] == 1
    for r in out["results"]:
        assert 0 <= r["hypervolume"] <= 1 and r["best_runtime"] > 0


def test_cli_compare_writes_the_combined_front(tmp_path, capsys):
    """`compare` writes front.json as `search` does (issue 34): each point names its searcher,
    the file says what it was searched on, and evaluating a point from it gives the values it
    was found with, strategy-wide options (micro-batches, ZeRO, recomputation) included."""
    out = tmp_path / "cmp"
    assert main(["compare", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--searchers",
                 "heft,random", "--budget", "60", "--no-mlflow", "--out", str(out),
                 "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    data = json.loads((out / "front.json").read_text())
    assert shown["front_file"] == str(out / "front.json")
    assert {p["searcher"] for p in data["points"]} <= {"heft", "random"}
    assert data["graph_source"] == "pipedream:vgg16" and "graph_fingerprint" in data
    options = [k for k, p in enumerate(data["points"])
               if p["plan"]["micro_batches"] > 1 or p["plan"]["zero_stage"]
               or p["plan"]["recomputed_groups"]]
    assert options  # random draws them: the check below is about them
    for k in options[:3]:
        assert main(["evaluate", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--strategy",
                     str(out / "front.json"), "--point", str(k), "--json"]) == 0
        again = json.loads(capsys.readouterr().out)
        assert again["runtime_s"] == pytest.approx(data["points"][k]["runtime_s"], rel=1e-12)
    assert main(["compare", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--searchers",
                 "heft", "--no-mlflow", "--out", str(out)]) == 2  # checked before searching
    assert "exists; pass --force" in capsys.readouterr().err


def test_cli_compare_checks_names_before_searching(capsys):
    code = main(["compare", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--searchers",
                 "random,nope", "--no-mlflow"])
    captured = capsys.readouterr()
    assert code == 2 and "unknown searcher 'nope'" in captured.err and captured.out == ""


def test_cli_search_reports_the_schedulers_estimate(tmp_path, capsys):
    assert main(["search", "pipedream:resnet50", "--cluster", "4xV100-NVLink", "--searcher", "heft",
                 "--no-mlflow", "--out", str(tmp_path)]) == 0
    assert "the scheduler's own makespan estimate" in capsys.readouterr().out


def test_cli_set_passes_settings_to_the_searcher(tmp_path, capsys):
    code = main(["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher", "random",
                 "--set", "batch_size=7", "--set", "splits=false", "--budget", "20", "--no-mlflow",
                 "--out", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["settings"] == {"batch_size": 7, "splits": False}


def test_cli_compare_set_is_per_searcher(capsys):
    code = main(["compare", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--searchers",
                 "random,mcmc", "--set", "mcmc.chains=2", "--set", "random.batch_size=5",
                 "--budget", "20", "--no-mlflow", "--json"])
    assert code == 0 and len(json.loads(capsys.readouterr().out)["results"]) == 2


def test_every_test_runs_in_an_empty_folder_of_its_own(tmp_path):
    """What a command leaves in the checkout (a front.json from any `moplace search`) cannot
    change a test's outcome: every test starts in an empty temporary folder (conftest.py)."""
    from pathlib import Path

    here = Path.cwd()
    root = Path(__file__).resolve().parents[1]
    assert here != root and root not in here.parents and here != tmp_path
    assert list(here.iterdir()) == []


@pytest.mark.parametrize("cmd, sets, message", [
    ("search", ["popsize=5"], "searcher 'nsga2' has no setting 'popsize' (did you mean "
     "'pop_size'?); its settings: pop_size"),
    ("search", ["pop_size"], "--set wants KEY=VALUE"),
    ("search", ["pop_size=1"], "pop_size must be at least 2"),
    ("compare", ["pop_size=5"], "--set in compare wants NAME.KEY=VALUE"),
    ("compare", ["heft.pop_size=5"], "NAME one of nsga2"),
])
def test_cli_bad_settings_are_refused_before_any_work(capsys, cmd, sets, message):
    which = ["--searcher", "nsga2"] if cmd == "search" else ["--searchers", "nsga2"]
    args = [cmd, "pipedream:alexnet", "--cluster", "4xV100-NVLink", *which, "--no-mlflow"]
    for s in sets:
        args += ["--set", s]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_searchers_lists_names_and_settings(capsys):
    assert main(["searchers"]) == 0
    blocks = {b.split()[0]: b for b in capsys.readouterr().out.strip().split("\n\n")}
    assert blocks["nsga2"].splitlines()[0].startswith("nsga2  (moplace ")
    assert "pop_size         int = 100  (at least 2)" in blocks["nsga2"]
    assert "population, and offspring per generation." in blocks["nsga2"]
    assert "temperature" in blocks["mcmc"]
    settings = [line.split()[0] for line in blocks["optuna-tpe"].splitlines()[2:]
                if line.startswith("    ") and not line.startswith("      ")]
    assert "storage" in settings and "sampler" not in settings  # fixed by the name
    assert "polish" in blocks["optuna-tpe"] and "= 32" in blocks["optuna-tpe"]
    assert len(blocks["heft"].splitlines()) == 2  # name and origin, summary: no settings


def test_searchers_json_describes_every_setting(capsys):
    assert main(["searchers", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by_name = {s["name"]: s for s in out["searchers"]}
    nsga2 = {s["name"]: s for s in by_name["nsga2"]["settings"]}
    assert nsga2["pop_size"] == {"name": "pop_size", "type": "int", "required": False,
                                 "default": 100, "meaning": "population, and offspring per generation.",
                                 "allowed": "at least 2"}
    assert by_name["mcmc"]["target"] == "searchers.mcmc:McmcSearcher"
    assert all(s["meaning"] for e in out["searchers"] for s in e["settings"])