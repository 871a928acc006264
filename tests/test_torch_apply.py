"""Plans applied for real on the PyTorch testbed (`moplace.torch.apply`): each rank's program
is consistent (every receive has its send), what the testbed cannot run is refused by name
before any process starts, and plans compute the one-device step (losses and weights within
`moplace.testbed.equivalence`'s tolerances). The tiny GPT of experiments/models/gpt.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from moplace.core import baselines as base  # noqa: E402
from moplace.simulator.engine import simulate  # noqa: E402

GPT = str(Path(__file__).resolve().parents[1] / "experiments" / "models" / "gpt.py")
DIMS = "64,4,2,32,256"


@pytest.fixture(scope="module")
def gpt_graph():
    from moplace.torch.frontend import profile_torch_model

    old = os.environ.get("GPT_DIMS")
    os.environ["GPT_DIMS"] = DIMS  # the workers inherit it
    try:
        yield profile_torch_model(GPT, 8, ["cpu"], target_kind="cpu", cache=False).graph
    finally:
        if old is None:
            os.environ.pop("GPT_DIMS", None)
        else:
            os.environ["GPT_DIMS"] = old


def _cluster(n):
    from moplace.torch.testbed import TorchTestbed

    return TorchTestbed.placeholder_cluster(n)


def test_every_receive_has_its_send_and_every_rank_its_collectives(gpt_graph):
    from moplace.torch.applyprep import prepare

    g = gpt_graph
    plan = base.data_parallel(g, 2).with_options(micro_batches=2)
    programs, *_ = prepare(g, plan, simulate(g, _cluster(2), plan), 2)
    sends, recvs = _sends_and_receives(programs)
    tags = [tag for *_, tag in sends]
    assert len(tags) == len(set(tags))
    assert recvs == sends and recvs
    reduces = [[s[1].update for s in p.steps if s[0] == "reduce"] for p in programs]
    assert reduces[0] == reduces[1] and reduces[0]  # the same all-reduces in the same order
    assert all(any(s[0] == "update" for s in p.steps) for p in programs)


def _sends_and_receives(programs):
    sends = {(src.rank, key, dst, tag) for src in programs
             for key, out in src.sends.items() for dst, tag in out}
    recvs = set()
    for prog in programs:
        for step in prog.steps:
            needs = [n for _, ns, _ in step[2] for n in ns] if step[0] == "task" else \
                [step[2]] if step[0] == "collect" else []
            for need in needs:
                for q, src, tag in need.recv:
                    recvs.add((src, (need.source, need.mb, q), prog.rank, tag))
    return sends, recvs


def test_a_channel_split_plan_joins_its_parts_where_they_are_read(gpt_graph):
    """Every matmul and attention cut on channel (the tensor blocks dissolved): the parts run
    the kernels, the views after them are made by their readers from the joined output, and
    the weight gradients made in channel parts are joined where the update runs."""
    from moplace.torch.applyprep import prepare
    from moplace.torch.equivalence import split_matmuls, without_tensor_blocks

    g = without_tensor_blocks(gpt_graph)
    plan = split_matmuls(g, 2, "channel")
    kinds = {g.ops[i].type for i in plan.splits}
    assert {"mm.default", "addmm.default"} <= kinds and any("attention" in k for k in kinds)
    programs, *_ = prepare(g, plan, simulate(g, _cluster(2), plan), 2)
    sends, recvs = _sends_and_receives(programs)
    assert recvs == sends and recvs
    tasks = [s[1] for p in programs for s in p.steps if s[0] == "task"]
    assert {t.dim for t in tasks if t.parts > 1} == {"channel"}
    made = {name for p in programs for s in p.steps if s[0] == "task" and s[1].parts > 1
            for name, _, _ in s[2]}
    viewed = {n.node for p in programs for s in p.steps if s[0] == "task"
              for _, ns, _ in s[2] for n in ns if n.views}
    assert viewed and not viewed & made  # views of split outputs: made by their readers
    collects = [s for p in programs for s in p.steps if s[0] == "collect"]
    assert collects and all(p.rank == 0 for p in programs for s in p.steps
                            if s[0] == "collect")


def test_zero3_gathers_each_weight_before_its_first_use_and_not_after_updates(gpt_graph):
    from moplace.torch.applyprep import prepare

    g = gpt_graph
    plan = base.data_parallel(g, 2).with_options(zero_stage=3)
    programs, *_ = prepare(g, plan, simulate(g, _cluster(2), plan), 2)
    trained = {i for i, op in enumerate(g.ops) if op.role == "update"}
    for prog in programs:
        assert set(prog.sharded) == trained
        weight_op = {u: op for u, (_, op) in prog.sharded.items()}
        gathered, updated = set(), set()
        for step in prog.steps:
            if step[0] == "gather":
                assert step[1].update not in updated  # none after the update (ZeRO-1's)
                gathered.add(weight_op[step[1].update])
            elif step[0] == "task" and step[1].op in weight_op.values():
                assert step[1].op in gathered  # the weight is whole when its op runs
            elif step[0] == "update":
                updated.add(step[1].op)
        assert any(s[0] == "regather" for s in prog.steps)  # the blocks' backward


@pytest.mark.parametrize("stage", [0, 1, 3])
@pytest.mark.parametrize("bucket", [0.0, 25 * 2**20])
def test_replicas_reduce_gradients_in_the_simulators_buckets(gpt_graph, stage, bucket):
    from collections import Counter

    from moplace.simulator.collectives import KINDS
    from moplace.torch.applyprep import prepare

    g = gpt_graph
    plan = base.data_parallel(g, 2).with_options(zero_stage=stage, bucket_bytes=bucket)
    trace = simulate(g, _cluster(2), plan)
    programs, *_ = prepare(g, plan, trace, 2)
    kinds = Counter(KINDS[k] for k in trace.collective_kind.tolist())
    trained = sum(op.role == "update" for op in g.ops)
    for prog in programs:
        reduces = [s[1] for s in prog.steps if s[0] == "reduce"]
        how = "reducescatter" if stage else "allreduce"
        assert {r.how for r in reduces} == {how}
        assert len(reduces) == kinds[{"allreduce": "all-reduce",
                                      "reducescatter": "reduce-scatter"}[how]]
        assert (1 < len(reduces) < trained) if bucket == 0 else len(reduces) == 1
        assert sorted(u for r in reduces for u in r.updates) == sorted(
            i for i, op in enumerate(g.ops) if op.role == "update")
        gathers = [s[1] for s in prog.steps if s[0] == "gather"]
        if stage == 1:  # the updated shards gathered per bucket too
            assert len(gathers) == kinds["all-gather"] == len(reduces)


def test_zero_buckets_compute_the_one_device_step(gpt_graph):
    from moplace.torch.equivalence import reference_step, run_plans

    dp = base.data_parallel(gpt_graph, 2)
    plans = [("ZeRO-1, one bucket", dp.with_options(zero_stage=1)),
             ("ZeRO-3, one bucket", dp.with_options(zero_stage=3))]
    rows = list(run_plans(gpt_graph, plans, 2, reference_step(gpt_graph, 2), steps=2))
    assert [r["verdict"] for r in rows] == ["equal", "equal"], rows


def test_tensor_parts_hold_their_heads_of_a_fused_projection_and_sum_partials(gpt_graph):
    """nn.MultiheadAttention's fused query-key-value projection: part k holds the rows of its
    heads of each of the three (three runs, not one half), its bias the same rows though the
    key bias's gradient is zero by the maths; the row linear's partial sums are all-reduced
    among the parts before a node outside the block reads them."""
    from moplace.torch.applyprep import prepare

    g = gpt_graph
    plan = base.tensor_parallel(g, 2)
    programs, *_ = prepare(g, plan, simulate(g, _cluster(2), plan), 2)
    layouts = {}
    for prog in programs:
        for step in prog.steps:
            if step[0] == "task":
                for name, _, lay in step[2]:
                    layouts[(g.ops[step[1].op].name, name)] = lay
    weight = next(lay for (op, _), lay in layouts.items()
                  if op == "param/blocks.0.attn.in_proj_weight")
    bias = next(lay for (op, _), lay in layouts.items()
                if op == "param/blocks.0.attn.in_proj_bias")
    h = 64  # DIMS: hidden 64
    assert weight.kind == "shard" and weight.dim == 0
    assert weight.runs[0] == ((0, h // 2), (h, 3 * h // 2), (2 * h, 5 * h // 2))
    assert bias.runs == weight.runs
    sums = [s for p in programs for s in p.steps if s[0] == "tpsum"]
    assert sums and all(set(s[3]) == {0, 1} for s in sums)
    assert {s[0] for p in programs for s in p.steps} >= {"task", "update", "tpsum"}
    assert not any(s[0] == "reduce" for p in programs for s in p.steps
                   if s[0] == "reduce" and g.ops[s[1].update].name.startswith(
                       "update/blocks.0.attn.in_proj"))  # each part updates its own shard


def test_the_testbed_runs_a_cut_loss_whole_and_reads_a_damaged_loss_list_as_none(gpt_graph):
    """Data parallelism cuts the loss (each rank its samples' loss); the testbed runs it whole
    on its cut's first device and leaves every other split as it is. A graph whose
    ``metadata["loss"]`` is damaged names no loss: the plan runs as it is."""
    from moplace.core.graph import OpGraph
    from moplace.torch.apply import testbed_strategy

    dp = base.data_parallel(gpt_graph, 2)
    loss = [gpt_graph.index[x] for x in gpt_graph.metadata["loss"]]
    assert loss and all(dp.splits[i].dim == "batch" for i in loss)
    run = testbed_strategy(gpt_graph, dp)
    assert all(i not in run.splits and run.placement[i] == dp.splits[i].devices[0]
               for i in loss)
    assert {i: s for i, s in dp.splits.items() if i not in loss} == dict(run.splits)
    for damaged in (5, "nll_loss_forward", [3, None, "no such op"], {"a": 1}):
        g = OpGraph(gpt_graph.ops, gpt_graph.edges, name=gpt_graph.name,
                    metadata={**gpt_graph.metadata, "loss": damaged})
        assert testbed_strategy(g, dp) is dp


def test_what_the_testbed_cannot_run_is_refused_by_name_before_any_process(gpt_graph):
    from moplace.torch.apply import apply_torch

    # data parallel over 4 micro-batches: parts of one sample, where nn.MultiheadAttention's
    # traced step differs from the step traced at 8
    plan = base.data_parallel(gpt_graph, 2).with_options(micro_batches=4)
    result, simulated = apply_torch(gpt_graph, plan, _cluster(2))
    assert not result.expressible and "traced at batch 1" in result.reason
    assert simulated > 0


def test_data_parallel_and_a_pipeline_compute_the_one_device_step(gpt_graph):
    from moplace.torch.equivalence import reference_step, run_plans

    layer = base.layer_split(gpt_graph, 2)
    plans = [("data parallel", base.data_parallel(gpt_graph, 2)),
             ("1F1B", layer.with_options(micro_batches=2))]
    rows = list(run_plans(gpt_graph, plans, 2, reference_step(gpt_graph, 2), steps=2))
    assert [r["verdict"] for r in rows] == ["equal", "equal"], rows
    assert all(r["step_ms"] > 0 for r in rows)


@pytest.mark.slow
def test_interleaved_and_zero_bubble_pipelines_compute_the_one_device_step(gpt_graph):
    """The testbed runs each rank's tasks in the simulator's order: under zero-bubble each
    weight gradient where the schedule holds it back, under interleaved 1F1B Megatron's order."""
    from moplace.core.strategy import SCHEDULES
    from moplace.torch.equivalence import reference_step, run_plans

    layer = base.layer_split(gpt_graph, 2)
    plans = [(name, layer.with_options(micro_batches=4, schedule=SCHEDULES.index(name)))
             for name in ("zero-bubble", "interleaved")]
    rows = list(run_plans(gpt_graph, plans, 2, reference_step(gpt_graph, 2), steps=2))
    assert [r["verdict"] for r in rows] == ["equal", "equal"], rows


@pytest.mark.slow
def test_every_plan_class_and_front_points_compute_the_one_device_step(gpt_graph):
    from moplace.torch.equivalence import plan_classes, reference_step, run_plans

    plans = plan_classes(gpt_graph, 2, nsga2_points=1)
    rows = list(run_plans(gpt_graph, plans, 2, reference_step(gpt_graph, 2), steps=2))
    ran = {r["plan"]: r["verdict"] for r in rows if r["ran"]}
    refused = {r["plan"]: r["reason"] for r in rows if not r["ran"]}
    assert refused == {}, refused
    assert set(ran.values()) == {"equal"}, ran
    assert len(ran) == len(plans) >= 17


def test_profile_on_a_testbed_then_apply_from_the_command_line(tmp_path, monkeypatch, capsys):
    import json

    from moplace.cli import main
    from moplace.io import load_graph

    monkeypatch.setenv("GPT_DIMS", DIMS)
    graph = tmp_path / "gpt.json"
    assert main(["profile", GPT, "--batch", "4", "--testbed", "2", "-o", str(graph),
                 "--steps", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "testbed: 2 PyTorch processes (gloo)" in out and "gloo, measured" in out
    g = load_graph(str(graph))
    measured = g.metadata["measured"]
    assert measured["testbed"] == {"processes": 2} and len(measured["links"]) == 2
    # every op timed as the testbed runs it, at the batch and at its half (at one sample
    # nn.MultiheadAttention traces another graph: that batch is left out)
    assert measured["testbed_op_times"]["batches"] == [4, 2]
    matmul = next(op for op in g.ops if op.type.startswith("addmm"))
    assert matmul.compute["cpu"] > 0 and matmul.part_compute[2]["cpu"] > 0
    assert (tmp_path / "gpt.cluster.toml").exists()
    assert main(["apply", str(graph), "--baseline", "data-parallel", "--steps", "2",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["testbed"] == 2 and report["expressible"] and report["trained"]
    assert len(report["rank_step_s"]) == 2 and report["measured_step_s"] > 0
    assert main(["apply", str(graph), "--baseline", "tensor-parallel", "--steps", "2",
                 "--json"]) == 0  # Megatron's blocks cut in two
    assert json.loads(capsys.readouterr().out)["trained"]
    from moplace.core import baselines
    from moplace.io.strategies import save_strategy

    plan = tmp_path / "plan.json"  # 2 replicas of 4 micro-batches: not a batch of 4
    save_strategy(plan, g, baselines.data_parallel(g, 2).with_options(micro_batches=4))
    assert main(["apply", str(graph), "--strategy", str(plan), "--steps", "2"]) == 2
    assert "does not cut into 4 micro-batches" in capsys.readouterr().err
    if torch.cuda.device_count() < 2:  # a GPU each, before any work
        assert main(["apply", str(graph), "--baseline", "single", "--steps", "2", "--device",
                     "cuda"]) == 2
        assert "a testbed of 2 processes needs 2 GPUs, one each" in capsys.readouterr().err


def test_a_ranks_nodes_on_its_gpu_have_their_device_arguments_pointed_there():
    from moplace.torch.applyprep import Ref, Row
    from moplace.torch.applyvalues import bind, rows_on_device

    row = Row("call_function", "aten.arange.start", (0, Ref("n"), [Ref("m"), 2]),
              {"device": torch.device("cpu"), "dtype": torch.int64}, (3,), torch.int64, (1,))
    moved = rows_on_device({"a": row}, "meta")["a"]
    assert moved.kwargs == {"device": torch.device("meta"), "dtype": torch.int64}
    assert bind(moved.args, {"n": 5, "m": 7}) == (0, 5, [7, 2])  # the nodes it reads kept
    assert row.kwargs["device"] == torch.device("cpu")  # the job's rows are left as they were


def test_device_is_refused_for_a_graph_not_profiled_from_pytorch(capsys):
    from moplace.cli import main

    assert main(["apply", "pipedream:resnet50", "--baseline", "single", "--steps", "1",
                 "--device", "cpu"]) == 2
    assert "not profiled from a PyTorch model" in capsys.readouterr().err


def _random_plans(graph, count: int, seed: int = 1, tries: int = 200):
    """Up to ``count`` random plans the testbed runs, with their programs: the genome's
    samples (placements, batch, channel and tensor splits, ZeRO stages, recomputed groups),
    1, 2 or 4 micro-batches."""
    import numpy as np

    from moplace.core.runners import pytorch_refusal
    from moplace.core.strategy import Strategy
    from moplace.errors import StrategyError
    from moplace.optimize.problem import Problem
    from moplace.torch.applyplan import PlanRefused
    from moplace.torch.applyprep import prepare

    g = graph
    problem = Problem(g, _cluster(2))
    rng = np.random.default_rng(seed)
    plans = []
    for x in problem.genome.sample(tries, rng):
        s = problem.genome.decode(x)
        s = Strategy(s.placement, s.priority, s.splits, bucket_bytes=s.bucket_bytes,
                     zero_stage=s.zero_stage, micro_batches=[1, 2, 4][int(rng.integers(3))],
                     schedule=s.schedule, recompute=s.recompute)
        try:
            s.validate(g, 2)
        except StrategyError:
            continue
        if pytorch_refusal(g, s) is not None:
            continue
        try:
            programs, *_ = prepare(g, s, simulate(g, _cluster(2), s), 2)
        except PlanRefused:  # e.g. a batch split of a node that mixes samples
            continue
        plans.append((f"random {len(plans)}", s, programs))
        if len(plans) == count:
            break
    return plans


def _missing_piece(programs):
    """The first piece a rank reads that it neither made nor receives before, or None."""
    for prog in programs:
        held = set()
        for step in prog.steps:
            if step[0] == "task":
                nodes = [(name, ns) for name, ns, _ in step[2]]
            else:
                nodes = [("collect", [step[2]])] if step[0] == "collect" else []
            for name, needs in nodes:
                for n in needs:
                    arriving = {q for q, _, _ in n.recv}
                    for q in n.pieces:
                        if (n.source, n.mb, q) not in held and q not in arriving:
                            return f"rank {prog.rank}: {name} reads {(n.source, n.mb, q)}"
                    held |= {(n.source, n.mb, q) for q in arriving}
                if step[0] == "task":
                    held.add((name, step[1].mb, step[1].part))
            if step[0] == "tpsum":  # a tensor-parallel partial sum, all-reduced
                _, node, mb, ranks = step
                held.add((f"{node}@sum", mb, ranks.index(prog.rank)))
    return None


def _stuck(programs):
    """Where the ranks' programs stop for good, run in the testbed's blocking order (a task
    waits for the pieces it receives, a collective for every rank of its group to reach it,
    in each group's order), or None when every rank finishes."""
    sent, reached, done, at = set(), {}, [dict() for _ in programs], [0] * len(programs)
    moved = True
    while moved:
        moved = False
        for prog in programs:
            r, steps = prog.rank, prog.steps
            while at[r] < len(steps):
                step = steps[at[r]]
                needs = [n for _, ns, _ in step[2] for n in ns] if step[0] == "task" else \
                    [step[2]] if step[0] == "collect" else []
                if any((src, r, tag) not in sent for n in needs for _, src, tag in n.recv):
                    break
                group = tuple(sorted(step[3])) if step[0] == "tpsum" else \
                    tuple(sorted(set(step[1].ranks) | set(step[1].contributors))) \
                    if step[0] in ("reduce", "gather", "regather") and step[1].how != "send" \
                    else ()
                if len(group) > 1:
                    key = (group, done[r].get(group, 0))
                    reached.setdefault(key, set()).add(r)
                    if reached[key] != set(group):
                        break
                    done[r][group] = key[1] + 1
                if step[0] == "task":
                    for name, _, _ in step[2]:
                        sent |= {(r, dst, tag) for dst, tag in
                                 prog.sends.get((name, step[1].mb, step[1].part), ())}
                at[r] += 1
                moved = True
    left = [(p.rank, p.steps[at[p.rank]][0]) for p in programs if at[p.rank] < len(p.steps)]
    return left or None


@pytest.mark.parametrize("blocks", ["kept", "dissolved"])
def test_random_split_plans_read_only_what_they_made_or_received(gpt_graph, blocks):
    """The fuzz of the planner, without processes: in random plans with batch, channel and
    tensor splits, each rank reads only pieces it made or receives first."""
    from moplace.torch.equivalence import without_tensor_blocks

    g = gpt_graph if blocks == "kept" else without_tensor_blocks(gpt_graph)
    plans = _random_plans(g, 10)
    assert len(plans) >= 4
    dims = {sp.dim for _, s, _ in plans for sp in s.splits.values()}
    assert {"batch", "channel"} <= dims and (blocks == "dissolved" or "tensor" in dims)
    assert [name for name, _, programs in plans if _missing_piece(programs)] == []
    # and run in the order the testbed blocks in, every rank finishes (a channel-split
    # attention once read its heads' slice of a packed projection's channel parts in the
    # simulator, ran before the piece's producer, and waited at a ZeRO gather for good)
    assert [(name, _stuck(programs)) for name, _, programs in plans if _stuck(programs)] == []


@pytest.mark.slow
@pytest.mark.parametrize("blocks", ["kept", "dissolved"])
def test_random_split_plans_compute_the_one_device_step(gpt_graph, blocks):
    """Random plans (`_random_plans`) applied for real compute the one-device step; with the
    tensor blocks dissolved, channel splits reach every matmul and attention."""
    from moplace.torch.equivalence import reference_step, run_plans, without_tensor_blocks

    g = gpt_graph if blocks == "kept" else without_tensor_blocks(gpt_graph)
    plans = [(name, s) for name, s, _ in _random_plans(g, 8)]
    assert len(plans) >= 4
    rows = list(run_plans(g, plans, 2, reference_step(g, 1), steps=1))
    assert all(r["ran"] for r in rows), [r["reason"] for r in rows if not r["ran"]]
    assert all(r["verdict"] == "equal" for r in rows), [(r["plan"], r["loss_rel"],
                                                         r["weight_abs"]) for r in rows]


@pytest.mark.slow
def test_fidelity_on_the_pytorch_testbed_from_the_command_line(tmp_path, monkeypatch, capsys):
    import json

    from moplace.cli import main

    monkeypatch.setenv("GPT_DIMS", DIMS)
    stem = tmp_path / "fid"
    assert main(["fidelity", GPT, "--batch", "8", "--testbed", "2", "--steps", "3",
                 "--front-points", "1", "--budget", "30", "--calibration", "2", "--no-mlflow",
                 "--rounds", "2", "-o", str(stem), "--quiet"]) == 0
    data = json.loads((tmp_path / "fid.json").read_text())
    assert data["rounds"] == 2
    ran = [r for r in data["rows"] if r["measured_s"]]
    assert len(ran) >= 10 and data["corrections"]["calibration_strategies"] == 2
    assert "PyTorch processes (gloo)" in data["testbed"]
    # each at the machine's speed when the ops were timed (a probe's ratio)
    assert all(r["machine_speed"] > 0 for r in ran)
    assert any(r["machine_speed"] != 1.0 for r in ran)
    out = capsys.readouterr().out
    assert "corrected: median |err|" in out and "measured steps scaled to the machine's" in out
