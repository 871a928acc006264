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
    (["--searcher", "mcmc", "--set", "move_weights=[1,2]"], "must be tuple[float, float, float]"),
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
    assert make_searcher("nsga2", pop_size=value).pop_size == expected
    assert make_searcher("nsga2", seed_heuristics="no").settings()["seed_heuristics"] is False
    searcher = make_searcher("mcmc", move_weights="0.5,0.25,0.25", restarts="best")
    assert searcher.move_weights == (0.5, 0.25, 0.25) and searcher.restart_kinds == ("best",)
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


@pytest.mark.parametrize("argv", [["zoo"], ["profile", "mlp", "--batch", "2", "-o", "x.json"],
                                  ["apply", "g.json", "--baseline", "single", "--steps", "1"]])
def test_the_tensorflow_commands_say_how_to_install_it(monkeypatch, capsys, argv):
    import sys

    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if it were not installed
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs TensorFlow" in err and "pip install 'moplace[tf]'" in err
