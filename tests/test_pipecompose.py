"""A regular plan's step composed from one micro-batch (`moplace.simulator.pipecompose`): the
schedules' arithmetic on blocks of known length, and the composed step against every
micro-batch simulated op by op (``evaluate_regular(..., whole=True)``)."""

from __future__ import annotations

import numpy as np
import pytest

from moplace.core.pod import load_target
from moplace.core.regular import parse_plan
from moplace.simulator.atscale import evaluate_regular
from moplace.simulator.pipecompose import Blocks, actions, compose

from test_atscale import TINY
from moplace.io import load_graph


def _blocks(p, v=1, f=1.0, b=2.0, send=0.0, held=1.0, w=1, grads=0.0):
    """Equal stages: one micro-batch peaking at 7 bytes on every device: 5 of them static,
    ``held`` (1) of activations per stage, a working set of 1; ``grads`` of gradients per
    stage."""
    S = p * v
    z = np.zeros(p * w)
    return Blocks(p, v, w, np.full(S, f), np.full(S, b), np.full(S - 1, send),
                  np.full(S - 1, send), np.full((S, w), held), np.zeros(p), z + 7.0,
                  z + 5.0, np.full((S, w), grads), z + 1.0)


@pytest.mark.parametrize("p, m", [(1, 1), (1, 6), (4, 4), (4, 8), (8, 16)])
def test_one_f_one_b_takes_its_textbook_time(p, m):
    """Equal stages, free sends: 1F1B and GPipe take (m + p - 1)(F + B); rank r keeps
    min(p - r, m) micro-batches in flight under 1F1B, all m under GPipe."""
    bl = _blocks(p)
    for schedule in ("1f1b", "gpipe"):
        c = compose(bl, schedule, m)
        assert c.makespan == pytest.approx((m + p - 1) * 3.0)
    c = compose(bl, "1f1b", m)
    assert c.in_flight.tolist() == [min(p - r, m) for r in range(p)]
    assert compose(bl, "gpipe", m).in_flight.tolist() == [m] * p
    # a rank's peak, without gradients: the one micro-batch's plus the other micro-batches'
    # activations
    extra = np.array([min(p - r, m) - 1 for r in range(p)], float)
    assert np.allclose(c.peak, 7.0 + extra)
    # GPipe holds every micro-batch's at once, 1F1B no more than the stages ahead
    assert np.allclose(compose(bl, "gpipe", m).peak, 7.0 + (m - 1))


def test_gradients_stay_from_the_first_backward_on():
    """With 5 bytes of gradients per stage: rank 0 of two runs F0 F1 B0 F2 B1 F3 B2 B3 and
    holds, as B1 starts, 5 static + 5 gradients (B0's) + 2 micro-batches + 1 working set =
    13; rank 1 (F0 B0 F1 B1 ...) as B1 starts 5 + 5 + 1 + 1 = 12. One micro-batch: its
    peak."""
    c = compose(_blocks(2, grads=5.0), "1f1b", 4)
    assert c.peak.tolist() == [13.0, 12.0]
    assert compose(_blocks(2, grads=5.0), "1f1b", 1).peak.tolist() == [7.0, 7.0]


def test_interleaving_shrinks_the_bubble_by_the_chunks():
    """Interleaved 1F1B over v chunks of F/v and B/v: the bubble, (p - 1)(F + B) under 1F1B,
    is (p - 1)(F + B) / v (Narayanan et al. 2021)."""
    p, m = 4, 8
    plain = compose(_blocks(p), "1f1b", m).makespan
    for v in (2, 4):
        inter = compose(_blocks(p, v, 1.0 / v, 2.0 / v), "interleaved", m).makespan
        assert plain - m * 3.0 == pytest.approx((p - 1) * 3.0)
        assert inter - m * 3.0 == pytest.approx((p - 1) * 3.0 / v)


def test_sends_delay_the_step():
    """A send of s seconds between stages delays an equal 1F1B pipeline's step by at least
    the fill's and the drain's 2 (p - 1) s and at most 2 s per step of its critical path."""
    p, m, s = 4, 8, 0.25
    t = compose(_blocks(p, send=s), "1f1b", m).makespan
    assert (m + p - 1) * 3.0 + 2 * (p - 1) * s <= t <= (m + p - 1) * (3.0 + 2 * s)


def test_actions_are_megatrons_orders():
    """1F1B on rank r: p - r forwards, then a backward and a forward, the backwards last;
    each micro-batch once forward and once backward on every schedule."""
    assert actions("1f1b", 4, 1, 6, 1) == [(0, 0, 0), (0, 0, 1), (0, 0, 2), (1, 0, 0),
                                           (0, 0, 3), (1, 0, 1), (0, 0, 4), (1, 0, 2),
                                           (0, 0, 5), (1, 0, 3), (1, 0, 4), (1, 0, 5)]
    for schedule, v in (("1f1b", 1), ("gpipe", 1), ("interleaved", 2)):
        for r in range(4):
            acts = actions(schedule, 4, v, 8, r)
            assert sorted(acts) == sorted({(k, c, i) for k in (0, 1) for c in range(v)
                                           for i in range(8)})


# -- against every micro-batch simulated ----------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    return load_graph(str(TINY))


@pytest.fixture(scope="module")
def pod16():
    return load_target("pod:H100:16")


@pytest.mark.parametrize("spec", ["tp=2,pp=2,dp=4,mbs=8,gbs=32", "tp=1,pp=4,dp=4,mbs=8,gbs=32",
                                  "tp=4,pp=1,dp=4,mbs=8,gbs=32,zero=1"])
def test_one_micro_batch_is_the_simulated_step(tiny, pod16, spec):
    """With one micro-batch there is nothing to compose: the composed step is the simulated
    one, its traffic the same, but for the optimizer's step, which it runs after each rank's
    last backward as Megatron does (the full simulation starts each update as soon as its
    gradient is made, in the gaps of the backward): no shorter, and longer by at most the
    updates' seconds."""
    from moplace.simulator.atscale import _costs, replica_strategy
    from moplace.simulator.composedstep import update_seconds
    from moplace.simulator.replica import replica_cluster, replica_graph

    plan = parse_plan(spec)
    assert plan.micro_batches == 1
    a, b = evaluate_regular(tiny, pod16, plan), evaluate_regular(tiny, pod16, plan, whole=True)
    assert a.trace.composed and not b.trace.composed
    rg = replica_graph(tiny, plan, pod16, 1).graph
    cl = replica_cluster(pod16, pod16, plan)
    updates = update_seconds(rg, replica_strategy(rg, plan, 1), _costs(rg, cl, True),
                             cl.n_devices)
    assert updates.max() > 0
    assert b.runtime_s * (1 - 1e-9) <= a.runtime_s <= b.runtime_s + updates.max() + 1e-12
    assert np.allclose(a.trace.traffic, b.trace.traffic, rtol=1e-12)


@pytest.mark.parametrize("spec", ["tp=2,pp=2,dp=4,mbs=8,gbs=256",
                                  "tp=1,pp=4,dp=4,mbs=8,gbs=256,recompute=full",
                                  "tp=2,pp=2,v=2,dp=4,mbs=8,gbs=256",
                                  "tp=2,pp=2,dp=4,mbs=8,gbs=128,schedule=gpipe",
                                  "tp=4,pp=1,dp=4,mbs=8,gbs=128,zero=1"])
def test_composed_step_is_near_every_micro_batch_simulated(tiny, pod16, spec):
    """Many micro-batches: the composed step no slower than 2% over every micro-batch
    simulated op by op, and within 12% below it on this tiny model (a 2-30 ms step, where
    the full simulation's waits between a device's slots weigh most: interleaved 1F1B's
    bubble is near its textbook (p - 1) / v there and 2.5x it in the full simulation; 1-2%
    on Megatron's 70 B row), its traffic the same, its memory at most 10% more (the two
    hold different transients) and often less (the full simulation keeps each backward op's
    activation gradient until the next micro-batch's copy of it has run: 10-16% more here,
    50-70% on the 70 B row) and no less than one micro-batch's."""
    plan = parse_plan(spec)
    assert plan.micro_batches > 1
    a, b = evaluate_regular(tiny, pod16, plan), evaluate_regular(tiny, pod16, plan, whole=True)
    assert b.runtime_s * 0.88 <= a.runtime_s <= b.runtime_s * 1.02
    assert np.allclose(a.trace.traffic, b.trace.traffic, rtol=1e-9)
    if plan.schedule != "gpipe":  # GPipe run strictly holds all m forwards' activations; the
        # full simulation's last stage starts a backward while the next forward is on its way
        assert np.all(a.trace.peak_memory <= b.trace.peak_memory * 1.10)
    assert np.all(a.trace.peak_memory >= a.trace.replica.peak_memory * (1 - 1e-12))
    assert sum(a.losses.values()) == pytest.approx(a.runtime_s, rel=1e-9)
    assert "composed into" in a.how() and "composed" not in b.how()


def test_zero_bubble_is_simulated_whole(tiny, pod16):
    plan = parse_plan("tp=1,pp=2,v=2,dp=8,mbs=8,gbs=256,schedule=zero-bubble")
    ev = evaluate_regular(tiny, pod16, plan)
    assert not ev.trace.composed and "composed" not in ev.how()
