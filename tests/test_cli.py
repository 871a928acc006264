"""The command line: in-process through `moplace.cli.main`, and as a real subprocess."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moplace.cli import main
from moplace.core.baselines import BASELINES, baseline
from moplace.core.presets import list_presets, load_cluster
from moplace.io import list_bundled, load_graph
from moplace.io.strategies import save_strategy
from moplace.simulator.evaluation import evaluate

ROOT = Path(__file__).resolve().parents[1]
GRAPH, CLUSTER = "pipedream:vgg16", "4xV100-NVLink"
EVAL = ["evaluate", GRAPH, "--cluster", CLUSTER]


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def run_subprocess(argv, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "moplace.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=120, **kw)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_result(obj):
    for key in ("runtime_s", "peak_comm_bytes", "peak_mem_bytes", "memory_excess_bytes"):
        assert is_number(obj[key]), (key, obj[key])
    assert isinstance(obj["feasible"], bool)
    assert obj["runtime_s"] > 0


def one_json_object(out: str) -> dict:
    text = out.strip()
    assert text.startswith("{") and text.endswith("}")
    obj, end = json.JSONDecoder().raw_decode(text)
    assert end == len(text), "more than one JSON value printed"
    assert isinstance(obj, dict)
    return obj


# -- good runs -----------------------------------------------------------------------------------
class TestEvaluate:
    def test_json_one_baseline(self, capsys):
        code, out, err = run(capsys, EVAL + ["--baseline", "data-parallel", "--json"])
        assert code == 0 and err == ""
        obj = one_json_object(out)
        check_result(obj)
        assert obj["graph"] == "vgg16" and obj["cluster"] == CLUSTER
        assert obj["strategy"] == "data-parallel"
        assert obj["feasible"] is True and obj["memory_excess_bytes"] == 0
        assert len(obj["devices"]) == 4
        # the same figures as the Python API
        g, c = load_graph(GRAPH), load_cluster(CLUSTER)
        ev = evaluate(g, c, baseline("data-parallel", g, c.n_devices))
        # what the CLI adds around the evaluation: its context and the strategy's plan
        # and where its costs came from (measured on V100 here: nothing to say)
        context = {"graph", "cluster", "strategy", "plan", "cost_notes"}
        assert set(obj) - context == set(ev.as_dict()) and obj["cost_notes"] == []
        assert obj["runtime_s"] == ev.as_dict()["runtime_s"]
        assert obj["peak_comm_bytes"] == ev.as_dict()["peak_comm_bytes"]
        assert obj["peak_mem_bytes"] == ev.as_dict()["peak_mem_bytes"]
        assert max(d["peak_mem_bytes"] for d in obj["devices"]) == obj["peak_mem_bytes"]
        assert max(d["sent_bytes"] + d["received_bytes"] for d in obj["devices"]) == \
            pytest.approx(obj["peak_comm_bytes"])

    def test_json_all_baselines(self, capsys):
        code, out, err = run(capsys, EVAL + ["--baseline", "all", "--json"])
        assert code == 0 and err == ""
        obj = one_json_object(out)
        assert obj["graph"] == "vgg16" and obj["cluster"] == CLUSTER
        assert list(obj["results"]) == list(BASELINES)
        for result in obj["results"].values():
            check_result(result)
        assert obj["results"]["single"]["peak_comm_bytes"] == 0

    def test_text_mentions_every_baseline(self, capsys):
        code, out, err = run(capsys, EVAL + ["--baseline", "all"])
        assert code == 0 and err == ""
        assert "vgg16" in out and CLUSTER in out
        for name in BASELINES:
            assert f"\n{name}:" in out          # its own section
            assert any(line.startswith(name) for line in out.splitlines())  # summary row
        assert "runtime" in out and "feasible: yes" in out and "feasible: no" not in out

    def test_text_one_baseline(self, capsys):
        code, out, _ = run(capsys, EVAL + ["--baseline", "layer-split"])
        assert code == 0 and "layer-split:" in out and "gpu3" in out

    @pytest.mark.parametrize("name", ["data-parallel", "layer-split", "round-robin"])
    @pytest.mark.parametrize("with_names", [True, False])
    def test_saved_strategy_gives_the_baseline_figures(self, capsys, tmp_path, name, with_names):
        g, c = load_graph(GRAPH), load_cluster(CLUSTER)
        path = tmp_path / f"{name}.json"
        save_strategy(path, g, baseline(name, g, c.n_devices), c if with_names else None)
        code, out, err = run(capsys, EVAL + ["--strategy", str(path), "--json"])
        assert code == 0 and err == ""
        from_file = one_json_object(out)
        code, out, _ = run(capsys, EVAL + ["--baseline", name, "--json"])
        from_baseline = one_json_object(out)
        assert from_file["strategy"] == str(path)
        for key in ("runtime_s", "peak_comm_bytes", "peak_mem_bytes", "feasible", "devices"):
            assert from_file[key] == from_baseline[key], key

    def test_cluster_from_toml_file(self, capsys, tmp_path):
        toml = tmp_path / "two.toml"
        toml.write_text('name = "two"\n[[servers]]\ncount = 2\nkind = "V100"\nmemory = "16GiB"\n'
                        'speed = 1.0\n[servers.interconnect]\nbandwidth = "10GB/s"\n'
                        'latency = "5us"\nsharing = "dedicated"\n')
        code, out, err = run(capsys, ["evaluate", GRAPH, "--cluster", str(toml), "--baseline",
                                      "round-robin", "--json"])
        assert code == 0, err
        obj = one_json_object(out)
        assert obj["cluster"] == "two" and len(obj["devices"]) == 2

    def test_graph_from_native_file(self, capsys, tmp_path):
        path = tmp_path / "g.json"
        path.write_text(json.dumps(native_graph([op("a", 1e-3, out=10), op("b", 2e-3)],
                                                [("a", "b", 10)])))
        code, out, err = run(capsys, ["evaluate", str(path), "--cluster", CLUSTER,
                                      "--baseline", "single", "--json"])
        assert code == 0, err
        assert one_json_object(out)["runtime_s"] == pytest.approx(3e-3)

    def test_op_larger_than_memory_is_infeasible_not_a_crash(self, capsys, tmp_path):
        big = op("huge", 1e-3, params=100 * 10**9)  # 100 GB > 16 GiB on every device
        path = tmp_path / "big.json"
        path.write_text(json.dumps(native_graph([op("in", 1e-3, out=10), big], [("in", "huge", 10)])))
        code, out, err = run(capsys, ["evaluate", str(path), "--cluster", CLUSTER,
                                      "--baseline", "all", "--json"])
        assert code == 0 and err == ""
        for name, result in one_json_object(out)["results"].items():
            check_result(result)
            assert result["feasible"] is False, name
            assert result["memory_excess_bytes"] > 0
            assert result["peak_mem_bytes"] >= 100 * 10**9
        code, out, err = run(capsys, ["evaluate", str(path), "--cluster", CLUSTER,
                                      "--baseline", "single"])
        assert code == 0 and err == "" and "feasible: no (" in out
        assert "over capacity, summed over devices" in out


class TestListings:
    def test_clusters_lists_every_preset(self, capsys):
        code, out, err = run(capsys, ["clusters", "--all"])
        assert code == 0 and err == ""
        presets = list_presets()
        assert len(presets) >= 5
        for name in presets:
            assert f"{name}:" in out
            assert any(line.startswith(name + ":") for line in out.splitlines())
        assert "speed: each GPU's compute speed relative to a V100" in out

    def test_clusters_lists_one_line_per_preset_by_default(self, capsys):
        """(issue 48) A line per preset, its links in words and `speed` explained, not 253
        lines of devices."""
        code, out, err = run(capsys, ["clusters"])
        assert code == 0 and err == ""
        lines = out.splitlines()
        assert lines[0].split() == ["preset", "GPUs", "servers", "kind", "memory", "speed",
                                    "inside", "a", "server", "between", "servers"]
        assert [line.split()[0] for line in lines[1:len(list_presets()) + 1]] == list_presets()
        assert len(lines) <= len(list_presets()) + 5
        row = next(line for line in lines if line.startswith("2x8xH100-80GB-8xIB400 "))
        assert row.split()[1:7] == ["16", "2", "H100", "80", "GiB", "4.27"]
        assert "NVLink4/NVSwitch 370 GB/s" in row and row.endswith("IB NDR 48 GB/s")
        assert "speed: each GPU's compute speed relative to a V100" in out
        assert "`moplace clusters --all` lists every device and link" in out

    def test_graphs_lists_bundled_names(self, capsys):
        code, out, err = run(capsys, ["graphs"])
        assert code == 0 and err == ""
        rows = [line.split() for line in out.splitlines()[1:]]
        assert [r[0] for r in rows] == list_bundled()
        from moplace import load_graph
        for name, ops, edges, *_ in rows[::7]:
            g = load_graph(name)
            assert (int(ops), int(edges)) == (len(g.ops), len(g.edges))
        assert "pipedream:vgg16" in out.split()

    def test_no_command_prints_help(self, capsys):
        code, out, _ = run(capsys, [])
        assert code == 2 and "evaluate" in out


# -- bad input -----------------------------------------------------------------------------------
def op(name, t, out=0, params=0, **kw):
    return {"name": name, "compute": {"V100": t}, "output_bytes": out, "param_bytes": params, **kw}


def native_graph(ops, edges, name="g"):
    return {"format": "moplace-graph", "version": 1, "name": name, "ops": ops,
            "edges": [{"src": a, "dst": b, "bytes": n} for a, b, n in edges]}


def vgg_strategy(tmp_path, **changes):
    g, c = load_graph(GRAPH), load_cluster(CLUSTER)
    path = tmp_path / "strategy.json"
    save_strategy(path, g, baseline("layer-split", g, c.n_devices))
    data = json.loads(path.read_text())
    for field, (key, value) in changes.items():
        data[field][key] = value
    path.write_text(json.dumps(data, indent=1))
    return path


def bad_case(kind, tmp_path):
    """(argv, substrings the one-line error must contain) for one kind of bad input."""
    def graph_file(text, name="g.json"):
        p = tmp_path / name
        p.write_text(text)
        return str(p)

    if kind == "cyclic-graph":
        path = graph_file(json.dumps(native_graph(
            [op("a", 1e-3), op("b", 1e-3), op("c", 1e-3)],
            [("a", "b", 1), ("b", "c", 1), ("c", "a", 1)])), "cyc.json")
        return ["evaluate", path, "--cluster", CLUSTER, "--baseline", "single"], \
            ["cyc.json", "cycle", "a -> b -> c -> a"]
    if kind == "unknown-op-in-strategy":
        path = vgg_strategy(tmp_path, placement=("ghost_op", 1))
        return EVAL + ["--strategy", str(path)], ["strategy.json", "unknown op 'ghost_op'"]
    if kind == "device-out-of-range-in-strategy":
        path = vgg_strategy(tmp_path, placement=("node10", 7))
        return EVAL + ["--strategy", str(path)], \
            ["strategy.json", "'node10'", "device 7 out of range 0..3"]
    if kind == "unknown-device-name-in-strategy":
        path = vgg_strategy(tmp_path, placement=("node10", "gpu99"))
        return EVAL + ["--strategy", str(path)], ["strategy.json", "unknown device 'gpu99'"]
    if kind == "malformed-strategy":
        path = tmp_path / "strategy.json"
        path.write_text('{\n "placement": {\n  "node10": 0\n  "node11": 1\n }\n}\n')
        return EVAL + ["--strategy", str(path)], ["strategy.json", "line 4", "invalid JSON"]
    if kind == "missing-strategy":
        return EVAL + ["--strategy", str(tmp_path / "nope.json")], ["nope.json", "cannot read"]
    if kind in ("negative-cost", "nan-cost"):
        text = json.dumps(native_graph([op("a", 1e-3), op("b", -1.0 if kind == "negative-cost"
                                                            else float("nan"))], []))
        return ["evaluate", graph_file(text, "cost.json"), "--cluster", CLUSTER, "--baseline",
                "single"], ["cost.json", "ops[1].compute.V100", "finite non-negative"]
    if kind == "negative-bytes":
        text = json.dumps(native_graph([op("a", 1e-3, out=-5)], []))
        return ["evaluate", graph_file(text, "bytes.json"), "--cluster", CLUSTER, "--baseline",
                "single"], ["bytes.json", "ops[0].output_bytes", "non-negative integer"]
    if kind == "malformed-json-graph":
        path = graph_file('{"format": "moplace-graph",\n "version": 1,\n "ops": [\n  {"name": "a"},\n'
                          '  {"name": }\n ]\n}\n', "broken.json")
        return ["evaluate", path, "--cluster", CLUSTER, "--baseline", "single"], \
            ["broken.json", "line 5", "invalid JSON"]
    if kind == "malformed-toml":
        toml = tmp_path / "bad.toml"
        toml.write_text('name = "x"\n\n[[servers]\ncount = 2\n')
        return ["evaluate", GRAPH, "--cluster", str(toml), "--baseline", "single"], \
            ["bad.toml", "line 3", "malformed TOML"]
    if kind == "bad-toml-field":
        toml = tmp_path / "field.toml"
        toml.write_text('[[servers]]\ncount = 0\nkind = "V100"\nmemory = "16GiB"\n')
        return ["evaluate", GRAPH, "--cluster", str(toml), "--baseline", "single"], \
            ["field.toml", "servers[0].count"]
    if kind == "malformed-pipedream":
        path = graph_file(
            "node1 -- Conv2d(3, 8) -- forward_compute_time=1.0, backward_compute_time=2.0, "
            "activation_size=64.0, parameter_size=8.0\n"
            "node2 -- ReLU() -- forward_compute_time=0.5, backward_compute_time=0.5, "
            "activation_size=64.0, parameter_size=0.0\n"
            "node3 -- ReLU() -- forward_compute_time=fast, backward_compute_time=0.5, "
            "activation_size=64.0, parameter_size=0.0\n"
            "\tnode1 -- node2\n\tnode2 -- node3\n", "graph.txt")
        return ["evaluate", path, "--cluster", CLUSTER, "--baseline", "single"], \
            ["graph.txt", "line 3", "forward_compute_time"]
    if kind == "unknown-preset":
        return ["evaluate", GRAPH, "--cluster", "3xTPU", "--baseline", "single"], \
            ["unknown cluster preset '3xTPU'", "(`moplace clusters` lists them"] \
            + [f" {name}, " for name in list_presets()[1:8]]  # names whole, as many as fit
    if kind == "missing-cluster-file":
        return ["evaluate", GRAPH, "--cluster", str(tmp_path / "gone.toml"), "--baseline",
                "single"], ["gone.toml"]
    if kind == "unknown-baseline":
        return EVAL + ["--baseline", "magic"], ["unknown baseline 'magic'"] + list(BASELINES)
    if kind == "missing-graph-file":
        return ["evaluate", str(tmp_path / "absent.json"), "--cluster", CLUSTER, "--baseline",
                "single"], ["absent.json", "no such file"]
    if kind == "unknown-bundled-graph":
        return ["evaluate", "pipedream:nosuchnet", "--cluster", CLUSTER, "--baseline", "single"], \
            ["pipedream:nosuchnet", "pipedream:vgg16"]
    raise AssertionError(kind)


BAD = ["cyclic-graph", "unknown-op-in-strategy", "device-out-of-range-in-strategy",
       "unknown-device-name-in-strategy", "malformed-strategy", "missing-strategy",
       "negative-cost", "nan-cost", "negative-bytes", "malformed-json-graph", "malformed-toml",
       "bad-toml-field", "malformed-pipedream", "unknown-preset", "missing-cluster-file",
       "unknown-baseline", "missing-graph-file", "unknown-bundled-graph"]


def check_error(code, out, err, wanted):
    assert code == 2, (code, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert out == ""
    line = err.strip()
    assert "\n" not in line, f"more than one line on stderr: {err!r}"
    assert line.startswith("moplace: error: ")
    for text in wanted:
        assert text in line, (text, line)


@pytest.mark.parametrize("kind", BAD)
def test_bad_input_in_process(kind, tmp_path, capsys):
    argv, wanted = bad_case(kind, tmp_path)
    code, out, err = run(capsys, argv + ["--json"])
    check_error(code, out, err, wanted)


# -- real subprocesses ---------------------------------------------------------------------------
def test_subprocess_json():
    proc = run_subprocess(EVAL + ["--baseline", "data-parallel", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    obj = one_json_object(proc.stdout)
    check_result(obj)
    assert obj["feasible"] is True


@pytest.mark.parametrize("kind", ["cyclic-graph", "device-out-of-range-in-strategy",
                                  "malformed-toml", "malformed-pipedream"])
def test_subprocess_bad_input(kind, tmp_path):
    argv, wanted = bad_case(kind, tmp_path)
    proc = run_subprocess(argv)
    check_error(proc.returncode, proc.stdout, proc.stderr, wanted)


def test_subprocess_closed_pipe_is_quiet():
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "moplace.cli", "clusters"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # like `moplace clusters | head -0`: nobody reads
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    proc.stderr.close()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
