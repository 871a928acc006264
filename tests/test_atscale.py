"""Regular plans at any scale (issue 50, part 1, for issue 49's 64-GPU Mixtral mapping): pods
of 8-GPU servers named without listing devices (`moplace.core.pod`), collectives timed by
NCCL's cost model (`moplace.simulator.nccl`), plans given by their degrees
(`moplace.core.regular`), one replica simulated with the cross-replica collectives modelled
(`moplace.simulator.replica`, `moplace.simulator.atscale`), held to the full simulation where
both run, and ``moplace evaluate --plan``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from moplace.cli import main
from moplace.core.degrees import Degrees, regular_plan
from moplace.core.pod import load_target, pod_of_cluster, pod_preset, sub_cluster
from moplace.core.presets import load_cluster
from moplace.core.regular import parse_plan
from moplace.costs.costmodel import CostModel
from moplace.errors import ClusterError, FormatError, StrategyError
from moplace.io import load_graph
from moplace.simulator import nccl
from moplace.simulator.atscale import evaluate_regular
from moplace.simulator.evaluation import evaluate
from moplace.simulator.replica import _replica_graph, replica_devices

TINY = Path(__file__).parent / "data" / "tiny-llama.json"
POD4 = """name = "test-pod"
[pod]
gpus = 4
[[servers]]
count = 2
nics = 2
kind = "H100"
memory = "80GiB"
[servers.interconnect]
bandwidth = "370GB/s"
latency = "2us"
sharing = "port"
[network]
bandwidth = "48GB/s"
latency = "5us"
"""


@pytest.fixture(scope="module")
def tiny():
    return load_graph(str(TINY))


@pytest.fixture
def pod4(tmp_path):
    path = tmp_path / "pod4.toml"
    path.write_text(POD4)
    return load_target(str(path))


# -- pods -------------------------------------------------------------------------------------

def test_pod_presets_carry_the_cited_figures():
    pod = pod_preset("pod:H100:16384")
    assert (pod.gpus, pod.per_server, pod.n_servers, pod.kind) == (16384, 8, 2048, "H100")
    assert (pod.nvlink_bandwidth, pod.nic_bandwidth, pod.nvls_bandwidth) == (370e9, 48e9, 480e9)
    two = pod.servers(2)
    assert two.n_devices == 16 and two.n_servers == 2
    assert two.bandwidth[0, 1] == 370e9 and two.bandwidth[0, 8] == 48e9
    assert pod_preset("pod:b200:64").kind == "B200"


@pytest.mark.parametrize("name", ["pod:X:8", "pod:H100:12", "pod:H100:4", "pod:H100:65536",
                                  "pod:H100", "pod:"])
def test_bad_pod_names_are_one_line(name):
    with pytest.raises(ClusterError) as e:
        pod_preset(name)
    assert "\n" not in str(e.value) and "pod" in str(e.value)


def test_a_pod_is_only_for_regular_plans(tmp_path):
    with pytest.raises(ClusterError, match="regular plans only"):
        load_cluster("pod:H100:64")
    path = tmp_path / "p.toml"
    path.write_text(POD4)
    with pytest.raises(FormatError, match="regular plans only"):
        load_cluster(str(path))


@pytest.mark.parametrize("edit, field", [
    (("gpus = 4", "gpus = 5"), "pod.gpus"), (("gpus = 4", "gpus = true"), "pod.gpus"),
    (("gpus = 4", "gpus = 4\nfoo = 1"), "pod.foo"), (("count = 2", "count = 2\nrepeat = 2"),
                                                      "servers")])
def test_bad_pod_files_name_the_field(tmp_path, edit, field):
    path = tmp_path / "p.toml"
    path.write_text(POD4.replace(*edit))
    with pytest.raises(FormatError) as e:
        load_target(str(path))
    assert field in str(e.value)


def test_pod_file_and_listed_cluster_as_pods(pod4):
    assert (pod4.gpus, pod4.per_server, pod4.nic_bandwidth) == (4, 2, 48e9)
    listed = load_cluster("2x8xH100-80GB-8xIB400")
    as_pod = pod_of_cluster(listed)
    assert (as_pod.gpus, as_pod.per_server, as_pod.nvlink_bandwidth) == (16, 8, 370e9)
    sub = sub_cluster(listed, [0, 8, 1, 9])
    assert sub.n_servers == 2 and sub.bandwidth[0, 2] == 370e9 and sub.bandwidth[0, 1] == 48e9


# -- NCCL's cost model ------------------------------------------------------------------------

def test_ring_inside_a_server_by_hand():
    pod = pod_preset("pod:H100:64")
    b = 100e6
    t, alg = nccl.collective_time(pod, nccl.ALL_REDUCE, b, 8, 1)
    steps = 14
    assert alg == "ring"
    assert t == pytest.approx(8.4e-6 + steps * 3.4e-6 + b / (370e9 * 8 / steps))
    # above 256 MB an all-reduce in one server runs on NVLink SHARP's bus
    t2, _ = nccl.collective_time(pod, nccl.ALL_REDUCE, 1e9, 8, 1)
    assert t2 == pytest.approx(8.4e-6 + steps * 3.4e-6 + 1e9 / (480e9 * 8 / steps))


def test_across_servers_each_rank_brings_its_nic():
    pod = pod_preset("pod:H100:1024")
    # 16 ranks one per server (stride 8): one NIC each; 8 per server: NVLink's ring bounds
    assert nccl.bus_bandwidth(pod, 16, 8) == 48e9
    assert nccl.bus_bandwidth(pod, 16, 1) == 370e9
    assert nccl.group_servers(16, 2, 8) == (4, 4)
    t, alg = nccl.collective_time(pod, nccl.REDUCE_SCATTER, 1e9, 16, 8)
    assert alg == "ring"
    assert t == pytest.approx(8.4e-6 + 15 * 9.6e-6 + 1e9 / (48e9 * 16 / 15))


def test_tree_wins_small_all_reduces_over_many_servers():
    pod = pod_preset("pod:H100:8192")
    small = nccl.collective_time(pod, nccl.ALL_REDUCE, 1e6, 1024, 8)
    big = nccl.collective_time(pod, nccl.ALL_REDUCE, 4e9, 16, 8)
    assert small[1] == "tree" and big[1] == "ring"
    r, servers = 1, 1024
    assert small[0] == pytest.approx(2 * (math.log2(servers) * 50e-6) + 1e6 / (0.45 * 48e9))
    del r


def test_all_to_all_by_hand():
    pod = pod_preset("pod:H100:64")
    b = 64 * 2**20
    t, _ = nccl.collective_time(pod, nccl.ALL_TO_ALL, b, 8, 1)  # one server
    assert t == pytest.approx(b * 7 / 8 / 370e9 + 2e-6)
    t, _ = nccl.collective_time(pod, nccl.ALL_TO_ALL, b, 8, 2)  # 4 per server, 2 servers
    assert t == pytest.approx(max(b * 3 / 8 / 370e9, b * 4 / 8 / 48e9) + 5e-6)
    assert nccl.moved_bytes(nccl.ALL_REDUCE, 8.0, 4) == 12.0
    assert nccl.collective_time(pod, nccl.ALL_REDUCE, 1e6, 1) == (0.0, "none")


# -- plans by their degrees --------------------------------------------------------------------

def test_parse_plan_reads_what_people_write():
    p = parse_plan("tp=8, cp=1, pp=16, v=2, dp=128, ep=1, mbs=1, gbs=2048, recompute=selective")
    assert (p.tp, p.pp, p.v, p.dp, p.gpus, p.micro_batches) == (8, 16, 2, 128, 16384, 16)
    assert p.schedule == "interleaved" and p.zero == 1
    assert p.text() == ("TP8 PP16 (v2) DP128, mbs 1, gbs 2,048, interleaved, recompute "
                        "selective, ZeRO-1")
    assert parse_plan(p.spec()) == p


@pytest.mark.parametrize("text, words", [
    ("", "give the degrees"), ("tp", "not key=value"), ("tp=x,pp=1,dp=1,mbs=1,gbs=1", "whole"),
    ("tp=1,tp=2", "twice"), ("foo=1", "unknown key"), ("tp=1,pp=1", "dp, mbs, gbs missing"),
    ("tp=0,pp=1,dp=1,mbs=1,gbs=1", "from 1"), ("tp=1,pp=1,dp=1,mbs=1,gbs=1,zero=3", "from 0 to 2"),
    ("tp=1,pp=1,dp=1,mbs=1,gbs=1,precision=fp4", "one of bf16")])
def test_bad_plans_are_one_line_naming_the_key(text, words):
    with pytest.raises(StrategyError) as e:
        parse_plan(text)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_misfits_say_why(tiny):
    fits = parse_plan("tp=1,pp=2,dp=2,mbs=8,gbs=64")
    assert fits.misfit(tiny, 4) is None
    assert "4 GPUs, but the cluster has 8" in fits.misfit(tiny, 8)
    assert "trace it at --batch 4" in parse_plan("tp=1,pp=2,dp=2,mbs=4,gbs=64").misfit(tiny, 4)
    assert "whole layers" in parse_plan("tp=1,pp=4,v=2,dp=1,mbs=8,gbs=64").misfit(tiny, 4)
    assert "multiples of pp" in parse_plan("tp=1,pp=2,v=2,dp=1,mbs=8,gbs=8").misfit(tiny, 2)
    assert "no mixture of experts" in parse_plan("tp=1,pp=1,dp=2,ep=2,mbs=8,gbs=16").misfit(tiny, 2)


def test_replica_ranks_follow_megatron_order():
    # tp fastest, then cp, (ep within) dp, pp outermost
    assert replica_devices(parse_plan("tp=2,pp=2,dp=4,mbs=1,gbs=8")) == [0, 1, 8, 9]
    assert replica_devices(parse_plan("tp=8,pp=4,dp=2,mbs=1,gbs=8"))[8] == 16


# -- one replica against the whole --------------------------------------------------------------

def _full(graph, plan, pod):
    """The plan simulated whole: the micro-batch graph made the step's (times and activations
    dp x m over, linear as the replica assumes), every replica's devices op by op."""
    full = _replica_graph(graph, plan.micro_batches * plan.dp, 1, 1, pod, 1).graph
    cl = pod.servers(pod.n_servers)
    s = regular_plan(full, Degrees(plan.gpus, plan.pp, "data", plan.micro_batches,
                                   plan.schedule, plan.recompute, plan.zero, plan.v, plan.fp8, 1))
    return evaluate(full, cl, s, costs=CostModel(full, cl, split_overhead_s=0.0))


@pytest.mark.parametrize("spec, time_tol", [("tp=1,pp=2,dp=2,mbs=8,gbs=64,zero=1", 0.03),
                                            ("tp=1,pp=2,dp=2,mbs=8,gbs=64,zero=0", 0.03),
                                            ("tp=1,pp=2,dp=2,mbs=8,gbs=16,zero=0", 0.03),
                                            ("tp=1,pp=1,dp=4,mbs=8,gbs=64,zero=1", 0.15)])
def test_one_replica_is_the_whole_plan(tiny, pod4, spec, time_tol):
    """Where the full simulation runs the plan (4 GPUs), the replica's step, every
    micro-batch simulated (``whole``; the step composed from one micro-batch is held against
    it in test_pipecompose), is within a few
    percent of it (the full one's first device also runs the few ops that do not split on
    batch, for the whole batch: 11% of this tiny model's step with 4 replicas, and sends the
    others their slices) and its traffic and memory within 5% of the other devices'. (Its
    memory is the same pipeline's without data parallelism exactly,
    `test_replica_is_its_pipeline`; the full simulation held up to 2.7 MB more per device
    with 2 stages of 2 replicas and 4 micro-batches until 1F1B ranked a stage's devices as
    one stage.)"""
    plan = parse_plan(spec)
    ev = evaluate_regular(tiny, pod4, plan, whole=True)
    ref = _full(tiny, plan, pod4)
    rt = ref.trace
    assert ev.runtime_s == pytest.approx(float(rt.makespan), rel=time_tol)
    others = [1, 2, 3] if plan.pp == 1 else [1, 3]  # each stage's second replica
    replica = [0, 0, 0] if plan.pp == 1 else [0, 1]
    assert ev.trace.received[replica] == pytest.approx(rt.received[others], rel=0.05)
    assert ev.trace.peak_memory[replica] == pytest.approx(rt.peak_memory[others], rel=0.05)
    assert ev.parts["grad_reduce_s"] > 0 and ev.how().startswith("simulated op by op")


def test_replica_is_its_pipeline(tiny, pod4):
    """The replica's simulated part (``whole``) is the plan's pipeline, micro-batches and all,
    exactly:
    the full simulation of one pipeline on the same two GPUs, its graph the step's."""
    plan = parse_plan("tp=1,pp=2,dp=2,mbs=8,gbs=64,zero=0")
    ev = evaluate_regular(tiny, pod4, plan, whole=True)
    full = _replica_graph(tiny, plan.micro_batches, 1, 1, pod4, 1).graph
    cl = sub_cluster(pod4.servers(2), [0, 2])
    s = regular_plan(full, Degrees(2, 2, "data", 4, "1f1b", "none", 0, 1, "none", 1))
    ref = evaluate(full, cl, s, costs=CostModel(full, cl, split_overhead_s=0.0)).trace
    assert np.array_equal(ev.trace.peak_memory, ref.peak_memory)
    assert ev.parts["simulated_s"] == float(ref.makespan)


def test_same_plan_same_numbers(tiny, pod4):
    plan = parse_plan("tp=1,pp=2,dp=2,mbs=8,gbs=64")
    a, b = evaluate_regular(tiny, pod4, plan), evaluate_regular(tiny, pod4, plan)
    assert np.array_equal(a.values, b.values) and a.parts == b.parts


def test_overlap_hides_what_fits_its_window(tiny, pod4, monkeypatch):
    """Overlapped, the reduction exposes what exceeds its window or the last bucket, the
    gather its first bucket (buckets of 64 K parameters here, four of the tiny model's
    249 K: they fit Megatron's one)."""
    from moplace.simulator import dpsync

    monkeypatch.setattr(dpsync, "bucket_params", lambda dp: 2**16)
    on = evaluate_regular(tiny, pod4, parse_plan("tp=1,pp=1,dp=4,mbs=8,gbs=32"))
    off = evaluate_regular(tiny, pod4, parse_plan("tp=1,pp=1,dp=4,mbs=8,gbs=32,overlap=0"))
    whole = off.parts["grad_reduce_s"] + off.parts["param_gather_s"]
    assert off.parts["exposed_s"] == pytest.approx(whole)
    assert on.parts["exposed_s"] < whole and on.runtime_s < off.runtime_s


def test_evaluate_plan_cli(tiny, tmp_path, capsys):
    path = tmp_path / "pod4.toml"
    path.write_text(POD4)
    argv = ["evaluate", str(TINY), "--cluster", str(path), "--plan",
            "tp=1,pp=2,dp=2,mbs=8,gbs=64"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "TP1 PP2 DP2" in out and "tokens/s per GPU" in out and "modelled" in out
    assert main(argv + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"] == 4 and data["micro_batches"] == 4 and data["runtime_s"] > 0
    assert data["tokens_per_step"] == 64 * 32
    assert main(["evaluate", str(TINY), "--cluster", str(path), "--plan",
                 "tp=1,pp=2,dp=2,mbs=8,gbs=64", "--baseline", "all"]) == 2
    assert main(["evaluate", str(TINY), "--cluster", "pod:H100:8", "--plan",
                 "tp=1,pp=2,dp=2,mbs=8,gbs=64"]) == 2
    err = capsys.readouterr().err
    assert "8 GPUs" in err or "cluster has 8" in err


def test_regular_space_lists_what_runs(tiny):
    """Every plan of the space fits the graph and GPUs; Megatron has no zero-bubble schedule,
    torchtitan shards (FSDP); recomputation modes that recompute nothing are not offered."""
    from moplace.core.recompute import attention_cores
    from moplace.core.regularspace import RegularSpace

    mega = RegularSpace(tiny, 4, 64).all()
    assert mega and all(p.misfit(tiny, 4) is None for p in mega)
    assert {p.schedule for p in mega} == {"1f1b", "interleaved"}
    assert {(p.tp, p.pp, p.dp) for p in mega} >= {(1, 1, 4), (2, 2, 1), (4, 1, 1), (1, 4, 1)}
    titan = RegularSpace(tiny, 4, 64, framework="torchtitan").all()
    assert "zero-bubble" in {p.schedule for p in titan} and {p.zero for p in titan} == {1}
    modes = {p.recompute for p in mega}
    assert ("selective" in modes) == bool(attention_cores(tiny).size)
    assert len(set(p.spec() for p in mega)) == len(mega)


def test_throughput_in_the_words_people_use(tiny, pod4):
    """Tokens/s and model TFLOP/s per GPU and MFU, the FLOPs counted as Megatron-LM does
    (`moplace.core.flops`) from the shape the graph records; none without one."""
    from moplace.core.flops import TransformerShape, megatron_flops
    from moplace.core.graph import OpGraph

    plan = parse_plan("tp=1,pp=2,dp=2,mbs=8,gbs=64")
    bare = evaluate_regular(tiny, pod4, plan)
    assert bare.tflops_per_gpu is None and "no transformer shape" in bare.flops_note
    shape = TransformerShape(hidden=64, layers=4, heads=4, kv_heads=4, head_dim=16, ffn=128,
                             vocab=128, gated=True)
    g = OpGraph(tiny.ops, tiny.edges, name=tiny.name,
                metadata={**tiny.metadata, "transformer": shape.as_dict()})
    ev = evaluate_regular(g, pod4, plan)
    flops = megatron_flops(shape, 64, 32)[0]
    assert ev.tokens_per_s_per_gpu == pytest.approx(64 * 32 / ev.runtime_s / 4)
    assert ev.tflops_per_gpu == pytest.approx(flops / ev.runtime_s / 4 / 1e12)
    assert ev.mfu == pytest.approx(ev.tflops_per_gpu * 1e12 / 989.5e12)
    assert ev.summary().startswith("TP1 PP2 DP2, ") and "MFU" in ev.summary()


def test_where_the_step_goes(tiny, pod4):
    """The step on its slowest stage by cause adds up to the step; full recomputation shows
    as its own share, and a pipeline's bubble as another."""
    plain = evaluate_regular(tiny, pod4, parse_plan("tp=1,pp=2,dp=2,mbs=8,gbs=64"))
    again = evaluate_regular(tiny, pod4, parse_plan("tp=1,pp=2,dp=2,mbs=8,gbs=64,"
                                                    "recompute=full"))
    for ev in (plain, again):
        assert sum(ev.losses.values()) == pytest.approx(ev.runtime_s, rel=1e-9)
        assert ev.losses["pipeline bubble and waits"] > 0
    assert plain.losses["recomputation"] == 0 < again.losses["recomputation"]


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_splits_past_the_63rd_device_run_as_the_same_splits_below_it(zero):
    """Device sets are rows of 63-device bitmask words (`moplace.simulator.devsets`): on a
    cluster of 128 equal devices, a data-parallel plan (each op split on 8 devices, its
    gradients all-reduced, or reduce-scattered and gathered under ZeRO) on devices that cross
    the words' boundary and reach the last one gives the figures of the same plan on devices
    0 to 7, device for device. (Splits past device 62 were once refused, and before that gave
    collectives over the wrong devices.)"""
    from moplace.core.baselines import data_parallel
    from moplace.core.cluster import Cluster
    from moplace.core.strategy import Split, Strategy
    from moplace.simulator.engine import simulate

    g = load_graph("pipedream:alexnet")
    big = Cluster.uniform(128, kind="H100", memory_bytes=80 * 2**30, bandwidth=100e9,
                          latency=1e-6)
    near = data_parallel(g, 8)
    near = Strategy(near.placement, near.priority, near.splits, bucket_bytes=25 * 2**20,
                    zero_stage=zero)
    far_devices = np.array([60, 61, 62, 63, 64, 100, 126, 127])
    far = Strategy(far_devices[near.placement], near.priority,
                   {op: Split(s.dim, tuple(far_devices[list(s.devices)].tolist()))
                    for op, s in near.splits.items()},
                   bucket_bytes=near.bucket_bytes, zero_stage=zero)
    a, b = simulate(g, big, near), simulate(g, big, far)
    assert b.makespan == pytest.approx(a.makespan, rel=1e-12)
    for name in ("sent", "received", "peak_memory", "busy"):
        assert np.allclose(getattr(b, name)[far_devices], getattr(a, name)[:8], rtol=1e-12), name
        rest = np.setdiff1d(np.arange(128), far_devices)
        assert not getattr(b, name)[rest].any(), name
    assert a.sent[:8].min() > 0  # the gradients went round
    whole = simulate(g, big, data_parallel(g, 128))
    assert whole.sent.min() > 0 and np.ptp(whole.sent) <= 1e-9 * whole.sent.max()


def test_uneven_first_and_last_stages(tiny):
    """first= and last= set the first and last stages' layers (Megatron's
    --decoder-first/last-pipeline-num-layers), the others sharing the rest: what a 126-layer
    model needs for 16 stages."""
    from moplace.core.cluster import Cluster

    plan = parse_plan("tp=1,pp=3,dp=1,mbs=8,gbs=16,first=1,last=1")
    assert plan.stage_layers(4) == (1, 2, 1) and "1 first, 1 last" in plan.text()
    assert parse_plan("tp=1,pp=16,dp=1,mbs=1,gbs=16,first=7,last=7").stage_layers(126) == \
        (7,) + (8,) * 14 + (7,)
    assert "not a whole number" in parse_plan("tp=1,pp=2,dp=1,mbs=8,gbs=16,first=3,last=3"
                                              ).misfit(tiny, 2)
    three = Cluster.uniform(3, kind="H100", memory_bytes=80 * 2**30, bandwidth=100e9,
                            latency=1e-6)
    ev = evaluate_regular(tiny, three, plan)
    even = evaluate_regular(tiny, three, parse_plan("tp=1,pp=3,dp=1,mbs=8,gbs=16,first=2"))
    busy, busy2 = ev.trace.replica.busy, even.trace.replica.busy
    assert busy[1] > busy[0] and busy2[0] > busy2[2]  # the middle stage has 2 layers, then 1


def test_fp16_runs_as_bf16_but_megatron_keeps_its_gradients_in_fp16(tiny, pod4):
    """FP16 takes BF16's time and bytes; what differs is Megatron's rule: BF16's gradients are
    held and reduced in FP32, FP16's (loss-scaled) in FP16, so its space halves the
    data-parallel traffic; both read back and say their precision."""
    from moplace.core.regularspace import RegularSpace
    from moplace.io.regularexport import regular_megatron

    fp16 = parse_plan("tp=1,pp=1,dp=4,mbs=8,gbs=32,precision=fp16")
    bf16 = parse_plan("tp=1,pp=1,dp=4,mbs=8,gbs=32")
    a, b = evaluate_regular(tiny, pod4, fp16), evaluate_regular(tiny, pod4, bf16)
    assert np.array_equal(a.values, b.values) and a.parts == b.parts
    assert "FP16" in fp16.text() and parse_plan(fp16.spec()) == fp16
    space = {p.precision: p for p in RegularSpace(tiny, 4, 32, precisions=("bf16", "fp16")).all()
             if (p.tp, p.pp, p.dp, p.zero, p.recompute) == (1, 1, 4, 1, "none")}
    assert space["bf16"].grad_fp32 == 1 and space["fp16"].grad_fp32 == 0
    ev = {k: evaluate_regular(tiny, pod4, p) for k, p in space.items()}
    assert ev["fp16"].parts["grad_reduce_s"] < ev["bf16"].parts["grad_reduce_s"]
    args = regular_megatron(space["fp16"], None)["args"]
    assert "--fp16" in args and "--bf16" not in args
    assert "--accumulate-allreduce-grads-in-fp32" in regular_megatron(
        parse_plan("tp=1,pp=1,dp=4,mbs=8,gbs=32,precision=fp16,grad_fp32=1"), None)["args"]
