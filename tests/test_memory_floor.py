"""A memory cap no plan can fit under is refused before the search, naming the floor; a
negative cap is our one line in both spellings; a cap above the devices' memory is taken with a
warning; a search or comparison that finds nothing feasible exits 3 (issue 48, defect 4)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from moplace import load_cluster, load_graph
from moplace.cli import main
from moplace.cli.problem import NOTHING_FEASIBLE, memory_floor
from moplace.optimize.problem import Problem

SEARCH = ["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher", "random",
          "--budget", "10", "--no-mlflow", "--quiet", "--figures", "off", "--force"]


def run(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name,cluster,optimizer", [
    ("pipedream:alexnet", "4xV100-NVLink", "adam"),
    ("pipedream:vgg16", "2x4xV100-IB100", "momentum")])
def test_the_floor_is_below_every_plan_the_simulator_makes(name, cluster, optimizer):
    """Random genomes (splits, ZeRO-1/3, micro-batches, recomputation) and the baselines under
    every ZeRO stage: none holds less on its fullest device than the floor."""
    from moplace.core.baselines import BASELINES, baseline

    graph, c = load_graph(name, optimizer=optimizer), load_cluster(cluster)
    floor, why = memory_floor(graph, c.n_devices)
    assert floor == pytest.approx(graph.arrays.param_bytes.sum() / c.n_devices)
    assert f"sharded over all {c.n_devices} devices" in why
    problem = Problem(graph, c)
    strategies = [problem.genome.decode(x)
                  for x in problem.genome.sample(40, np.random.default_rng(3))]
    strategies += [baseline(b, graph, c.n_devices).with_options(zero_stage=z)
                   for b in BASELINES for z in (0, 1, 3)]
    assert {int(s.zero_stage) for s in strategies} >= {0, 1, 3}
    assert any(s.splits for s in strategies) and any(s.micro_batches > 1 for s in strategies)
    least = min(problem.evaluate(s).trace.peak_memory[:c.n_devices].max() for s in strategies)
    assert floor <= least


def test_an_op_no_plan_can_split_holds_its_own_whole():
    from moplace.core.graph import Edge, Op, OpGraph

    ops = [Op("embed", param_bytes=900, output_bytes=8, compute={"V100": 1e-3}),
           Op("head", param_bytes=100, output_bytes=8, compute={"V100": 1e-3},
              splittable=("batch",))]
    graph = OpGraph(ops, [Edge(0, 1, 8)], name="two")
    assert memory_floor(graph, 4) == (900.0, "op embed's weights and optimizer state, which no "
                                             "plan can split")


def test_a_cap_below_the_floor_is_refused_before_the_search(capsys, tmp_path):
    code, out, err = run(capsys, SEARCH + ["--out", tmp_path / "out", "--memory-limit", "10MB"])
    assert (code, out) == (2, "")
    assert err == ("moplace: error: --memory-limit 10MB is below the least any plan of alexnet "
                   "can hold on 4xV100-NVLink: 116.5 MiB per device (its 466.2 MiB of weights "
                   "and optimizer state sharded over all 4 devices)\n")
    assert not (tmp_path / "out").exists()
    for command in (["evaluate", "pipedream:alexnet", "--cluster", "4xV100-NVLink",
                     "--baseline", "single"],
                    ["compare", "pipedream:alexnet", "--cluster", "4xV100-NVLink",
                     "--searchers", "random", "--budget", "5", "--no-mlflow", "--quiet",
                     "--out", tmp_path / "c"]):
        code, out, err = run(capsys, command + ["--memory-limit", "100MiB"])
        assert code == 2 and err.count("\n") == 1 and "116.5 MiB per device" in err


@pytest.mark.parametrize("argv", [["--memory-limit", "-4GB"], ["--memory-limit=-4GB"],
                                  ["--memory-limit", "-0.5GiB"], ["--memory-limit", "-7"]])
def test_a_negative_cap_is_named_in_either_spelling(capsys, argv):
    code, out, err = run(capsys, ["evaluate", "pipedream:alexnet", "--cluster", "4xV100-NVLink",
                                  "--baseline", "single", *argv])
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "argument --memory-limit: must be a positive memory size" in err


def test_a_cap_above_every_device_is_taken_with_a_warning(capsys):
    code, out, err = run(capsys, ["evaluate", "pipedream:alexnet", "--cluster", "4xV100-NVLink",
                                  "--baseline", "single", "--memory-limit", "100GB", "--json"])
    assert code == 0 and json.loads(out)["feasible"]
    assert err == ("moplace: warning: --memory-limit 100GB is above the memory of every device "
                   "of 4xV100-NVLink (at most 16.00 GiB): it changes nothing, the devices' own "
                   "memory bounds the plans\n")


def test_nothing_feasible_exits_3_with_the_least_violating_points(capsys, tmp_path):
    code, out, _ = run(capsys, SEARCH + ["--out", tmp_path, "--memory-limit", "200MB"])
    assert code == NOTHING_FEASIBLE == 3
    assert "no feasible strategy found; the least-violating ones:" in out
    front = json.loads((tmp_path / "front.json").read_text())
    assert not front["points"] and front["infeasible"]
    code, out, _ = run(capsys, SEARCH + ["--out", tmp_path, "--memory-limit", "200MB", "--json"])
    assert code == 3 and json.loads(out)["feasible_found"] is False
    code, out, _ = run(capsys, ["compare", "pipedream:alexnet", "--cluster", "4xV100-NVLink",
                                "--searchers", "random", "--budget", "5", "--no-mlflow",
                                "--quiet", "--out", tmp_path, "--force", "--memory-limit",
                                "200MB", "--json"])
    assert code == 3 and json.loads(out)["combined_hypervolume"] == 0
    code, _, _ = run(capsys, SEARCH + ["--out", tmp_path, "--memory-limit", "2GiB"])
    assert code == 0
    # evaluate answers what was asked: an infeasible strategy is a result, not a failure
    code, out, _ = run(capsys, ["evaluate", "pipedream:alexnet", "--cluster", "4xV100-NVLink",
                                "--baseline", "single", "--memory-limit", "200MB"])
    assert code == 0 and "feasible: no" in out
