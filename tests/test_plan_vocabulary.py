"""One vocabulary for a plan (issue 48, defect 6): the table's plan column counts splits in ops
as `show --point` does, names a regular plan by its degrees ("data parallel ×4"), counts
recomputation in co-location groups, and leaves out the levers that act on nothing (buckets
and ZeRO where no weights are replicated: one device, a pipeline of whole layers)."""

from __future__ import annotations

import json
import re

from moplace import load_cluster, load_graph
from moplace.cli import main
from moplace.core.baselines import baseline
from moplace.core.levers import plan_of
from moplace.review.units import plan_text

GRAPH, CLUSTER = "pipedream:vgg16", "4xV100-NVLink"


def test_a_data_parallel_plan_reads_as_its_degree():
    g = load_graph(GRAPH)
    s = baseline("data-parallel", g, 4).with_options(zero_stage=1)
    plan = plan_of(s, g)
    assert plan["degrees"] == {"data": 4, "tensor": 1, "pipeline": 1} and plan["replicas"]
    assert plan["split_ops"] == len(s.splits) > plan["split_groups"]
    assert plan_text(plan) == "data parallel ×4, 25.00 MiB buckets, ZeRO-1"


def test_levers_that_act_on_nothing_are_left_out():
    g = load_graph(GRAPH)
    one = baseline("single", g, 4).with_options(bucket_bytes=25 * 2**20, zero_stage=1,
                                                 micro_batches=4)
    plan = plan_of(one, g)
    assert plan["bucket_bytes"] > 0 and plan["zero_stage"] == 1 and not plan["replicas"]
    assert plan_text(plan) == "1 device, 4 micro-batches 1F1B"
    pipeline = baseline("layer-split", g, 4).with_options(bucket_bytes=25 * 2**20, zero_stage=3)
    text = plan_text(plan_of(pipeline, g))
    assert "buckets" not in text and "ZeRO" not in text


def test_an_irregular_plan_counts_its_splits_in_ops_as_show_does(capsys, tmp_path):
    assert main(["search", GRAPH, "--cluster", CLUSTER, "--searcher", "random", "--budget",
                 "40", "--no-mlflow", "--quiet", "--figures", "off", "--out", str(tmp_path)]) \
        in (0, 3)
    table = capsys.readouterr().out
    front = json.loads((tmp_path / "front.json").read_text())
    points = front["points"] or front["infeasible"]
    split = [k for k, p in enumerate(points) if p["plan"]["degrees"] is None
             and p["plan"]["split_ops"]]
    assert split, "the random search found no irregular split plan to read"
    k = split[0]
    n = points[k]["plan"]["split_ops"]
    assert n == len(points[k]["strategy"]["splits"])
    assert f"{n} ops split" in plan_text(points[k]["plan"])
    assert not re.search(r"\d split|\d recomputed", table)  # ops split, groups recomputed
    if front["points"]:
        main(["show", str(tmp_path / "front.json"), "--point", str(k)])
        assert f"  {n} ops split (parts:" in capsys.readouterr().out


def test_a_front_written_before_the_vocabulary_reads_in_groups():
    old = {"devices": 4, "split_groups": 40, "tensor_groups": 2, "bucket_bytes": 2.0**20,
           "zero_stage": 1, "recomputed_groups": 1, "micro_batches": 1, "schedule": None}
    assert plan_text(old) == ("4 devices, 40 groups split (2 tensor-parallel), 1.000 MiB "
                              "buckets, ZeRO-1, 1 group recomputed")
    damaged = {**old, "degrees": {"data": "x"}, "split_ops": -3, "replicas": False}
    assert plan_text(damaged) == "4 devices, 40 groups split (2 tensor-parallel), 1 group " \
        "recomputed"  # damaged new fields: read as the older front it then is
    assert plan_text({**old, "degrees": {"data": 2, "tensor": 2, "pipeline": 2}}).startswith(
        "2 pipeline stages × data parallel ×2 × tensor parallel ×2, ")
