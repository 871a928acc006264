"""The main job's report (`moplace evaluate GRAPH --cluster C --baseline all`, the README's
first command; issue 48, defect 8): the batch it is for, one unit per quantity across the
whole report, a baseline that is another's plan on this graph said so (and why), and the
command to run next."""

from __future__ import annotations

import json
import re

from moplace.cli import main

MAIN = ["evaluate", "pipedream:resnet50", "--cluster", "8xV100-16GB-NVLink", "--baseline", "all"]


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _units(out: str, column: str) -> set[str]:
    return set(re.findall(re.escape(column) + r" \(([^)]+)\)", out))


def test_the_main_job_reads_in_one_unit_per_quantity(capsys):
    code, out, err = run(capsys, MAIN)
    assert code == 0 and err == ""
    assert out.splitlines()[0] == ("graph resnet50 (461 ops, 670 edges, batch 128) on "
                                   "8xV100-16GB-NVLink (8 devices)")
    # times: the summary's runtime, each strategy's runtime and busy time, in one unit
    assert _units(out, "runtime") == _units(out, "busy") == {"s"}
    assert re.findall(r"^  runtime [\d.]+ (\S+) ", out, re.M) == ["s"] * 4
    # traffic: peak communication, sent and received, in one unit
    assert _units(out, "peak communication") == _units(out, "sent") \
        == _units(out, "received") == {"GiB"}
    assert set(re.findall(r"peak communication [\d.]+ (\S+) ", out)) == {"GiB"}
    # memory held: peak memory and capacity
    assert _units(out, "peak memory") == _units(out, "capacity") == {"GiB"}


def test_a_baseline_that_is_another_on_this_graph_says_why(capsys):
    code, out, _ = run(capsys, MAIN)
    row = next(line for line in out.splitlines() if line.startswith("tensor-parallel "))
    assert row.endswith("= data-parallel: no op of resnet50 can be split on tensor, so its "
                        "groups split on batch")
    assert ("\ntensor-parallel: the same plan as data-parallel (no op of resnet50 can be split "
            "on tensor, so its groups split on batch), above\n") in out
    assert out.count("\n  device  kind") == 4  # the same device table is not printed twice
    code, out, _ = run(capsys, MAIN + ["--json"])
    results = json.loads(out)["results"]
    assert results["tensor-parallel"]["same_plan_as"] == "data-parallel"
    assert "same_plan_as" not in results["data-parallel"]
    # on one device every baseline is single
    code, out, _ = run(capsys, ["evaluate", "pipedream:alexnet", "--cluster", "1xV100",
                                "--baseline", "all"])
    assert "(1 device)" in out.splitlines()[0]
    assert out.count("= single: every op on one device") == 4


def test_the_report_ends_with_the_next_command(capsys):
    _, out, _ = run(capsys, MAIN)
    assert out.rstrip().splitlines()[-1] == (
        "next: moplace search pipedream:resnet50 --cluster 8xV100-16GB-NVLink --searcher nsga2 "
        "--out resnet50  (the trade-off front beyond the baselines; then `moplace show "
        "resnet50/front.json`)")
