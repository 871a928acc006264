"""Graph sources (`moplace.io.sources`): ``PREFIX:NAME`` graph names that a front end resolves,
taken by every command's graph argument; ``zoo:MODEL`` registered by the command line without
loading TensorFlow."""

import json
import subprocess
import sys

import pytest

from moplace.cli import main
from moplace.errors import FormatError
from moplace.io import load_graph
from moplace.io.native import save_graph
from moplace.io.sources import GRAPH_SOURCES, add_source, split_spec

CLUSTER = "4xV100-NVLink"


@pytest.fixture
def fake_source():
    """A source ``fake:NAME`` whose graphs are the bundled ``pipedream:NAME``; yields the
    calls its loader got."""
    calls = []

    def load(name, **options):
        calls.append((name, options))
        return load_graph(f"pipedream:{name}")

    add_source("fake", load, "a test's graphs")
    try:
        yield calls
    finally:
        GRAPH_SOURCES.remove("fake")


def test_a_registered_source_is_every_commands_graph(fake_source, tmp_path, capsys):
    name = load_graph("pipedream:alexnet").name
    assert main(["evaluate", "fake:alexnet", "--cluster", CLUSTER, "--baseline", "single",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["graph"] == name
    assert main(["search", "fake:alexnet", "--cluster", CLUSTER, "--searcher", "random",
                 "--budget", "4", "--no-mlflow", "--quiet", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "front.json").read_text())["graph"] == name
    assert fake_source == [("alexnet", {}), ("alexnet", {})]


def test_options_reach_the_loader(fake_source):
    load_graph("fake:vgg16", batch=8)
    assert fake_source == [("vgg16", {"batch": 8})]


def test_bundled_names_and_files_come_before_sources(fake_source, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="bundled"):
        add_source("pipedream", lambda name: None)
    with pytest.raises(ValueError, match="already registered"):
        add_source("fake", lambda name: None)
    assert load_graph("pipedream:alexnet").name  # not the source's
    monkeypatch.chdir(tmp_path)
    save_graph(load_graph("pipedream:vgg16"), tmp_path / "fake:alexnet")
    assert load_graph("fake:alexnet").name == load_graph("pipedream:vgg16").name
    assert fake_source == []


def test_an_unknown_prefix_names_the_known_sources(capsys):
    with pytest.raises(FormatError, match=r"no such file.*nosuch: is no graph source.*zoo:"):
        load_graph("nosuch:thing")
    assert main(["evaluate", "nosuch:thing", "--cluster", CLUSTER, "--baseline", "single"]) == 2
    err = capsys.readouterr().err
    assert "nosuch: is no graph source" in err and "zoo:NAME" in err


@pytest.mark.parametrize("spec, split", [
    ("zoo:mlp", ("zoo", "mlp")), ("hf:org/model", ("hf", "org/model")), ("zoo:", ("zoo", "")),
    ("C:\\graph.json", None), ("http://host/graph.json", None), ("graph.json", None),
    ("Zoo:mlp", None)])
def test_split_spec(spec, split):
    assert split_spec(spec) == split


def test_zoo_is_known_to_every_user_of_moplace_without_tensorflow():
    code = ("import sys, moplace\n"
            "from moplace.io.sources import GRAPH_SOURCES\n"
            "heavy = ('tensorflow', 'keras', 'moplace.tf')\n"
            "print('zoo' in GRAPH_SOURCES, sorted(m for m in heavy if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "True []"


def test_zoo_names_resolve_through_the_python_api(monkeypatch):
    """`moplace.load_graph` (the API a Dask worker uses too) hands ``zoo:`` to the zoo
    source (here a stand-in for the TensorFlow profiler, which the slow test runs)."""
    import moplace
    from moplace.tf import graphsource

    made = moplace.load_graph("pipedream:vgg16")
    monkeypatch.setattr(graphsource, "zoo_graph", lambda model, **kw: made if model == "mlp"
                        else None)
    assert moplace.load_graph("zoo:mlp") is made


def test_an_unknown_zoo_model_names_the_zoo(capsys):
    pytest.importorskip("tensorflow")
    assert main(["evaluate", "zoo:nosuch", "--cluster", CLUSTER, "--baseline", "single"]) == 2
    err = capsys.readouterr().err
    assert "unknown zoo model 'nosuch'" in err and "mlp" in err


@pytest.mark.slow
def test_evaluate_a_zoo_model(capsys):
    """``zoo:mlp`` profiled with TensorFlow at batch 32, as a sweep's default (about 10 s)."""
    pytest.importorskip("tensorflow")
    assert main(["evaluate", "zoo:mlp", "--cluster", CLUSTER, "--baseline", "single",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["graph"] == "mlp" and out["feasible"] and out["runtime_s"] > 0
