"""Context parallelism in the simulator (issue 49, part 3): a traced Llama's token-wise ops cut
on ``sequence``, its fused attention reading every part's keys and values (ring attention).

Held to ring attention's traffic: each device receives ``(c - 1) / c`` of every forward
kernel's keys and values, and in the backward ``(c - 1) / c`` of them again with their
gradients; nothing else crosses devices that a batch split would not move. Memory: a sequence
part holds ``1 / c`` of each activation, and the step's activations under CP are those of one
device divided by c, but for the blocks a forward kernel receives while it runs.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from moplace.core.baselines import baseline, data_parallel, with_context_parallel  # noqa: E402
from moplace.core.graph import OpGraph  # noqa: E402
from moplace.core.presets import load_cluster  # noqa: E402
from moplace.costs.costmodel import CostModel  # noqa: E402
from moplace.io import load_graph  # noqa: E402
from moplace.simulator import simulate  # noqa: E402
from moplace.simulator.taskgraph import build_split_task_graph  # noqa: E402

CLUSTER = "8xH100-80GB-NVLink"


@pytest.fixture(scope="module")
def llama(tiny_llama_file):
    """The tiny Llama (GQA: 4 heads, 2 of keys and values) at one sequence of 128 tokens for
    H100s: flash attention kernels (tests/conftest.py)."""
    return load_graph(str(tiny_llama_file))


def on(graph, c: int, dim: str = "sequence"):
    """The data-parallel baseline on c devices, with ``dim`` "sequence" in context
    parallelism (`with_context_parallel`: ring attention)."""
    dp = data_parallel(graph, c)
    return dp if dim == "batch" else with_context_parallel(graph, dp, c)


def crossing(graph, strategy) -> dict:
    """Bytes moved between devices per graph edge (producer, reader names), collectives
    left out."""
    tg, moved = build_split_task_graph(graph, strategy, CostModel(graph, load_cluster(CLUSTER)))
    n = tg.n_compute
    cross = ~tg.e_local & (tg.e_src < n) & (tg.e_dst < n)
    out: dict = {}
    for s, d, b in zip(tg.e_src[cross], tg.e_dst[cross], moved[cross]):
        key = (graph.ops[tg.task_op[s]].name, graph.ops[tg.task_op[d]].name)
        out[key] = out.get(key, 0.0) + float(b)
    return out


def test_a_fused_attention_graph_names_its_keys_values_and_their_gradients(llama):
    ctx = llama.metadata["context"]
    assert len(ctx["attention"]) == 4  # two layers, forward and backward kernels
    assert (ctx["heads"], ctx["kv_heads"]) == (4, 2)
    # each kernel reads keys and values from two producers (the rotated keys, the values'
    # projection); each backward kernel's key and value gradients go to their first readers
    assert len(ctx["kv"]) == 8 and len(ctx["kv_grads"]) == 4
    kv_bytes = 128 * 2 * 16 * 2  # tokens x kv heads x head size x bf16
    edges = {(llama.ops[s].name, llama.ops[d].name): b for s, d, b in
             zip(llama.arrays.src, llama.arrays.dst, llama.arrays.edge_bytes)}
    assert {edges[tuple(p)] for p in ctx["kv"] + ctx["kv_grads"]} == {kv_bytes}
    # every op a batch split may cut, the loss too (each part its tokens' loss: no CP or
    # data-parallel plan gathers the logits), with the output it keeps apart
    sequence = {op.name for op in llama.ops if "sequence" in op.splittable}
    batch = {op.name for op in llama.ops if "batch" in op.splittable}
    assert sequence == batch
    assert llama.metadata["loss"] == ["nll_loss_forward", "nll_loss_forward.output1"]
    assert set(llama.metadata["loss"]) <= sequence


@pytest.mark.parametrize("c", [2, 4, 8])
def test_ring_attention_moves_c_minus_1_of_c_of_the_keys_values_and_gradients(llama, c):
    """Each of the c devices receives the c - 1 other slices of every forward kernel's keys
    and values: (c - 1) x the tensor's bytes in all, per edge. In the backward the ring
    passes the keys and values again with their partial gradients, moved with the gradients:
    2 (c - 1) x each gradient's bytes, and the backward kernel reads its own keys and values.
    A batch split of the same ops moves none of it, and every edge else moves what it moves
    there (but the loss's, which a batch split leaves whole)."""
    ctx = llama.metadata["context"]
    moved = crossing(llama, on(llama, c))
    edges = {(llama.ops[s].name, llama.ops[d].name): b for s, d, b in
             zip(llama.arrays.src, llama.arrays.dst, llama.arrays.edge_bytes)}
    role = {op.name: op.role for op in llama.ops}
    for pair in ctx["kv"]:
        forward = role[pair[1]] == "forward"
        assert moved.get(tuple(pair), 0.0) == pytest.approx(
            (c - 1) * edges[tuple(pair)] if forward else 0.0)
    assert {role[p[1]] for p in ctx["kv"]} == {"forward", "backward"}
    for pair in ctx["kv_grads"]:
        assert moved[tuple(pair)] == pytest.approx(2 * (c - 1) * edges[tuple(pair)])
    batch = crossing(llama, on(llama, c, "batch"))
    ring = {tuple(p) for p in ctx["kv"] + ctx["kv_grads"]}
    assert not ring & set(batch)
    apart = (lambda d: {k: v for k, v in d.items() if k not in ring})
    assert apart(moved) == pytest.approx(apart(batch))


def test_a_sequence_part_holds_its_slice_of_the_tokens(llama):
    """A token-wise op's part on sequence holds 1/c of its output."""
    c = 4
    s = on(llama, c)
    rms = next(i for i, op in enumerate(llama.ops) if op.type.startswith("rsqrt"))
    tg, _ = build_split_task_graph(llama, s, CostModel(llama, load_cluster(CLUSTER)))
    parts = np.flatnonzero(tg.task_op[:tg.n_compute] == rms)
    assert parts.size == c
    assert tg.out_bytes[parts] == pytest.approx([llama.ops[rms].output_bytes / c] * c)


def test_context_parallelism_divides_activations_and_passes_keys_and_values(llama):
    """On the tiny Llama the step's parameters stay whole on each device (no ZeRO) while its
    activations fall with c; the ring's traffic is on top of the same split's without the
    graph's attention named (each kernel's part reading only its tokens' keys and values)."""
    cluster = load_cluster(CLUSTER)
    single = simulate(llama, cluster, baseline("single", llama, 8))
    ring = simulate(llama, cluster, on(llama, 4))
    unnamed = OpGraph(llama.ops, llama.edges, name=llama.name,
                      metadata={k: v for k, v in llama.metadata.items() if k != "context"})
    local = simulate(unnamed, cluster, on(llama, 4))
    assert ring.static_memory.max() == pytest.approx(single.static_memory.max())
    assert ring.sent.max() > local.sent.max()
    act = (ring.peak_memory - ring.static_memory).max()
    assert act < (single.peak_memory - single.static_memory).max()


@pytest.fixture(scope="module")
def long_llama(tmp_path_factory):
    """The tiny Llama at one sequence of 4,096 tokens: activations that grow with the tokens
    dominate, as in the long contexts CP is for."""
    import json

    from moplace.cli import main
    from conftest import TINY_LLAMA

    folder = tmp_path_factory.mktemp("long-llama")
    (folder / "config.json").write_text(json.dumps({**TINY_LLAMA,
                                                    "max_position_embeddings": 4096}))
    out = folder / "g.json"
    assert main(["profile", f"hf:{folder / 'config.json'}", "--batch", "1", "--seq-len",
                 "4096", "--estimate", "H100", "--quiet", "--no-cache", "-o", str(out)]) == 0
    return load_graph(str(out))


@pytest.mark.parametrize("c", [2, 4, 8])
def test_activations_under_cp_are_one_devices_over_c(long_llama, c):
    """The step's activations under CP c are within 5% of one device's divided by c (issue
    49): a device holds its slice of every token-wise tensor, the keys and values it receives
    only while its forward kernel runs, and runs no backward op before the loss."""
    cluster = load_cluster(CLUSTER)
    act = (lambda t: (t.peak_memory - t.static_memory).max())
    one = act(simulate(long_llama, cluster, baseline("single", long_llama, 8)))
    ring = act(simulate(long_llama, cluster, on(long_llama, c)))
    assert ring == pytest.approx(one / c, rel=0.05)


@pytest.mark.parametrize("dim", ["batch", "sequence"])
def test_no_data_or_context_parallel_plan_gathers_the_logits(llama, dim):
    """Each rank computes its own tokens' loss, as data-parallel trainers do: the loss is cut
    with the rest, and nothing crosses devices into it (the graph's ``metadata["loss"]``)."""
    plan = on(llama, 4, dim)
    loss = set(llama.metadata["loss"])
    assert all(plan.splits[llama.index[x]].dim == dim for x in loss)
    assert not {k: v for k, v in crossing(llama, plan).items() if k[1] in loss}


def test_a_cp_plan_reads_with_its_gradient_levers(llama):
    """Weights are replicas over the CP ranks: the plan's line names its buckets and ZeRO."""
    from moplace.core.levers import plan_of
    from moplace.review.units import plan_text

    plan = plan_of(on(llama, 4).with_options(zero_stage=1.0), llama)
    assert plan["replicas"] and plan["degrees"]["context"] == 4
    assert plan_text(plan).startswith("context parallel ×4 (ring)")
    assert "ZeRO-1" in plan_text(plan)
