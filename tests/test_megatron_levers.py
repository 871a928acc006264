"""Two of Megatron-LM's ways a regular plan can take: tensor-parallel communication overlapped
with the GEMMs (``tp_overlap=1``, Megatron's ``--tp-comm-overlap``:
`moplace.simulator.tpoverlap`) and FP32 weight gradients (``grad_fp32=1``, what Megatron does
for BF16 training: `moplace.simulator.replica`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from moplace.core.pod import load_target
from moplace.core.regular import parse_plan
from moplace.io import load_graph
from moplace.simulator.atscale import evaluate_regular
from moplace.simulator.nccl import REDUCE_SCATTER, collective_time
from moplace.simulator.replica import replica_cluster
from moplace.simulator.tpoverlap import hidden_server_links

from test_atscale import POD4

TINY = Path(__file__).parent / "data" / "tiny-llama.json"


def _pod(tmp_path, nvlink: str, latency: str = "2us"):
    """test_atscale's 4-GPU pod (2 servers of 2) with these NVLink figures."""
    path = tmp_path / f"pod-{nvlink.replace('/', '')}-{latency}.toml"
    path.write_text(POD4.replace('bandwidth = "370GB/s"\nlatency = "2us"',
                                 f'bandwidth = "{nvlink}"\nlatency = "{latency}"'))
    return load_target(str(path))


@pytest.fixture(scope="module")
def tiny():
    return load_graph(str(TINY))


PLAN = "tp=2,pp=1,dp=2,mbs=8,gbs=32"


def test_the_plan_names_the_overlap():
    plan = parse_plan(PLAN + ",tp_overlap=1")
    assert plan.tp_overlap == 1 and "TP comm overlap" in plan.text()
    assert parse_plan(PLAN).tp_overlap == 0
    assert parse_plan(plan.spec()) == plan


def test_the_overlap_hides_what_the_gemms_cover_and_no_more(tiny, tmp_path):
    """With the overlap the step is no longer and the memory the same; the collectives are
    counted whole and what their GEMMs leave exposed is part of them; that part grows as the
    server's links slow down; where the GEMMs hide everything, the step is the plan's compute
    and data-parallel communication alone."""
    fast, slow = _pod(tmp_path, "370GB/s"), _pod(tmp_path, "5GB/s")
    for pod in (fast, slow):
        plain = evaluate_regular(tiny, pod, parse_plan(PLAN))
        hidden = evaluate_regular(tiny, pod, parse_plan(PLAN + ",tp_overlap=1"))
        assert hidden.runtime_s <= plain.runtime_s * (1 + 1e-9)
        assert np.array_equal(hidden.trace.peak_memory, plain.trace.peak_memory)
        assert sum(hidden.losses.values()) == pytest.approx(hidden.runtime_s, rel=1e-9)
        assert 0 < hidden.parts["tp_left_s"] <= hidden.parts["tp_comm_s"]
        assert plain.parts["tp_comm_s"] == 0
    left = [evaluate_regular(tiny, pod, parse_plan(PLAN + ",tp_overlap=1")).parts["tp_left_s"]
            for pod in (fast, slow)]
    assert left[0] < left[1]
    slow_plain = evaluate_regular(tiny, slow, parse_plan(PLAN))
    slow_hidden = evaluate_regular(tiny, slow, parse_plan(PLAN + ",tp_overlap=1"))
    assert slow_hidden.runtime_s < slow_plain.runtime_s


def test_gemms_that_hide_every_collective_leave_no_tensor_parallel_cost(tiny, tmp_path):
    """On links fast enough that every collective is shorter than its GEMM, the replica's
    step is its compute alone: nothing of the tensor-parallel communication is left."""
    pod = _pod(tmp_path, "1000TB/s", "1ns")
    ev = evaluate_regular(tiny, pod, parse_plan(PLAN + ",tp_overlap=1"))
    assert ev.parts["tp_left_s"] == 0 < ev.parts["tp_comm_s"]
    assert ev.losses["pipeline bubble and waits"] <= 1e-6 * ev.runtime_s


def test_without_tensor_parallelism_the_overlap_changes_nothing(tiny, tmp_path):
    pod = _pod(tmp_path, "370GB/s")
    a = evaluate_regular(tiny, pod, parse_plan("tp=1,pp=2,dp=2,mbs=8,gbs=32"))
    b = evaluate_regular(tiny, pod, parse_plan("tp=1,pp=2,dp=2,mbs=8,gbs=32,tp_overlap=1"))
    assert np.array_equal(a.values, b.values)


def test_hidden_server_links_free_the_server_and_keep_the_network(tmp_path):
    pod = _pod(tmp_path, "370GB/s")
    cluster = replica_cluster(pod, pod, parse_plan("tp=2,pp=2,dp=1,mbs=8,gbs=8"))
    free = hidden_server_links(cluster)
    assert cluster.server[0] == cluster.server[1] != cluster.server[2]
    assert free.transfer_time(0, 1, 2**20) < 1e-9 < cluster.transfer_time(0, 1, 2**20)
    assert free.transfer_time(0, 2, 2**20) == cluster.transfer_time(0, 2, 2**20)
    assert np.array_equal(free.memory, cluster.memory)


def test_fp32_gradients_double_the_reduction_and_add_their_bytes(tiny, tmp_path):
    """FP32 gradients: the data-parallel reduce-scatter moves twice the bytes, the weights'
    gather is unchanged, and with gradients accumulated over micro-batches (held from the
    first micro-batch's backward to the update) every GPU holds each of its weight gradients'
    16-bit bytes once more."""
    pod = _pod(tmp_path, "370GB/s")
    plan = "tp=1,pp=1,dp=4,mbs=8,gbs=64"
    half = evaluate_regular(tiny, pod, parse_plan(plan))
    full = evaluate_regular(tiny, pod, parse_plan(plan + ",grad_fp32=1"))
    assert "FP32 gradients" in parse_plan(plan + ",grad_fp32=1").text()
    assert full.parts["param_gather_s"] == half.parts["param_gather_s"]
    grads = sum(op.grad_bytes for op in tiny.ops)
    for ev, nbytes in ((half, grads), (full, 2 * grads)):
        want, _ = collective_time(pod, REDUCE_SCATTER, nbytes, 4)
        assert ev.parts["grad_reduce_s"] == pytest.approx(want, rel=1e-9)
    assert np.array_equal(full.trace.peak_memory - half.trace.peak_memory, [grads])


def test_the_vocabulary_is_cut_over_the_tensor_parallel_ranks(tiny, tmp_path):
    """With TP the replica holds 1/tp of the embedding's and the output layer's weights,
    gradients and optimizer state per rank (Megatron's VocabParallelEmbedding and output
    ColumnParallelLinear, torchtitan's row- and column-wise ones): found by the vocab x hidden
    the graph records; less static memory and a smaller data-parallel reduction than the
    same graph without its shape, and nothing changes without TP."""
    from moplace.core.graph import OpGraph
    from moplace.optimize.regularsearch import static_bytes
    from moplace.simulator.replica import replica_graph, vocab_ops

    shaped = OpGraph(tiny.ops, tiny.edges, name=tiny.name,
                     metadata={**tiny.metadata, "transformer": {"vocab": 500, "hidden": 64}})
    cut = vocab_ops(shaped)
    names = {shaped.ops[i].name for i in np.flatnonzero(cut)}
    assert {"param/model.embed_tokens.weight", "param/lm_head.weight",
            "update/lm_head.weight", "update/model.embed_tokens.weight"} <= names
    assert not vocab_ops(tiny).any()
    pod = _pod(tmp_path, "370GB/s")
    plan = parse_plan("tp=2,pp=1,dp=2,mbs=8,gbs=32,zero=1")
    rg = replica_graph(shaped, plan, pod, 1).graph
    i = shaped.index["param/lm_head.weight"]
    assert rg.ops[i].param_bytes == shaped.ops[i].param_bytes // 2
    grads = [shaped.ops[k].grad_bytes for k in np.flatnonzero(cut) if shaped.ops[k].grad_bytes]
    assert grads and all(rg.ops[k].grad_bytes * 2 == shaped.ops[k].grad_bytes
                         for k in np.flatnonzero(cut) if shaped.ops[k].grad_bytes)
    # an op whose output is its weight gradient outputs the cut gradient, in FP32 too
    fp32 = replica_graph(shaped, parse_plan("tp=2,pp=1,dp=2,mbs=8,gbs=32,grad_fp32=1"),
                         pod, 1).graph
    made = [k for k in np.flatnonzero(cut)
            if 0 < shaped.ops[k].grad_bytes == shaped.ops[k].output_bytes]
    assert made and all(fp32.ops[k].output_bytes == fp32.ops[k].grad_bytes
                        == shaped.ops[k].grad_bytes for k in made)
    assert static_bytes(shaped, plan, pod) < static_bytes(tiny, plan, pod)
    a, b = evaluate_regular(shaped, pod, plan), evaluate_regular(tiny, pod, plan)
    assert a.parts["grad_reduce_s"] < b.parts["grad_reduce_s"]
    assert a.trace.peak_memory.max() < b.trace.peak_memory.max()
    one = parse_plan("tp=1,pp=1,dp=4,mbs=8,gbs=32,zero=1")
    assert static_bytes(shaped, one, pod) == static_bytes(tiny, one, pod)
