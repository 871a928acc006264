"""Progress of long commands: a live bar on a terminal, plain lines otherwise, nothing with
--quiet."""

import io

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
