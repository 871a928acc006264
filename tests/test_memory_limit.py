"""A per-device memory cap for search, compare and evaluate (``--memory-limit 8GiB``): every
device's memory is capped, so feasibility, tables, JSON and figures all read the cap."""

from __future__ import annotations

import json

import pytest

from moplace import load_cluster
from moplace.cli import main
from moplace.errors import ClusterError

GIB = 2**30


def run(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_capped_cluster_keeps_its_links_and_servers():
    c = load_cluster("2x4xV100-IB100")
    capped = c.capped(3 * GIB)
    assert capped.memory.tolist() == [3 * GIB] * 8
    assert capped.name == "2x4xV100-IB100 (memory capped at 3 GiB)"
    assert (capped.bandwidth == c.bandwidth).all() and capped.server.tolist() == c.server.tolist()
    assert [capped.route(0, 4).tolist()] == [c.route(0, 4).tolist()]
    assert c.capped(64 * GIB).memory.tolist() == c.memory.tolist()  # a cap above: no change
    with pytest.raises(ClusterError, match="memory cap"):
        c.capped(0)


def test_evaluate_reads_feasibility_against_the_cap(capsys):
    base = ["evaluate", "pipedream:resnet50", "--cluster", "4xV100-NVLink", "--baseline",
            "data-parallel", "--json"]
    code, out, _ = run(capsys, base)
    free = json.loads(out)
    assert code == 0 and free["feasible"]  # 4.7 GiB on 16 GiB devices
    code, out, _ = run(capsys, base + ["--memory-limit", "3GiB"])
    capped = json.loads(out)
    assert code == 0 and not capped["feasible"]
    assert capped["cluster"] == "4xV100-NVLink (memory capped at 3 GiB)"
    assert {d["capacity_bytes"] for d in capped["devices"]} == {3 * GIB}
    assert capped["memory_excess_bytes"] == pytest.approx(
        sum(max(d["peak_mem_bytes"] - 3 * GIB, 0) for d in capped["devices"]))
    assert capped["runtime_s"] == free["runtime_s"]  # the cap changes feasibility, not the run


def test_search_keeps_only_points_under_the_cap_and_records_it(capsys, tmp_path):
    code, out, _ = run(capsys, ["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink",
                                "--searcher", "random", "--budget", "40", "--no-mlflow",
                                "--out", tmp_path, "--memory-limit", "1GiB", "--json"])
    assert code == 0
    front = json.loads((tmp_path / "front.json").read_text())
    assert front["memory_limit_bytes"] == GIB
    assert front["points"] and all(p["peak_mem_bytes"] <= GIB for p in front["points"])
    # evaluating a point again under the same cap: no note that the cluster differs
    code, out, err = run(capsys, ["evaluate", "pipedream:alexnet", "--cluster", "4xV100-NVLink",
                                  "--memory-limit", "1GiB", "--strategy",
                                  tmp_path / "front.json", "--point", "0", "--json"])
    assert code == 0 and json.loads(out)["feasible"] and "differ" not in err
    # figures drawn again later read the cap from front.json
    from moplace.cli.review import _plot_source

    class Args:
        source, graph, cluster = str(tmp_path / "front.json"), None, None
    _, problem, _ = _plot_source(Args)
    assert problem.cluster.memory.tolist() == [GIB] * 4


@pytest.mark.parametrize("value", ["0", "-1GiB", "3 parsecs", "1e400", ""])
def test_a_bad_cap_is_one_line(capsys, value):
    code, out, err = run(capsys, ["evaluate", "pipedream:alexnet", "--cluster", "4xV100-NVLink",
                                  "--baseline", "single", "--memory-limit", value])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "argument --memory-limit: " in err
