"""Checkpoints: a search stopped half-way continues to the same budget without losing a point."""

import dataclasses
import json
import os
import signal

import numpy as np
import pytest

from moplace.cli import main
from moplace.core.graph import OpGraph
from moplace.errors import MoplaceError
from moplace.optimize.checkpoint import read_meta
from moplace.optimize.driver import Budget, Callback, search
from moplace.optimize.plugins import make_searcher
from moplace.optimize.problem import Problem

from conftest import make_cluster

BUDGET = 96
SETTINGS = {  # small populations and batches: several batches within the budget
    "random": {"batch_size": 16},
    "nsga2": {"pop_size": 16},
    "mcmc": {"chains": 4, "steps_per_ask": 2},
    "optuna-nsga2": {"batch_size": 8, "population_size": 16},
}
NAMES = list(SETTINGS)


def make(name):
    return make_searcher(name, **SETTINGS[name])


class StopAfter(Callback):
    """Ctrl-C at a batch boundary, once ``n`` evaluations are done."""

    def __init__(self, n):
        self.n = n

    def on_batch(self, result):
        if result.n_evaluations >= self.n:
            raise KeyboardInterrupt


class CountingEvaluate:
    """Replaces ``problem.evaluate``: counts the calls; Ctrl-C on call number ``fail_at``."""

    def __init__(self, problem, fail_at=None):
        self.evaluate, self.fail_at, self.calls = problem.evaluate, fail_at, 0

    def __call__(self, strategy, parent=None):
        self.calls += 1
        if self.calls == self.fail_at:
            raise KeyboardInterrupt
        return self.evaluate(strategy, parent)


@pytest.fixture
def problem(small):
    small.reference  # noqa: B018 - evaluates the baselines now, not inside a counted search
    return small


def front_values(result):
    return np.array([p.values for p in result.front]).reshape(-1, 3)


def assert_keeps(first, resumed):
    """Every point of ``first``'s front is weakly dominated by a point of ``resumed``'s."""
    later = front_values(resumed)
    for v in front_values(first):
        assert (later <= v).all(axis=1).any(), v


@pytest.mark.parametrize("name", NAMES)
def test_interrupt_at_a_batch_boundary_then_resume_gives_the_uninterrupted_result(
        problem, tmp_path, name):
    ck = tmp_path / "search.ckpt"
    first = search(problem, make(name), budget=BUDGET, seed=3, callbacks=[StopAfter(40)],
                   checkpoint=ck)
    assert first.status == "interrupted" and 40 <= first.n_evaluations < BUDGET
    assert read_meta(ck)["n_evaluations"] == first.n_evaluations
    resumed = search(problem, make(name), budget=BUDGET, seed=3, checkpoint=ck)
    assert resumed.status == "finished" and resumed.n_evaluations == BUDGET
    assert resumed.resumed_from == first.n_evaluations
    assert resumed.hypervolume_history[:len(first.hypervolume_history)] == first.hypervolume_history
    assert_keeps(first, resumed)
    # same seed, same result: the uninterrupted search finds exactly the same points
    whole = search(problem, make(name), budget=BUDGET, seed=3)
    assert np.array_equal(front_values(resumed), front_values(whole))
    assert [p.strategy for p in resumed.front] == [p.strategy for p in whole.front]
    assert resumed.hypervolume_history == whole.hypervolume_history


@pytest.mark.parametrize("name", NAMES)
def test_interrupt_inside_a_batch_keeps_every_evaluated_point(problem, tmp_path, monkeypatch, name):
    ck = tmp_path / "search.ckpt"
    first_calls = CountingEvaluate(problem, fail_at=45)  # inside a batch for every searcher
    monkeypatch.setattr(problem, "evaluate", first_calls)
    first = search(problem, make(name), budget=BUDGET, seed=5, checkpoint=ck)
    assert first.status == "interrupted" and first.n_evaluations == 44
    assert read_meta(ck)["n_evaluations"] == 44  # the partial batch was told and saved
    calls = CountingEvaluate(problem)
    monkeypatch.setattr(problem, "evaluate", calls)
    resumed = search(problem, make(name), budget=BUDGET, seed=5, checkpoint=ck)
    assert resumed.status == "finished" and resumed.n_evaluations == BUDGET
    assert calls.calls == BUDGET - 44  # nothing evaluated twice
    assert_keeps(first, resumed)


@pytest.mark.parametrize("name", ["nsga2", "optuna-nsga2"])
def test_interrupt_inside_ask_resumes_from_the_last_batch(problem, tmp_path, monkeypatch, name):
    """A KeyboardInterrupt raised inside ``ask`` leaves the searcher's state unknown: nothing
    is written then, and the file keeps the state after the last batch (written after every
    batch with checkpoint_every=0)."""
    searcher = make(name)
    ask, asked = type(searcher).ask, []

    def failing_ask(self):
        asked.append(1)
        if len(asked) == 4:
            raise KeyboardInterrupt
        return ask(self)

    ck = tmp_path / "search.ckpt"
    monkeypatch.setattr(type(searcher), "ask", failing_ask)
    first = search(problem, searcher, budget=BUDGET, seed=1, checkpoint=ck, checkpoint_every=0)
    monkeypatch.undo()
    assert first.status == "interrupted" and read_meta(ck)["n_evaluations"] == first.n_evaluations
    calls = CountingEvaluate(problem)
    monkeypatch.setattr(problem, "evaluate", calls)
    resumed = search(problem, make(name), budget=BUDGET, seed=1, checkpoint=ck)
    assert resumed.n_evaluations == BUDGET and calls.calls == BUDGET - first.n_evaluations
    assert_keeps(first, resumed)


@pytest.mark.parametrize("name", ["random", "optuna-nsga2"])
def test_ctrl_c_during_ask_is_held_until_ask_returns(problem, tmp_path, monkeypatch, name):
    """A real SIGINT while the searcher asks: the batch is told with nothing evaluated and the
    state written at the end is the consistent one."""
    # a process started with SIGINT ignored (a background job of a non-interactive shell)
    # would never see the signal: the test runs with Python's own handler
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_during_ask(problem, tmp_path, monkeypatch, name)
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_during_ask(problem, tmp_path, monkeypatch, name):
    searcher = make(name)
    ask, asked = type(searcher).ask, []

    def ask_then_ctrl_c(self):
        if len(asked) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        batch = ask(self)
        asked.append(len(batch))
        return batch

    ck = tmp_path / "search.ckpt"
    monkeypatch.setattr(type(searcher), "ask", ask_then_ctrl_c)
    first = search(problem, searcher, budget=BUDGET, seed=2, checkpoint=ck)
    monkeypatch.undo()
    done = asked[0] + asked[1]  # two batches (a seeded searcher's first: its seeds)
    assert asked[1] == SETTINGS[name]["batch_size"]
    assert first.status == "interrupted" and first.n_evaluations == done
    assert read_meta(ck)["n_evaluations"] == done
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    resumed = search(problem, make(name), budget=BUDGET, seed=2, checkpoint=ck)
    assert resumed.n_evaluations == BUDGET
    assert_keeps(first, resumed)


def test_time_budget_counts_every_run(problem, tmp_path):
    ck = tmp_path / "search.ckpt"
    budget = Budget(evaluations=None, seconds=0.4)
    first = search(problem, make("random"), budget=budget, checkpoint=ck,
                   callbacks=[StopAfter(16)])
    assert first.status == "interrupted"
    resumed = search(problem, make("random"), budget=budget, checkpoint=ck)
    assert resumed.status == "finished" and 0.4 <= resumed.seconds < 5
    assert resumed.n_evaluations > first.n_evaluations
    again = search(problem, make("random"), budget=budget, checkpoint=ck)  # spent: nothing to do
    assert again.n_evaluations == resumed.n_evaluations and again.resumed_from == resumed.n_evaluations


def test_a_finished_search_resumed_with_a_larger_budget_goes_on(problem, tmp_path):
    ck = tmp_path / "search.ckpt"
    search(problem, make("random"), budget=32, seed=4, checkpoint=ck)
    more = search(problem, make("random"), budget=64, seed=4, checkpoint=ck)
    whole = search(problem, make("random"), budget=64, seed=4)
    assert more.n_evaluations == 64 and np.array_equal(front_values(more), front_values(whole))


# -- the wrong file ------------------------------------------------------------------------------

def _other_costs(problem):
    g = problem.graph
    ops = list(g.ops)
    ops[3] = dataclasses.replace(ops[3], compute={k: 2 * v for k, v in ops[3].compute.items()})
    return Problem(OpGraph(ops, g.edges, name=g.name), problem.cluster)


@pytest.mark.parametrize("change, field", [
    (lambda p: (p, make_searcher("random", batch_size=16), 9), "seed"),
    (lambda p: (p, make_searcher("mcmc"), 0), "searcher"),
    (lambda p: (p, make_searcher("random", batch_size=8), 0), "settings"),
    (lambda p: (Problem(p.graph, make_cluster(2)), make_searcher("random", batch_size=16), 0), "cluster"),
    (lambda p: (_other_costs(p), make_searcher("random", batch_size=16), 0), "graph_fingerprint"),
    (lambda p: (Problem(p.graph, p.cluster, objectives=("runtime", "peak_memory")),
                make_searcher("random", batch_size=16), 0), "objectives"),
])
def test_a_checkpoint_of_another_search_is_refused(problem, tmp_path, change, field):
    ck = tmp_path / "search.ckpt"
    search(problem, make("random"), budget=16, seed=0, checkpoint=ck)
    other, searcher, seed = change(problem)
    with pytest.raises(MoplaceError, match=field) as err:
        search(other, searcher, budget=32, seed=seed, checkpoint=ck)
    assert str(ck) in str(err.value)


def test_other_graph_is_refused(problem, vgg, tmp_path):
    ck = tmp_path / "search.ckpt"
    search(problem, make("random"), budget=16, checkpoint=ck)
    with pytest.raises(MoplaceError, match="graph differs") as err:
        search(vgg, make("random"), budget=32, checkpoint=ck)
    assert str(ck) in str(err.value)


@pytest.mark.parametrize("damage, message", [
    (lambda data: b"not a checkpoint at all\n" + data, "not a moplace checkpoint"),
    (lambda data: data[:-100], "corrupt or truncated"),
    (lambda data: data[:-100] + bytes(100), "corrupt or truncated"),
    (lambda data: data.split(b"\n", 1)[0] + b"\n{garbage", "corrupt or truncated"),
    (lambda data: data.replace(b'"version": 7', b'"version": 99', 1),
     "format version 99; this moplace reads versions 7 \\(newer than this moplace"),
    (lambda data: data.replace(b'"version": 7', b'"version": 1', 1),
     "format version 1, written by moplace 0.1 before its searcher settings were declared"),
    (lambda data: b"", "not a moplace checkpoint"),
])
def test_a_damaged_file_is_refused(problem, tmp_path, damage, message):
    ck = tmp_path / "search.ckpt"
    search(problem, make("random"), budget=16, checkpoint=ck)
    ck.write_bytes(damage(ck.read_bytes()))
    with pytest.raises(MoplaceError, match=message) as err:
        search(problem, make("random"), budget=32, checkpoint=ck)
    assert str(ck) in str(err.value)


@pytest.mark.parametrize("version", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("name", ["random", "mcmc"])
def test_a_checkpoint_of_an_older_genome_is_refused_by_name(problem, tmp_path, version, name):
    """Checkpoints written before strategies had options (version 2) or sharded and
    recomputed (version 3) or micro-batched (version 4), or before the degree space had virtual
    stages and FP8 (version 5) or expert parallelism (version 6), hold searcher state of an
    older genome
    (MCMC's chains crashed on it): refused, naming both versions, before any work."""
    ck = tmp_path / "search.ckpt"
    search(problem, make(name), budget=16, checkpoint=ck)
    data = ck.read_bytes()
    assert b'"version": 7' in data
    ck.write_bytes(data.replace(b'"version": 7', f'"version": {version}'.encode(), 1))
    with pytest.raises(MoplaceError, match=f"format version {version}, written by moplace "
                       "before .* genomes of another layout; this moplace reads versions 7"):
        search(problem, make(name), budget=32, checkpoint=ck)


def test_checkpoint_every_must_be_a_number_of_seconds(problem, tmp_path):
    with pytest.raises(MoplaceError, match="checkpoint_every"):
        search(problem, make("random"), budget=16, checkpoint=tmp_path / "c", checkpoint_every=-1)


# -- the command line ----------------------------------------------------------------------------

CLI = ["search", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--searcher", "random",
       "--no-mlflow"]


def test_cli_checkpoint_resumes_and_then_has_nothing_left(tmp_path, capsys):
    ck = str(tmp_path / "vgg.ckpt")
    args = CLI + ["--budget", "40", "--out", str(tmp_path), "--checkpoint", ck]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "resumed" not in out and "40 evaluations" in out
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"resumed from {ck}: 40 evaluations" in out and "nothing left to do" in out
    assert main(args[:-4] + ["--budget", "72", "--json", "--out", str(tmp_path), "--checkpoint", ck]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["evaluations"] == 72 and obj["resumed_from"] == 40 and obj["checkpoint"] == ck


def test_cli_ctrl_c_says_how_to_continue(tmp_path, capsys, monkeypatch):
    ck = str(tmp_path / "vgg.ckpt")
    evaluate, calls = Problem.evaluate, []

    def interrupted(self, strategy):
        calls.append(1)
        # the 5 baselines front.json records, then the 4 of the reference point, come first
        if len(calls) == 55:
            raise KeyboardInterrupt
        return evaluate(self, strategy)

    monkeypatch.setattr(Problem, "evaluate", interrupted)
    args = CLI + ["--budget", "80", "--out", str(tmp_path), "--checkpoint", ck]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "(interrupted)" in captured.out and (tmp_path / "front.json").exists()
    assert f"checkpoint {ck} holds 45 evaluations" in captured.err
    assert "--checkpoint" in captured.err
    monkeypatch.undo()
    assert main(args + ["--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["evaluations"] == 80 and obj["resumed_from"] == 45


def test_cli_checkpoint_of_another_search_is_a_clean_error(tmp_path, capsys):
    ck = str(tmp_path / "vgg.ckpt")
    assert main(CLI + ["--budget", "20", "--out", str(tmp_path), "--checkpoint", ck]) == 0
    capsys.readouterr()
    code = main(CLI + ["--budget", "20", "--out", str(tmp_path), "--checkpoint", ck, "--seed", "7"])
    err = capsys.readouterr().err
    assert code == 2 and ck in err and "seed" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["nsga2", "mcmc"])
def test_the_resumed_searcher_works_on_the_problem_it_is_given(problem, tmp_path, name):
    """The checkpoint holds no copy of the problem: a new, equal Problem object takes its place
    (its genome space included, computed on demand)."""
    ck = tmp_path / "search.ckpt"
    first = search(problem, make(name), budget=BUDGET, seed=6, callbacks=[StopAfter(30)],
                   checkpoint=ck)
    again = Problem(problem.graph, problem.cluster)
    assert "genome" not in vars(again)
    searcher = make(name)
    resumed = search(again, searcher, budget=BUDGET, seed=6, checkpoint=ck)
    assert resumed.n_evaluations == BUDGET and resumed.resumed_from == first.n_evaluations
    assert searcher.problem is again and searcher.problem.genome is again.genome
    space = getattr(searcher, "space", None) or searcher._space
    assert space is again.genome
    whole = search(problem, make(name), budget=BUDGET, seed=6)
    assert np.array_equal(front_values(resumed), front_values(whole))


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_at_most_the_checkpoint_interval():
    """experiments/kill_resume.py: a worker killed with SIGKILL at a random moment, resumed
    here: exactly the rest of the budget evaluated, the uninterrupted result, and at most 500
    evaluations (the default interval) done again."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "experiments" / "kill_resume.py"
    out = subprocess.run([sys.executable, str(script), "--kills", "3", "--searchers", "mcmc",
                          "random", "nsga2", "--graph", "pipedream:alexnet", "--budget", "1500",
                          "--json", "-"], capture_output=True, text=True, timeout=600)
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["failed"] == 0, out.stderr
    assert len(report["rows"]) == 3
    for row in report["rows"]:
        assert row["counted_once"] and row["identical"] and 0 <= row["lost"] <= 500, row
