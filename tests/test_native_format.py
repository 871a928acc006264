"""moplace's own JSON graph format: exact round trips and precise errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from moplace.core.graph import Op, OpGraph
from moplace.errors import FormatError, GraphError
from moplace.io import list_bundled, load_graph, load_native, save_graph

DOC = Path(__file__).resolve().parents[1] / "docs" / "graph-format.md"


def doc_example() -> str:
    """The hand-written example of docs/graph-format.md (so the doc cannot go stale)."""
    return re.search(r"```json\n(.*?)```", DOC.read_text(), re.S).group(1)


def assert_same(a: OpGraph, b: OpGraph):
    assert a.name == b.name
    assert a.ops == b.ops
    assert a.edges == b.edges
    assert dict(a.metadata) == dict(b.metadata)
    for x, y in zip(a.ops, b.ops):  # bit-identical floats, not merely close
        assert [v.hex() for v in map(float, x.compute.values())] == \
               [v.hex() for v in map(float, y.compute.values())]


@pytest.mark.parametrize("spec", list_bundled())
def test_round_trip_bundled(spec, tmp_path):
    g = load_graph(spec)
    path = tmp_path / "g.json"
    save_graph(g, path)
    assert_same(g, load_native(path))


def test_hand_written_example(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(doc_example())
    g = load_graph(path)
    assert (g.name, len(g.ops), len(g.edges)) == ("tiny-mlp", 3, 2)
    grad = g.op("fc1/grad")
    assert grad.part_compute[2]["V100"] == 0.0013 and grad.grad_bytes == 1048576
    upd = g.op("fc1/update")
    assert (upd.output_bytes, upd.splittable, upd.role) == (0, (), "update")
    again = tmp_path / "again.json"
    save_graph(g, again)
    assert_same(g, load_native(again))


def test_defaults_and_awkward_values(tmp_path):
    g = OpGraph([Op("a"), Op("b", compute={"V100": np.float64(0.1) + 0.2, "cpu": 1e-300},
                               output_bytes=np.int64(7), part_compute={3: {"V100": 1 / 3}})],
                [("a", "b", 5)], name="odd", metadata={"nested": {"x": [1, 2.5, None]}})
    path = tmp_path / "odd.json"
    save_graph(g, path)
    assert_same(g, load_native(path))
    minimal = tmp_path / "min.json"
    minimal.write_text('{"format": "moplace-graph", "version": 1, "ops": [{"name": "x"}]}')
    m = load_native(minimal)
    assert (m.name, m.ops, m.edges) == ("min", (Op("x"),), ())


def _bad(tmp_path, edit) -> FormatError:
    data = json.loads(doc_example())
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FormatError) as err:
        load_native(path)
    assert "bad.json" in str(err.value)
    return err.value


def test_unknown_op_key_is_named(tmp_path):
    err = _bad(tmp_path, lambda d: d["ops"][1].update(outptu_bytes=5))
    assert err.field == "ops[1].outptu_bytes" and "outptu_bytes" in str(err)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["ops"][0]["compute"].update(V100="fast"), "ops[0].compute.V100"),
    (lambda d: d["ops"][0]["compute"].update(V100=-1.0), "ops[0].compute.V100"),
    (lambda d: d["ops"][2].update(param_bytes=1.5), "ops[2].param_bytes"),
    (lambda d: d["ops"][1].update(splittable=["width"]), "ops[1].splittable"),
    (lambda d: d["ops"][1].update(role="sideways"), "ops[1].role"),
    (lambda d: d["ops"][1]["part_compute"].update({"1": {"V100": 1.0}}), "ops[1].part_compute.1"),
    (lambda d: d["ops"][0].pop("name"), "ops[0].name"),
    (lambda d: d["ops"][1].update(name="fc1"), "ops[1].name"),
    (lambda d: d["edges"][1].update(dst="fc9"), "edges[1].dst"),
    (lambda d: d["edges"][0].update(weight=3), "edges[0].weight"),
    (lambda d: d.update(version=3), "version"),
    (lambda d: d.update(format="other"), "format"),
    (lambda d: d.update(extra=1), "extra"),
])
def test_field_errors(tmp_path, edit, field):
    assert _bad(tmp_path, edit).field == field


def test_syntax_error_gives_line(tmp_path):
    lines = doc_example().splitlines()
    lines[4] = lines[4].replace('"note"', "note")
    path = tmp_path / "broken.json"
    path.write_text("\n".join(lines))
    with pytest.raises(FormatError) as err:
        load_native(path)
    assert err.value.line == 5 and "broken.json, line 5" in str(err.value)


def test_cycle_is_graph_error(tmp_path):
    data = json.loads(doc_example())
    data["edges"].append({"src": "fc1/update", "dst": "fc1"})
    path = tmp_path / "cyc.json"
    path.write_text(json.dumps(data))
    with pytest.raises(GraphError, match="cyc.json.*cycle"):
        load_native(path)


@pytest.mark.parametrize("text", ["[1, 2]", "5", '"moplace-graph"'])
def test_top_level_not_an_object(tmp_path, text):
    path = tmp_path / "odd.json"
    path.write_text(text)
    with pytest.raises(FormatError, match="odd.json"):
        load_graph(path)
    with pytest.raises(FormatError, match="must be an object"):
        load_native(path)
