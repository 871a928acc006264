"""PipeDream and dnn-partitioning importers, bundled names and format dispatch.

Expected figures are computed here from the raw files with a few lines of independent parsing.
"""

from __future__ import annotations

import json
import math

import networkx as nx
import pytest

from moplace.errors import FormatError
from moplace.io import bundled_path, detect_format, list_bundled, load_graph, save_graph
from moplace.io.dnnpart import load_dnn_partitioning
from moplace.io.pipedream import load_pipedream

PIPEDREAM = [n for n in list_bundled() if n.startswith("pipedream:")]
DNN = [n for n in list_bundled() if n.startswith("dnn:")]


# -- independent raw parsers -----------------------------------------------------------------------
def raw_pipedream(path):
    """{name: (fwd_ms, bwd_ms, activation, params)} and forward edges of a graph.txt."""
    layers, edges = {}, []
    for line in open(path):
        if line.startswith("\t"):
            edges.append(tuple(line.strip().split(" -- ")))
        elif line.strip():
            name, values = line.split(" -- ")[0], line.strip().split(" -- ")[-1]
            kv = dict(item.split("=") for item in values.split(", "))
            size = lambda s: sum(float(x) for x in s.strip("[]").split(";"))  # noqa: E731
            layers[name] = (float(kv["forward_compute_time"]), float(kv["backward_compute_time"]),
                            size(kv["activation_size"]), float(kv["parameter_size"]))
    return layers, edges


def test_bundled_names_cover_all_data():
    assert len(PIPEDREAM) == 11 and "pipedream:resnet50" in PIPEDREAM
    assert len(DNN) == 15 and "dnn:LayerGraphs/resnet50_training" in DNN
    assert all(bundled_path(n).is_file() for n in list_bundled())


# -- PipeDream -------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", PIPEDREAM)
def test_pipedream_training_step(spec):
    layers, fwd_edges = raw_pipedream(bundled_path(spec))
    with_params = [n for n, v in layers.items() if v[3] > 0]
    g = load_graph(spec)
    assert len(g.ops) == 2 * len(layers) + len(with_params)
    assert len(g.edges) == 2 * len(fwd_edges) + len(layers) + len(with_params)
    expected = sum(v[0] + v[1] for v in layers.values()) / 1000 + sum(
        5 * layers[n][3] / 900e9 for n in with_params)
    assert g.total_compute("V100") == pytest.approx(expected, rel=1e-12)
    assert sum(op.param_bytes for op in g.ops if op.role == "forward") == sum(
        v[3] for v in layers.values())
    assert {op.name for op in g.ops if op.role == "update"} == {f"{n}/update" for n in with_params}
    assert nx.is_directed_acyclic_graph(g.to_networkx())
    json.dumps(dict(g.metadata))  # JSON-serialisable


@pytest.mark.parametrize("spec", ["pipedream:resnet50", "pipedream:gnmt", "pipedream:inception_v3"])
def test_pipedream_dependencies_and_bytes(spec):
    layers, fwd_edges = raw_pipedream(bundled_path(spec))
    g = load_graph(spec)
    nbytes = {(g.ops[e.src].name, g.ops[e.dst].name): e.bytes for e in g.edges}
    for name, (_, _, act, params) in layers.items():
        assert nbytes[(name, f"{name}/grad")] == act
        if params:
            assert nbytes[(f"{name}/grad", f"{name}/update")] == params
        grad = g.op(f"{name}/grad")
        preds = [p for p, s in fwd_edges if s == name]
        assert grad.grad_bytes == params
        assert grad.output_bytes == sum(layers[p][2] for p in preds) + params
    for p, s in fwd_edges:
        assert nbytes[(p, s)] == layers[p][2]
        assert nbytes[(f"{s}/grad", f"{p}/grad")] == layers[p][2]


def test_pipedream_op_fields():
    g = load_graph("pipedream:resnet50")
    conv, bn = g.op("node76"), g.op("node77")
    assert (conv.type, conv.splittable, conv.colocation) == ("Conv2d", ("batch", "channel"), "node76")
    assert bn.splittable == ("batch",) and g.op("node77/grad").type == "BatchNorm2dGrad"
    assert g.op("node1").type == "Input" and g.op("node1").splittable == ("batch",)
    assert g.op("node77/update").param_bytes == 4096
    assert load_graph("pipedream:gnmt").op("node1").type == "Input"  # "Input0"
    half = load_pipedream(bundled_path("pipedream:resnet50"), optimizer_state_factor=2.0)
    assert half.op("node77/update").param_bytes == 8192
    assert g.metadata["format"] == "pipedream" and g.metadata["estimated"]


GOOD = (
    "node1 -- Input -- forward_compute_time=1.0, backward_compute_time=0.0, "
    "activation_size=100.0, parameter_size=0.0\n"
    "node2 -- Conv2d(3, 8, kernel_size=(3, 3)) -- forward_compute_time=2.0, "
    "backward_compute_time=3.0, activation_size=200.0, parameter_size=50.0\n"
    "node3 -- ReLU(inplace) -- forward_compute_time=0.5, backward_compute_time=0.5, "
    "activation_size=200.0, parameter_size=0.0\n"
    "\tnode1 -- node2\n"
    "\tnode2 -- node3\n"
)


def test_pipedream_small_file(tmp_path):
    path = tmp_path / "graph.txt"
    path.write_text(GOOD)
    g = load_pipedream(path, device_kind="A100", name="tiny")
    assert (g.name, len(g.ops), len(g.edges)) == ("tiny", 7, 8)
    assert g.total_compute("A100") == pytest.approx(7e-3 + 5 * 50 / 900e9)


@pytest.mark.parametrize("line, old, new", [
    (2, "forward_compute_time=2.0", "forward_compute_time=abc"),
    (3, "backward_compute_time=0.5, ", ""),
    (2, "forward_compute_time=2.0", "forward_compute_time=-2.0"),
    (1, "activation_size=100.0", "activation_size=nan"),
    (3, "parameter_size=0.0", "parameter_sise=0.0"),
    (5, "node2 -- node3", "node2 -- node9"),
    (5, "node2 -- node3", "node2 node3"),
    (3, "node3 --", "node1 --"),
])
def test_pipedream_malformed(tmp_path, line, old, new):
    lines = GOOD.splitlines(keepends=True)
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new)
    path = tmp_path / "bad_graph.txt"
    path.write_text("".join(lines))
    with pytest.raises(FormatError) as err:
        load_pipedream(path)
    assert "bad_graph.txt" in str(err.value) and f"line {line}:" in str(err.value)


def test_pipedream_cycle(tmp_path):
    path = tmp_path / "graph.txt"
    path.write_text(GOOD + "\tnode3 -- node1\n")
    with pytest.raises(FormatError, match=r"graph.txt, line 4: the edges form a cycle: node1 -> "
                                          r"node2 -> node3 -> node1 \(edges on lines 4, 5, 6\)"):
        load_pipedream(path)


# -- dnn-partitioning ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", DNN)
def test_dnn_counts_and_compute(spec):
    raw = json.loads(bundled_path(spec).read_text())
    g = load_graph(spec)
    assert (len(g.ops), len(g.edges)) == (len(raw["nodes"]), len(raw["edges"]))
    assert g.total_compute("V100") == pytest.approx(
        sum(n["fpgaLatency"] for n in raw["nodes"]) / 1000, rel=1e-12)
    assert g.total_compute("cpu") == pytest.approx(
        sum(n["cpuLatency"] for n in raw["nodes"]) / 1000, rel=1e-12)
    assert sum(op.role != "forward" for op in g.ops) == sum(
        bool(n["isBackwardNode"]) for n in raw["nodes"])
    assert sum(e.bytes for e in g.edges) == sum(math.ceil(e["size"]) for e in raw["edges"])
    assert g.metadata["max_devices"] == raw["maxFPGAs"]
    assert g.metadata["max_bytes_per_device"] == raw["maxSizePerFPGA"]
    json.dumps(dict(g.metadata))


def test_dnn_layer_graph_matches_pipedream_in_ms():
    """The unit evidence: the ResNet50 layer graph's latencies are PipeDream's ms."""
    layers, _ = raw_pipedream(bundled_path("pipedream:resnet50"))
    g = load_graph("dnn:LayerGraphs/resnet50_training")
    for name, (fwd, bwd, act, params) in layers.items():
        assert g.op(name).compute["V100"] == fwd / 1000
        assert g.op(name + "grad").compute["V100"] == bwd / 1000
    assert (g.op("node77").output_bytes, g.op("node77").param_bytes) == (205520896, 4096)
    assert g.op("node77").colocation == g.op("node77grad").colocation == "77"


def test_dnn_operator_graph_fields():
    g = load_graph("dnn:bert_l-3_training")  # unique stem: short alias
    weight = g.op("cls.seq_relationship.weight")
    assert (weight.param_bytes, weight.output_bytes, weight.role) == (1024, 0, "forward")
    assert g.op("MatMul27").type == "MatMul"
    assert any(op.role == "update" for op in g.ops) and g.metadata["granularity"] == "operator"


def _dnn_file(tmp_path, mutate=None):
    data = {"maxSizePerFPGA": 1e9, "maxFPGAs": 2, "maxCPUs": 1,
            "nodes": [{"id": i, "name": "n", "supportedOnFpga": i != 2, "cpuLatency": 2.0,
                       "fpgaLatency": 1.0, "isBackwardNode": 0, "colorClass": i, "size": 10.0}
                      for i in range(3)],
            "edges": [{"sourceId": 0, "destId": 1, "cost": 1.0},
                      {"sourceId": 1, "destId": 2, "cost": 0.5, "size": 4.0}]}
    if mutate:
        mutate(data)
    path = tmp_path / "small.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def test_dnn_small_file(tmp_path):
    g = load_dnn_partitioning(_dnn_file(tmp_path))
    assert [op.name for op in g.ops] == ["n#0", "n#1", "n#2"]
    assert g.metadata["cpu_only"] == ["n"]
    assert [e.bytes for e in g.edges] == [8, 4]  # the missing size derived from cost
    assert g.metadata["estimated"]


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["nodes"][1].pop("fpgaLatency"), "nodes[1].fpgaLatency"),
    (lambda d: d["nodes"][2].update(size="big"), "nodes[2].size"),
    (lambda d: d["nodes"][0].update(cpuLatency=-1), "nodes[0].cpuLatency"),
    (lambda d: d["edges"][1].update(destId=7), "edges[1].destId"),
    (lambda d: d.pop("maxFPGAs"), "maxFPGAs"),
    (lambda d: d.update(nodes={}), "nodes"),
])
def test_dnn_malformed_fields(tmp_path, mutate, field):
    with pytest.raises(FormatError) as err:
        load_dnn_partitioning(_dnn_file(tmp_path, mutate))
    assert err.value.field == field and "small.json" in str(err.value)


def test_dnn_syntax_error_line(tmp_path):
    path = _dnn_file(tmp_path)
    lines = path.read_text().splitlines()
    lines[5] = lines[5] + ","  # a trailing comma inside an object
    path.write_text("\n".join(lines))
    with pytest.raises(FormatError) as err:
        load_graph(path)
    assert err.value.line is not None and f"line {err.value.line}" in str(err.value)


# -- dispatch --------------------------------------------------------------------------------------
def test_load_graph_dispatch(tmp_path):
    assert detect_format(bundled_path("pipedream:vgg16")) == "pipedream"
    assert detect_format(bundled_path("dnn:gnmt_training")) == "dnn-partitioning"
    native = tmp_path / "g.json"
    save_graph(load_graph("pipedream:vgg16"), native)
    assert detect_format(native) == "native"
    assert load_graph(native).metadata["format"] == "pipedream"
    assert len(load_graph(str(bundled_path("dnn:gnmt_training")))) == 192
    assert load_graph("pipedream:alexnet", device_kind="P100").device_kinds() == {"P100"}


def test_unknown_or_missing_names_list_bundled(tmp_path):
    with pytest.raises(FormatError) as err:  # close to one: that one, not the whole list
        load_graph("pipedream:resnet9000")
    assert "did you mean 'pipedream:resnet50'" in str(err.value)
    assert "dnn:LayerGraphs/gnmt_training" not in str(err.value)
    with pytest.raises(FormatError) as err:  # close to none: every name
        load_graph("pipedream:zzzz")
    assert "pipedream:resnet50" in str(err.value) and "dnn:LayerGraphs/gnmt_training" in str(err.value)
    with pytest.raises(FormatError, match="LayerGraphs/resnet50_training or"):
        load_graph("dnn:resnet50_training")  # in both folders
    with pytest.raises(FormatError, match="no such file.*pipedream:resnet50"):
        load_graph(tmp_path / "nope.txt")
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    with pytest.raises(FormatError, match="unrecognised"):
        load_graph(other)
    (tmp_path / "x.json").write_text('{"a": 1}')
    with pytest.raises(FormatError, match="neither"):
        load_graph(tmp_path / "x.json")
