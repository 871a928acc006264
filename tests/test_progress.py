"""Progress of long commands: a live bar on a terminal, plain lines otherwise, nothing with
--quiet."""

import io
import re

from moplace.cli import main
from moplace.cli.progress import Display
from moplace.optimize.driver import search
from moplace.optimize.plugins import make_searcher

ARGS = ["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher", "random",
        "--budget", "64", "--no-mlflow", "--force"]


def test_plain_lines_when_stderr_is_not_a_terminal(tmp_path, capsys):
    assert main(ARGS + ["--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("  random: finished, 64/64 evaluations in ")
    assert "HV 0." in last and " ms" in last and "iB" in last


def test_quiet_is_quiet(tmp_path, capsys):
    assert main(ARGS + ["--out", str(tmp_path), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_a_live_display_shows_budget_time_and_best_values(vgg):
    stream = io.StringIO()
    with Display("live", stream=stream, width=200) as display:
        search(vgg, make_searcher("random"), budget=48, seed=0,
               callbacks=[display.search("random on vgg16")])
    text = stream.getvalue()
    assert "random on vgg16" in text and "48/48" in text
    assert "finished: 48 evals" in text and "runtime" in text and "mem" in text
    assert re.search(r"elapsed \d:\d\d:\d\d, left 0:00:00", text)  # issue 34's wording


def test_a_ticker_reports_every_stage_and_its_units_up_to_the_total():
    from moplace.progress import Ticker

    reports = []
    t = Ticker(lambda *r: reports.append(r), 10, every=4)
    t.stage("a")
    for _ in range(10):
        t.tick()
    t.prefix = "b: "
    t.stage("c")
    assert reports == [("a", 0, 10), ("a", 4, 10), ("a", 8, 10), ("a", 10, 10), ("b: c", 10, 10)]
    Ticker(None, 3).tick()  # no report function: counts, reports nothing


def test_a_job_shows_its_stage_live_or_as_plain_lines():
    stream = io.StringIO()
    with Display("live", stream=stream, width=120) as display:
        job = display.job("profile mlp")
        for k in range(4):
            job("timed steps", k, 3)
    text = stream.getvalue()
    assert "profile mlp" in text and "3/3" in text and "timed steps" in text
    stream = io.StringIO()
    with Display("plain", stream=stream) as display:
        job = display.job("apply")
        job("warm-up", 0, 4)
        job("warm-up", 1, 4)  # same stage, too soon: no line
        job("timed", 2, 4)
        job("timed", 4, 4)  # the end always gets a line
    assert stream.getvalue().splitlines() == ["  apply: warm-up (0/4)", "  apply: timed (2/4)",
                                              "  apply: timed (4/4)"]
    stream = io.StringIO()
    with Display("quiet", stream=stream) as display:
        display.job("x")("y", 1, 1)
    assert stream.getvalue() == ""


def test_an_exact_front_reports_its_candidates():
    from moplace.optimize.exact import enumeration_size, exact_front
    from moplace.optimize.tiny import tiny_instance

    problem = tiny_instance(0, 0, n_devices=2, n_ops=5)
    reports = []
    front = exact_front(problem, progress=lambda *r: reports.append(r))
    total = enumeration_size(problem)
    done = [d for _, d, _ in reports]
    assert done == sorted(done) and done[-1] == total and {t for *_, t in reports} == {total}
    assert front.n_orders == total and reports[0][0].startswith("enumerating ")


def test_counts_and_times_are_never_cut_at_120_columns():
    status = "12345 evals  HV 0.7441  " + "runtime 140.6 ms  comm 1.546 GiB  " * 4
    for width in (120, 100, 80):
        stream = io.StringIO()
        with Display("live", stream=stream, width=width) as display:
            p = display.progress
            for label, done, total in (("nsga2 on pipedream:resnet50", 12345, 20000),
                                       ("heft", 5, 48)):
                task = p.add_task(label, total=total, status="x")
                p.update(task, completed=done, status=status)
        lines = [line.rstrip() for line in stream.getvalue().splitlines() if line.strip()]
        assert len(lines) == 2 and all(len(line) <= width for line in lines), (width, lines)
        assert "12345/20000  elapsed 0:00:" in lines[0] and ", left " in lines[0]
        assert " 5/48  elapsed 0:00:" in lines[1]
        assert lines[0].endswith("…") or "evals" not in lines[0]  # the status gave way
        if width == 120:
            assert "nsga2 on pipedream:resnet50" in lines[0] and "HV 0.7441" in lines[0]


def test_the_first_seconds_are_named(tmp_path, capsys, monkeypatch):
    from moplace.cli import progress
    from moplace.simulator import engine

    assert main(ARGS + ["--out", str(tmp_path)]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first == "  random: setting up: seed strategies and the first batch"
    assert engine.compiled_on_disk()  # the search above ran the event loop: it is cached
    # with numba's cache of the event loop gone, the first seconds compile it
    cache_file = engine.simulate_core._cache._cache_file
    monkeypatch.setattr(cache_file, "_index_path", str(tmp_path / "none.nbi"))
    assert not engine.compiled_on_disk()
    assert progress.first_seconds().startswith("compiling the simulator (first run after ")
