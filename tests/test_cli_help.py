"""The command line a new user meets (issue 34): `moplace --help` with a line per command and
examples, help for every option, and "did you mean" for a mistyped name."""

from __future__ import annotations

import pytest

from moplace.cli import _parser, main


def test_the_top_help_lists_each_command_with_examples(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and "examples:" in out
    commands = _parser()._subparsers._group_actions[0].choices
    lines = out.splitlines()
    starts = set()
    for name in commands:  # each command on a line of its own, its help beside it in one column
        line = next(line for line in lines if line.strip().split(" ")[0] == name)
        assert len(line.split()) > 1, name
        starts.add(line.index(line.split()[1], line.index(name) + len(name)))
    assert len(starts) == 1
    assert "moplace show vgg16/front.json --where" in out


@pytest.mark.parametrize("command, option", [("search", "--seed"), ("compare", "--seed"),
                                             ("ui", "--port"), ("ui", "--host")])
def test_every_option_says_what_it_does(capsys, command, option):
    sub = _parser()._subparsers._group_actions[0].choices[command]
    action = next(a for a in sub._actions if option in a.option_strings)
    assert action.help and len(action.help) > 10


@pytest.mark.parametrize("argv, hint", [
    (["evaluate", "pipedream:resnt50", "--cluster", "4xV100-NVLink", "--baseline", "single"],
     "did you mean 'pipedream:resnet50'"),
    (["evaluate", "vgg16", "--cluster", "4xV100-NVLink", "--baseline", "single"],
     "did you mean 'pipedream:vgg16'?"),
    (["evaluate", "pipedream:vgg16", "--cluster", "8xV100-16GB-NVLnk", "--baseline", "single"],
     "did you mean '8xV100-16GB-NVLink'"),
    (["evaluate", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--baseline", "singel"],
     "did you mean 'single'?"),
    (["search", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--searcher", "nsga",
      "--no-mlflow"], "did you mean 'nsga2'"),
    (["search", "pipedream:vgg16", "--cluster", "4xV100-NVLink", "--searcher", "nsga2",
      "--set", "pop_sze=10", "--no-mlflow"], "did you mean 'pop_size'?"),
])
def test_a_mistyped_name_gets_a_suggestion(tmp_path, monkeypatch, capsys, argv, hint):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert hint in err and len(err.splitlines()) == 1
    assert "pipedream:squeezenet1_0" not in err  # one name, not the whole catalogue


def test_graphs_show_batch_and_precision(capsys):
    """ResNet-50's profile is batch 128 in FP32 (its input: 128 x 3 x 224 x 224 x 4 bytes);
    Inception-v3's crops are 299 x 299; where the source shows neither, "unknown"."""
    assert main(["graphs"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]
            if line}
    assert rows["pipedream:resnet50"][4:6] == ["128", "FP32"]
    assert rows["pipedream:inception_v3"][4:6] == ["128", "FP32"]
    assert rows["pipedream:resnet101"][4] == "64" and rows["pipedream:gnmt"][4] == "unknown"
    assert rows["dnn:LayerGraphs/gnmt_training"][4:6] == ["unknown", "unknown"]


def test_where_and_memory_limit_each_say_which_one_bounds_the_search():
    choices = _parser()._subparsers._group_actions[0].choices

    def help_of(command, option):
        return next(a.help for a in choices[command]._actions if option in a.option_strings)

    assert "bounds the search itself" in help_of("search", "--memory-limit")
    assert "filters a front after the search" in help_of("search", "--memory-limit")
    assert "filters the front after the search" in help_of("show", "--where")
    assert "--memory-limit` bounds the search itself" in help_of("show", "--where")
