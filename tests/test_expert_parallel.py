"""Expert parallelism (issue 49, part 2): a mixture-of-experts layer's experts split on
``expert`` over the devices its tokens are split on by batch (`moplace.core.graph.SPLIT_DIMS`,
`moplace.simulator.taskgraph`), held to the published all-to-all volume and the expert
weights' memory on a tiny traced Mixtral; then the degree space's ``ep`` gene, the plan's
shape and its Megatron and torchtitan configurations."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch", reason="the PyTorch front end needs torch")
pytest.importorskip("transformers", reason="hf: models need transformers ('moplace[torch]')")

from moplace.cli import main  # noqa: E402
from moplace.core.baselines import data_parallel  # noqa: E402
from moplace.core.cluster import Cluster  # noqa: E402
from moplace.core.strategy import Split, Strategy  # noqa: E402
from moplace.io import load_graph  # noqa: E402
from moplace.simulator.engine import simulate  # noqa: E402

#: a Mixtral of 8 layers, 4 experts of which each token takes 2 (tests/test_moe_trace.py's,
#: deeper: pipelines of 2 and 4 stages, virtual stages of 2 and 4 layers)
CONFIG = {"model_type": "mixtral", "hidden_size": 32, "num_hidden_layers": 8,
          "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100,
          "max_position_embeddings": 64, "num_local_experts": 4, "num_experts_per_tok": 2,
          "intermediate_size": 48}


@pytest.fixture(scope="module")
def mixtral_file(tmp_path_factory):
    """The tiny Mixtral traced at 4 x 8 tokens in bf16 with H100 estimates: 32 tokens, 2 of 4
    experts each, buffers [4, 16, 32] (4,096 bytes) per layer."""
    folder = tmp_path_factory.mktemp("mixtral")
    (folder / "config.json").write_text(json.dumps(CONFIG))
    out = folder / "g.json"
    assert main(["profile", f"hf:{folder / 'config.json'}", "--batch", "4", "--seq-len", "8",
                 "--dtype", "bf16", "--estimate", "H100", "--quiet", "--no-cache", "-o",
                 str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def mixtral(mixtral_file):
    return load_graph(str(mixtral_file))


def cluster(n: int) -> Cluster:
    return Cluster.uniform(n, kind="H100", memory_bytes=80 * 2**30, bandwidth=100e9,
                           latency=1e-6)


def expert_parallel(graph, n: int) -> Strategy:
    """Data parallelism over n devices with every op splittable on expert split on it
    over the same n devices (by hand, not by the degree space)."""
    dp = data_parallel(graph, n)
    splits = dict(dp.splits)
    for i, op in enumerate(graph.ops):
        if "expert" in op.splittable:
            splits[i] = Split("expert", tuple(range(n)))
    return Strategy(dp.placement, dp.priority, splits,
                    bucket_bytes=dp.bucket_bytes).validate(graph, n)


def layer_ops(graph, part: str) -> list[int]:
    return [graph.index[name] for layer in graph.metadata["moe"]["layer_ops"]
            for name in layer[part]]


def test_the_experts_their_weights_and_updates_are_splittable_on_expert(mixtral):
    """Every op of a layer's experts (the activation's backward, which reads the forward's
    buffers, included), the stacked weights and their updates; nothing else."""
    moe = mixtral.metadata["moe"]
    cut = {op.name for op in mixtral.ops if "expert" in op.splittable}
    for layer in moe["layer_ops"]:
        assert set(layer["gemms"]) <= set(layer["experts"]) <= cut
        assert set(layer["weights"]) <= cut
        assert {f"update/{w.removeprefix('param/')}" for w in layer["weights"]} <= cut
        for part in ("slots", "dispatch", "combine", "dispatch_backward", "combine_backward"):
            assert not set(layer[part]) & cut
    listed = {n for layer in moe["layer_ops"] for k in ("experts", "weights") for n in layer[k]}
    assert {n for n in cut if not n.startswith("update/")} == listed
    assert all(mixtral.ops[mixtral.index[n]].output_bytes % moe["experts"] == 0
               for layer in moe["layer_ops"] for n in layer["experts"])


@pytest.mark.parametrize("ep", [2, 4])
def test_all_to_all_bytes_are_the_published_volume(mixtral, ep):
    """Each device sends (ep - 1)/ep of its tokens' dispatch buffer per all-to-all: the
    dispatch and the combine forward, their gradients backward (the dispatched tokens stay
    on the expert's device for the weight gradient, as Megatron keeps them); against data
    parallelism each device sends that, 4 times per layer, less the expert weights' gradient
    all-reduce (2 (n - 1)/n of their bytes on a ring)."""
    moe = mixtral.metadata["moe"]
    buffers = [mixtral.ops[i].output_bytes for i in layer_ops(mixtral, "dispatch")]
    assert buffers == [4 * 16 * 32 * 2] * moe["layers"]  # [E, C, H] bf16, C = 32 x 2 / 4
    per_a2a = (ep - 1) / ep * buffers[0] / ep  # a device's share of one all-to-all
    dp, exp = data_parallel(mixtral, ep), expert_parallel(mixtral, ep)
    t_dp = simulate(mixtral, cluster(ep), dp, record=True)
    t_ep = simulate(mixtral, cluster(ep), exp, record=True)
    tr = t_ep.transfers
    op = t_ep.task_op[tr[:, 0].astype(np.int64)]

    def sent(ops) -> np.ndarray:
        m = np.isin(op, ops)
        return np.bincount(tr[m, 1].astype(np.int64), weights=tr[m, 3], minlength=ep)

    layers = moe["layers"]
    np.testing.assert_allclose(sent(layer_ops(mixtral, "dispatch")), layers * per_a2a)
    np.testing.assert_allclose(sent(layer_ops(mixtral, "combine_backward")), layers * per_a2a)
    experts = [mixtral.index[n] for layer in moe["layer_ops"] for n in layer["experts"]]
    np.testing.assert_allclose(sent(experts), 2 * layers * per_a2a)  # to combine, its grad
    expert_grads = sum(mixtral.ops[i].grad_bytes for i in experts)
    assert expert_grads == sum(mixtral.ops[i].param_bytes for i in layer_ops(mixtral, "weights"))
    np.testing.assert_allclose(t_ep.sent - t_dp.sent,
                               4 * layers * per_a2a - 2 * (ep - 1) / ep * expert_grads)


@pytest.mark.parametrize("ep", [2, 4])
def test_expert_weights_and_their_state_are_divided_by_ep(mixtral, ep):
    """Each device holds 1/ep of the experts' weights and optimizer state (each expert on one
    device), the rest of the model whole; and an expert part runs 1/ep of its op's time."""
    weights = layer_ops(mixtral, "weights")
    updates = [i for i, op in enumerate(mixtral.ops)
               if op.role == "update" and "expert" in op.splittable]
    experts = sum(mixtral.ops[i].param_bytes for i in weights + updates)
    assert sum(mixtral.ops[i].param_bytes for i in weights) == 8 * 2 * (
        4 * 96 * 32 + 4 * 32 * 48)  # 8 layers of [E, 2I, H] and [E, H, I] in bf16
    t_dp = simulate(mixtral, cluster(ep), data_parallel(mixtral, ep))
    t_ep = simulate(mixtral, cluster(ep), expert_parallel(mixtral, ep), record=True)
    np.testing.assert_allclose(t_dp.static_memory - t_ep.static_memory,
                               experts * (1 - 1 / ep))
    gemm = layer_ops(mixtral, "gemms")[0]
    parts = np.flatnonzero(t_ep.task_op[:t_ep.task_device.size] == gemm)
    parts = parts[t_ep.task_device[parts] >= 0]
    assert sorted(t_ep.task_device[parts].tolist()) == list(range(ep))
    from moplace.costs.costmodel import CostModel

    costs = CostModel(mixtral, cluster(ep))
    np.testing.assert_allclose(t_ep.task_end[parts] - t_ep.task_start[parts],
                               costs.compute[gemm, 0] / ep + costs.split_overhead_s)


# -- the degree space, the plan's shape, its configurations -----------------------------------

def test_the_space_offers_expert_parallelism_on_experts_only(mixtral):
    """ep: 1, or the stage width in data-parallel mode where it divides the 4 experts
    (torchtitan: under FSDP only); a dense model's plans all have ep 1, the gene one choice."""
    from pathlib import Path

    from moplace.core.degrees import GENES, DegreeSpace

    assert GENES[-1] == "ep"
    for framework in ("megatron", "torchtitan"):
        space = DegreeSpace(mixtral, 4, framework)
        plans = space.all()
        ep = [d for d in plans if d.ep > 1]
        assert ep and all(d.mode == "data" and d.ep == d.width and 4 % d.ep == 0 for d in ep)
        assert {(d.devices, d.pp) for d in ep} == {(2, 1), (4, 1), (4, 2)}  # width 2 or 4
        assert all(d.zero > 0 for d in ep) == (framework == "torchtitan")
        # each EP plan is a data-parallel plan of the space with its experts cut
        assert {d.__class__(**{**vars(d), "ep": 1}) for d in ep} <= set(plans)
    llama = load_graph(str(Path(__file__).parent / "data" / "tiny-llama.json"))
    space = DegreeSpace(llama, 4, "megatron")
    assert space.experts == 0 and all(d.ep == 1 for d in space.all())
    assert space.bounds[1][-1] == 0


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_every_expert_parallel_plan_runs_and_reads_back(mixtral, framework):
    """Each EP plan of the space: a regular shape of expert degree ep, its degrees read back
    from the strategy (`of_strategy`, `encode`), run by its framework, simulated; the
    experts, weights and updates split on expert over each stage's devices, all else on
    batch."""
    from moplace.core.degrees import DegreeSpace
    from moplace.core.planshape import plan_shape
    from moplace.core.runners import runners

    space = DegreeSpace(mixtral, 4, framework)
    for d in (d for d in space.all() if d.ep > 1):
        x = space.encode_degrees(d)
        s = space.decode(x)
        shape = plan_shape(mixtral, s)
        assert shape.regular and (shape.ep, shape.dp, shape.tp, shape.pp) == (
            d.ep, d.width, 1, d.pp), d.text()
        assert space.of_strategy(s) == d and np.array_equal(space.encode(s), x)
        assert framework in runners(mixtral, s, shape)
        assert "moplace-apply" not in runners(mixtral, s, shape)  # the testbed splits no expert
        dims = {mixtral.ops[i].name: sp.dim for i, sp in s.splits.items()}
        cut = {op.name for op in mixtral.ops if "expert" in op.splittable}
        assert {n for n, dim in dims.items() if dim == "expert"} == cut
        assert set(dims.values()) == {"batch", "expert"}
        assert simulate(mixtral, cluster(d.devices), s).makespan > 0
        assert "(expert parallel x" in d.text()


def test_the_frameworks_configurations_take_the_expert_degree(mixtral, tmp_path):
    """Megatron's --expert-model-parallel-size (megatron-core's TransformerConfig takes it)
    with the all-to-all dispatcher simulated; torchtitan's expert_parallel_degree (its
    ConfigManager reads it), under FSDP only: under DDP's replicas torchtitan is refused."""
    from test_export import _torchtitan_config_manager

    from moplace.core.degrees import Degrees, regular_plan
    from moplace.core.levers import plan_of
    from moplace.core.planshape import plan_shape
    from moplace.core.runners import misfit
    from moplace.io.export import plan_document, plan_text
    from moplace.review.units import plan_text as plan_line

    s = regular_plan(mixtral, Degrees(4, 1, "data", 1, "1f1b", "none", 1, ep=4))
    shape = plan_shape(mixtral, s)
    doc = plan_document(mixtral, s, shape, [f"gpu{i}" for i in range(4)])
    args = doc["megatron"]["args"]
    assert args[args.index("--expert-model-parallel-size") + 1] == "4"
    assert args[args.index("--moe-token-dispatcher-type") + 1] == "alltoall"
    assert doc["degrees"]["expert"] == 4
    assert doc["torchtitan"]["tables"]["parallelism"]["expert_parallel_degree"] == 4
    assert "1 of each layer's 4 experts per rank" in " ".join(doc["megatron"]["notes"])
    assert "shape: data 4 (expert parallel x4) x tensor 1" in plan_text(doc, title="t")
    assert plan_line(plan_of(s, mixtral)).startswith("data parallel ×4 with expert parallel ×4")
    ConfigManager = _torchtitan_config_manager()
    path = tmp_path / "ep.toml"
    path.write_text(doc["torchtitan"]["toml"])
    par = ConfigManager().parse_args(["--job.config_file", str(path)]).parallelism
    assert par.expert_parallel_degree == 4 and par.data_parallel_shard_degree == 4
    ddp = plan_shape(mixtral, regular_plan(mixtral, Degrees(4, 1, "data", 1, "1f1b", "none", 0,
                                                              ep=4)))
    assert any("FSDP's shard degree" in w for w in misfit(mixtral, ddp, "torchtitan"))
    assert not misfit(mixtral, ddp, "megatron")
    tc = pytest.importorskip("megatron.core.transformer.transformer_config",
                             reason="megatron-core is not installed")
    made = tc.TransformerConfig(num_layers=8, hidden_size=32, num_attention_heads=4,
                                num_moe_experts=4, **doc["megatron"]["config"])
    assert made.expert_model_parallel_size == 4
    assert made.moe_token_dispatcher_type == "alltoall"


@pytest.mark.parametrize("pp, vp", [(2, 1), (4, 1), (2, 2), (2, 4)])
def test_a_layers_experts_and_weights_sit_on_its_stage(mixtral, pp, vp):
    """Each MoE layer's dispatch, experts (forward and backward), weights, their updates and
    combine on one stage: a backward op is staged by the forward values it reads, not by its
    depth mirrored about the loss's, which drifts where a layer's backward is longer than its
    forward (28 to 56 of these ops were on another stage on this Mixtral, 140 to 322 on
    Mixtral-8x7B, whose interleaved pipelines then deadlocked); pipelined, each device sends
    only the stage boundaries' activations and gradients (and the rotary tables)."""
    from moplace.core.degrees import Degrees, regular_plan

    schedule = "1f1b" if vp == 1 else "interleaved"
    s = regular_plan(mixtral, Degrees(pp, pp, "data", pp, schedule, "none", 0, vp))
    for layer in mixtral.metadata["moe"]["layer_ops"]:
        names = [n for part in ("dispatch", "combine", "combine_backward", "dispatch_backward",
                                "experts", "weights") for n in layer[part]]
        names += [f"update/{w.removeprefix('param/')}" for w in layer["weights"]]
        assert {int(s.placement[mixtral.index[n]]) for n in names} == {
            int(s.placement[mixtral.index[layer["dispatch"][0]]])}
    t = simulate(mixtral, cluster(pp), s)
    boundary = 4 * 8 * 32 * 2  # the batch's [b, s, h] in bf16, over its micro-batches
    crossings = pp * vp - 1  # boundaries on the forward, each crossed back by its gradient
    # beside them, the labels (256 bytes) to the last stage and the rotary tables (2 x 128)
    # to each other device
    assert 2 * crossings * boundary <= t.sent.sum() <= 2 * crossings * boundary + 512 * pp


def test_evaluate_applies_expert_parallelism_to_the_data_parallel_baseline(mixtral_file, mixtral,
                                                                          tmp_path, capsys):
    """``evaluate --expert-parallel EP``: the data-parallel baseline (any strategy that splits
    the experts on batch over EP devices) with its experts on expert, the figures of that plan
    simulated; refused by name where the experts do not divide or none is split so."""
    from moplace.core.presets.export import cluster_to_toml

    path = tmp_path / "four.toml"
    path.write_text(cluster_to_toml(cluster(4)))
    argv = ["evaluate", str(mixtral_file), "--cluster", str(path), "--baseline"]
    assert main([*argv, "data-parallel", "--expert-parallel", "4", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    t = simulate(mixtral, cluster(4), expert_parallel(mixtral, 4))
    assert said["runtime_s"] == pytest.approx(t.makespan)
    assert said["peak_comm_bytes"] == pytest.approx(float(t.traffic.max()))
    assert said["plan"]["degrees"] == {"data": 4, "tensor": 1, "pipeline": 1, "expert": 4}
    assert main([*argv, "all", "--expert-parallel", "4"]) == 0
    table = capsys.readouterr().out
    assert "data-parallel, expert parallel ×4" in table and "\nsingle " in table
    for ep, baseline, why in ((3, "data-parallel", "the 4 experts of each layer do not divide"),
                              (2, "data-parallel", "no group of experts is split on batch over 2"),
                              (4, "single", "no group of experts is split on batch over 4")):
        assert main([*argv, baseline, "--expert-parallel", str(ep)]) == 2
        assert why in capsys.readouterr().err


def test_show_offers_apply_only_for_a_point_apply_runs():
    """`show` names `moplace apply` for a profiled graph's point unless the point's runners
    leave apply out (an expert-parallel or FP8 plan: the PyTorch testbed runs neither)."""
    from moplace.cli.review import _commands

    info = {"front_file": "front.json"}
    data = {"graph_source": "g.json", "cluster_source": "c.toml",
            "points": [{"runs": ["torchtitan", "megatron"]},
                       {"runs": ["megatron", "moplace-apply"]}, {}]}
    assert "apply" not in _commands(info, data, 0)
    assert {k: "apply" in _commands(info, data, k) for k in (1, 2)} == {1: True, 2: True}
