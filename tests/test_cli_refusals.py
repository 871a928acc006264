"""Refused commands (issue 48, defect 9): a cluster name that is no preset suggests the presets
of its words or device kind (``8xH100``: the two H100 presets, not ``1xV100``); lists in an
error name whole names, never cut mid-word; and a refused command leaves no folder of its own
behind."""

from __future__ import annotations

import pytest

from moplace.cli import main
from moplace.errors import MAX_ERROR_LINE, error_line, names_within


def run(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name, suggested", [
    ("8xH100", "(did you mean '8xH100-80GB-NVLink' or '2x8xH100-80GB-8xIB400'?)"),
    ("16xh100", "(did you mean '8xH100-80GB-NVLink' or '2x8xH100-80GB-8xIB400'?)"),
    ("8xV100", "(did you mean '8xV100-16GB-NVLink'?)"),
    ("8xB200-NVLink", "(did you mean '8xB200-180GB-NVLink'?)"),
    ("8xV100-16GB-NVLnk", "(did you mean '8xV100-16GB-NVLink' or"),
])
def test_a_cluster_that_is_no_preset_suggests_those_of_its_kind(capsys, name, suggested):
    code, out, err = run(capsys, ["evaluate", "pipedream:alexnet", "--cluster", name,
                                  "--baseline", "single"])
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert f"unknown cluster preset '{name}' {suggested}" in err
    assert "1xV100'?" not in err and "more characters" not in err
    listed = err.split("presets are: ")[1].split(" (`moplace clusters`")[0]
    from moplace.core.presets import list_presets

    names = listed.replace(" and ", ", ").split(", ")
    assert names[:-1] == list_presets()[:len(names) - 1]  # whole names, in order
    assert names[-1] == f"{len(list_presets()) - len(names) + 1} more" or listed.endswith(
        list_presets()[-1])


def test_no_error_line_is_cut_mid_word():
    words = " ".join(f"name{k:03d}" for k in range(200))
    line = error_line(Exception(words))
    assert len(line) <= MAX_ERROR_LINE
    kept = line.split("... (")[0].split()
    assert kept == words.split()[:len(kept)] and line.endswith("more characters)")
    assert names_within(["alpha", "beta", "gamma"], 100) == "alpha, beta, gamma"
    assert names_within(["alpha", "beta", "gamma"], 20) == "alpha and 2 more"


@pytest.mark.parametrize("argv", [
    ["search", "pipedream:alexnet", "--cluster", "8xH100", "--searcher", "random"],
    ["search", "pipedream:nosuch", "--cluster", "4xV100-NVLink", "--searcher", "random"],
    ["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher", "nosuch"],
    ["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher", "random",
     "--memory-limit", "1MB"],
    ["compare", "pipedream:alexnet", "--cluster", "8xH100", "--searchers", "random"],
])
def test_a_refused_command_leaves_no_output_folder(capsys, tmp_path, argv):
    out = tmp_path / "new" / "deeper"
    code, _, err = run(capsys, argv + ["--budget", "5", "--no-mlflow", "--quiet", "--out", out])
    assert code == 2 and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
    # a folder that was there stays, and so does a folder the command made and wrote into
    (tmp_path / "kept").mkdir()
    code, _, _ = run(capsys, argv + ["--budget", "5", "--no-mlflow", "--quiet", "--out",
                                     tmp_path / "kept"])
    assert code == 2 and (tmp_path / "kept").is_dir()
    code, _, _ = run(capsys, ["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink",
                              "--searcher", "random", "--budget", "5", "--no-mlflow",
                              "--quiet", "--figures", "off", "--out", out])
    assert code == 0 and (out / "front.json").is_file()
