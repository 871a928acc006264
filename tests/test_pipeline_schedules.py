"""Interleaved 1F1B and zero-bubble pipelines (issue 49): each rank's actions are the ones
PyTorch computes, and on a balanced chain with free transfers the simulated bubble is the
published one: (p - 1) / (v m) for interleaved 1F1B (Narayanan et al. 2021), and
(p - 1)(T_F + T_B - T_W) / (m (T_F + T_B + T_W)) for zero-bubble (ZB-H1, Qi et al. 2024)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import moplace
from moplace import load_cluster, load_graph, simulate
from moplace.core.baselines import baseline
from moplace.core.strategy import SCHEDULES, Strategy
from moplace.core.synthetic import pipeline_chain, pipeline_chain_placement
from moplace.costs.costmodel import CostModel
from moplace.errors import StrategyError
from moplace.simulator.pipeorder import B, F, W, rank_actions

MS = 1e-3


def _bubble(p, v, m, schedule, tf=1.0, tb=1.0, tw=1.0):
    """The simulated bubble of ``schedule`` on a chain of p * v layers, layer i on device
    i mod p: (step - ideal) / ideal, ideal being one device's compute."""
    g = pipeline_chain(p * v, m, forward_s=tf * MS, backward_s=tb * MS, weight_s=tw * MS)
    c = moplace.Cluster.uniform(p, bandwidth=1e15, latency=0.0)
    s = Strategy(pipeline_chain_placement(g, p), micro_batches=m,
                 schedule=SCHEDULES.index(schedule))
    tr = simulate(g, c, s, costs=CostModel(g, c, split_overhead_s=0.0))
    ideal = m * v * (tf + tb + tw) * MS
    return (tr.makespan - ideal) / ideal


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("v", [2, 4, 8])
def test_the_interleaved_bubble_is_p_minus_1_over_v_m(p, v):
    # the formula's chain: each layer's backward one op (its weight gradient takes no time)
    for m in (p, 2 * p, 4 * p):
        assert _bubble(p, v, m, "interleaved", 1.0, 2.0, 0.0) == pytest.approx(
            (p - 1) / (v * m), rel=0.02)


@pytest.mark.parametrize("times", [(1, 1, 1), (1, 1.5, 0.75), (1, 2, 1)])
@pytest.mark.parametrize("p", [2, 4, 8])
def test_the_zero_bubble_bubble_is_the_papers_and_below_1f1bs(p, times):
    tf, tb, tw = times
    for m in (p, 2 * p, 4 * p):
        zb = _bubble(p, 1, m, "zero-bubble", *times)
        assert zb == pytest.approx((p - 1) * (tf + tb - tw) / (m * (tf + tb + tw)), rel=0.02)
        assert zb < _bubble(p, 1, m, "1f1b", *times)


def test_interleaving_and_zero_bubble_together_divide_the_bubble_by_v():
    assert _bubble(4, 2, 8, "zero-bubble") == pytest.approx(_bubble(4, 1, 8, "zero-bubble") / 2,
                                                           rel=0.02)


def _torch_actions(cls, p, v, m, rank):
    """PyTorch's actions of ``rank`` (its schedule's own computation, without stages)."""
    from torch.distributed.pipelining import schedules as S

    kinds = {S._ComputationType.FORWARD: F, S._ComputationType.FULL_BACKWARD: B,
             S._ComputationType.BACKWARD_INPUT: B, S._ComputationType.BACKWARD_WEIGHT: W}
    rounds = max(1, m // p)
    ns = SimpleNamespace(n_local_stages=v, pp_group_size=p, _n_microbatches=m, rank=rank,
                         microbatches_per_round=m // rounds, number_of_rounds=rounds)
    acts = [a for a in cls._calculate_single_rank_operations(ns, rank) if a is not None]
    assert all(a.stage_index % p == rank for a in acts)
    return tuple((kinds[a.computation_type], a.stage_index // p, a.microbatch_index)
                 for a in acts)


@pytest.mark.parametrize("name", ["interleaved", "zero-bubble"])
def test_each_ranks_actions_are_pytorchs(name):
    pytest.importorskip("torch")
    from torch.distributed.pipelining import schedules as S

    cls = {"interleaved": S.ScheduleInterleaved1F1B,
           "zero-bubble": S.ScheduleInterleavedZeroBubble}[name]
    for p in (2, 4, 8):
        for v in (1, 2, 4):
            for m in (p, 2 * p, 4 * p, 3 * p):
                for r in range(p):
                    assert rank_actions(name, p, v, m, r) == _torch_actions(cls, p, v, m, r)


def test_every_action_runs_once():
    for name in ("interleaved", "zero-bubble"):
        acts = rank_actions(name, 4, 2, 8, 1)
        kinds = (F, B, W) if name == "zero-bubble" else (F, B)
        assert sorted(acts) == sorted((k, c, i) for k in kinds for c in range(2)
                                      for i in range(8))


def test_a_layout_not_round_robin_or_micro_batches_megatron_refuses_are_named():
    g = pipeline_chain(4, 4)
    c = moplace.Cluster.uniform(2, bandwidth=1e15, latency=0.0)
    placement = pipeline_chain_placement(g, 4) // 2  # stages on devices 0, 0, 1, 1: p = 2
    s = Strategy(placement, micro_batches=4, schedule=SCHEDULES.index("interleaved"))
    simulate(g, c, s)  # contiguous stages: two ranks of one chunk each
    back_and_forth = np.array([[0, 1, 1, 0][min(int(op.name[1:]), 3)] if op.name[1:].isdigit()
                               else 0 for op in g.ops])
    with pytest.raises(StrategyError, match="round-robin over its 2 devices"):
        simulate(g, c, Strategy(back_and_forth, micro_batches=4, schedule=2))
    s = Strategy(pipeline_chain_placement(g, 2), micro_batches=3, schedule=2)
    with pytest.raises(StrategyError, match="multiple of 2"):
        simulate(g, c, s)


def test_zero_bubble_holds_back_weight_gradients_and_runs_them_in_its_bubble():
    """On 4 stages the last rank holds 3 weight gradients back: its first W runs after its
    fourth input gradient; rank 0 runs each W right after its B."""
    g = pipeline_chain(4, 8)
    c = moplace.Cluster.uniform(4, bandwidth=1e15, latency=0.0)
    s = Strategy(pipeline_chain_placement(g, 4), micro_batches=8, schedule=3)
    tr = simulate(g, c, s, costs=CostModel(g, c, split_overhead_s=0.0))

    def starts(name):
        k = np.flatnonzero(tr.task_op == g.index[name])
        return np.sort(tr.task_start[k])

    assert starts("w3")[0] > starts("b3")[3]
    assert starts("w0")[0] < starts("b0")[1]


@pytest.mark.parametrize("schedule", ["interleaved", "zero-bubble"])
def test_a_real_graphs_layer_split_runs_under_the_new_schedules(schedule):
    g, c = load_graph("pipedream:gnmt"), load_cluster("4xV100-NVLink")
    ls = baseline("layer-split", g, 4)
    one_f = simulate(g, c, ls.with_options(micro_batches=8, schedule=0))
    tr = simulate(g, c, ls.with_options(micro_batches=8,
                                        schedule=SCHEDULES.index(schedule)))
    assert tr.makespan == pytest.approx(one_f.makespan, rel=0.25)
    assert sorted(tr.stage.tolist()) == [1, 2, 3, 4]


TINY = str(Path(__file__).parent / "data" / "tiny-llama.json")


@pytest.mark.parametrize("schedule", ["interleaved", "zero-bubble"])
def test_a_traced_llama_runs_virtual_stages_with_and_without_recomputation(schedule):
    from moplace.core.degrees import Degrees, regular_plan

    g = load_graph(TINY)
    c = moplace.Cluster.uniform(4, bandwidth=1e11, latency=1e-6)
    steps = {}
    for rec in ("none", "full", "selective"):
        s = regular_plan(g, Degrees(4, 2, "data", 4, schedule, rec, 0, 2))
        tr = simulate(g, c, s)
        steps[rec] = tr
        assert (tr.n_recomputed > 0) == (rec == "full")  # SDPA: a selective core saves none
    assert steps["full"].peak_memory.max() < steps["none"].peak_memory.max()


def test_zero_bubble_defers_the_weight_gradients_of_a_traced_llama():
    """Each weight's gradient (the op an update reads) is a W on every stage that sends a
    gradient back; the first stage, sending none, runs its whole backward as W."""
    from moplace.core.degrees import Degrees, regular_plan
    from moplace.simulator.pipeorder import pipeline_layout

    g = load_graph(TINY)
    s = regular_plan(g, Degrees(2, 2, "data", 2, "zero-bubble", "none", 0))
    layout = pipeline_layout(g, s.placement, 2, "zero-bubble")
    a = g.arrays
    backward = a.role == 1
    feeds_update = np.zeros(len(g.ops), bool)
    feeds_update[a.src[a.role[a.dst] == 2]] = True
    later = backward & (s.placement == 1)
    assert layout.weight[later & feeds_update].all()
    assert 0 < layout.weight[later].sum() < later.sum()  # B ops too: what it sends back
    assert layout.weight[backward & (s.placement == 0)].all()


@pytest.mark.parametrize("schedule", ["interleaved", "zero-bubble"])
def test_a_weight_tied_to_the_last_layer_neither_adds_a_stage_nor_waits_for_it(schedule):
    """GPT-2 ties its embedding to its output head: the weight sits with the head on the last
    device and the first layer reads it across devices. It is no stage of the data flow (the
    chain keeps p * v stages) and, there from the step's start, runs in no action (in the last
    stage's, the first layer would wait for the last: a deadlock)."""
    from moplace.core.graph import Edge, Op
    from moplace.simulator.pipeorder import pipeline_layout

    base = pipeline_chain(4, 4)
    tied = Op("tied", "Param", {"V100": 0.0}, 8, param_bytes=8, role="forward")
    g = moplace.OpGraph([*base.ops, tied],
                        [*base.edges, Edge("tied", "f0", 8), Edge("tied", "f3", 8)], name="tied")
    placement = np.append(pipeline_chain_placement(base, 2), 1)
    layout = pipeline_layout(g, placement, 2, schedule)
    assert (layout.p, layout.v) == (2, 2) and layout.source[g.index["tied"]]
    c = moplace.Cluster.uniform(2, bandwidth=1e15, latency=0.0)
    tr = simulate(g, c, Strategy(placement, micro_batches=4,
                                 schedule=SCHEDULES.index(schedule)))
    assert np.isfinite(tr.makespan)
