"""`moplace search` then `moplace evaluate --strategy front.json --point K`: the front says what it
was searched on (evaluating it on another cluster or graph is noted, or refused with a clear
error), and every point the search printed can be evaluated, infeasible ones included.

Every test runs the CLI in process, in its own temporary folder."""

import json
import re
from pathlib import Path

import pytest

from moplace.cli import main
from moplace.core.baselines import baseline
from moplace.core.presets import load_cluster
from moplace.io import load_graph
from moplace.io.native import save_graph
from moplace.io.strategies import save_strategy

GRAPH = "pipedream:vgg16"
PRESETS = Path(__file__).resolve().parents[1] / "moplace" / "core" / "presets"
TOML = """name = "{name}"
[[servers]]
count = {count}
kind = "V100"
memory = "{memory}"
[servers.interconnect]
bandwidth = "48GB/s"
latency = "2us"
sharing = "dedicated"
"""


@pytest.fixture(autouse=True)
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def search(capsys, cluster, graph=GRAPH, out=".", status=0):
    code, text, err = run(capsys, "search", graph, "--cluster", cluster, "--searcher", "random",
                          "--budget", "30", "--out", out, "--no-mlflow", "--quiet",
                          "--figures", "off")
    assert code == status, err  # 3: nothing feasible found
    return text, json.loads((Path(out) / "front.json").read_text())


def evaluate(capsys, cluster, *more, graph=GRAPH, strategy="front.json"):
    return run(capsys, "evaluate", graph, "--cluster", cluster, "--strategy", strategy, *more)


def one_json_object(out: str) -> dict:
    obj, end = json.JSONDecoder().raw_decode(out.strip())
    assert end == len(out.strip()), "more than one JSON value printed"
    return obj


def one_error_line(code, out, err) -> str:
    assert code == 2 and out == "" and "Traceback" not in err, (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("moplace: error: "), err
    return lines[0]


def write_cluster(path, name, count=4, memory="16GiB") -> str:
    Path(path).write_text(TOML.format(name=name, count=count, memory=memory))
    return str(path)


# -- 1. a front evaluated on another cluster ------------------------------------------------------
def test_front_from_another_cluster_is_noted(capsys):
    search(capsys, "4xV100-NVLink")
    note = ("moplace: note: front.json was searched on cluster '4xV100-NVLink'; evaluating on "
            "'8xV100-16GB-NVLink'")
    code, out, err = evaluate(capsys, "8xV100-16GB-NVLink", "--point", "0")
    assert code == 0 and "runtime" in out
    assert err.splitlines() == [note]
    code, out, err = evaluate(capsys, "8xV100-16GB-NVLink", "--point", "0", "--json")
    obj = one_json_object(out)  # stdout stays one strict JSON object; the note is on stderr
    assert code == 0 and err.splitlines() == [note]
    assert obj["cluster"] == "8xV100-16GB-NVLink" and obj["searched_on_cluster"] == "4xV100-NVLink"
    assert obj["cluster_differs"] is True and obj["graph_differs"] is False
    assert obj["notes"] == [note.removeprefix("moplace: note: ")]


def test_front_on_its_own_cluster_is_not_noted(capsys, here):
    search(capsys, "4xV100-NVLink")
    (here / "copy.toml").write_text((PRESETS / "4xV100-NVLink.toml").read_text())
    # the preset however spelt, and a file with the same devices and links, are that cluster
    for cluster in ("4xV100-NVLink", "4xv100-nvlink", "copy.toml"):
        code, out, err = evaluate(capsys, cluster, "--point", "0", "--json")
        obj = one_json_object(out)
        assert (code, err) == (0, ""), cluster
        assert obj["searched_on_cluster"] == "4xV100-NVLink" and obj["cluster_differs"] is False
        assert obj["notes"] == []


def test_toml_cluster_same_file_or_changed_file(capsys, here):
    write_cluster("mine.toml", "mine")
    search(capsys, "mine.toml")
    for spelt in ("mine.toml", str(here / "mine.toml"), "./mine.toml"):
        assert evaluate(capsys, spelt, "--point", "0")[::2] == (0, ""), spelt
    write_cluster("mine.toml", "mine", memory="8GiB")  # the same file, other devices now
    code, out, err = evaluate(capsys, "mine.toml", "--point", "0", "--json")
    assert code == 0 and one_json_object(out)["cluster_differs"] is True
    assert err.splitlines() == ["moplace: note: front.json was searched on another cluster "
                                "named 'mine' (other devices, memory or links than --cluster "
                                "mine.toml has now)"]


def test_front_written_before_fingerprints_compares_sources(capsys, here):
    search(capsys, "4xV100-NVLink")
    front = json.loads(Path("front.json").read_text())
    for key in ("graph_fingerprint", "cluster_fingerprint", "cluster_devices"):
        del front[key]
    Path("front.json").write_text(json.dumps(front))
    assert evaluate(capsys, "4xv100-nvlink", "--point", "0")[::2] == (0, "")
    code, _, err = evaluate(capsys, "8xV100-16GB-NVLink", "--point", "0")
    assert code == 0 and "searched on cluster '4xV100-NVLink'" in err
    # two TOML files of the same name: told apart by where the search's came from
    Path("a").mkdir(), Path("b").mkdir()
    write_cluster("a/c.toml", "c"), write_cluster("b/c.toml", "c")
    search(capsys, "a/c.toml", out="a")
    front = json.loads(Path("a/front.json").read_text())
    del front["cluster_fingerprint"]
    Path("a/front.json").write_text(json.dumps(front))
    assert evaluate(capsys, "a/c.toml", "--point", "0", strategy="a/front.json")[::2] == (0, "")
    code, _, err = evaluate(capsys, "b/c.toml", "--point", "0", strategy="a/front.json")
    assert code == 0 and "a/front.json was searched on another cluster named 'c'" in err


def test_front_on_a_cluster_without_its_devices_is_a_clear_error(capsys):
    _, front = search(capsys, "4xV100-NVLink")
    k = next(k for k, p in enumerate(front["points"])
             if set(p["strategy"]["placement"].values()) - {"gpu0"})  # uses more than gpu0
    line = one_error_line(*evaluate(capsys, "1xV100", "--point", str(k)))
    assert "unknown device 'gpu" in line and "(devices: gpu0)" in line
    assert line.endswith("front.json was searched on cluster '4xV100-NVLink' (4 devices: gpu0, "
                         "gpu1, gpu2, gpu3), not on --cluster 1xV100 (1 device: gpu0)")


def test_saved_strategy_records_its_cluster(capsys):
    g = load_graph(GRAPH)
    eight, four = load_cluster("8xV100-16GB-NVLink"), load_cluster("4xV100-NVLink")
    save_strategy("dp8.json", g, baseline("data-parallel", g, 8), eight)
    save_strategy("dp4.json", g, baseline("data-parallel", g, 4), four)
    assert json.loads(Path("dp8.json").read_text())["cluster"] == "8xV100-16GB-NVLink"
    assert evaluate(capsys, "8xV100-16GB-NVLink", strategy="dp8.json")[::2] == (0, "")
    code, out, err = evaluate(capsys, "8xV100-16GB-NVLink", "--json", strategy="dp4.json")
    assert code == 0 and one_json_object(out)["searched_on_cluster"] == "4xV100-NVLink"
    assert err.splitlines() == ["moplace: note: dp4.json was saved for cluster '4xV100-NVLink'; "
                                "evaluating on '8xV100-16GB-NVLink'"]
    line = one_error_line(*evaluate(capsys, "4xV100-NVLink", strategy="dp8.json"))
    assert line.endswith("dp8.json was saved for cluster '8xV100-16GB-NVLink', not on --cluster "
                         "4xV100-NVLink (4 devices: gpu0, gpu1, gpu2, gpu3)")


# -- the graph: another one is refused, the same name with other contents is noted ----------------
def test_front_of_another_graph_is_refused(capsys):
    search(capsys, "4xV100-NVLink")
    for cluster in ("4xV100-NVLink", "8xV100-16GB-NVLink"):
        line = one_error_line(*evaluate(capsys, cluster, "--point", "0",
                                        graph="pipedream:resnet50"))
        assert line == ("moplace: error: front.json: field 'graph': the strategy is for graph "
                        "'vgg16', not 'resnet50'")


def test_same_named_graph_with_other_times_is_noted(capsys):
    search(capsys, "4xV100-NVLink")
    save_graph(load_graph(GRAPH), "vgg16.json")
    code, out, err = evaluate(capsys, "4xV100-NVLink", "--point", "0", "--json",
                              graph="vgg16.json")
    assert (code, err) == (0, "") and one_json_object(out)["graph_differs"] is False
    text = Path("vgg16.json").read_text()
    first = re.search(r'"compute": \{"V100": ([0-9.e-]+)\}', text)
    Path("vgg16.json").write_text(text.replace(first.group(0), '"compute": {"V100": %r}'
                                               % (float(first.group(1)) * 10), 1))
    code, out, err = evaluate(capsys, "4xV100-NVLink", "--point", "0", "--json",
                              graph="vgg16.json")
    assert code == 0 and one_json_object(out)["graph_differs"] is True
    assert err.splitlines() == ["moplace: note: front.json was searched on another graph named "
                                "'vgg16' (other ops, sizes or times than the graph given now)"]


# -- 2. the advice after a search where nothing fits ----------------------------------------------
def test_advice_after_a_search_where_nothing_fits_is_followed(capsys):
    write_cluster("tiny.toml", "tiny-mem", memory="1GiB")
    text, front = search(capsys, "tiny.toml", status=3)
    assert "no feasible strategy found; the least-violating ones:" in text
    assert "moplace evaluate front.json --point K" in text
    rows = [int(m) for m in re.findall(r"^\s*(\d+)\s.*\sno\s", text, re.M)]
    n = len(front["infeasible"])
    assert not front["points"] and set(rows) <= set(range(n)) and 1 < len(rows) <= 10
    for k in (rows[0], rows[-1]):
        code, out, err = evaluate(capsys, "tiny.toml", "--point", str(k))
        assert code == 0 and "feasible: no" in out and f"front.json point {k}:" in out, err
        code, out, err = evaluate(capsys, "tiny.toml", "--point", str(k), "--json")
        obj, want = one_json_object(out), front["infeasible"][k]
        assert code == 0 and obj["feasible"] is False and obj["point"] == k
        assert obj["memory_excess_bytes"] == pytest.approx(want["violation_bytes"], rel=1e-12)
        assert obj["runtime_s"] == pytest.approx(want["runtime_s"], rel=1e-12)
        assert obj["cluster_differs"] is False
        assert err.splitlines() == [f"moplace: note: front.json holds no feasible point: point {k} "
                                    f"is one of the {n} least-violating ones the search "
                                    "listed"]
    line = one_error_line(*evaluate(capsys, "tiny.toml", "--point", str(n)))
    assert f"--point {n} is out of range 0..{n - 1}" in line and "none feasible" in line
    line = one_error_line(*evaluate(capsys, "tiny.toml"))
    assert f"choose one with --point (0..{n - 1})" in line


# -- a front.json alone: the graph, cluster and options it records (issue 34) --------------------
def test_a_front_alone_is_evaluated_on_what_it_records(capsys):
    search(capsys, "4xV100-NVLink")
    front = json.loads(Path("front.json").read_text())
    code, out, err = run(capsys, "evaluate", "front.json", "--point", "0", "--json")
    assert (code, err) == (0, "")
    obj = one_json_object(out)
    assert (obj["graph"], obj["cluster"], obj["point"]) == ("vgg16", "4xV100-NVLink", 0)
    assert obj["cluster_differs"] is False and obj["runtime_s"] == front["points"][0]["runtime_s"]
    code, out2, err = run(capsys, "evaluate", "--strategy", "front.json", "--point", "0", "--json")
    assert code == 0 and one_json_object(out2)["runtime_s"] == obj["runtime_s"]
    # given on the command line, the cluster wins over the recorded one (and is noted)
    code, out, err = run(capsys, "evaluate", "front.json", "--point", "0",
                         "--cluster", "8xV100-16GB-NVLink")
    assert code == 0 and "searched on cluster '4xV100-NVLink'" in err


def test_a_front_searched_under_a_memory_cap_is_evaluated_under_it(capsys):
    code, _, err = run(capsys, "search", GRAPH, "--cluster", "4xV100-NVLink", "--searcher",
                       "random", "--budget", "20", "--out", ".", "--no-mlflow", "--quiet",
                       "--figures", "off", "--memory-limit", "2GiB", "--no-inplace")
    assert code == 3, err  # nothing fits in 2 GiB without in-place ops: the least-violating
    code, out, err = run(capsys, "evaluate", "front.json", "--point", "0", "--json")
    capped = one_json_object(out)
    assert code == 0 and {d["capacity_bytes"] for d in capped["devices"]} == {2 * 2 ** 30}
    front = json.loads(Path("front.json").read_text())
    assert capped["runtime_s"] == (front["points"] or front["infeasible"])[0]["runtime_s"]


@pytest.mark.parametrize("argv, says", [
    (["evaluate", GRAPH, "--cluster", "4xV100-NVLink"], "say what to evaluate"),
    (["evaluate", "--strategy", "plain.json", "--point", "0"], "give the graph and --cluster"),
    (["evaluate", "--strategy", "bare.json", "--point", "0"],
     "bare.json does not record its graph and cluster"),
    (["evaluate", GRAPH, "--strategy", "plain.json"], "--cluster is required"),
])
def test_what_a_front_does_not_record_is_asked_for_by_name(capsys, argv, says):
    search(capsys, "4xV100-NVLink")
    front = json.loads(Path("front.json").read_text())
    Path("plain.json").write_text(json.dumps(front["points"][0]["strategy"]))
    Path("bare.json").write_text(json.dumps({k: v for k, v in front.items()
                                             if k not in ("graph_source", "cluster_source")}))
    assert says in one_error_line(*run(capsys, *argv))
