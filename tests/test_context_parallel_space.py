"""Context parallelism (issue 49, part 3) in the plan's shape, the degree spaces, the
frameworks' configurations and ``evaluate --context-parallel``: a tiny Llama traced at 1 x 128
tokens with fused attention (ring attention only: its attention kernels share their
co-location group with the tensor-parallel block's projections and rotary ops), and a model
file of one attention without projections around it, whose kernels' groups may split on heads
(Ulysses' all-to-all too)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch", reason="the PyTorch front end needs torch")
pytest.importorskip("transformers", reason="hf: models need transformers ('moplace[torch]')")

from moplace.cli import main  # noqa: E402
from moplace.core.cluster import Cluster  # noqa: E402
from moplace.core.degrees import DegreeSpace, Degrees, regular_plan  # noqa: E402
from moplace.core.levers import plan_of  # noqa: E402
from moplace.core.planshape import plan_shape  # noqa: E402
from moplace.core.runners import misfit, runners  # noqa: E402
from moplace.io import load_graph  # noqa: E402
from moplace.io.export import plan_document, plan_text  # noqa: E402
from moplace.review.units import plan_text as plan_line  # noqa: E402
from moplace.simulator.engine import simulate  # noqa: E402

def _attention_alone() -> str:
    """tests/test_torch_attention.py's model file (one causal attention over an embedding)
    without the output projection: no tensor-parallel block holds the kernels, whose groups
    are then theirs alone and may split on channel (heads)."""
    from test_torch_attention import MODEL_FILE

    swaps = (("self.qkv, self.out = torch.nn.Linear(64, 192), torch.nn.Linear(64, 64)",
              "self.qkv = torch.nn.Linear(64, 192)"),
             ("return self.out(y.transpose(1, 2).flatten(2))",
              "return x + y.transpose(1, 2).flatten(2)"))
    text = MODEL_FILE
    for old, new in swaps:
        assert old in text
        text = text.replace(old, new)
    return text


def _profile(model: str, out) -> None:
    assert main(["profile", model, "--batch", "1", "--estimate", "H100", "--quiet",
                 "--no-cache", "-o", str(out)]) == 0


@pytest.fixture(scope="module")
def llama_file(tiny_llama_file):
    return tiny_llama_file


@pytest.fixture(scope="module")
def llama(tiny_llama_file):
    return load_graph(str(tiny_llama_file))


@pytest.fixture(scope="module")
def heads_graph(tmp_path_factory):
    folder = tmp_path_factory.mktemp("attention")
    (folder / "attn.py").write_text(_attention_alone())
    _profile(str(folder / "attn.py"), folder / "g.json")
    return load_graph(str(folder / "g.json"))


def cluster(n: int) -> Cluster:
    return Cluster.uniform(n, kind="H100", memory_bytes=80 * 2**30, bandwidth=100e9,
                           latency=1e-6)


def context_plans(graph, framework):
    space = DegreeSpace(graph, 4, framework)
    return space, [d for d in space.all() if d.mode.startswith("context")]


def check_plan(graph, space, d, framework) -> dict:
    """One CP plan of ``space``: regular, its degrees read back (`of_strategy`, `encode`),
    every group on sequence but (Ulysses) the attention kernels' on channel, run by
    ``framework`` with its flags; its export document."""
    x = space.encode_degrees(d)
    s = space.decode(x)
    shape = plan_shape(graph, s)
    comm = "a2a" if d.mode == "context-a2a" else "p2p"
    assert shape.regular, (d.text(), shape.why)
    assert (shape.cp, shape.cp_comm, shape.dp, shape.tp, shape.pp) == (
        d.width, comm, 1, 1, d.pp), d.text()
    assert space.of_strategy(s) == d and np.array_equal(space.encode(s), x)
    assert not misfit(graph, shape, framework) and framework in runners(graph, s, shape)
    assert "moplace-apply" not in runners(graph, s, shape)  # the testbed cuts no sequence
    assert simulate(graph, cluster(d.devices), s).makespan > 0
    dims = {sp.dim for sp in s.splits.values()}
    assert dims == ({"sequence", "channel"} if comm == "a2a" else {"sequence"})
    attention = {graph.index[n] for n in graph.metadata["context"]["attention"]}
    assert all((s.splits[i].dim == "channel") == (comm == "a2a") for i in attention)
    doc = plan_document(graph, s, shape, [f"gpu{i}" for i in range(d.devices)])
    assert doc["degrees"]["context"] == d.width and doc["degrees"]["context_comm"] == comm
    words = "all-to-all" if comm == "a2a" else "ring"
    assert f"context parallel ×{d.width} ({words})" in plan_line(plan_of(s, graph))
    assert f"x context {d.width} ({words})" in plan_text(doc, title="t")
    if framework == "megatron":
        args = doc["megatron"]["args"]
        assert args[args.index("--context-parallel-size") + 1] == str(d.width)
        assert args[args.index("--cp-comm-type") + 1] == comm
    else:
        par = doc["torchtitan"]["tables"]["parallelism"]
        assert par["context_parallel_degree"] == d.width and d.zero > 0
    return doc


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_every_ring_plan_of_the_llama_runs_and_reads_back(llama, framework):
    """The tiny Llama on 4 devices: CP over 2 and 4 devices (one stage, or 2 of 2), ring only;
    torchtitan's under FSDP only; no CP beside data or tensor parallelism in a stage."""
    space, plans = context_plans(llama, framework)
    assert plans and {d.mode for d in plans} == {"context"}
    assert {(d.devices, d.pp) for d in plans} == {(2, 1), (4, 1), (4, 2)}
    assert all(d.zero > 0 for d in plans) == (framework == "torchtitan")
    for d in plans:
        check_plan(llama, space, d, framework)
    assert space.context.ulysses_misfit(4).startswith("all-to-all (Ulysses)")


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_ulysses_plans_where_the_attention_splits_on_heads(heads_graph, framework):
    """Attention alone in its groups: Megatron offers ring and all-to-all; torchtitan, which
    runs no Ulysses, ring only, and refuses all-to-all by name."""
    space, plans = context_plans(heads_graph, framework)
    modes = {d.mode for d in plans}
    assert modes == ({"context", "context-a2a"} if framework == "megatron" else {"context"})
    for d in plans:
        check_plan(heads_graph, space, d, framework)
    a2a = plan_shape(heads_graph, regular_plan(heads_graph, Degrees(4, 1, "context-a2a", 1,
                                                                    "1f1b", "none", 1)))
    assert a2a.cp_comm == "a2a"
    assert any("no all-to-all (Ulysses)" in w for w in misfit(heads_graph, a2a, "torchtitan"))
    ring0 = plan_shape(heads_graph, regular_plan(heads_graph, Degrees(4, 1, "context", 1,
                                                                      "1f1b", "none", 0)))
    assert any("FSDP" in w for w in misfit(heads_graph, ring0, "torchtitan"))
    assert not misfit(heads_graph, ring0, "megatron")


def test_misfit_names_what_does_not_divide(llama, heads_graph):
    """Megatron and torchtitan cut each sequence into 2C slices; Ulysses needs the heads to
    divide: a plan over 3 devices' tokens (128 / 6) and heads (4 / 3) is refused by name."""
    from dataclasses import replace

    ring = plan_shape(llama, regular_plan(llama, Degrees(4, 1, "context", 1, "1f1b", "none", 1)))
    odd = replace(ring, cp=3)
    for framework in ("megatron", "torchtitan"):
        assert any("128 tokens do not cut into 6 equal slices" in w
                   for w in misfit(llama, odd, framework))
    a2a = plan_shape(heads_graph, regular_plan(heads_graph, Degrees(4, 1, "context-a2a", 1,
                                                                    "1f1b", "none", 1)))
    assert any("4 attention heads do not divide" in w
               for w in misfit(heads_graph, replace(a2a, cp=3), "megatron"))
    # stages of unequal context parallelism are no regular plan: the first stage's splits
    # taken off (its groups on device 0 alone), the second's on sequence over devices 2, 3
    two = regular_plan(llama, Degrees(4, 2, "context", 1, "1f1b", "none", 1))
    splits = {i: sp for i, sp in two.splits.items() if sp.devices != (0, 1)}
    assert len(splits) < len(two.splits)
    from moplace.core.strategy import Strategy

    shape = plan_shape(llama, Strategy(two.placement, two.priority, splits, **two.options))
    assert not shape.regular and "the stages differ in context parallelism (stage 0: 1 (p2p), " \
        "stage 1: 2 (p2p))" in shape.why


def test_the_frameworks_config_classes_take_every_cp_plan(llama, heads_graph, tmp_path):
    """megatron-core 0.16.1's TransformerConfig takes each CP plan's config (its
    context_parallel_size and cp_comm_type); torchtitan 0.2.2's ConfigManager reads each
    torchtitan TOML (its context_parallel_degree, the FSDP shard and replicate degrees 1)."""
    from test_export import _torchtitan_config_manager

    ConfigManager = _torchtitan_config_manager()
    tc = pytest.importorskip("megatron.core.transformer.transformer_config",
                             reason="megatron-core is not installed")
    for graph, layers in ((llama, 2), (heads_graph, 1)):
        space, plans = context_plans(graph, "megatron")
        for d in plans:
            config = check_plan(graph, space, d, "megatron")["megatron"]["config"]
            made = tc.TransformerConfig(num_layers=layers, hidden_size=64,
                                        num_attention_heads=4, **config,
                                        **({"pipeline_dtype": __import__("torch").bfloat16}
                                           if d.pp > 1 else {}))
            assert made.context_parallel_size == d.width
            assert made.cp_comm_type == ("a2a" if d.mode == "context-a2a" else "p2p")
        space, plans = context_plans(graph, "torchtitan")
        for k, d in enumerate(plans):
            path = tmp_path / f"cp{layers}-{k}.toml"
            path.write_text(check_plan(graph, space, d, "torchtitan")["torchtitan"]["toml"])
            job = ConfigManager().parse_args(["--job.config_file", str(path)])
            par = job.parallelism
            assert job.training.seq_len == (128 if graph is llama else 2048)  # else its default
            assert par.context_parallel_degree == d.width
            assert par.data_parallel_shard_degree == par.data_parallel_replicate_degree == 1
            assert par.pipeline_parallel_degree == d.pp


def test_the_space_seeds_context_parallelism(llama, heads_graph):
    from searchers.degrees import space_seeds

    for graph, ways in ((llama, 1), (heads_graph, 2)):
        space = DegreeSpace(graph, 4, "megatron")
        seeds = [d for label, d in space_seeds(space) if label.startswith("context parallel")]
        assert len(seeds) == ways and all(d.devices == 4 and d.pp == 1 for d in seeds)
        assert all(d in set(space.all()) for d in seeds)


def test_evaluate_context_parallel(llama_file, llama, tmp_path, capsys):
    """``evaluate --context-parallel C``: the data-parallel baseline on C devices with every
    group on sequence, labelled so, its plan's degrees read back; refused by name, one line,
    exit 2, where C does not cut the tokens, no group is split over C devices, C is more
    devices than the cluster has, Ulysses cannot cut the attention's groups by heads, --cp-comm
    comes alone or the graph names no fused attention."""
    from moplace.core.presets.export import cluster_to_toml

    path = tmp_path / "four.toml"
    path.write_text(cluster_to_toml(cluster(4)))
    argv = ["evaluate", str(llama_file), "--cluster", str(path), "--baseline"]
    assert main([*argv, "data-parallel", "--context-parallel", "4", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["strategy"] == "data-parallel, context parallel ×4"
    # the figures of the data-parallel baseline cut on sequence by hand, simulated: beside
    # what a batch split sends, each attention's keys and values go round
    from moplace.core.baselines import data_parallel
    from moplace.core.strategy import Split, Strategy

    dp = data_parallel(llama, 4)
    devices = next(iter(dp.splits.values())).devices
    # every group whose ops may all be cut on sequence (the loss too, which the baseline
    # leaves whole: no batch split cuts it)
    by_hand = Strategy(dp.placement, dp.priority, {
        i: Split("sequence", devices) for members in llama.groups
        if all("sequence" in llama.ops[i].splittable for i in members) for i in members},
        **dp.options)
    t = simulate(llama, cluster(4), by_hand)
    assert said["runtime_s"] == pytest.approx(t.makespan)
    assert said["peak_comm_bytes"] == pytest.approx(float(t.traffic.max()))
    from moplace.core.graph import OpGraph

    unnamed = OpGraph(llama.ops, llama.edges, name=llama.name,  # no keys and values go round
                      metadata={k: v for k, v in llama.metadata.items() if k != "context"})
    assert t.sent.sum() > simulate(unnamed, cluster(4), by_hand).sent.sum()
    assert said["plan"]["degrees"] == {"data": 1, "tensor": 1, "pipeline": 1, "context": 4,
                                       "context_comm": "p2p"}
    assert main([*argv, "all", "--context-parallel", "4"]) == 0
    table = capsys.readouterr().out
    assert "data-parallel, context parallel ×4" in table and "\nsingle " in table
    for extra, why in ((["--context-parallel", "3"], "128 tokens do not cut into 3"),
                       (["--context-parallel", "2"], "no group is split on batch over 2"),
                       (["--context-parallel", "8"], "the cluster has 4 devices"),
                       (["--context-parallel", "4", "--cp-comm", "a2a"], "cannot split on heads"),
                       (["--cp-comm", "ring"], "give --context-parallel C too"),
                       (["--context-parallel", "1"], "must be from 2 to 1024")):
        assert main([*argv, "data-parallel", *extra]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1, err
    assert main(["evaluate", "pipedream:vgg16", "--cluster", str(path), "--baseline",
                 "data-parallel", "--context-parallel", "4"]) == 2
    assert "names no fused attention" in capsys.readouterr().err

