"""The data-parallel collectives as Megatron-Core r0.8.0 runs them over a composed step
(`moplace.simulator.dpsync`): the gathers' waits and the reductions past the last action on
timelines of known length, and on a plan, what the schedule changes."""

from __future__ import annotations

import numpy as np
import pytest

from moplace.core.regular import parse_plan
from moplace.simulator.atscale import evaluate_regular
from moplace.simulator.dpsync import bucket_params, gather_wait, reduce_past_end
from moplace.simulator.pipeorder import B, F

from test_atscale import pod4, tiny  # noqa: F401  (fixtures)


def rows(*actions):
    return np.array([(k, c, mb, s, e) for k, c, mb, s, e in actions], float)


def test_megatron_buckets_grow_with_the_replicas():
    assert bucket_params(8) == 40_000_000 and bucket_params(48) == 48_000_000


def test_a_gather_shorter_than_its_forward_waits_for_its_first_bucket_only():
    # 4 buckets of 1 s under a forward of 8 s: each next one is asked for when the forward
    # reaches the one before, 2 s later; only the first is waited for
    tl = rows((F, 0, 0, 0.0, 8.0), (B, 0, 0, 8.0, 24.0))
    assert gather_wait(tl, [[1.0] * 4]) == pytest.approx(1.0)


def test_a_gather_longer_than_its_forward_holds_the_forward_back():
    # 4 buckets of 3 s, used every 2 s: ready at 3, 6, 9, 12 where the forward, delayed,
    # wants them at 0, 2+3, 4+4, 6+5: the forward waits 3 + 1 + 1 + 1 s
    tl = rows((F, 0, 0, 0.0, 8.0), (B, 0, 0, 8.0, 24.0))
    assert gather_wait(tl, [[3.0] * 4]) == pytest.approx(6.0)


def test_a_later_chunk_is_gathered_after_the_first_one_is_used():
    # chunk 1's gather (one bucket) starts when chunk 0's forward waits for chunk 0's (at 0,
    # done at 2), so it is ready at 2 + 5 = 7, and chunk 1's first forward (at 4, delayed 2
    # by chunk 0's wait: 6) waits 1 s more
    tl = rows((F, 0, 0, 0.0, 2.0), (F, 0, 1, 2.0, 4.0), (F, 1, 0, 4.0, 6.0))
    assert gather_wait(tl, [[2.0], [5.0]]) == pytest.approx(3.0)


def test_rank_zero_reduces_its_buckets_as_the_last_backward_makes_them():
    tl = rows((F, 0, 0, 0.0, 2.0), (B, 0, 0, 2.0, 6.0), (F, 0, 1, 6.0, 8.0),
              (B, 0, 1, 8.0, 12.0))
    # 4 buckets of 1 s, made at 9, 10, 11, 12: the last ends 1 s past the backward
    assert reduce_past_end(tl, [[1.0] * 4], 0, 1) == pytest.approx(1.0)
    # of 2 s each: they queue, 9 + 4 * 2 = 17, 5 s past
    assert reduce_past_end(tl, [[2.0] * 4], 0, 1) == pytest.approx(5.0)
    # another rank reduces its (one) bucket after its last backward, whole
    assert reduce_past_end(tl, [[4.0]], 1, 1) == pytest.approx(4.0)


def test_with_virtual_stages_a_chunk_is_reduced_rank_backwards_after_its_last():
    # chunk 1's last backward ends at 3, chunk 0's at 5 (the rank's last action)
    tl = rows((B, 1, 0, 0.0, 1.0), (B, 1, 1, 1.0, 3.0), (B, 0, 0, 3.0, 4.0),
              (B, 0, 1, 4.0, 5.0))
    # rank 0: chunk 1's 3 s from 3 (to 6), then chunk 0's 1 s from 6: 2 s past 5
    assert reduce_past_end(tl, [[1.0], [3.0]], 0, 2) == pytest.approx(2.0)
    # rank 1 launches chunk 1's one backward later (at 4): 4 + 3 + 1 = 8, 3 s past
    assert reduce_past_end(tl, [[1.0], [3.0]], 1, 2) == pytest.approx(3.0)


def test_buckets_pay_a_latency_each(tiny, pod4, monkeypatch):  # noqa: F811
    """Cut into buckets, the gather and the reduction take longer (a collective's latency
    each) and the step waits for other seconds of them."""
    from moplace.simulator import dpsync

    plan = parse_plan("tp=1,pp=1,dp=4,mbs=8,gbs=32")
    one = evaluate_regular(tiny, pod4, plan)
    monkeypatch.setattr(dpsync, "bucket_params", lambda dp: 2**14)
    many = evaluate_regular(tiny, pod4, plan)
    assert many.parts["param_gather_s"] > one.parts["param_gather_s"]
    assert many.parts["grad_reduce_s"] > one.parts["grad_reduce_s"]
    assert many.parts["exposed_s"] != one.parts["exposed_s"]
