"""Tensor parallelism on traced transformers (issue 35): Megatron-LM's blocks found from the
data flow of Hugging Face models, one all-reduce forward and one backward per block, and the
activation memory of Korthikanti et al. (2022) per layer, with and without tensor and sequence
parallelism and with selective recomputation."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest

pytest.importorskip("torch", reason="the PyTorch front end needs torch ('moplace[torch]')")
pytest.importorskip("transformers", reason="hf: models need transformers ('moplace[torch]')")

from moplace.core.baselines import baseline, single  # noqa: E402
from moplace.core.cluster import Cluster  # noqa: E402
from moplace.costs.costmodel import CostModel  # noqa: E402
from moplace.simulator.build import build_task_graph  # noqa: E402
from moplace.simulator.collectives import KINDS  # noqa: E402
from moplace.simulator.engine import simulate  # noqa: E402

H, HEADS, SEQ, BATCH = 256, 4, 128, 2
GPT2 = {"model_type": "gpt2", "n_embd": H, "n_head": HEADS, "n_positions": SEQ,
        "vocab_size": 512, "activation_function": "gelu"}
LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 500, "max_position_embeddings": 64}


def profile(tmp_path_factory, config, name, seq, dtype="fp32", attention="eager"):
    """Eager attention unless said: Korthikanti et al. count the s x s scores it keeps."""
    from moplace.torch.frontend import profile_torch_model

    path = tmp_path_factory.mktemp(name) / "config.json"
    path.write_text(json.dumps(config))
    return profile_torch_model(f"hf:{path}", BATCH, ["H100"], seq_len=seq, dtype=dtype,
                               attention=attention).graph


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """GPT-2 with exact GeLU (one aten op, as Korthikanti et al. count it) in bf16, with one
    and with two layers: their difference is one layer."""
    return {n: profile(tmp_path_factory, {**GPT2, "n_layer": n}, f"gpt2-{n}", SEQ, "bf16")
            for n in (1, 2)}


@pytest.fixture(scope="module")
def gpt2_sdpa(tmp_path_factory):
    """The same with SDPA, traced as an H100's flash attention kernels."""
    return {n: profile(tmp_path_factory, {**GPT2, "n_layer": n}, f"gpt2-sdpa-{n}", SEQ, "bf16",
                       "sdpa") for n in (1, 2)}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return profile(tmp_path_factory, LLAMA, "llama", 32)


@pytest.fixture(scope="module")
def llama_sdpa(tmp_path_factory):
    return profile(tmp_path_factory, LLAMA, "llama-sdpa", 32, "bf16", "sdpa")


def groups(graph):
    out = collections.defaultdict(list)
    for op in graph.ops:
        out[op.colocation].append(op)
    return out


def cluster(n):
    return Cluster.uniform(n, kind="H100", memory_bytes=80 * 2**30, bandwidth=300e9)


def test_every_attention_and_mlp_is_a_block_and_the_lm_head_is_not(gpt2, llama):
    for graph, layers in ((gpt2[2], 2), (llama, 2)):
        blocks = {g: ops for g, ops in groups(graph).items()
                  if g and g.startswith("tensor:") and not g.endswith(":attention-core")}
        assert len(blocks) == 2 * layers
        cores = [g for g in groups(graph) if g and g.endswith(":attention-core")]
        assert len(cores) == layers  # the attention blocks' scores, softmax, dropout
        for ops in blocks.values():
            assert {"batch", "tensor"} <= set.intersection(*(set(o.splittable) for o in ops))
            kinds = {o.type for o in ops}
            assert "Parameter" in kinds and any(o.role == "update" for o in ops)
            assert {o.role for o in ops} >= {"forward", "backward", "update"}
            assert any(o.partial_sums and o.role == "forward" for o in ops)  # row-parallel
            assert any(o.partial_sums and o.role == "backward" for o in ops)  # X's gradient
        weights = {o.name for ops in blocks.values() for o in ops if o.type == "Parameter"}
        assert not any("lm_head" in w or "wte" in w or "embed" in w or "norm" in w or "ln_" in w
                       for w in weights)
    llama_weights = {o.name for o in llama.ops if o.type == "Parameter"
                     and (o.colocation or "").startswith("tensor:")}
    assert {f"param/model.layers.0.self_attn.{p}_proj.weight" for p in "qkvo"} <= llama_weights
    assert {f"param/model.layers.1.mlp.{p}_proj.weight" for p in ("gate", "up", "down")} \
        <= llama_weights


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_a_block_needs_one_collective_forward_and_one_backward(gpt2, llama, which):
    """Under the tensor-parallel baseline (with sequence parallelism) each block's row-parallel
    output and its input's gradient are reduce-scattered once, even where three projections'
    gradients are summed first (Llama's query, key and value)."""
    graph = gpt2[2] if which == "gpt2" else llama
    n_blocks = len({o.colocation for o in graph.ops if (o.colocation or "").startswith("tensor:")
                    and not o.colocation.endswith(":attention-core")})
    plan = baseline("tensor-parallel", graph, 4)
    tg = build_task_graph(graph, plan, CostModel(graph, cluster(4)))
    partial = np.array([graph.ops[o].partial_sums for o in tg.task_op[tg.n_compute:]], bool)
    kinds = collections.Counter(KINDS[k] for k in tg.coll_kind[partial])
    assert kinds == {"reduce-scatter": 2 * n_blocks}
    # without the norms' sequence parallelism they are all-reduces
    unsplit = plan.splits
    only_blocks = {o: s for o, s in unsplit.items() if s.dim == "tensor"}
    from moplace.core.strategy import Strategy

    tp = Strategy(plan.placement, plan.priority, only_blocks).validate(graph, 4)
    tg = build_task_graph(graph, tp, CostModel(graph, cluster(4)))
    partial = np.array([graph.ops[o].partial_sums for o in tg.task_op[tg.n_compute:]], bool)
    assert collections.Counter(KINDS[k] for k in tg.coll_kind[partial]) == {
        "all-reduce": 2 * n_blocks}


def held_at_forward_end(graph, plan, n):
    """Bytes device 0 holds beyond its weights and optimizer state when the loss is done."""
    trace = simulate(graph, cluster(n), plan, record=True)
    loss = next(i for i, op in enumerate(graph.ops) if op.type.startswith("nll_loss_forward"))
    rows = trace.memory[(trace.memory[:, 1] == 0) & (trace.memory[:, 0] <= trace.op_end[loss])]
    return rows[-1, 2] - trace.static_memory[0]


def per_layer(gpt2, t, selective=False):
    out = []
    for graph in (gpt2[1], gpt2[2]):
        plan = single(graph, 1) if t == 1 else baseline("tensor-parallel", graph, t)
        if selective:
            plan = plan.with_recompute(sorted({int(graph.group_head[i])
                                               for i, op in enumerate(graph.ops)
                                               if (op.colocation or "").endswith("-core")}))
        out.append(held_at_forward_end(graph, plan, t))
    return out[1] - out[0]


@pytest.mark.parametrize("t", [1, 2, 4])
def test_activations_per_layer_match_korthikanti(gpt2, t):
    """s·b·h·(34 + 5·a·s/h) bytes per layer at 16 bits, divided by t under tensor and sequence
    parallelism (Korthikanti et al. 2022, eq. 2 and 5), within 5%."""
    want = SEQ * BATCH * H * (34 + 5 * HEADS * SEQ / H) / t
    assert per_layer(gpt2, t) == pytest.approx(want, rel=0.05)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_flash_attention_keeps_34_sbh_and_the_log_sum_exp_per_layer(gpt2_sdpa, t):
    """With SDPA's flash kernels no s x s matrix is kept: s·b·h·34 bytes per layer at 16 bits
    (Korthikanti et al.'s count without its 5·a·s/h term) and the rows' log-sum-exp (FP32,
    b·a·s), divided by t under tensor and sequence parallelism, within 5%."""
    want = SEQ * BATCH * (34 * H + 4 * HEADS) / t
    assert per_layer(gpt2_sdpa, t) == pytest.approx(want, rel=0.05)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_selective_recomputation_keeps_34_sbh_over_t(gpt2, t):
    """Recomputing each attention's core (scores, softmax, dropout, attention over values)
    leaves 34·s·b·h/t bytes per layer (Korthikanti et al. 2022, eq. 6), within 5%."""
    want = 34 * SEQ * BATCH * H / t
    assert per_layer(gpt2, t, selective=True) == pytest.approx(want, rel=0.05)


def test_tensor_parallel_plans_export_as_megatron_tp_with_sequence_parallelism(gpt2):
    pytest.importorskip("megatron.core", reason="megatron-core is in the test extra")
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    from moplace.core.levers import plan_of
    from moplace.core.planshape import plan_shape
    from moplace.core.recompute import attention_cores
    from moplace.io.export import megatron_flags
    from moplace.review.units import plan_text

    graph = gpt2[2]
    tp = baseline("tensor-parallel", graph, 4)
    for plan, mode in ((tp, "none"), (tp.with_recompute(attention_cores(graph)), "selective")):
        shape = plan_shape(graph, plan)
        assert (shape.dp, shape.tp, shape.pp) == (1, 4, 1) and shape.sequence_parallel
        assert shape.recompute_mode == mode
        flags = megatron_flags(shape, graph)
        assert "--sequence-parallel" in flags["args"]
        made = TransformerConfig(num_layers=2, hidden_size=H, num_attention_heads=HEADS,
                                 params_dtype=torch.bfloat16, **flags["config"])
        assert made.tensor_model_parallel_size == 4 and made.sequence_parallel
        assert made.recompute_granularity == (None if mode == "none" else "selective")
    # a regular plan reads by its degrees (issue 48: one vocabulary across table and export)
    assert plan_text(plan_of(tp, graph)).startswith("tensor parallel ×4")


def test_the_seeds_hold_fsdp_and_selective_tensor_parallelism_unless_withheld(gpt2):
    import moplace
    from moplace.optimize.seeds import seed_strategies

    problem = moplace.Problem(gpt2[2], cluster(4))
    labels = [s.label for s in seed_strategies(problem)]
    for want in ("data-parallel", "tensor-parallel", "FSDP (data-parallel, ZeRO-3)",
                 "FSDP, each layer checkpointed",
                 "tensor-parallel, attention cores recomputed (selective)"):
        assert want in labels
    withheld = seed_strategies(problem, baselines=False)
    assert withheld and not any("parallel" in s.label or "FSDP" in s.label for s in withheld)
    assert not any(s.strategy.splits for s in withheld if s.label.startswith("all on"))


@pytest.mark.parametrize("which, names", [
    ("gpt2", ("add", "native_dropout")), ("llama", ("add",))])
def test_layers_are_found_from_the_repeated_structure(gpt2, llama, which, names):
    """The residual stream's ops dominate the loss; between them an attention and an MLP
    segment repeat once per layer, whatever the modules are called."""
    graph = gpt2[2] if which == "gpt2" else llama
    layers = graph.metadata["layers"]
    assert (layers["period"], layers["count"]) == (2, 2)
    assert all(graph.ops[graph.index[b]].role == "forward" for b in layers["boundaries"])
    assert sum(graph.ops[graph.index[b]].type.startswith("add") for b in
               layers["boundaries"]) >= 4  # after each attention and each MLP
    one = gpt2[1].metadata["layers"]
    assert one["count"] == 0 or one["period"] == 2  # one layer repeats nothing


def test_layer_checkpoints_keep_the_boundaries_and_save_memory(gpt2):
    from moplace.core.recompute import layer_checkpoints, recomputable_heads

    graph = gpt2[2]
    every, layers = recomputable_heads(graph), layer_checkpoints(graph)
    assert 0 < layers.size < every.size
    boundary_groups = {int(graph.group_head[graph.index[b]])
                       for b in graph.metadata["layers"]["boundaries"]}
    assert not boundary_groups & set(layers.tolist())
    dp = baseline("data-parallel", graph, 2)
    held = {name: held_at_forward_end(graph, dp.with_recompute(heads), 2)
            for name, heads in (("none", ()), ("every", every), ("layers", layers))}
    assert held["layers"] < held["none"] / 3


def test_nsga2_mutates_toward_the_recomputation_practitioners_use(gpt2):
    from moplace.core.genome import GenomeSpace
    from moplace.core.recompute import attention_cores, layer_checkpoints
    from searchers.nsga2.operators import GenomeStructure, MutationRates, mutate

    graph = gpt2[2]
    space = GenomeSpace(graph, 4)
    s = GenomeStructure.of(space)
    heads = space.recompute_heads
    want = [np.isin(heads, layer_checkpoints(graph)), np.isin(heads, attention_cores(graph))]
    assert len(s.recompute_patterns) == 2
    assert all(np.array_equal(p, w) for p, w in zip(s.recompute_patterns, want))
    only = MutationRates(moves=0, block=0, splits=0, swaps=0, jitter=0, reset=0, devices=0,
                         bucket=0, zero=0, micro_batches=0, schedule=0, recompute=0, regular=0,
                         recompute_pattern=1.0)
    rng = np.random.default_rng(0)
    x = space.encode(baseline("data-parallel", graph, 4))
    seen = set()
    for _ in range(30):
        rec = mutate(s, x, rng, only)[space.recompute_genes]
        seen.add(tuple(rec.astype(int)))
    assert seen == {tuple(w.astype(int)) for w in want} | {(0,) * heads.size}


def test_one_device_set_move_makes_the_regular_plans_practitioners_run(gpt2):
    """From a plan on one device, a regular move gives tensor parallelism exactly as the
    baseline has it; random device-set moves reach FSDP with each layer checkpointed and
    tensor parallelism with selective recomputation, all on every device."""
    from moplace.core.genome import GenomeSpace
    from moplace.core.recompute import attention_cores, layer_checkpoints

    graph = gpt2[2]
    space = GenomeSpace(graph, 4)
    assert space.regular_dims == ("batch", "tensor")
    one = space.encode(single(graph, 4))
    tp = space.decode(space.regular(one, 0, 4, "tensor"))
    assert tp.simulation_key == baseline("tensor-parallel", graph, 4).simulation_key
    rng, seen = np.random.default_rng(0), set()
    layers, cores = (frozenset(f(graph).tolist()) for f in (layer_checkpoints, attention_cores))
    for _ in range(600):
        s = space.decode(space.random_resize(one, rng))
        s.validate(graph, 4)
        dims = {(sp.dim, sp.parts) for sp in s.splits.values()}
        recomputed = frozenset(np.asarray(s.recompute).tolist())
        seen.add((tuple(sorted(dims)), s.zero_stage,
                  {layers: "layers", cores: "cores", frozenset(): "none"}.get(recomputed)))
    assert ((("batch", 4),), 3.0, "layers") in seen  # FSDP, each layer checkpointed
    assert ((("batch", 4), ("tensor", 4)), 0.0, "cores") in seen  # TP + SP, selective


def test_nsga2s_regular_move_is_the_childs_only_change(gpt2):
    """With only the regular move on, every child is a regular plan on the devices its parent
    used (data or tensor parallelism), as drawn: nothing else of it moves afterwards."""
    from moplace.core.genome import GenomeSpace
    from searchers.nsga2.operators import GenomeStructure, MutationRates, mutate

    graph = gpt2[2]
    space = GenomeSpace(graph, 4)
    s = GenomeStructure.of(space)
    only = MutationRates(moves=5, block=0, splits=5, swaps=5, jitter=1, reset=0, devices=0,
                         bucket=0, zero=0, micro_batches=0, schedule=0, recompute=0,
                         recompute_pattern=0, regular=1.0)
    rng = np.random.default_rng(1)
    x = space.encode(baseline("data-parallel", graph, 4))
    dims = set()
    for _ in range(20):
        y = mutate(s, x, rng, only)
        strategy = space.decode(y)
        kinds = {(sp.dim, sp.devices) for sp in strategy.splits.values()}
        assert kinds <= {("batch", (0, 1, 2, 3)), ("tensor", (0, 1, 2, 3))}
        prio = y[space.priorities]
        assert np.array_equal(prio, x[space.priorities]) or np.array_equal(
            prio, space.topological_priorities)
        dims |= {d for d, _ in kinds}
    assert dims == {"batch", "tensor"}


def test_a_causal_mask_and_rotary_angles_are_made_on_every_device(llama):
    """Values no input or trained weight decides are held like weights: a batch split of
    them is a replica each device makes, not a tensor sent to every tensor-parallel part."""
    made = [op for op in llama.ops if op.output_bytes == 0 and op.param_bytes > 0
            and op.type not in ("Parameter", "Buffer") and op.role == "forward"]
    # the mask, and the cosines and sines of the rotary embedding
    assert "where.self" in {op.type for op in made} and len(made) >= 3
    plan = baseline("tensor-parallel", llama, 4)
    tg = build_task_graph(llama, plan, CostModel(llama, cluster(4)))
    nc = tg.n_compute
    names = {op.name for op in made}
    moved = [tg.e_bytes[e] for e in range(tg.e_src.size) if tg.e_src[e] < nc
             and llama.ops[tg.task_op[tg.e_src[e]]].name in names and not tg.e_local[e]]
    assert sum(moved) == 0


def test_the_known_good_benchmark_finds_every_configuration_people_run_on_the_front(
        tmp_path, capsys):
    """experiments/known_good.py on a small GPT-2: seeded, the front holds or dominates DDP,
    ZeRO-1, FSDP (with and without per-layer checkpointing) and TP + SP (with and without
    selective recomputation); the withheld search is reported, not required."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("known_good",
                                                  root / "experiments" / "known_good.py")
    known_good = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(known_good)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**GPT2, "n_layer": 2, "n_positions": 64}))
    out = tmp_path / "kg.json"
    assert known_good.main(["--models", f"hf:{config}", "--clusters", "8xH100-80GB-NVLink",
                            "--evaluations", "80", "--seq-len", "64", "--json", str(out)]) == 0
    (entry,) = json.loads(out.read_text())
    assert set(entry["known"]) == {"DDP", "ZeRO-1", "FSDP", "FSDP + layers checkpointed",
                                   "TP=8 + SP", "TP=8 + SP, selective recompute"}
    verdicts = entry["searches"]["seeded"]["verdicts"]
    assert all(v.startswith(("on the front", "dominated by")) for v in verdicts.values()), \
        verdicts
    assert set(entry["searches"]["withheld"]["verdicts"]) == set(verdicts)
    assert "nsga2, withheld" in capsys.readouterr().out


@pytest.mark.parametrize("which", ["gpt2", "llama",
                                   pytest.param("gpt2-sdpa", marks=pytest.mark.slow),
                                   pytest.param("llama-sdpa", marks=pytest.mark.slow)])
def test_tensor_parallel_plans_run_to_the_end(gpt2, llama, gpt2_sdpa, llama_sdpa, which):
    """A regression: a value every layer's backward reads (rotary angles) was gathered once for
    all its readers, the gather waiting on ops after the first reader: the step deadlocked."""
    from moplace.core.recompute import attention_cores, layer_checkpoints

    graph = {"gpt2": gpt2[2], "llama": llama, "gpt2-sdpa": gpt2_sdpa[2],
             "llama-sdpa": llama_sdpa}[which]
    tp = baseline("tensor-parallel", graph, 4)
    for plan in (tp, tp.with_recompute(attention_cores(graph)),
                 tp.with_recompute(layer_checkpoints(graph)),
                 tp.with_options(micro_batches=2)):
        assert simulate(graph, cluster(4), plan).makespan > 0
