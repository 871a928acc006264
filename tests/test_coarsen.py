"""Coarsening (issue 35, `moplace.core.coarsen`): each op whose output only one op reads is
merged into that op; the merged op's scratch keeps the inner outputs in the peak, the graph
maps merged ops back to the real ones, and an exported plan names every real op."""

from __future__ import annotations

import json

import numpy as np
import pytest

import moplace
from moplace.core.baselines import baseline
from moplace.core.cluster import Cluster
from moplace.core.coarsen import coarsen, expand_names, expand_strategy
from moplace.core.graph import Op, OpGraph
from moplace.errors import GraphError
from moplace.io import load_graph, save_graph


def _op(name, out, seconds=1e-3, **kw):
    return Op(name, compute={"V100": seconds}, output_bytes=out, role=kw.pop("role", "forward"),
              splittable=kw.pop("splittable", ("batch",)), **kw)


def chain():
    """x -> a -> b -> c, each read by one op; c is read by d and e."""
    ops = [_op("x", 100), _op("a", 50, param_bytes=8), _op("b", 30), _op("c", 10),
           _op("d", 5), _op("e", 5)]
    return OpGraph(ops, [(0, 1, 100), (1, 2, 50), (2, 3, 30), (3, 4, 10), (3, 5, 10)],
                   name="chain")


def test_a_chain_of_single_readers_becomes_one_op_at_its_end():
    g = coarsen(chain())
    assert [op.name for op in g.ops] == ["c", "d", "e"]
    c = g.op("c")
    assert c.compute["V100"] == pytest.approx(4e-3) and c.param_bytes == 8
    assert c.output_bytes == 10
    assert c.scratch_bytes == 140  # x and a live together (150), less c's own output
    assert expand_names(g, "c") == ["x", "a", "b", "c"] and expand_names(g, "d") == ["d"]
    assert g.metadata["coarsened"]["ops"] == 6
    assert {(g.ops[e.src].name, g.ops[e.dst].name, e.bytes) for e in g.edges} == {
        ("c", "d", 10), ("c", "e", 10)}


def test_the_inner_outputs_stay_in_the_peak():
    """On one device the merged chain peaks where the real ops do: x and a held at once."""
    fine, coarse = chain(), coarsen(chain())
    cluster = Cluster.uniform(1, kind="V100", memory_bytes=2**30, bandwidth=1e9)
    peaks = [moplace.Problem(g, cluster).evaluate(baseline("single", g, 1))
             .objectives()["peak_memory"] for g in (fine, coarse)]
    assert peaks[0] == peaks[1] == 150 + 8


@pytest.mark.parametrize("change", ["role", "splittable", "partial_sums", "colocation",
                                    "boundary"])
def test_what_a_plan_may_treat_apart_is_not_merged(change):
    kw = {"role": {"role": "backward"}, "splittable": {"splittable": ("batch", "channel")},
          "partial_sums": {"partial_sums": True, "splittable": ("tensor",)},
          "colocation": {"colocation": "elsewhere"}, "boundary": {}}[change]
    ops = [_op("u", 10, **kw), _op("v", 10, **({"splittable": ("tensor",)}
                                               if change == "partial_sums" else {}))]
    meta = {"layers": {"boundaries": ["u"]}} if change == "boundary" else {}
    g = OpGraph(ops, [(0, 1, 10)], metadata=meta)
    assert coarsen(g) is g


def test_two_readers_merged_into_one_make_a_single_reader():
    """p feeds q and r, both merged into s (read by t and w): p is then read by one op and
    merges too."""
    ops = [_op("p", 40), _op("q", 20), _op("r", 20), _op("s", 5), _op("t", 1), _op("w", 1)]
    g = coarsen(OpGraph(ops, [(0, 1, 40), (0, 2, 40), (1, 3, 20), (2, 3, 20), (3, 4, 5),
                              (3, 5, 5)]))
    assert [op.name for op in g.ops] == ["s", "t", "w"]
    assert expand_names(g, "s") == ["p", "q", "r", "s"]


def test_a_plan_for_the_coarse_graph_runs_on_the_real_ops():
    fine, g = chain(), coarsen(chain())
    s = baseline("data-parallel", g, 2)
    back = expand_strategy(g, fine, s)
    assert back.placement.tolist() == [0] * 6
    assert {fine.ops[i].name for i in back.splits} == {op.name for op in fine.ops}
    with pytest.raises(GraphError, match="not the graph it was coarsened from"):
        expand_strategy(g, OpGraph([_op("x", 1)]), s)


def test_a_coarsened_graph_round_trips_through_its_file(tmp_path):
    g = coarsen(chain())
    save_graph(g, tmp_path / "g.json")
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["version"] == 2 and data["ops"][0]["scratch_bytes"] == 140
    back = load_graph(tmp_path / "g.json")
    assert back.op("c") == g.op("c") and expand_names(back, "c") == ["x", "a", "b", "c"]


def test_an_exported_plan_names_every_real_op():
    from moplace.core.planshape import plan_shape
    from moplace.io.export import plan_document

    fine, g = chain(), coarsen(chain())
    s = baseline("data-parallel", g, 2)
    doc = plan_document(g, s, plan_shape(g, s), ["gpu0", "gpu1"])
    assert set(doc["placement"]) == {op.name for op in fine.ops}
    assert set(doc["splits"]) == {op.name for op in fine.ops}


torch_only = pytest.mark.skipif(
    not all(__import__("importlib").util.find_spec(m) for m in ("torch", "transformers")),
    reason="the PyTorch front end needs torch and transformers ('moplace[torch]')")


@torch_only
def test_a_traced_transformer_keeps_its_traffic_and_memory(tmp_path):
    """GPT-2 (2 layers, bf16, eager attention, roofline costs on A100s): under data, tensor and
    pipeline plans, with and without recomputation, the coarsened graph moves the same bytes
    and peaks at the same memory; its runtime differs by the per-part overhead of the merged
    ops (one launch each). (On calibrated H100 costs the two stages of the layer split
    interleave otherwise, and the coarsened peak there is one b·s·h activation, 1.6%, higher:
    a merged op holds its inputs to its end, docs/frontend.md.)"""
    from moplace.core.recompute import attention_cores, layer_checkpoints
    from moplace.torch.frontend import profile_torch_model

    config = {"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_positions": 128,
              "vocab_size": 512, "activation_function": "gelu", "n_layer": 2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    fine = profile_torch_model(f"hf:{tmp_path / 'config.json'}", 4, ["A100"], seq_len=128,
                               dtype="bf16", attention="eager").graph
    g = coarsen(fine)
    assert len(g.ops) < len(fine.ops) and len(g.groups) < len(fine.groups)
    assert g.metadata["layers"] == fine.metadata["layers"]
    assert layer_checkpoints(g).size == layer_checkpoints(fine).size
    cluster = Cluster.uniform(4, kind="A100", memory_bytes=80 * 2**30, bandwidth=300e9)
    for graph in (fine, g):
        dp, tp = baseline("data-parallel", graph, 4), baseline("tensor-parallel", graph, 4)
        plans = [dp, tp, baseline("layer-split", graph, 4),
                 dp.with_options(zero_stage=3).with_recompute(layer_checkpoints(graph)),
                 tp.with_recompute(attention_cores(graph)), dp.with_options(micro_batches=4)]
        values = np.array([moplace.Problem(graph, cluster).evaluate(p).values for p in plans])
        if graph is fine:
            want = values
    np.testing.assert_allclose(values[:, 1:], want[:, 1:], rtol=1e-3)  # traffic, memory
    assert np.all(np.abs(values[:, 0] / want[:, 0] - 1) < 0.15)
    # the coarse plans, expanded onto the real ops, are the fine plans: the same values
    problem = moplace.Problem(fine, cluster)
    back = np.array([problem.evaluate(expand_strategy(g, fine, p)).values for p in plans])
    np.testing.assert_allclose(back, want, rtol=1e-12)
    members = [m for name in (op.name for op in g.ops) for m in expand_names(g, name)]
    assert sorted(members) == sorted(op.name for op in fine.ops)


def _kernel_types(graph, cluster):
    """The numba types of the task-graph arrays the event loop takes, by build path, for a
    strategy of each path on ``graph``: no splits, a split (filled from its skeleton), a move
    of it (patched)."""
    import dataclasses

    import numba

    from moplace.core.strategy import Split, Strategy
    from moplace.costs.costmodel import CostModel
    from moplace.simulator.build import build
    from moplace.simulator.delta import SimulationBase

    costs, n = CostModel(graph, cluster), len(graph.ops)
    split = Strategy(np.zeros(n, np.int64), splits={0: Split("batch", (0, 1))})
    moved = Strategy(np.r_[np.zeros(n - 1, np.int64), 1], splits=split.splits)
    parent = SimulationBase(split, build(graph, split, costs)[0], graph, costs)
    plans = {"unsplit": (Strategy(np.zeros(n, np.int64)), None), "filled": (split, None),
             "patched": (moved, parent)}
    types = {}
    for path, (strategy, base) in plans.items():
        tg, how = build(graph, strategy.validate(graph, 2), costs, base)
        types[path] = (how, {f.name: numba.typeof(getattr(tg, f.name))
                             for f in dataclasses.fields(tg)
                             if isinstance(getattr(tg, f.name), np.ndarray)})
    return types


def test_scratch_does_not_change_what_the_event_loop_is_compiled_for():
    """A graph with scratch gives the event loop arguments of the same types (read-only
    flags included) as one without, on every build path: else its first simulation compiles
    the loop again (a minute on a clean install), as the fuzz run once found."""
    cluster = Cluster.uniform(2, kind="V100", memory_bytes=2**30, bandwidth=1e9)
    fine, coarse = chain(), coarsen(chain())
    assert fine.arrays.scratch_bytes is None and coarse.arrays.scratch_bytes is not None
    plain, with_scratch = _kernel_types(fine, cluster), _kernel_types(coarse, cluster)
    assert [how for how, _ in plain.values()] == ["unsplit", "filled", "patched"]
    assert plain == with_scratch
