"""profile -> search -> apply through the command line, as a user runs it (issue 30, section 3).

A front searched on the cluster file `moplace profile` writes names that file's devices; `moplace
apply` must read it against the same names, on the devices it runs on. Every command runs in
the test's own temporary folder.
"""

import json

import pytest

from moplace.cli import main
from moplace.core.presets import load_cluster


def moplace(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, f"moplace {' '.join(map(str, argv))} -> {code}:\n{err[-2000:]}"
    return out


def profile_search_apply(tmp_path, monkeypatch, capsys, where):
    monkeypatch.chdir(tmp_path)
    moplace(capsys, "profile", "mlp", "--batch", 4, *where, "--steps", 2, "--quiet", "-o", "g.json")
    cluster = load_cluster("g.cluster.toml")
    names = [d.name for d in cluster.devices]
    assert len(names) == 2
    moplace(capsys, "search", "g.json", "--cluster", "g.cluster.toml", "--searcher", "data-parallel",
            "--no-mlflow", "--quiet", "--figures", "off", "--out", ".")
    front = json.loads((tmp_path / "front.json").read_text())
    strategy = front["points"][0]["strategy"]
    # the front names the cluster file's devices, and splits ops over both
    assert set(strategy["placement"].values()) <= set(names)
    assert strategy["splits"] and all(s["devices"] == names for s in strategy["splits"].values())
    result = json.loads(moplace(capsys, "apply", "g.json", "--strategy", "front.json", "--point", 0,
                                "--steps", 2, "--json"))
    assert result["expressible"] and result["trained"], result
    assert len(result["devices"]) == 2 and result["measured_step_s"] > 0
    return result


def test_a_front_searched_on_the_profiled_cluster_file_applies(tmp_path, monkeypatch, capsys):
    profile_search_apply(tmp_path, monkeypatch, capsys, ["--device-count", 2])
    # with the cluster file named, and for a graph that does not record its devices' names
    # (profiled before they were recorded): the names any cluster file gives two devices
    result = json.loads(moplace(capsys, "apply", "g.json", "--strategy", "front.json", "--point", 0,
                                "--cluster", "g.cluster.toml", "--steps", 2, "--json"))
    assert result["expressible"] and result["trained"]
    # the front alone: the graph and cluster file it records (issue 34)
    result = json.loads(moplace(capsys, "apply", "front.json", "--point", 0, "--steps", 2,
                                "--json"))
    assert result["expressible"] and result["trained"] and result["strategy"] == \
        "front.json point 0"
    evaluated = json.loads(moplace(capsys, "evaluate", "front.json", "--point", 0, "--json"))
    assert evaluated["cluster"] == load_cluster("g.cluster.toml").name
    graph = json.loads((tmp_path / "g.json").read_text())
    assert graph["metadata"]["measured"]["device_names"] == ["gpu0", "gpu1"]
    del graph["metadata"]["measured"]["device_names"]
    (tmp_path / "old.json").write_text(json.dumps(graph))
    result = json.loads(moplace(capsys, "apply", "old.json", "--strategy", "front.json", "--point",
                                0, "--steps", 2, "--json"))
    assert result["expressible"] and result["trained"]


def test_a_strategy_naming_devices_apply_lacks_is_refused_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    moplace(capsys, "profile", "mlp", "--batch", 4, "--device-count", 2, "--steps", 2, "--quiet",
            "-o", "g.json")
    graph = json.loads((tmp_path / "g.json").read_text())
    ops = [op["name"] for op in graph["ops"]]
    (tmp_path / "s.json").write_text(json.dumps({"placement": {op: "gpu2" for op in ops}}))
    assert main(["apply", "g.json", "--strategy", "s.json", "--steps", "1"]) == 2
    assert "unknown device 'gpu2' (devices: gpu0, gpu1)" in capsys.readouterr().err


@pytest.mark.slow  # two TensorFlow worker processes for profile and again for apply: ~100 s here
def test_a_front_searched_on_the_testbeds_cluster_file_applies_on_the_testbed(tmp_path, monkeypatch,
                                                                              capsys):
    result = profile_search_apply(tmp_path, monkeypatch, capsys, ["--testbed", 2])
    assert result["testbed"] == 2
    assert all("/job:worker/" in d for d in result["devices"])
