"""Fidelity reports: the corrections' fit, the corrected memory, the table, the figure and MLflow.

No TensorFlow run here: the numbers are the simulator's own, so what the fit must recover is
known exactly. The testbed and the `moplace fidelity` command run for real in test_testbed.py.
"""

import json
import math

import numpy as np
import pytest

import moplace
from moplace.core.cluster import Cluster, Device
from moplace.simulator.engine import simulate


def two_devices():
    return Cluster("two", [Device("w0", "V100", 16 * 2**30, 1.0), Device("w1", "V100", 16 * 2**30, 1.0)],
                   [[0, 2e9], [2e9, 0]], [[0, 5e-4], [5e-4, 0]])


@pytest.fixture(scope="module")
def alexnet():
    return moplace.load_graph("pipedream:alexnet")


def calibration_runs(graph, latency, worker_s, step_s, count=7, seed=0, message_s=0.0):
    from moplace.testbed.calibration import calibration_strategies, run_features, with_latency

    truth = with_latency(two_devices(), latency)
    runs = []
    for s in calibration_strategies(graph, 2, count, seed):
        features = run_features(graph, two_devices(), s)
        runs.append({"measured_s": simulate(graph, truth, s).makespan + step_s
                     + worker_s * (len(s.used_devices) - 1) + message_s * features["messages"],
                     "devices_used": len(s.used_devices), **features})
    return runs


def test_calibration_recovers_the_latency_and_worker_cost_it_was_made_with(alexnet):
    from moplace.testbed.calibration import calibration_strategies, fit

    strategies = calibration_strategies(alexnet, 2, 6, seed=0)
    assert any(s.splits for s in strategies)
    runs = calibration_runs(alexnet, 200e-6, 3e-3, 1e-3)
    assert max(r["devices_used"] for r in runs) == 2
    k = fit(runs, step_s=1e-3)
    assert k["latency_s"] == pytest.approx(200e-6)
    assert k["worker_s"] == pytest.approx(3e-3, rel=1e-6)
    assert k["calibration_median_abs_error"] < 1e-9
    assert k["calibration_strategies"] == 7 and k["runs"] == runs


def test_one_run_the_simulator_cannot_explain_does_not_move_the_fit(alexnet):
    from moplace.testbed.calibration import fit

    runs = calibration_runs(alexnet, 200e-6, 3e-3, 1e-3)
    runs[-1] = {**runs[-1], "measured_s": runs[-1]["measured_s"] * 30}  # a loop across workers
    k = fit(runs, step_s=1e-3)
    assert k["latency_s"] == pytest.approx(200e-6) and k["worker_s"] == pytest.approx(3e-3, rel=1e-6)


def test_calibration_recovers_a_cost_per_message_and_keeps_it_per_run(alexnet):
    from moplace.testbed.calibration import fit

    runs = calibration_runs(alexnet, 0.0, 0.0, 1e-3, count=8, message_s=3.5e-4)
    assert len({r["messages"] for r in runs}) > 3  # few transfers to many (a price per
    # message off the latency grid: on a chain every transfer is on the critical path)
    k = fit(runs, step_s=1e-3)
    assert "messages" in k["terms"]
    assert k["latency_s"] == 0.0
    assert k["messages_s"] == pytest.approx(3.5e-4, rel=1e-3)
    assert k["worker_s"] == pytest.approx(0.0, abs=1e-6)
    assert k["held_out_median_abs_error"] < 1e-6
    assert all("messages" in r and "collectives" in r for r in k["runs"])


def test_runs_kept_before_messages_were_counted_fit_as_they_did():
    from moplace.testbed.calibration import fit

    runs = [{"measured_s": 0.01 + 0.003 * (d - 1), "devices_used": d,
             "simulated_by_latency": [0.01] * 15} for d in (1, 2, 2, 1, 2, 2)]
    k = fit(runs, step_s=0.0)
    assert k["terms"] == ["worker"] and k["worker_s"] == pytest.approx(3e-3)
    assert k["messages_s"] == 0.0 and k["collectives_s"] == 0.0


def test_enough_runs_price_the_collectives_a_minority_pays():
    from moplace.testbed.calibration import RUNS_PER_PRICE, TERMS, fit

    def runs(count):  # every run pays messages, one in four collectives too (ZeRO runs)
        out = []
        for k in range(count):
            messages, collectives = 4 + 3 * k, (6 + k if k % 4 == 3 else 0)
            out.append({"measured_s": 0.02 + 3e-4 * messages + 2e-3 * collectives,
                        "devices_used": 2, "messages": messages, "collectives": collectives,
                        "simulated_by_latency": [0.02] * 15})
        return out

    assert RUNS_PER_PRICE * len(TERMS) <= 16
    k = fit(runs(16), step_s=0.0)
    assert k["terms"] == ["worker", "messages", "collectives"]
    assert k["collectives_s"] == pytest.approx(2e-3, rel=1e-6)
    assert k["messages_s"] == pytest.approx(3e-4, rel=1e-6)
    few = fit(runs(8), step_s=0.0)  # the median of 8 cannot see the two that pay: not priced
    assert few["terms"] == ["messages"] and few["collectives_s"] == 0.0


def test_a_saved_report_is_fitted_again_from_its_runs(alexnet):
    from moplace.testbed.calibration import corrected

    r = report()
    r.corrections = {**r.corrections, "runs": calibration_runs(alexnet, 200e-6, 3e-3, 1e-3)}
    r.rows[0].simulated_by_latency = list(np.linspace(0.004, 0.006, 15))
    again = r.refit()
    assert again.corrections["latency_s"] == pytest.approx(200e-6)
    assert again.rows[0].corrected_s == pytest.approx(corrected(
        {"simulated_by_latency": r.rows[0].simulated_by_latency}, 1, again.corrections))
    assert again.rows[1].corrected_s == r.rows[1].corrected_s  # nothing stored: kept


def test_calibration_strategies_grow_from_few_moves_to_many(alexnet):
    from moplace.testbed.calibration import calibration_strategies

    strategies = calibration_strategies(alexnet, 2, 6, seed=3)
    off = [float(np.mean(s.placement != 0)) for s in strategies]
    assert off[0] < off[-1]
    assert strategies == calibration_strategies(alexnet, 2, 6, seed=3)  # same seed, same set


def test_calibration_strategies_that_split_take_the_zero_stages_in_turn(alexnet):
    from moplace.testbed.calibration import calibration_strategies

    plain = calibration_strategies(alexnet, 2, 12, seed=3)
    assert {s.zero_stage for s in plain} == {0}  # a testbed that runs no ZeRO: none
    zero = calibration_strategies(alexnet, 2, 12, seed=3, zero_stages=(0, 1, 3))
    # every second strategy splits, under stage 0, 1, 3, 0, ... (one that split nothing: 0)
    assert [s.zero_stage for s in zero] == [(0, 1, 3)[k // 2 % 3] if s.splits else 0
                                            for k, s in enumerate(zero)]
    assert {1, 3} <= {s.zero_stage for s in zero}
    assert [s.placement.tolist() for s in zero] == [s.placement.tolist() for s in plain]


def test_corrected_peaks_add_the_largest_scratch_of_the_device():
    from moplace.core.graph import OpGraph
    from moplace.core.synthetic import random_dag
    from moplace.testbed.calibration import corrected_peaks

    base = random_dag(20, seed=0)
    alone = [0, 1, 2]
    names = [base.ops[i].name for i in alone]
    meta = {"measured": {"scratch_bytes": {names[0]: 1000, names[1]: 5000, names[2]: 300}}}
    g = OpGraph(base.ops, base.edges, name="dag", metadata=meta)
    placement = np.zeros(len(g.ops), np.int64)
    placement[alone[1]] = 1
    s = moplace.Strategy(placement)
    trace = simulate(g, two_devices(), s)
    assert corrected_peaks(g, s, trace, [0, 1]) == [trace.peak_memory[0] + 1000,
                                                    trace.peak_memory[1] + 5000]


def report():
    from moplace.testbed.fidelity import FidelityReport, FidelityRow

    rows = [FidelityRow("single", "baseline", True, devices_used=1, steps=10, measured_s=0.010,
                        spread_s=(0.009, 0.011), simulated_s=0.008, corrected_s=0.0105,
                        measured_peak_bytes=[100], simulated_peak_bytes=[80.0],
                        corrected_peak_bytes=[99.0], same_as=["heft"]),
            FidelityRow("data-parallel", "baseline", True, splits=4, devices_used=2, steps=10,
                        measured_s=0.020, spread_s=(0.018, 0.024), simulated_s=0.030,
                        corrected_s=0.021, measured_peak_bytes=[100, 90],
                        simulated_peak_bytes=[50.0, 40.0], corrected_peak_bytes=[95.0, 92.0]),
            FidelityRow("nsga2-0", "nsga2", True, splits=1, devices_used=2, steps=10,
                        measured_s=0.015, spread_s=(0.014, 0.016), simulated_s=0.007,
                        corrected_s=0.016, measured_peak_bytes=[100, 50],
                        simulated_peak_bytes=[70.0, 20.0], corrected_peak_bytes=[101.0, 52.0]),
            FidelityRow("os-dpos", "heuristic", False, reason="op 'x': a batch of 1 cannot be cut")]
    return FidelityReport("cnn", 32, "2 worker processes", 178, 10,
                          {"latency_s": 2e-4, "worker_s": 1e-3, "step_s": 2e-3,
                           "calibration_strategies": 6}, rows, 12.0)


def test_summary_errors_and_ranking():
    s = report().summary()
    assert s["strategies"] == 3 and s["not_expressible"] == 1
    a, c = s["as_measured"], s["corrected"]
    assert a["median_abs_error"] == pytest.approx(0.5)  # |-0.2|, |+0.5|, |-0.53|
    assert a["worst_abs_error"] == pytest.approx(8 / 15)
    assert a["kendall_tau"] == pytest.approx(1 / 3)  # the simulator puts nsga2-0 first
    assert c["kendall_tau"] == pytest.approx(1.0)
    assert c["median_abs_error"] == pytest.approx(0.05)
    assert c["memory_median_abs_error"] < a["memory_median_abs_error"]
    dp = s["data_parallel_speedup"]  # single over data parallel
    assert dp["measured"] == pytest.approx(0.5) and dp["as_measured"] == pytest.approx(0.8 / 3)
    assert dp["corrected"] == pytest.approx(0.5)


def test_tables_name_every_strategy_and_the_corrections():
    from moplace.testbed.fidelity import report_table, summary_table

    text = report_table(report())
    assert "single (=heft)" in text and "not run: op 'x'" in text
    assert ("link latency 200 us, each extra worker 1.00 ms, each message 0.00 ms, each "
            "collective 0.00 ms, each step 2.00 ms") in text
    assert "Kendall tau 0.33" in text and "Kendall tau 1.00" in text
    total = summary_table([report()])
    assert "cnn" in total and "over 3 runs" in total


def test_report_json_is_strict_and_complete():
    from moplace import strictjson

    data = json.loads(strictjson.dumps(report().as_dict()))
    assert data["summary"]["corrected"]["kendall_tau"] == pytest.approx(1.0)
    assert [r["strategy"] for r in data["rows"]][-1] == "os-dpos"


def test_scatter_figure(tmp_path):
    from moplace.review.figures.fidelity import fidelity_scatter

    path = fidelity_scatter(report().as_dict()["rows"], tmp_path / "f.png", title="cnn")
    assert path.stat().st_size > 10_000


def test_logged_to_mlflow_with_table_and_figure(tmp_path):
    from mlflow.tracking import MlflowClient

    from moplace.testbed.fidelitylog import log_fidelity

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = log_fidelity(report(), uri)
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.data.tags["kind"] == "fidelity" and run.info.status == "FINISHED"
    assert run.data.metrics["corrected.kendall_tau"] == pytest.approx(1.0)
    assert math.isclose(float(run.data.params["correction.latency_s"]), 2e-4)
    paths = {a.path for a in client.list_artifacts(run_id)}
    assert {"fidelity_table.json", "fidelity.json", "figures"} <= paths
    assert [a.path for a in client.list_artifacts(run_id, "figures")] == ["figures/fidelity.png"]


def test_a_saved_report_reads_back_the_same():
    from moplace import strictjson
    from moplace.testbed.fidelity import FidelityReport

    data = json.loads(strictjson.dumps(report().as_dict()))
    again = FidelityReport.from_dict(data)
    assert again.summary() == report().summary()
    assert again.rows[0].spread_s == (0.009, 0.011)


def test_a_result_at_another_speed_of_the_machine_keeps_the_factor_and_the_ranks_clock():
    from moplace.testbed.result import ApplyResult

    raw = ApplyResult(True, step_seconds=[0.02, 0.03, 0.04], rank_seconds=[[0.02, 0.03, 0.04]])
    slow = raw.at_speed(2.0)
    assert slow.step_seconds == pytest.approx([0.01, 0.015, 0.02])
    assert slow.machine_speed == 2.0 and slow.rank_seconds == raw.rank_seconds
    assert slow.measured_step_s * slow.machine_speed == pytest.approx(raw.measured_step_s)
    assert raw.machine_speed == 1.0


def test_rounds_keep_the_least_step_or_the_median_round():
    from moplace.testbed.fidelity import _run_rounds
    from moplace.testbed.result import ApplyResult

    steps = {"a": iter([[3.0], [1.0], [2.0]]), "b": iter([[5.0], [4.0], [6.0], [7.0]])}
    fails = iter([ApplyResult(True, step_seconds=[9.0]), ApplyResult(False, "died"),
                  ApplyResult(True, step_seconds=[8.0])])

    def run(name):
        return next(fails) if name == "c" else ApplyResult(True, step_seconds=next(steps[name]))

    said = []
    least = _run_rounds([("a", "a"), ("c", "c")], run, 3, lambda *a: said.append(a))
    assert least[0].measured_step_s == 1.0
    assert least[1].measured_step_s == 8.0  # a round that fails does not undo the others
    assert said[0] == ("a (round 1 of 3)", 0, 2)
    median = _run_rounds([("b", "b")], run, 4, lambda *a: None, "median")
    assert median[0].measured_step_s == 5.0  # the lower middle of 4, 5, 6, 7
    refused = _run_rounds([("c", "c")], lambda s: ApplyResult(False, "no"), 3, lambda *a: None,
                          "median")
    assert not refused[0].expressible
    with pytest.raises(ValueError, match="'least' or 'median'"):
        _run_rounds([], run, 1, lambda *a: None, "mean")


def test_probes_scale_each_strategy_to_the_machines_speed_at_the_reference():
    from moplace.errors import MoplaceError
    from moplace.testbed.probe import PROBE_STEPS, probed
    from moplace.testbed.result import ApplyResult

    speeds = iter([1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 1.5, 1.5])  # the machine, call after call
    true = {"probe": 0.01, "a": 0.05, "b": 0.02}
    calls = []

    def apply(plan, steps, warmup):
        calls.append((plan, steps, warmup))
        if plan == "refused":
            raise MoplaceError("cannot run this")
        speed = next(speeds)
        return ApplyResult(True, step_seconds=[true[plan] * speed] * steps)

    run = probed(apply, "probe", steps=10, warmup=2)
    a = run("a")  # probes at 1.0 (the reference: the first) and 2.0 around a step at 2.0
    assert calls[:3] == [("probe", PROBE_STEPS, 1), ("a", 10, 2), ("probe", PROBE_STEPS, 1)]
    assert a.machine_speed == pytest.approx(2 ** 0.5)
    assert a.measured_step_s * a.machine_speed == pytest.approx(0.1)  # the clock's step kept
    b = run("b")  # the probe after a is b's before: 2.0, b at 3.0, then 3.0
    assert calls[3:] == [("b", 10, 2), ("probe", PROBE_STEPS, 1)]
    assert b.machine_speed == pytest.approx(6 ** 0.5)
    refused = run("refused")
    assert not refused.expressible and "cannot run this" in refused.reason
    again = run("b")  # no probe after a refusal: a new one before (3.0), b at 1.5, then 1.5
    assert calls[-3:] == [("probe", PROBE_STEPS, 1), ("b", 10, 2), ("probe", PROBE_STEPS, 1)]
    assert again.measured_step_s == pytest.approx(0.02 * 1.5 / (3.0 * 1.5) ** 0.5)
    given = probed(lambda plan, s, w: ApplyResult(True, step_seconds=[0.03] * s), "probe",
                   steps=3, warmup=1, reference=0.015)
    assert given("a").machine_speed == pytest.approx(2.0)  # probes at twice the reference


def test_without_a_probe_a_strategy_runs_as_the_clock_says():
    from moplace.errors import MoplaceError
    from moplace.testbed.probe import probed
    from moplace.testbed.result import ApplyResult

    calls = []

    def apply(plan, steps, warmup):
        calls.append(plan)
        if plan == "refused":
            raise MoplaceError("cannot run this")
        return ApplyResult(True, step_seconds=[0.02] * steps)

    run = probed(apply, None, steps=5, warmup=1)
    ran = run("a")
    assert ran.measured_step_s == 0.02 and ran.machine_speed == 1.0 and calls == ["a"]
    refused = run("refused")
    assert not refused.expressible and "cannot run this" in refused.reason
