"""In-place ops (issue 32): an element-wise op writes its output into an input no other op
reads, as frameworks do, when the two run on one device; ``--no-inplace`` turns it off."""

from __future__ import annotations

import json

import numpy as np
import pytest

import moplace
from moplace import OpGraph, load_cluster, load_graph, simulate
from moplace.cli import main
from moplace.core.baselines import BASELINES, baseline
from moplace.core.graph import Edge, Op
from moplace.core.strategy import Strategy
from moplace.costs.costmodel import CostModel
from moplace.simulator.build import build_task_graph
from moplace.simulator.reference import reference_trace

MIB = 2**20
BERT = "dnn:OperatorGraphs/bert_l-3_inference"


def _chain(second_reader: bool):
    """x (100 MiB) -> relu (in place, 100 MiB) -> y (10 MiB), optionally x -> z as well."""
    op = lambda name, kind, mib=100: Op(name, kind, compute={"V100": 1e-3},  # noqa: E731
                                        output_bytes=mib * MIB)
    ops = [op("x", "MatMul"), op("relu", "Relu"), op("y", "MatMul", 10)] + (
        [op("z", "MatMul", 10)] if second_reader else [])
    edges = [Edge(0, 1, 100 * MIB), Edge(1, 2, 100 * MIB)] + (
        [Edge(0, 3, 100 * MIB)] if second_reader else [])
    return OpGraph(ops, edges, name="chain")


@pytest.mark.parametrize("second_reader", [False, True])
def test_an_op_runs_in_place_only_into_an_input_nobody_else_reads(second_reader):
    g = _chain(second_reader)
    c = moplace.Cluster.single()
    s = Strategy(np.zeros(len(g.ops), np.int64))
    on = simulate(g, c, s, costs=CostModel(g, c))
    off = simulate(g, c, s, costs=CostModel(g, c, inplace=False))
    # without: x and relu's output are held together (and with y's when z still needs x)
    assert off.peak_memory[0] == (210 if second_reader else 200) * MIB
    # in place: relu's output takes x's buffer, unless z still reads x
    assert on.peak_memory[0] == (210 if second_reader else 110) * MIB
    assert on.makespan == off.makespan


def test_not_in_place_across_devices():
    g, c = _chain(False), load_cluster("4xV100-NVLink")
    apart = Strategy(np.array([0, 1, 1]))  # relu's input arrives from another device
    on = simulate(g, c, apart)
    off = simulate(g, c, apart, costs=CostModel(g, c, inplace=False))
    np.testing.assert_array_equal(on.peak_memory, off.peak_memory)


def test_the_largest_input_is_the_one_written_into():
    g = load_graph(BERT)
    src = CostModel(g, load_cluster("4xV100-NVLink")).inplace_source
    add = g.index["Add36"]  # MatMul27 (358 MiB) + a bias (0.1 MiB)
    assert g.ops[src[add]].name == "MatMul27"


def test_bert_inference_fits_600_mib_devices_only_in_place():
    """BERT-3 inference on 4 devices of 600 MiB: the 358 MiB logits are written into the
    matmul's buffer, so one device holds 404 MiB; without in-place no baseline fits."""
    g = load_graph(BERT)
    c = load_cluster("4xV100-NVLink").capped(600 * MIB)
    on = {b: simulate(g, c, baseline(b, g, 4)) for b in BASELINES}
    off = {b: simulate(g, c, baseline(b, g, 4), costs=CostModel(g, c, inplace=False))
           for b in BASELINES}
    assert not any(t.feasible for t in off.values())
    assert on["single"].feasible and on["single"].peak_memory[0] < 420 * MIB


@pytest.mark.parametrize("name", ["pipedream:resnet50", BERT, "pipedream:inception_v3"])
def test_in_place_frees_memory_and_costs_no_time(name):
    g = load_graph(name)
    for cluster in ("4xV100-NVLink", "2x4xV100-IB100"):
        c = load_cluster(cluster)
        for b in BASELINES:
            s = baseline(b, g, c.n_devices)
            on = simulate(g, c, s)
            off = simulate(g, c, s, costs=CostModel(g, c, inplace=False))
            assert (on.peak_memory <= off.peak_memory).all(), (name, cluster, b)
            np.testing.assert_array_equal(on.task_end, off.task_end)


@pytest.mark.parametrize("b", ["data-parallel", "round-robin", "single"])
def test_the_fast_loop_matches_the_reference_in_place(b):
    g, c = load_graph("dnn:OperatorGraphs/bert_l-3_training"), load_cluster("2x4xV100-IB100")
    s = baseline(b, g, 8)
    tg = build_task_graph(g, s, CostModel(g, c))
    assert (tg.ip_src >= 0).any()
    fast = simulate(g, c, s, record=True)
    ref = reference_trace(tg, c, len(g.ops), record=True)
    np.testing.assert_array_equal(fast.peak_memory, ref.peak_memory)
    np.testing.assert_array_equal(fast.memory, ref.memory)
    np.testing.assert_array_equal(fast.task_end, ref.task_end)


def test_no_inplace_on_the_command_line(capsys, tmp_path):
    base = ["evaluate", BERT, "--cluster", "4xV100-NVLink", "--memory-limit", "600MiB",
            "--baseline", "single", "--json"]
    assert main(base) == 0
    assert json.loads(capsys.readouterr().out)["feasible"]
    assert main(base + ["--no-inplace"]) == 0
    assert not json.loads(capsys.readouterr().out)["feasible"]
    # a search's front says whether ops ran in place; a checkpoint refuses the other setting
    ck = tmp_path / "ck"
    argv = ["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher",
            "random", "--budget", "10", "--no-mlflow", "--quiet", "--out", str(tmp_path),
            "--checkpoint", str(ck)]
    assert main(argv + ["--no-inplace"]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "front.json").read_text())["inplace"] is False
    assert main(argv + ["--budget", "20", "--force"]) == 2
    assert "pass --no-inplace to continue it" in capsys.readouterr().err
