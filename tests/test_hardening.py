"""Bad arguments give one clear line, heuristics never return a plan slower than a plain
baseline, and every --json output and JSON file is strict JSON."""

import json
import re

import pytest

from moplace.cli import main
from moplace.errors import MoplaceError
from moplace import load_cluster, load_graph
from moplace.optimize.plugins import make_searcher
from moplace.optimize.problem import Problem


def strict(text):
    def refuse(token):
        raise ValueError(f"non-strict JSON token {token}")
    return json.loads(text, parse_constant=refuse)


SEARCH = ["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--budget", "8",
          "--no-mlflow", "--quiet", "--force"]


@pytest.mark.parametrize("extra, message", [
    (["--searcher", "nsga2", "--set", "pop_size=abc"], "setting pop_size of searcher 'nsga2' must be int"),
    (["--searcher", "nsga2", "--set", "pop_size=1e400"], "must be int (numbers finite"),
    (["--searcher", "nsga2", "--set", "pop_size=" + "1" + "0" * 40], "must be int"),
    (["--searcher", "nsga2", "--set", "seed_heuristics=abc"], "seed_heuristics of searcher 'nsga2' must be bool"),
    (["--searcher", "nsga2", "--set", "pop_size=-3"], "pop_size must be at least 2"),
    (["--searcher", "mcmc", "--set", "move_weights=[1,2]"], "must be three or four"),
    (["--searcher", "optuna-tpe", "--set", "storage=foo://bar"], "storage 'foo://bar' cannot be opened"),
    (["--searcher", "optuna-tpe", "--set", "storage=nowhere"], "neither a database URL"),
    (["--searcher", "random", "--seed", "-1"], "argument --seed: must be from 0 to"),
    (["--searcher", "random", "--budget", "1" + "0" * 5000], "argument --budget: must be a whole"),
    (["--searcher", "random", "--checkpoint", "/proc/nope/x.ckpt"], "cannot write checkpoint"),
])
def test_a_bad_argument_is_one_clear_line(tmp_path, capsys, extra, message):
    try:
        code = main(SEARCH + ["--out", str(tmp_path / "out")] + extra)
    except SystemExit as exc:  # argparse refused it
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert re.match(r"moplace( search)?: error: ", err) and message in err and "\n" not in err, err


@pytest.mark.parametrize("value, expected", [("50", 50), ("5e1", 50), ("50.0", 50)])
def test_settings_take_their_declared_type(value, expected):
    assert make_searcher("nsga2", pop_size=value).config.pop_size == expected
    assert make_searcher("nsga2", seed_heuristics="no").settings()["seed_heuristics"] is False
    searcher = make_searcher("mcmc", move_weights="0.5,0.25,0.25", restarts="best")
    assert searcher.config.move_weights == (0.5, 0.25, 0.25) and searcher.config.restarts == ("best",)
    with pytest.raises(MoplaceError, match="must be float"):
        make_searcher("mcmc", temperature=float("nan"))


@pytest.mark.parametrize("name", ["heft", "dpos", "m-etf"])
def test_a_list_schedule_slower_than_a_plain_baseline_falls_back_to_it(name):
    from moplace.optimize.driver import search

    # gnmt on 4 V100s: every candidate schedule of the three is slower than the layer split
    gnmt = Problem(load_graph("pipedream:gnmt"), load_cluster("4xV100-NVLink"))
    searcher = make_searcher(name)
    result = search(gnmt, searcher, budget=1)
    layers = gnmt.baselines["layer-split"].values[0]
    assert searcher.fell_back == "layer-split" and result.front[0].values[0] == layers
    assert "slower" in searcher.notes()[0] and "returned layer-split instead" in searcher.notes()[0]


@pytest.mark.parametrize("name", ["heft", "dpos", "m-etf"])
def test_a_model_that_fits_one_gpu_by_liveness_gets_it(vgg, name):
    from moplace.optimize.driver import search

    # vgg16 pins 29 GiB statically but peaks at 15.4 GiB on one 16 GB V100: the unbounded or
    # liveness candidate runs it there, as fast as the single baseline, where the static
    # model's schedule took two GPUs and 724.8 ms
    searcher = make_searcher(name)
    result = search(vgg, searcher, budget=1)
    assert searcher.fell_back is None and result.front[0].evaluation.feasible
    assert result.front[0].values[0] == pytest.approx(vgg.baselines["single"].values[0], rel=1e-12)
    assert searcher.candidate != "static memory, grouped"
    assert searcher.candidate in searcher.notes()[0]


def test_the_fallback_is_said_on_the_command_line(tmp_path, capsys):
    args = ["search", "pipedream:gnmt", "--cluster", "4xV100-NVLink", "--searcher", "dpos",
            "--no-mlflow", "--quiet", "--out", str(tmp_path)]
    assert main(args + ["--json"]) == 0
    out = strict(capsys.readouterr().out)
    assert out["notes"] and "returned layer-split instead" in out["notes"][0]
    assert strict((tmp_path / "front.json").read_text())["notes"] == out["notes"]
    assert main(args + ["--force"]) == 0
    assert "note: dpos's schedule is slower" in capsys.readouterr().out


def test_json_out_is_strict():
    import numpy as np

    from moplace import strictjson

    value = {"a": float("inf"), "b": np.float64("nan"), "c": np.arange(2), "d": (1.5, -np.inf),
             "e": [{"f": np.int64(3)}]}
    text = strictjson.dumps(value)
    assert strict(text) == {"a": None, "b": None, "c": [0, 1], "d": [1.5, None], "e": [{"f": 3}]}


@pytest.mark.parametrize("argv", [["profile", "mlp", "--batch", "2", "-o", "x.json"],
                                  # a graph that is not a PyTorch one (those need torch)
                                  ["apply", "pipedream:alexnet", "--baseline", "single",
                                   "--steps", "1"]])
def test_the_tensorflow_commands_say_how_to_install_it(monkeypatch, capsys, argv):
    import sys

    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if it were not installed
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs TensorFlow" in err and "pip install 'moplace[tf]'" in err
    # the zoo's names are listed without it (issue 48): profiling them is what needs it
    assert main(["zoo"]) == 0 and "resnet50" in capsys.readouterr().out.split()


# -- malformed files: one line naming the file, exit 2, never a traceback ------------------------
#: a 4,817-digit integer: TOML reads hexadecimal of any length, and str() of it raises
#: (Python's 4,300-digit limit on int-to-decimal conversion)
BIG_HEX = "0x" + "f" * 4000
SERVER = "[[servers]]\ncount = {count}\nkind = \"V100\"\nmemory = {memory}\n"
ONE_SERVER = SERVER.format(count=1, memory='"16GiB"')
TWO_GPUS = (SERVER.format(count=2, memory='"16GiB"')
            + "[servers.interconnect]\nbandwidth = \"1GB/s\"\nlatency = 0\nlabel = {label}\n")


def _graph_json(op=None, **top):
    doc = {"format": "moplace-graph", "version": 1, "ops": [op or {"name": "a"}], "edges": []}
    doc.update(top)
    return json.dumps(doc)


MALFORMED = [
    # (id, file name, text, CLI arguments reading it, words the one error line holds)
    ("toml arrays nested 1,000 deep", "c.toml", "name = " + "[" * 1000 + "]" * 1000 + "\n",
     "cluster", ["nested more than 100 deep", "line 1"]),
    ("toml inline tables nested 1,000 deep", "c.toml",
     ONE_SERVER + "speed = " + "{a = " * 1000 + "1" + "}" * 1000 + "\n",
     "cluster", ["nested more than 100 deep", "line 5"]),
    ("toml 5,000-digit count", "c.toml", SERVER.format(count="1" * 5000, memory='"16GiB"'),
     "cluster", ["line 2", "integer of 5000 digits"]),
    ("toml 5,000-digit memory", "c.toml", SERVER.format(count=1, memory="9" * 5000),
     "cluster", ["line 4", "integer of 5000 digits"]),
    ("toml 4,817-digit memory in an array", "c.toml", SERVER.format(count=1, memory=f"[{BIG_HEX}]"),
     "cluster", ["servers[0].memory", "4817-digit"]),
    ("toml 4,817-digit speed in an array", "c.toml", ONE_SERVER + f"speed = [1, {BIG_HEX}]\n",
     "cluster", ["servers[0].speed", "4817-digit"]),
    ("toml 4,817-digit label", "c.toml", TWO_GPUS.format(label=f"[{BIG_HEX}]"),
     "cluster", ["interconnect.label", "4817-digit"]),
    ("toml 4,817-digit name", "c.toml", f"name = {{x = {BIG_HEX}}}\n" + ONE_SERVER,
     "cluster", ["field 'name'", "4817-digit"]),
    ("json 5,000-digit number", "g.json", _graph_json(version=1).replace('"version": 1',
                                                                        '"version": ' + "7" * 5000),
     "graph", ["line 1", "integer of 5000 digits"]),
    ("json 5,000-digit part count", "g.json",
     _graph_json({"name": "a", "part_compute": {"1" * 5000: {"cpu": 1.0}}}),
     "graph", ["ops[0].part_compute", "part counts"]),
    ("json arrays nested 100,000 deep", "g.json", "[" * 100_000 + "]" * 100_000,
     "graph", ["nested too deeply"]),
    ("json op type nested 900 deep", "g.json",
     _graph_json({"name": "a", "type": json.loads("[" * 900 + "]" * 900)}),
     "graph", ["ops[0].type", "[[[["]),
    ("json a megabyte of op type", "g.json", _graph_json({"name": "a", "type": [[1, 2]] * 200_000}),
     "graph", ["ops[0].type", "[[1, 2], [1, 2]"]),
    ("json a megabyte of role", "g.json", _graph_json({"name": "a", "role": "x" * 1_000_000}),
     "graph", ["ops[0].role", "xxx..."]),
    ("json metadata nested 900 deep", "g.json",
     _graph_json(metadata={"notes": json.loads("[" * 900 + "]" * 900)}),
     "graph", ["field 'metadata.notes'", "nested"]),
]


def _argv(kind, path):
    if kind == "cluster":
        return ["evaluate", "pipedream:alexnet", "--cluster", str(path), "--baseline", "single"]
    return ["evaluate", str(path), "--cluster", "1xV100", "--baseline", "single", "--json"]


@pytest.mark.parametrize("name, text, kind, words", [m[:1] + m[2:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_a_malformed_file_is_one_clear_line(tmp_path, capsys, name, text, kind, words):
    filename = next(m[1] for m in MALFORMED if m[0] == name)
    path = tmp_path / filename
    path.write_text(text)
    code = main(_argv(kind, path))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"moplace: error: {path}") and err.count("\n") == 1, err[:2000]
    assert len(err) < 500 and "Traceback" not in err, err[:2000]
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("name", ["toml arrays nested 1,000 deep", "toml 5,000-digit count",
                                  "json 5,000-digit part count"])
def test_a_malformed_file_is_one_clear_line_from_the_command(tmp_path, name):
    """The same through the installed entry point: stderr is the one line, exit status 2."""
    import subprocess
    import sys

    _, filename, text, kind, words = next(m for m in MALFORMED if m[0] == name)
    path = tmp_path / filename
    path.write_text(text)
    out = subprocess.run([sys.executable, "-m", "moplace", *_argv(kind, path)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.startswith(f"moplace: error: {path}") and out.stderr.count("\n") == 1
    assert "Traceback" not in out.stderr and words[0] in out.stderr


@pytest.mark.parametrize("value, expected", [
    (10**5000, "a 5001-digit integer"),
    (-(10**5000), "a 5001-digit integer"),
    ([1, 10**5000], "[1, a 5001-digit integer]"),
    ({"k": (10**4400,)}, "{'k': (a 4401-digit integer,)}"),
    (12345, "12345"),
    ("abc", "'abc'"),
    (True, "True"),
    ([[[[]]]], "[[[[]]]]"),
], ids=["huge", "huge-negative", "huge-in-list", "huge-in-dict", "int", "str", "bool", "nested"])
def test_shown_renders_any_value_in_one_short_line(value, expected):
    from moplace.errors import shown

    assert shown(value) == expected


def test_shown_cuts_deep_and_long_values():
    from moplace.errors import shown

    deep = []
    for _ in range(100_000):  # repr() of this raises RecursionError
        deep = [deep]
    assert shown(deep).startswith("[[[[") and len(shown(deep)) <= 60
    assert len(shown("x" * 10**6)) <= 60 and len(shown([[1, 2]] * 10**5)) <= 60
    assert shown(list(range(100)), width=20) == "[0, 1, 2, 3, 4, 5..."

    class Odd:
        def __repr__(self):
            raise ValueError("no repr")

    assert shown(Odd()) == "<a Odd>"


def test_toml_depth_is_judged_outside_strings_and_comments(monkeypatch):
    from moplace.errors import FormatError, parse_toml

    shallow = "a = [" + "[1], " * 150 + "]\n" + 'b = "' + "[" * 200 + '"\n# ' + "{" * 200 + "\n"
    assert len(parse_toml(shallow, "x.toml")["a"]) == 150 and parse_toml(shallow, "x")["b"]
    deep = "a = 1\nb = " + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(FormatError, match=r"x.toml, line 2: .* nested more than 100 deep"):
        parse_toml(deep, "x.toml")
    # past the check (were it to misjudge a file), tomllib's RecursionError is still one line
    monkeypatch.setattr("moplace.errors.MAX_TOML_DEPTH", 10**6)
    with pytest.raises(FormatError, match=r"x.toml, line 2: malformed TOML: .* nested too deeply"):
        parse_toml(deep, "x.toml")


@pytest.mark.parametrize("case", ["graph", "argument"])
def test_a_value_quoted_whole_in_an_error_is_cut_to_one_short_line(tmp_path, capsys, case):
    """A message that quotes a value whole (a node name of 5,000 characters in a PipeDream
    graph, an unknown argument as long) is cut at MAX_ERROR_LINE, its place kept first (seen by
    the slow fuzz: error lines of 5,061 and 5,154 characters)."""
    from moplace.errors import MAX_ERROR_LINE

    long = "node1" + "0" * 5000
    if case == "graph":
        path = tmp_path / "graph.txt"
        path.write_text("node1 -- Input -- forward_compute_time=1.0, backward_compute_time=1.0, "
                        "activation_size=1.0, parameter_size=0.0\n"
                        f"\tnode1 -- {long}\n")
        argv = ["evaluate", str(path), "--cluster", "4xV100-NVLink", "--baseline", "single"]
    else:
        argv = ["evaluate", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--baseline",
                "single", "x" * 5000]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("moplace") and ": error:" in err
    assert len(err) < MAX_ERROR_LINE + 80
    if case == "graph":  # the importer shows the name short
        assert "graph.txt, line 2: edge names unknown node" in err
    else:  # argparse quotes it whole: the line is cut
        assert "more characters" in err


def test_a_damaged_mlflow_store_is_one_clear_line(tmp_path, capsys):
    """A store file that is not a database (or one whose making was killed part-way: the
    fuzz met "table _alembic_tmp_experiments already exists") was a traceback."""
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"not an SQLite database\n" * 64)
    code = main(["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher",
                 "random", "--budget", "4", "--quiet", "--out", str(tmp_path / "out"),
                 "--tracking-uri", f"sqlite:///{db}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"MLflow store sqlite:///{db} cannot be opened" in err and "remove the file" in err


def test_sweep_returns_nested_in_a_list_are_one_clear_line(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text('[sweep]\nname = "s"\nreturns = [["hypervolume"]]\n[fixed]\n'
                    'graph = "pipedream:alexnet"\ncluster = "4xV100-NVLink"\n'
                    'searcher = "random"\nbudget = 4\n[space]\nseed = [0, 1]\n')
    assert main(["sweep", str(path), "--check", "--no-mlflow"]) == 2
    err = capsys.readouterr().err
    assert "[sweep] returns: must be one or more of" in err and err.count("\n") == 1, err
