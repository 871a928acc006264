"""Optimizer state apart from the weights (issue 32): update ops keep the state of the optimizer
the source names, or the one ``--optimizer`` asks for, wherever a graph is loaded."""

from __future__ import annotations

import json

import pytest

from moplace import load_cluster, load_graph, simulate
from moplace.cli import main
from moplace.core.baselines import baseline
from moplace.core.optimizer import OPTIMIZERS, update_weights, with_optimizer
from moplace.errors import GraphError

BERT = "dnn:OperatorGraphs/bert_l-3_training"


def _state(g):
    return sum(op.param_bytes for op in g.ops if op.role == "update")


def test_pipedream_profiles_keep_a_momentum_copy_as_given():
    g, raw = load_graph("pipedream:resnet50"), load_graph("pipedream:resnet50", optimizer=None)
    assert g.metadata["optimizer"] == "momentum" and _state(g) == _state(raw)
    assert _state(g) == pytest.approx(update_weights(g).sum()) and _state(g) > 0
    assert _state(load_graph("pipedream:resnet50", optimizer="adam")) == 2 * _state(g)
    assert _state(load_graph("pipedream:resnet50", optimizer="sgd")) == 0


def test_operator_graphs_name_adam_whose_state_the_files_leave_out():
    g, raw = load_graph(BERT), load_graph(BERT, optimizer=None)
    assert g.metadata["optimizer"] == "adam" and _state(raw) == 0
    assert _state(g) == pytest.approx(2 * update_weights(g).sum())
    weights = sum(op.param_bytes for op in g.ops if op.role == "forward")
    assert 0.9 * 2 * weights < _state(g) <= 2 * weights  # Adam: two copies of the weights
    c = load_cluster("4xV100-NVLink")
    dp = baseline("data-parallel", g, 4)
    more = simulate(g, c, dp).peak_memory.max() - simulate(raw, c, dp).peak_memory.max()
    assert more == pytest.approx(_state(g))  # every replica keeps the whole state


def test_mixed_precision_keeps_the_state_and_a_master_copy_in_fp32():
    """ZeRO's accounting: per FP16 parameter (2 bytes) Adam keeps 12 bytes (FP32 master copy,
    momentum and variance), momentum 8, SGD 4."""
    g = load_graph("pipedream:resnet50", optimizer=None)
    weights = update_weights(g).sum()
    for name, per_param in (("adam-mixed", 12), ("momentum-mixed", 8), ("sgd-mixed", 4)):
        mixed = load_graph("pipedream:resnet50", optimizer=name)
        assert mixed.metadata["optimizer"] == name
        assert _state(mixed) == pytest.approx(per_param / 2 * weights, rel=1e-6)


def test_without_update_ops_there_is_nowhere_to_keep_state():
    g = load_graph("dnn:LayerGraphs/resnet50_training", optimizer="auto")
    assert "optimizer" not in g.metadata  # nothing named: as given
    with pytest.raises(GraphError, match="no update ops"):
        with_optimizer(g, "adam")
    with pytest.raises(GraphError, match="unknown optimizer 'lion'; optimizers are: "
                       + ", ".join(OPTIMIZERS)):
        with_optimizer(load_graph(BERT), "lion")


def test_optimizer_on_the_command_line(capsys, tmp_path):
    base = ["evaluate", BERT, "--cluster", "4xV100-NVLink", "--baseline", "data-parallel",
            "--json"]
    peaks = {}
    for opt in OPTIMIZERS:
        assert main(base + ["--optimizer", opt]) == 0
        peaks[opt] = json.loads(capsys.readouterr().out)["peak_mem_bytes"]
    assert peaks["sgd"] < peaks["momentum"] < peaks["adam"]
    assert main(base) == 0  # the default: the optimizer the source names
    assert json.loads(capsys.readouterr().out)["peak_mem_bytes"] == peaks["adam"]
    assert main(["search", BERT, "--cluster", "4xV100-NVLink", "--searcher", "data-parallel",
                 "--no-mlflow", "--quiet", "--out", str(tmp_path), "--optimizer", "sgd"]) == 0
    capsys.readouterr()
    front = json.loads((tmp_path / "front.json").read_text())
    assert front["optimizer"] == "sgd" and front["points"][0]["peak_mem_bytes"] == peaks["sgd"]
    from moplace.cli.review import _plot_source

    class Args:
        source, graph, cluster = str(tmp_path / "front.json"), None, None
    assert _state(_plot_source(Args)[1].graph) == 0  # drawn again with the search's optimizer
    code = main(["evaluate", "dnn:LayerGraphs/resnet50_training", "--cluster", "4xV100-NVLink",
                 "--baseline", "single", "--optimizer", "adam"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no update ops" in err
