"""Results computed on op times nobody measured say so (issue 34): roofline estimates a graph
records (`moplace profile --estimate`) and another kind's times scaled by relative speed."""

import json

from moplace.cli import main
from moplace.core.graph import Op, OpGraph
from moplace.core.presets import load_cluster
from moplace.costs.origin import estimated_notes


def graph(kinds, estimated=None):
    ops = [Op("a", compute={k: 1e-3 for k in kinds}, output_bytes=10),
           Op("b", compute={k: 2e-3 for k in kinds})]
    meta = {"profiled_on": kinds[0]}
    if estimated:
        meta["estimated"] = {k: "roofline from op shapes" for k in estimated}
    return OpGraph(ops, [("a", "b", 10)], name="g", metadata=meta)


def test_measured_times_say_nothing():
    assert estimated_notes(graph(["V100"]), load_cluster("4xV100-NVLink")) == []


def test_roofline_estimates_are_named_per_device_kind():
    notes = estimated_notes(graph(["CPU", "H100"], estimated=["H100"]),
                            load_cluster("8xH100-80GB-NVLink"))
    assert notes == ["op times on H100 are estimates (roofline from op shapes), not "
                     "measurements"]


def test_times_scaled_from_another_kind_are_named():
    notes = estimated_notes(graph(["V100"]), load_cluster("4xA100-40GB-NVLink"))
    assert notes == ["no op was measured on A100: its times are V100's scaled by relative "
                     "speed, an estimate"]


def test_search_and_show_say_the_costs_are_estimates(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    g = graph(["CPU", "H100"], estimated=["H100"])
    from moplace.io.native import save_graph

    save_graph(g, "g.json")
    assert main(["search", "g.json", "--cluster", "8xH100-80GB-NVLink", "--searcher", "random",
                 "--budget", "5", "--no-mlflow", "--quiet", "--out", "."]) == 0
    out = capsys.readouterr().out
    assert "note: op times on H100 are estimates" in out
    assert "op times on H100 are estimates (roofline from op shapes), not measurements" in \
        json.loads((tmp_path / "front.json").read_text())["notes"]
    assert main(["show", "front.json"]) == 0
    assert "note: op times on H100 are estimates" in capsys.readouterr().out
    assert main(["evaluate", "front.json", "--point", "0"]) == 0
    assert "note: op times on H100 are estimates" in capsys.readouterr().out


def test_the_mlflow_run_says_so_and_records_what_the_file_does(tmp_path, monkeypatch, capsys):
    from moplace.review.runs import find_run, run_front

    monkeypatch.chdir(tmp_path)
    from moplace.io.native import save_graph

    save_graph(graph(["CPU", "H100"], estimated=["H100"]), "g.json")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["search", "g.json", "--cluster", "8xH100-80GB-NVLink", "--searcher", "random",
                 "--budget", "5", "--quiet", "--out", ".", "--tracking-uri", uri,
                 "--figures", "off", "--memory-limit", "40GiB", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["mlflow_run_id"]
    client, run = find_run(uri, run_id)
    logged, written = run_front(client, run), json.loads((tmp_path / "front.json").read_text())
    for key in ("notes", "baselines", "memory_limit_bytes", "graph_source", "cluster_source"):
        assert logged[key] == written[key], key
    assert "Note: op times on H100 are estimates" in run.data.tags["mlflow.note.content"]
