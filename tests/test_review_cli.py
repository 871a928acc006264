"""The review commands: `moplace runs / show / plot`, outputs checked before the work, and
`evaluate --point` naming the point it used."""

import json

import pytest

from moplace.cli import main
from moplace.review.figures import FILES

GRAPH = ["pipedream:alexnet", "--cluster", "4xV100-NVLink"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding two searches (figures drawn inline, so they are there), and the
    front.json of the first."""
    tmp = tmp_path_factory.mktemp("review")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    ids = []
    for searcher, graph, figures in (("random", "pipedream:alexnet", "inline"),
                                     ("heft", "pipedream:gnmt", "off")):
        ids.append(_search(graph, searcher, uri, tmp / searcher, figures))
    return tmp, uri, ids


def _search(graph, searcher, uri, out, figures):
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):  # inline: the figures are there when it returns
        assert main(["search", graph, "--cluster", "4xV100-NVLink", "--searcher", searcher,
                     "--budget", "30", "--tracking-uri", uri, "--out", str(out), "--json",
                     "--figures", figures, "--seed", "1"]) == 0
    # (seed 1: random's 30 draws on alexnet put front points inside the reference box, so the
    # listing has a hypervolume above 0 to show; seed 0's all fall outside it)
    return json.loads(buffer.getvalue())["mlflow_run_id"]


def test_runs_lists_every_search_with_its_key_figures(store, capsys):
    tmp, uri, ids = store
    assert main(["runs", "--tracking-uri", uri, "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["run_id"] for r in runs] == ids[::-1]  # newest first
    by = {r["searcher"]: r for r in runs}
    assert by["random"]["evaluations"] == 30 and by["heft"]["evaluations"] == 1
    assert by["random"]["status"] == "finished" and by["random"]["figures"].startswith("ready")
    assert by["heft"]["figures"] == "off"
    assert 0 < by["random"]["best"]["runtime"] < 10 and by["random"]["hypervolume"] > 0
    assert main(["runs", "--tracking-uri", uri, "--graph", "gnmt", "--json"]) == 0
    assert [r["searcher"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["heft"]
    assert main(["runs", "--tracking-uri", uri]) == 0
    text = capsys.readouterr().out
    assert ids[0][:8] in text and "best runtime (ms)" in text and "evaluations" in text


def test_show_prints_the_front_and_its_figures(store, capsys):
    tmp, uri, ids = store
    assert main(["show", ids[0][:10], "--tracking-uri", uri, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    front = json.loads((tmp / "random" / "front.json").read_text())
    assert [p["runtime_s"] for p in shown["front"]] == [p["runtime_s"] for p in front["points"]]
    assert sorted(f.rsplit("/", 1)[1] for f in shown["figure_files"]) == sorted(FILES)
    assert main(["show", ids[0], "--tracking-uri", uri, "--point", "0"]) == 0
    assert "point 0" in capsys.readouterr().out


def test_a_runs_front_is_saved_and_answers_questions(store, capsys, tmp_path):
    """`show RUN --save` writes the run's front as a front.json (issue 34) that evaluate,
    plot and show take, and `show RUN --where/--best` answers on the run's front."""
    _, uri, ids = store
    saved = tmp_path / "saved" / "front.json"
    assert main(["show", ids[0][:8], "--tracking-uri", uri, "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {saved}" in out
    assert f"moplace evaluate {saved} --point " in out  # the file records graph and cluster
    assert main(["show", ids[0][:8], "--tracking-uri", uri, "--save", str(saved)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert main([*["evaluate", *GRAPH], "--strategy", str(saved), "--point", "0", "--json"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert main(["evaluate", str(saved), "--point", "0", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert (alone["graph"], alone["cluster"], alone["runtime_s"]) == \
        (given["graph"], given["cluster"], given["runtime_s"])
    assert main(["show", ids[0][:8], "--tracking-uri", uri, "--best", "runtime"]) == 0
    out = capsys.readouterr().out
    assert "least runtime" in out and f"moplace show {ids[0][:8]} --save front.json" in out


@pytest.mark.parametrize("run_id, message", [
    ("zzzzzzzz", "is not a run id"), ("abc", "is not a run id"),
    ("0123456789abcdef0123456789abcdef", "no MLflow run"), ("abcdef", "no MLflow run starts")])
def test_show_refuses_unknown_runs(store, capsys, run_id, message):
    _, uri, _ = store
    assert main(["show", run_id, "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_reading_a_store_that_is_not_there_says_so(tmp_path, capsys):
    assert main(["runs", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "no MLflow store" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()


def test_plot_draws_again_from_a_run_or_a_file_and_never_overwrites(store, tmp_path, capsys):
    tmp, uri, ids = store
    assert main(["plot", ids[0], "--tracking-uri", uri, "--out", str(tmp_path / "a")]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(FILES)
    front = str(tmp / "random" / "front.json")
    assert main(["plot", front, "--out", str(tmp_path / "b"), "--point", "0"]) == 0
    assert (tmp_path / "b" / "gantt.png").stat().st_size > 10_000
    capsys.readouterr()
    assert main(["plot", front, "--out", str(tmp_path / "b")]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert main(["plot", front, "--out", str(tmp_path / "b"), "--force"]) == 0


def test_search_checks_its_output_before_searching(tmp_path, capsys):
    (tmp_path / "front.json").write_text("{}")
    args = ["search", *GRAPH, "--searcher", "random", "--budget", "5", "--no-mlflow"]
    assert main(args + ["--out", str(tmp_path)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert (tmp_path / "front.json").read_text() == "{}"
    assert main(args + ["--out", "/proc/nope"]) == 2
    assert "cannot write there" in capsys.readouterr().err
    assert main(args + ["--out", str(tmp_path), "--force", "--json"]) == 0
    assert json.loads((tmp_path / "front.json").read_text())["evaluations"] == 5


def test_evaluate_names_the_point_it_used(store, capsys):
    tmp, _, _ = store
    front = str(tmp / "random" / "front.json")
    assert main(["evaluate", *GRAPH, "--strategy", front, "--point", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["point"] == 0 and out["strategy"].endswith("front.json point 0")
