"""Micro-batched pipelines (issue 33): every forward and backward op runs once per
micro-batch where it is placed, weight gradients accumulate, updates run once; GPipe and 1F1B
order the micro-batches' tasks."""

from __future__ import annotations

import numpy as np
import pytest

import moplace
from moplace import OpGraph, load_cluster, load_graph, simulate
from moplace.core.baselines import baseline
from moplace.core.genome import GenomeSpace
from moplace.core.graph import Edge, Op
from moplace.core.strategy import Strategy
from moplace.costs.costmodel import CostModel
from moplace.errors import StrategyError
from moplace.simulator.build import build_task_graph
from moplace.simulator.engine import run_task_graph
from moplace.simulator.reference import reference_trace

MS = 1e-3


def _two_layers(grad=10):
    """f0 -> f1 -> b1 -> b0 (f0 and f1 feed their backward ops), an update per layer.
    Forward 1 ms, backward 2 ms, update 0.5 ms; layer k on device k."""
    ops = [Op("f0", "MatMul", {"V100": 1 * MS}, output_bytes=1000, param_bytes=100,
              colocation="L0", role="forward"),
           Op("f1", "MatMul", {"V100": 1 * MS}, output_bytes=1000, param_bytes=100,
              colocation="L1", role="forward"),
           Op("b1", "MatMulGrad", {"V100": 2 * MS}, output_bytes=1000 + grad, grad_bytes=grad,
              colocation="L1", role="backward"),
           Op("b0", "MatMulGrad", {"V100": 2 * MS}, output_bytes=grad, grad_bytes=grad,
              colocation="L0", role="backward"),
           Op("u1", "Apply", {"V100": 0.5 * MS}, colocation="L1", role="update"),
           Op("u0", "Apply", {"V100": 0.5 * MS}, colocation="L0", role="update")]
    edges = [Edge("f0", "f1", 1000), Edge("f0", "b0", 1000), Edge("f1", "b1", 1000),
             Edge("b1", "b0", 1000), Edge("b1", "u1", grad), Edge("b0", "u0", grad)]
    return OpGraph(ops, edges, name="two-layers")


def _pipeline(g, m, schedule):
    placement = [0 if g.ops[i].colocation == "L0" else 1 for i in range(len(g.ops))]
    return Strategy(placement, micro_batches=m, schedule=schedule)


def _fast_link():
    return moplace.Cluster.uniform(2, bandwidth=1e15, latency=0.0)


def _spans(tr, g, name):
    """(start, end) in ms of each task of op ``name``, by micro-batch."""
    k = np.flatnonzero(tr.task_op == g.index[name])
    k = k[np.argsort(tr.task_micro_batch[k])] if tr.task_micro_batch.size else k
    return [(round(tr.task_start[t] / MS, 6), round(tr.task_end[t] / MS, 6)) for t in k]


def test_gpipe_runs_every_forward_then_every_backward_as_worked_out_by_hand():
    g, c = _two_layers(), _fast_link()
    tr = simulate(g, c, _pipeline(g, 2, 1), costs=CostModel(g, c, split_overhead_s=0.0))
    assert _spans(tr, g, "f0") == [(0, 0.5), (0.5, 1)]
    # at 1 ms both f1's second micro-batch and b1's first are ready: the forward goes first
    assert _spans(tr, g, "f1") == [(0.5, 1), (1, 1.5)]
    assert _spans(tr, g, "b1") == [(1.5, 2.5), (2.5, 3.5)]
    assert _spans(tr, g, "b0") == [(2.5, 3.5), (3.5, 4.5)]
    assert _spans(tr, g, "u1") == [(3.5, 4)] and _spans(tr, g, "u0") == [(4.5, 5)]
    assert tr.makespan == pytest.approx(5 * MS)


def test_1f1b_runs_the_last_stages_backward_before_its_next_forward():
    g, c = _two_layers(), _fast_link()
    tr = simulate(g, c, _pipeline(g, 2, 0), costs=CostModel(g, c, split_overhead_s=0.0))
    assert _spans(tr, g, "f0") == [(0, 0.5), (0.5, 1)]  # stage 0 of 2: two in flight
    # stage 1 of 2 keeps one micro-batch in flight: f1's second waits for b1's first
    assert _spans(tr, g, "f1") == [(0.5, 1), (2, 2.5)]
    assert _spans(tr, g, "b1") == [(1, 2), (2.5, 3.5)]
    assert _spans(tr, g, "b0") == [(2, 3), (3.5, 4.5)]
    assert tr.makespan == pytest.approx(5 * MS)


def test_one_micro_batch_is_the_step_as_before():
    g, c = load_graph("pipedream:gnmt"), load_cluster("4xV100-NVLink")
    for name in ("data-parallel", "layer-split"):
        s = baseline(name, g, 4)
        a, b = (simulate(g, c, x) for x in (s, s.with_options(micro_batches=1, schedule=1)))
        assert np.array_equal(a.task_end, b.task_end) and np.array_equal(a.peak_memory,
                                                                         b.peak_memory)
        assert s.simulation_key == s.with_options(schedule=1).simulation_key


@pytest.mark.parametrize("name", ["pipedream:vgg16", "pipedream:gnmt",
                                  "dnn:LayerGraphs/bert24_training"])
def test_the_fast_loop_matches_the_reference_with_micro_batches(name):
    g = load_graph(name)
    c = load_cluster("2x4xV100-2xIB100")
    costs = CostModel(g, c)
    ls, dp = baseline("layer-split", g, 8), baseline("data-parallel", g, 8)
    # interleaved stages: runs of layers dealt to the devices in turn, twice round
    order = np.argsort(np.argsort(moplace.core.baselines.group_order(g)))
    chunk = (order * 16 // max(g.arrays.n_groups, 1)) % 8
    interleaved = Strategy(chunk[g.arrays.group], ls.priority)
    cases = [ls.with_options(micro_batches=4), ls.with_options(micro_batches=3, schedule=1),
             dp.with_options(micro_batches=2, bucket_bytes=25 * 2**20),
             dp.with_options(micro_batches=4, zero_stage=1),
             interleaved.with_options(micro_batches=4)]
    for s in cases:
        tg = build_task_graph(g, s.validate(g, 8), costs)
        fast, ref = run_task_graph(tg, c, len(g.ops)), reference_trace(tg, c, len(g.ops))
        assert np.array_equal(fast.task_start, ref.task_start)
        assert np.array_equal(fast.task_end, ref.task_end)
        assert np.array_equal(fast.peak_memory, ref.peak_memory)
        assert np.array_equal(fast.sent, ref.sent)


def test_copies_take_their_share_of_the_time_and_updates_run_once():
    g, c = _two_layers(), _fast_link()
    costs = CostModel(g, c)  # 10 us per part
    tr = simulate(g, c, _pipeline(g, 4, 0), costs=costs)
    counts = np.bincount(tr.task_op, minlength=len(g.ops))
    assert counts.tolist() == [4, 4, 4, 4, 1, 1]
    dur = tr.task_end - tr.task_start
    assert np.allclose(dur[tr.task_op == g.index["b1"]], 2 * MS / 4 + 10e-6)
    assert np.allclose(dur[tr.task_op == g.index["u0"]], 0.5 * MS)


def test_a_measured_part_time_replaces_the_estimate():
    ops = [Op("f", "MatMul", {"V100": 1 * MS}, output_bytes=8, role="forward",
              part_compute={4: {"V100": 0.4 * MS}}),
           Op("b", "MatMulGrad", {"V100": 2 * MS}, output_bytes=8, role="backward")]
    g, c = OpGraph(ops, [Edge("f", "b", 8)]), moplace.Cluster.single()
    tr = simulate(g, c, Strategy([0, 0], micro_batches=4))
    dur = tr.task_end - tr.task_start
    assert np.allclose(dur[tr.task_op == 0], 0.4 * MS)  # measured: one of 4 parts
    assert np.allclose(dur[tr.task_op == 1], 0.5 * MS + 10e-6)  # estimated


def test_gradients_accumulate_and_are_reduced_once():
    g, c = load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink")
    dp = baseline("data-parallel", g, 4)
    one, four = (simulate(g, c, dp.with_options(micro_batches=m)) for m in (1, 4))
    n_coll = (lambda tr: int(np.count_nonzero(tr.task_device < 0)))
    assert n_coll(one) == n_coll(four) > 0
    assert np.allclose(one.traffic, four.traffic)  # the same all-reduces, once
    assert np.array_equal(one.static_memory, four.static_memory)  # weights once


def _in_flight(tr, g, dev):
    """The most micro-batches whose forward has started on ``dev`` and whose backward has
    not finished there."""
    a = g.arrays
    fwd = (a.role[tr.task_op] == 0) & (tr.task_device == dev)
    bwd = (a.role[tr.task_op] == 1) & (tr.task_device == dev)
    mb = tr.task_micro_batch
    m = int(mb.max()) + 1
    assert (mb[tr.task_device < 0] == -1).all()
    first = np.array([tr.task_start[fwd & (mb == i)].min() for i in range(m)])
    last = np.array([tr.task_end[bwd & (mb == i)].max() for i in range(m)])
    return max(int(np.sum((first <= t) & (last > t))) for t in first)


def test_1f1b_keeps_at_most_s_minus_k_micro_batches_in_flight_on_stage_k():
    g, c = load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink")
    ls = baseline("layer-split", g, 4)
    one_f, gpipe = (simulate(g, c, ls.with_options(micro_batches=8, schedule=s))
                    for s in (0, 1))
    stage_of = np.argsort([one_f.task_start[(one_f.task_device == d)].min() for d in range(4)])
    for k, d in enumerate(stage_of.tolist()):
        assert _in_flight(one_f, g, d) <= 4 - k
    assert _in_flight(gpipe, g, int(stage_of[0])) == 8
    assert one_f.peak_memory.max() < gpipe.peak_memory.max()


def test_micro_batches_with_splits_and_recomputation_run():
    g, c = load_graph("pipedream:resnet50"), load_cluster("4xV100-NVLink")
    dp = baseline("data-parallel", g, 4)
    heads = moplace.core.recompute.recomputable_heads(g)[::2]
    base = simulate(g, c, dp.with_recompute(heads))
    tr = simulate(g, c, dp.with_recompute(heads).with_options(micro_batches=2))
    assert tr.n_recomputed == 2 * base.n_recomputed
    assert tr.recomputed.sum() == tr.n_recomputed
    assert (tr.task_micro_batch[tr.recomputed] >= 0).all()


def test_options_are_checked():
    g = _two_layers()
    s = _pipeline(g, 2, 0)
    for bad, match in [(dict(micro_batches=0), "micro_batches"),
                       (dict(micro_batches=2.5), "micro_batches"),
                       (dict(schedule=4), "schedule"),
                       (dict(zero_stage=3), "zero_stage 3")]:
        with pytest.raises(StrategyError, match=match):
            s.with_options(**bad).validate(g, 2)


def test_the_genome_chooses_micro_batches_and_schedules():
    g = load_graph("pipedream:gnmt")
    space = GenomeSpace(g, 4)
    s = baseline("layer-split", g, 4).with_options(micro_batches=8, schedule=1)
    x = space.encode(s)
    back = space.decode(x)
    assert back.micro_batches == 8 and back.schedule_name == "gpipe"
    x[space.zero_gene] = space.zero_choices.index(3.0)
    assert space.decode(x).zero_stage == 1  # ZeRO-3 with micro-batches runs as ZeRO-1
    X = space.sample(400, np.random.default_rng(0))
    m = X[:, space.micro_batch_gene]
    assert 0.4 < np.mean(m == 0) < 0.6 and set(np.unique(m)) == set(range(6))
    with pytest.raises(StrategyError, match="micro-batches have no genome"):
        space.encode(s.with_options(micro_batches=3))


def test_strategy_files_carry_micro_batches_and_older_ones_run_one(tmp_path):
    from moplace.io.strategies import load_strategy, save_strategy, strategy_to_json
    g = _two_layers()
    s = _pipeline(g, 4, 1)
    data = strategy_to_json(g, s)
    assert data["version"] == 5 and data["options"]["schedule"] == "gpipe"
    assert data["options"]["micro_batches"] == 4
    c = _fast_link()
    save_strategy(tmp_path / "s.json", g, s)
    assert load_strategy(tmp_path / "s.json", g, c) == s
    del data["options"]["micro_batches"], data["options"]["schedule"]
    data["version"] = 3
    (tmp_path / "old.json").write_text(__import__("json").dumps(data))
    assert load_strategy(tmp_path / "old.json", g, c).micro_batches == 1


def test_the_figures_tell_micro_batches_and_stages_apart(tmp_path):
    from moplace.review.figures import timeline
    g, c = load_graph("pipedream:gnmt"), load_cluster("4xV100-NVLink")
    s = baseline("layer-split", g, 4).with_options(micro_batches=4)
    tr = simulate(g, c, s, record=True)
    assert sorted(tr.stage.tolist()) == [1, 2, 3, 4]  # layer-split: a stage per device
    gpipe = simulate(g, c, s.with_options(schedule=1), record=True)
    timeline.gantt(tr, tmp_path / "gantt.png", backward=g.arrays.role == 1)
    timeline.memory_over_time(tr, tmp_path / "memory.png", without=gpipe, lever="1F1B",
                              other="GPipe")
    assert (tmp_path / "gantt.png").stat().st_size > 10_000
    assert (tmp_path / "memory.png").stat().st_size > 10_000


def test_evaluate_runs_strategies_as_micro_batches(capsys):
    import json

    from moplace.cli import main
    assert main(["evaluate", "pipedream:gnmt", "--cluster", "4xV100-NVLink", "--baseline",
                 "layer-split", "--micro-batches", "8", "--schedule", "gpipe", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["strategy"] == "layer-split, 8 micro-batches GPipe"
    assert out["plan"]["micro_batches"] == 8 and out["plan"]["schedule"] == "gpipe"
    plain = simulate(load_graph("pipedream:gnmt"), load_cluster("4xV100-NVLink"),
                     baseline("layer-split", load_graph("pipedream:gnmt"), 4)).makespan
    assert out["runtime_s"] < plain
    assert main(["evaluate", "pipedream:gnmt", "--cluster", "4xV100-NVLink", "--baseline",
                 "single", "--micro-batches", "0"]) == 2
    assert "--micro-batches: must be from 1 to 1024" in capsys.readouterr().err
