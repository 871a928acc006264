"""Objectives carry their metadata (issue 31): registering an objective names its unit, JSON key,
label and short name, and the review code reads them. A fourth objective registered at run time
(energy per step) shows in the CLI's tables, ``--json``, front.json, the MLflow run (metrics,
front table, `moplace runs` / `show`) and the front figures, as the built-in three do."""

import json
from pathlib import Path

import pytest

import moplace
from moplace.cli import main
from moplace.errors import MoplaceError
from moplace.io.strategies import strategy_from_json
from moplace.review import units
from moplace.review.figures import FILES
from moplace.review.report import evaluation_table, summary_table
from moplace.review.tracking import metric_name
from moplace.simulator.engine import simulate
from objectives import DEFAULT, JSON_KEYS, OBJECTIVES, json_key

GRAPH = ["pipedream:alexnet", "--cluster", "4xV100-NVLink"]
FOUR = "runtime,peak_communication,peak_memory,energy"
WATTS = 300.0
LABEL = "energy per step"


def energy(trace) -> float:
    """Joules of one step: every device's busy time at 300 W."""
    return WATTS * float(trace.busy.sum())


@pytest.fixture
def fourth():
    with OBJECTIVES.registered("energy", energy, unit="J", json_key="energy_j", label=LABEL,
                               short="energy") as objective:
        yield objective
    assert "energy" not in OBJECTIVES and "energy" not in JSON_KEYS


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def test_the_built_in_objectives_keep_their_names():
    assert OBJECTIVES.names() == list(DEFAULT)
    assert dict(JSON_KEYS) == {"runtime": "runtime_s", "peak_communication": "peak_comm_bytes",
                               "peak_memory": "peak_mem_bytes"}
    assert dict(units.LABELS) == {"runtime": "runtime", "peak_communication": "peak communication",
                                  "peak_memory": "peak memory"}
    assert dict(units.SHORT) == {"runtime": "runtime", "peak_communication": "comm",
                                 "peak_memory": "mem"}
    assert [units.kind_of(o) for o in DEFAULT] == ["time", "bytes", "bytes"]
    assert [metric_name(o) for o in DEFAULT] == ["best_runtime_ms", "best_peak_communication_GiB",
                                                 "best_peak_memory_GiB"]
    with pytest.raises(ValueError, match="built in"):
        OBJECTIVES.unregister("runtime")


def test_a_registered_objective_carries_its_unit_key_label_and_short_name(fourth):
    assert OBJECTIVES["energy"] is fourth and fourth.unit == "J"
    assert json_key("energy") == JSON_KEYS["energy"] == "energy_j"
    assert units.kind_of("energy") == "J" and units.short("energy") == "energy"
    assert units.axis_label("energy", units.column_unit("energy", [2.5e6])) == f"{LABEL} (MJ)"
    assert metric_name("energy") == "best_energy_J"
    # other units get SI prefixes, read at a glance
    assert [units.fmt(v, "J") for v in (0.0, 0.5, 212.0, 1234.0, 3.2e7)] == \
        ["0 J", "500.0 mJ", "212.0 J", "1.234 kJ", "32.00 MJ"]
    with pytest.raises(ValueError, match="already objective 'energy'"):
        OBJECTIVES.add("joules", energy, json_key="energy_j")
    with pytest.raises(ValueError, match="taken"):
        OBJECTIVES.add("joules", energy, json_key="feasible")
    with pytest.raises(MoplaceError, match="unknown objective 'joules'"):
        OBJECTIVES.unregister("joules")


def test_evaluate_tables_show_a_fourth_objective(fourth):
    graph, cluster = moplace.load_graph("pipedream:alexnet"), moplace.load_cluster("4xV100-NVLink")
    strategy = moplace.baseline("data-parallel", graph, cluster.n_devices)
    ev = moplace.evaluate(graph, cluster, strategy, objectives=(*DEFAULT, "energy"))
    assert ev.as_dict()["energy_j"] == pytest.approx(energy(ev.trace))
    head = summary_table({"data-parallel": ev}).splitlines()[0]
    assert head.startswith("strategy") and "  runtime (ms)  peak communication (" in head
    assert f"{LABEL} (J)" in head or f"{LABEL} (kJ)" in head
    assert f"{LABEL} {units.fmt(energy(ev.trace), 'J')}" in evaluation_table(ev, cluster)


def test_a_fourth_objective_through_the_cli_mlflow_and_figures(fourth, tmp_path, capsys,
                                                               monkeypatch):
    from moplace.review.figures import common, fronts

    drawn = {}  # figure file -> the texts of its axes (labels, titles, colour bar)
    original = common.save

    def save(fig, path):
        drawn[Path(path).name] = [t for ax in fig.axes for t in (
            ax.get_xlabel(), ax.get_ylabel(), ax.get_title(),
            getattr(ax, "get_zlabel", lambda: "")()) if t]
        return original(fig, path)

    monkeypatch.setattr(common, "save", save)
    monkeypatch.setattr(fronts, "save", save)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out, err = run(capsys, "search", *GRAPH, "--searcher", "random", "--budget", "30",
                   "--objectives", FOUR, "--tracking-uri", uri, "--out", str(tmp_path / "a"))

    # the CLI's table and its progress line
    head = out.splitlines()[1]
    assert head.split()[-4:] == ["feasible", "notes", "runs", "plan"] and f"{LABEL} (J)" in head
    front = json.loads((tmp_path / "a" / "front.json").read_text())
    rows = [r for r in out.splitlines()[2:] if r[:3].strip().isdigit() and "yes" in r]
    assert 0 < len(rows) <= 10 and all(float(r.split()[4]) == pytest.approx(
        front["points"][int(r.split()[0])]["energy_j"], rel=1e-3) for r in rows)
    assert "energy " in err and " J" in err

    # front.json: every point, the history, the values the objective gives
    assert front["objectives"] == FOUR.split(",")
    assert all(p["energy_j"] > 0 for p in front["points"] + front["infeasible"])
    assert len(front["history"]["best"]["energy_j"]) == len(front["history"]["evaluations"])
    point = front["points"][0]
    graph, cluster = moplace.load_graph("pipedream:alexnet"), moplace.load_cluster("4xV100-NVLink")
    trace = simulate(graph, cluster, strategy_from_json(point["strategy"], graph, cluster))
    assert point["energy_j"] == pytest.approx(energy(trace))

    # MLflow: the metric in its unit, the parameter, the front table, figures drawn in this
    # process (a drawing process would not know the objective)
    from moplace.review.runs import find_run

    client, mlrun = find_run(uri, out.split("logged to MLflow run ")[1].split()[0])
    best = min(p["energy_j"] for p in front["points"])
    assert mlrun.data.metrics["best_energy_J"] == pytest.approx(best)
    assert [m.step for m in client.get_metric_history(mlrun.info.run_id, "best_energy_J")] == \
        front["history"]["evaluations"]
    assert mlrun.data.params["objectives"] == FOUR
    assert mlrun.data.tags["figures"].startswith("ready: 6 files")
    table = json.loads(Path(client.download_artifacts(mlrun.info.run_id,
                                                      "front_table.json")).read_text())
    assert f"{LABEL} (J)" in table["columns"]
    assert f"energy {units.fmt(best, 'J')}" in mlrun.data.tags["mlflow.note.content"]
    figures = sorted(a.path for a in client.list_artifacts(mlrun.info.run_id, "figures"))
    assert figures == sorted(f"figures/{f}" for f in FILES)

    # the front figures: every pair with energy, the 3-D front coloured by it, its progress
    pairs = drawn["front_pairs.png"]
    assert len(pairs) == 12 and pairs.count(f"{LABEL} (J)") == 3
    assert f"{LABEL} (J)" in drawn["front_3d.png"]
    assert f"best {LABEL} (J)" in drawn["progress.png"]
    html = Path(client.download_artifacts(mlrun.info.run_id, "figures/front_3d.html")).read_text()
    assert f"{LABEL} (J)" in html and f"{LABEL}: " in html

    # `moplace runs` and `moplace show`
    listed, _ = run(capsys, "runs", "--tracking-uri", uri)
    assert "best energy (J)" in listed.splitlines()[0]
    listed, _ = run(capsys, "runs", "--tracking-uri", uri, "--json")
    assert json.loads(listed)["runs"][0]["best"]["energy"] == pytest.approx(best)
    shown, _ = run(capsys, "show", mlrun.info.run_id, "--tracking-uri", uri)
    assert f"{LABEL} (J)" in shown
    shown, _ = run(capsys, "show", mlrun.info.run_id, "--tracking-uri", uri, "--point", "0")
    assert f"{LABEL} {units.fmt(point['energy_j'], 'J')}" in shown

    # --json
    out, _ = run(capsys, "search", *GRAPH, "--searcher", "random", "--budget", "30",
                 "--objectives", FOUR, "--no-mlflow", "--out", str(tmp_path / "b"), "--json")
    printed = json.loads(out)
    assert [p["energy_j"] for p in printed["front"]] == [p["energy_j"] for p in front["points"]]


def test_compare_shows_a_fourth_objective(fourth, capsys):
    out, _ = run(capsys, "compare", *GRAPH, "--searchers", "random,heft", "--budget", "10",
                 "--objectives", FOUR, "--no-mlflow", "--quiet")
    head = out.splitlines()[1]
    assert "best mem (" in head and "best energy (J)" in head


def test_an_unknown_objective_is_refused_with_the_known_ones(capsys):
    assert main(["search", *GRAPH, "--searcher", "random", "--objectives", "runtime,energy",
                 "--no-mlflow"]) == 2
    err = capsys.readouterr().err
    assert "unknown objective 'energy'" in err and "peak_memory" in err
    assert main(["search", *GRAPH, "--searcher", "random", "--objectives", "runtime,runtime",
                 "--no-mlflow"]) == 2
    assert "distinct" in capsys.readouterr().err


def test_a_run_of_an_objective_this_process_does_not_know(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with OBJECTIVES.registered("energy", energy, unit="J", json_key="energy_j"):
        run(capsys, "search", *GRAPH, "--searcher", "heft", "--objectives", FOUR, "--quiet",
            "--tracking-uri", uri, "--out", str(tmp_path), "--figures", "off")
    listed, _ = run(capsys, "runs", "--tracking-uri", uri, "--json")
    listed = json.loads(listed)["runs"][0]
    front = json.loads((tmp_path / "front.json").read_text())
    assert listed["best"]["energy"] == pytest.approx(front["points"][0]["energy_j"])
    assert main(["show", listed["run_id"], "--tracking-uri", uri]) == 2
    assert "registered where it ran, not here: energy" in capsys.readouterr().err
