"""Mixture-of-experts models trace into the graph (issue 49, part 1): their experts under a
stated routing assumption with static shapes (`moplace.torch.moe`, `moplace.torch.routing`),
the same outputs and gradients as the model's own layers where every token fits, and the
routing said in the graph's metadata and in every result."""

from __future__ import annotations

import json

import pytest

from moplace.errors import MoplaceError
from moplace.torch.routing import DEFAULT_IMBALANCE, Routing, routing_of

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch")
pytest.importorskip("transformers", reason="hf: models need transformers ('moplace[torch]')")

from moplace.cli import main  # noqa: E402
from moplace.io import load_graph  # noqa: E402

COMMON = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
              vocab_size=100, max_position_embeddings=64)
MLA = dict(kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
           intermediate_size=64, first_k_dense_replace=1)
#: tiny configurations of each kind of MoE layer moplace traces
TINY = {
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=48),
    "qwen3_moe": dict(num_experts=8, num_experts_per_tok=3, moe_intermediate_size=24,
                      norm_topk_prob=True, head_dim=16, intermediate_size=64),
    "qwen2_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=24,
                      shared_expert_intermediate_size=40, intermediate_size=64),
    "deepseek_v2": dict(n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=24,
                        n_shared_experts=2, q_lora_rank=None, n_group=1, topk_group=1, **MLA),
    "deepseek_v3": dict(n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=24,
                        n_shared_experts=1, q_lora_rank=24, n_group=2, topk_group=1, **MLA),
}


def tiny_model(kind: str, seed: int = 0):
    """A tiny ``kind`` model with random weights large enough to route unevenly."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.for_model(kind, **COMMON, **TINY[kind])
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.normal_(std=0.2)
        for name, b in model.named_buffers():
            if "e_score_correction" in name:  # DeepSeek-V3's load-balancing bias
                b.normal_(std=0.1)
    return model


def step(model, tokens):
    """The logits and every parameter's gradient of a next-token loss on ``tokens``."""
    model.zero_grad()
    logits = model(tokens).logits
    torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()) \
        .backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None}


@pytest.mark.parametrize("kind", list(TINY))
def test_static_experts_compute_the_models_layer_when_every_token_fits(kind):
    """Real tensors, real weights: the static dispatch, grouped GEMMs and combine (forward and
    the custom backward) give the model's own logits and gradients when the buffers hold
    every token; with buffers of the mean (balanced) a real, uneven routing drops some."""
    from moplace.torch.moe import experts_modules, static_experts

    model = tiny_model(kind)
    tokens = torch.randint(0, 100, (3, 10), generator=torch.Generator().manual_seed(1))
    logits, grads = step(model, tokens)
    top_k = model.config.num_experts_per_tok
    experts = experts_modules(model)[0][1].gate_up_proj.shape[0]
    every = Routing(capacity_factor=experts / top_k)  # buffers of every token (30)
    with static_experts(model, every) as layers:
        ours, our_grads = step(model, tokens)
    torch.testing.assert_close(ours, logits)
    assert our_grads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(our_grads[name], grad, msg=name)
    assert layers and all(r["capacity"] == 30 and r["top_k"] == top_k for r in layers)
    assert "forward" not in vars(model.get_submodule(layers[0]["module"]))  # put back
    with static_experts(model, Routing()):
        dropped, _ = step(model, tokens)
    assert not torch.allclose(dropped, logits)  # the mean is less than the busiest expert's


def test_slots_rank_each_experts_tokens_and_drop_beyond_capacity():
    from moplace.torch.moe import moe_dispatch, moe_slots

    index = torch.tensor([[0, 1], [0, 2], [0, 1], [2, 0]])  # expert 0 chosen 4 times
    token, slot = moe_slots(index, 3, 2, 0)
    assert token.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    # expert 0's rows 0, 1 then dropped (6 = 3 x 2); expert 1's 2, 3; expert 2's 4, 5
    assert slot.tolist() == [0, 2, 1, 4, 6, 3, 5, 6]
    x = torch.arange(4.0).reshape(4, 1).repeat(1, 2)
    buffers = moe_dispatch(x, token, slot, 3, 2, 0)
    assert buffers[:, :, 0].tolist() == [[0, 1], [0, 2], [1, 3]]


def test_routing_assumptions_by_hand():
    assert Routing().loads(4096, 8, 2) == [1024] * 8
    assert Routing().capacity(4096, 8, 2) == 1024
    assert Routing().loads(10, 4, 3) == [8, 8, 7, 7]  # 30 choices over 4 experts
    skewed = routing_of(imbalance=2.0)
    assert skewed.kind == "skewed" and routing_of("skewed").imbalance == DEFAULT_IMBALANCE
    loads = skewed.loads(4096, 8, 2)  # the hottest 2 x 1024; 6,144 left over 7 experts
    assert loads == [2048] + [878] * 5 + [877] * 2 and sum(loads) == 8192
    assert skewed.capacity(4096, 8, 2) == 2048
    capped = routing_of("skewed", 1.25, 3.0)
    assert capped.capacity(4096, 8, 2) == 1280  # ceil(1.25 x 1024)
    summary = capped.summary(4096, 8, 2)
    assert summary["tokens_per_expert"][0] == 3072 and summary["dropped"] == 3072 - 1280
    assert routing_of(capacity_factor=1.0).summary(4096, 8, 2)["dropped"] == 0
    assert routing_of("skewed", imbalance=4.0).loads(4096, 8, 2)[0] == 4096  # every token
    with pytest.raises(MoplaceError, match="at most every token, 4 times the mean"):
        routing_of(imbalance=4.5).loads(4096, 8, 2)
    for args, says in ((("zipf",), "one of balanced, skewed"),
                       ((None, 0.0), "above 0"), ((None, float("inf")), "above 0"),
                       ((None, None, 1.0), "above 1"), (("balanced", None, 2.0), "balanced")):
        with pytest.raises(MoplaceError, match=says):
            routing_of(*args)


def config_file(tmp_path, kind: str, **extra):
    path = tmp_path / kind / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"model_type": kind, **COMMON, **TINY[kind], **extra}))
    return path


def profile(tmp_path, capsys, config, *extra):
    out = tmp_path / "g.json"
    assert main(["profile", f"hf:{config}", "--batch", "2", "--seq-len", "16", "--dtype", "bf16",
                 "--quiet", "--json", "--force", "--no-cache", "-o", str(out), *extra]) == 0
    return json.loads(capsys.readouterr().out), load_graph(str(out))


def test_a_mixtral_traces_with_its_experts_marked(tmp_path, capsys):
    """Each MoE layer: the custom dispatch and combine ops (forward and backward), six grouped
    GEMMs over the stacked [E, ...] weights, buffers of C = tokens x k / E rows; the layers
    found, the parameters the model's, the routing said."""
    said, g = profile(tmp_path, capsys, config_file(tmp_path, "mixtral"))
    moe = g.metadata["moe"]
    assert moe["experts"] == 4 and moe["top_k"] == 2 and moe["layers"] == 2
    assert moe["routing"] == "balanced" and moe["tokens"] == 32 and moe["capacity"] == 16
    assert g.metadata["layers"]["count"] == 2
    ops = {op.name: op for op in g.ops}
    feats = g.metadata["cost_features"]
    for k, layer in enumerate(moe["layer_ops"]):
        assert layer["module"] == f"model.layers.{k}.mlp.experts"
        for part, kind, role in (("slots", "moe_slots", "forward"),
                                 ("dispatch", "moe_dispatch", "forward"),
                                 ("combine", "moe_combine", "forward"),
                                 ("dispatch_backward", "moe_dispatch_backward", "backward"),
                                 ("combine_backward", "moe_combine_backward", "backward")):
            assert [ops[n].type for n in layer[part]] == [f"{kind}.default"]
            assert ops[layer[part][0]].role == role
        assert ops[layer["dispatch"][0]].output_bytes == 4 * 16 * 32 * 2  # [E, C, H] bf16
        assert len(layer["gemms"]) == 6 and set(layer["gemms"]) <= set(layer["experts"])
        forward = [n for n in layer["gemms"] if ops[n].role == "forward"]
        assert [(feats[n]["batch"], feats[n]["m"], feats[n]["k"], feats[n]["n"])
                for n in forward] == [(4, 16, 32, 96), (4, 16, 48, 32)]
        assert [ops[w].param_bytes for w in layer["weights"]] == [4 * 96 * 32 * 2, 4 * 32 * 48 * 2]
    assert said["parameters"] == g.metadata["parameters"]
    assert sum(op.param_bytes for op in g.ops if op.type == "Parameter") == 2 * said["parameters"]
    assert any(n.startswith("routing: balanced, 16 tokens per expert per layer of 32 tokens")
               for n in said["notes"])
    assert said["moe"] == {k: v for k, v in moe.items() if k != "layer_ops"}


def test_the_routing_options_set_the_buffers(tmp_path, capsys):
    config = config_file(tmp_path, "mixtral")
    said, g = profile(tmp_path, capsys, config, "--imbalance", "1.5", "--capacity-factor", "1.25")
    moe = g.metadata["moe"]
    assert moe["routing"] == "skewed" and moe["capacity"] == 20  # ceil(1.25 x 16)
    assert moe["tokens_per_expert"] == [24, 14, 13, 13] and moe["dropped"] == 4
    gemm = moe["layer_ops"][0]["gemms"][0]
    assert g.metadata["cost_features"][gemm]["m"] == 20
    note = next(n for n in said["notes"] if n.startswith("routing:"))
    assert "1.5x the mean: 24 tokens" in note and "capacity factor 1.25" in note \
        and "4 choices dropped" in note
    # the graph records it, and a plan applied for real traces the model under it again
    from moplace.torch.applyprep import load_setup, model_source
    from moplace.torch.trace import trace_step

    assert g.metadata["source"]["routing"] == {"kind": "skewed", "capacity_factor": 1.25,
                                               "imbalance": 1.5}
    again = trace_step(load_setup(model_source(g), 2), "H100")
    assert [r["capacity"] for r in again.moe] == [20, 20]


@pytest.mark.parametrize("kind, shared", [("qwen3_moe", 0), ("qwen2_moe", 1),
                                          ("deepseek_v2", 2), ("deepseek_v3", 1)])
def test_the_other_kinds_trace(tmp_path, capsys, kind, shared):
    """Qwen3-MoE, Qwen2-MoE (a gated shared expert), DeepSeek-V2 and V3 (MLA attention,
    shared experts, a first dense layer): traced, one MoE layer per sparse layer."""
    said, g = profile(tmp_path, capsys, config_file(tmp_path, kind))
    moe = g.metadata["moe"]
    sparse = 1 if kind.startswith("deepseek") else 2
    assert moe["layers"] == sparse and moe["shared_experts"] == shared
    assert moe["capacity"] == 32 * moe["top_k"] // moe["experts"]
    assert said["parameters"] == g.metadata["parameters"]


MODEL_FILE = '''
import torch
from torch import nn


class Experts(nn.Module):
    moplace_experts = True  # moplace.torch.moe's interface

    def __init__(self, experts, hidden, inner):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.randn(experts, 2 * inner, hidden) * 0.1)
        self.down_proj = nn.Parameter(torch.randn(experts, hidden, inner) * 0.1)
        self.act_fn = nn.functional.silu

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for e in range(self.gate_up_proj.shape[0]):
            token, choice = torch.where(top_k_index == e)
            gate, up = (hidden_states[token] @ self.gate_up_proj[e].T).chunk(2, -1)
            y = (self.act_fn(gate) * up) @ self.down_proj[e].T
            out.index_add_(0, token, y * top_k_weights[token, choice, None])
        return out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 16)
        self.router = nn.Linear(16, 4, bias=False)
        self.experts = Experts(4, 16, 24)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        x = self.embed(x)
        weights, index = torch.topk(self.router(x).softmax(-1), 2)
        return self.head(x + self.experts(x, index, weights))


def build(batch_size):
    model = Model()
    x, y = torch.randn(batch_size, 16), torch.randint(0, 3, (batch_size,))
    return model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1), (x, y)
'''


def test_a_model_files_moe_layer_of_our_interface_traces(tmp_path, capsys):
    path = tmp_path / "moe_model.py"
    path.write_text(MODEL_FILE)
    out = tmp_path / "g.json"
    assert main(["profile", str(path), "--batch", "8", "--quiet", "--no-cache", "-o", str(out),
                 "--routing", "skewed"]) == 0
    moe = load_graph(str(out)).metadata["moe"]
    assert moe["routing"] == "skewed" and moe["capacity"] == 8  # the hottest: 2 x 16 / 4
    assert moe["layer_ops"][0]["module"] == "experts" and len(moe["layer_ops"][0]["gemms"]) == 6
    plain = tmp_path / "plain.py"
    plain.write_text(MODEL_FILE.replace("moplace_experts = True", "pass"))
    assert main(["profile", str(plain), "--batch", "8", "--quiet", "--no-cache", "-o",
                 str(tmp_path / "p.json"), "--capacity-factor", "2"]) == 2
    assert "no mixture-of-experts layer" in capsys.readouterr().err


def test_the_bundled_moe_configurations_are_the_published_sizes():
    from transformers import AutoModelForCausalLM

    from moplace.torch.hf import hf_config

    published = {"mixtral-8x7b": 46_702_792_704, "mixtral-8x22b": 140_630_071_296,
                 "qwen3-30b-a3b": 30_532_122_624, "deepseek-v2-lite": 15_706_484_224,
                 "deepseek-v3": 671_026_404_352, "llama-3.1-8b": 8_030_261_248,
                 "llama-3.1-405b": 405_853_388_800}
    for name, n in published.items():
        config, _ = hf_config(name)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        assert sum(p.numel() for p in model.parameters()) == n, name
    config, _ = hf_config("llama-3.1-8b")
    assert config.max_position_embeddings == 131072
    assert config.rope_parameters["rope_type"] == "llama3"
    assert config.rope_parameters["factor"] == 8.0


@pytest.mark.slow
@pytest.mark.parametrize("name, parameters", [("mixtral-8x7b", 46_702_792_704),
                                              ("qwen3-30b-a3b", 30_532_122_624)])
def test_the_full_moe_models_trace_with_their_published_parameters(tmp_path, capsys, name,
                                                                   parameters):
    out = tmp_path / "g.json"
    assert main(["profile", f"hf:{name}", "--batch", "1", "--seq-len", "4096", "--dtype",
                 "bf16", "--estimate", "H100", "--quiet", "--json", "-o", str(out)]) == 0
    said = json.loads(capsys.readouterr().out)
    g = load_graph(str(out))
    assert said["parameters"] == parameters
    assert sum(op.param_bytes for op in g.ops if op.type == "Parameter") == 2 * parameters
    moe = g.metadata["moe"]
    assert moe["layers"] == g.metadata["layers"]["count"] == len(moe["layer_ops"])


def test_the_twin_trace_beside_returns_its_result_or_its_error(tmp_path):
    """`moplace.torch.twin.beside`: the work's result (from a forked process where one can
    fork), its error as a MoplaceError, and a body that fails leaves no process behind."""
    import os

    from moplace.torch.twin import beside

    with beside(lambda: {"pid": os.getpid(), "shapes": [(2, 3)]}) as result:
        out = result()
    assert out["shapes"] == [(2, 3)] and out["pid"] != os.getpid()  # forked

    def fails():
        raise MoplaceError("model.py: PyTorch could not trace the training step at batch 4")

    with pytest.raises(MoplaceError, match="at batch 4"):
        with beside(fails) as result:
            result()
    import time

    where = tmp_path / "pid"

    def slow():
        with open(where, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(30)

    t0 = time.monotonic()
    with pytest.raises(ZeroDivisionError):
        with beside(slow):
            while not where.exists() or not where.read_text():
                time.sleep(0.01)
            1 / 0
    assert time.monotonic() - t0 < 20  # killed, not waited for
    with pytest.raises(ChildProcessError):
        os.waitpid(int(where.read_text()), os.WNOHANG)  # and reaped


@pytest.mark.slow
def test_a_moe_plan_runs_on_the_testbed(tmp_path, capsys):
    """The MoE ops run for real on the PyTorch testbed's ranks (registered where a rank
    resolves them): a layer split gives the one-device step's losses; data parallelism is
    refused by name (which tokens a buffer drops depends on the others in its batch)."""
    path = tmp_path / "moe_model.py"
    path.write_text(MODEL_FILE)
    graph = tmp_path / "g.json"
    assert main(["profile", str(path), "--batch", "8", "--testbed", "2", "--quiet", "-o",
                 str(graph)]) == 0
    capsys.readouterr()
    losses = {}
    for baseline in ("single", "layer-split"):
        assert main(["apply", str(graph), "--baseline", baseline, "--steps", "2", "--quiet",
                     "--json"]) == 0
        losses[baseline] = json.loads(capsys.readouterr().out)["losses"]
    assert losses["layer-split"] == pytest.approx(losses["single"], rel=1e-5)
    assert main(["apply", str(graph), "--baseline", "data-parallel", "--steps", "2",
                 "--quiet"]) == 2
    assert "mixes the samples of its batch" in capsys.readouterr().err
