"""Search at scale (issue 50, part 3): a framework's regular plans on a pod, each evaluated at
scale (`moplace.optimize.regularsearch`), the front written as front.json
(`moplace.io.regularfronts`) that ``show`` and ``export`` read; uneven first and last stages
where the stages cannot share the layers (`moplace.core.regularspace.uneven_ends`); a replica
whose stages share servers unevenly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from moplace.cli import main
from moplace.core.pod import load_target
from moplace.core.regular import parse_plan
from moplace.core.regularspace import RegularSpace, uneven_ends
from moplace.io import load_graph
from moplace.cli.scalesearch import SCALE_SEARCHERS
from moplace.optimize.regularsearch import METHODS, _Genome, framework_seeds, search_regular
from moplace.optimize.regularwalks import make_proposer
from moplace.simulator.atscale import evaluate_regular
from moplace.simulator.replica import replica_cluster

from test_atscale import POD4

TINY = Path(__file__).parent / "data" / "tiny-llama.json"


@pytest.fixture(scope="module")
def tiny():
    return load_graph(str(TINY))


def _pod(tmp_path, gpus: int, per_server: int = 2):
    path = tmp_path / f"pod{gpus}x{per_server}.toml"
    path.write_text(POD4.replace("gpus = 4", f"gpus = {gpus}")
                    .replace("count = 2\nnics = 2", f"count = {per_server}\nnics = {per_server}"))
    return path


def test_uneven_ends_put_fewer_layers_first_and_last():
    assert uneven_ends(126, 16) == 7  # 7 + 14 x 8 + 7: how Llama 3 405B was cut
    assert uneven_ends(126, 8) == 15 and uneven_ends(30, 4) == 7
    assert uneven_ends(10, 2) is None and uneven_ends(56, 16) is None


def test_the_space_offers_uneven_stages_where_the_layers_do_not_divide(tiny, tmp_path):
    plans = RegularSpace(tiny, 6, 48).all()
    three = [p for p in plans if p.pp == 3]
    assert three and all((p.first, p.last) == (1, 1) and p.v == 1 for p in three)
    assert all(p.misfit(tiny, 6) is None for p in plans)
    ev = evaluate_regular(tiny, load_target(str(_pod(tmp_path, 6))), three[0])
    assert ev.runtime_s > 0


def test_a_replica_whose_stages_share_servers_unevenly_runs(tiny, tmp_path):
    """TP1 x DP3 x PP4 on 12 GPUs in servers of 4: the replica's ranks 0, 3, 6, 9 sit two in
    the first server and one in each of the next two."""
    pod = load_target(str(_pod(tmp_path, 12, 4)))
    plan = parse_plan("tp=1,pp=4,dp=3,mbs=8,gbs=24")
    cluster = replica_cluster(pod, pod, plan)
    assert cluster.server.tolist() == [0, 0, 1, 2]
    assert evaluate_regular(tiny, pod, plan).runtime_s > 0


def test_the_seeds_are_the_recommended_plans_of_the_space(tiny):
    plans = RegularSpace(tiny, 16, 128).all()
    seeds = framework_seeds(plans, "megatron")
    assert seeds and all(p in plans for _, p in seeds)
    labels = [label for label, _ in seeds]
    assert any("TP8" in label for label in labels) and "data parallel" in labels[0]


@pytest.mark.parametrize("method", METHODS)
def test_search_at_scale_is_seeded_exact_and_repeatable(tiny, tmp_path, method):
    """Every plan is evaluated at most once; with a budget past the space's size the front is
    the exact one of the space (the same front for both methods); the same seed gives the
    same evaluations, in two worker processes as in one."""
    pod_file = _pod(tmp_path, 4)
    pod = load_target(str(pod_file))
    kw = dict(graph_spec=str(TINY), pod_spec=str(pod_file), method=method, seed=3)
    every = search_regular(tiny, pod, 64, budget=10**6, **kw)
    specs = [p.plan.spec() for p in every.points]
    assert len(set(specs)) == len(specs) == every.n_plans - every.unfit - len(every.refused)
    exact = search_regular(tiny, pod, 64, budget=10**6, graph_spec=str(TINY),
                           pod_spec=str(pod_file), method="random", seed=0)
    front = {every.points[k].plan for k in every.front}
    assert front == {exact.points[k].plan for k in exact.front}
    some = search_regular(tiny, pod, 64, budget=9, **kw)
    again = search_regular(tiny, pod, 64, budget=9, workers=2, **kw)
    assert [p.plan for p in some.points] == [p.plan for p in again.points]
    assert all(np.array_equal(a.values, b.values) for a, b in zip(some.points, again.points))
    assert len(some.points) == 9 and some.points[0].plan == framework_seeds(
        RegularSpace(tiny, 4, 64).all(), "megatron")[0][1]


def test_the_command_line_offers_every_method():
    assert tuple(SCALE_SEARCHERS) == tuple(METHODS)


def test_the_chain_moves_one_degree_at_a_time(tiny, tmp_path):
    """MCMC's proposals differ from its state in one gene; it takes a faster plan, and a
    plan over the memory only by chance."""
    pod_file = _pod(tmp_path, 16, 4)
    pod = load_target(str(pod_file))
    result = search_regular(tiny, pod, 128, graph_spec=str(TINY), pod_spec=str(pod_file),
                            method="random", budget=12, seed=1)
    plans = RegularSpace(tiny, 16, 128).all()
    genome = _Genome(plans)
    chain = make_proposer("mcmc", genome, result, 8, np.random.default_rng(0))
    best = min((p for p in result.points if p.feasible), key=lambda p: p.evaluation.runtime_s)
    assert genome.decode(chain.state) in {p.plan for p in result.points}
    state = chain.state.copy()
    for plan in chain.ask(8):
        if plan is not None:
            assert np.count_nonzero(genome.encode(plan) != state) == 1
    assert chain.cost <= np.log(best.evaluation.runtime_s) + 1.0


def test_optuna_is_told_the_plans_evaluated(tiny, tmp_path):
    pod_file = _pod(tmp_path, 16, 4)
    pod = load_target(str(pod_file))
    result = search_regular(tiny, pod, 128, graph_spec=str(TINY), pod_spec=str(pod_file),
                            method="random", budget=6, seed=1)
    tpe = make_proposer("optuna-tpe", _Genome(RegularSpace(tiny, 16, 128).all()), result, 4,
                        np.random.default_rng(0))
    assert len(tpe.study.trials) == len(result.points)
    asked = tpe.ask(4)
    assert len(asked) == 4 and len(tpe.pending) == 4


def test_search_on_a_pod_writes_a_front_that_show_and_export_read(tmp_path, capsys):
    pod = _pod(tmp_path, 4)
    out = tmp_path / "f"
    assert main(["search", str(TINY), "--cluster", str(pod), "--space", "megatron", "--gbs",
                 "64", "--searcher", "random", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "TP1 PP1 DP4" in printed and "searched the megatron space" in printed
    data = json.loads((out / "front.json").read_text())
    assert data["kind"] == "regular" and data["points"] and data["gbs"] == 64
    runtimes = [p["runtime_s"] for p in data["points"]]
    assert runtimes == sorted(runtimes)
    assert all(parse_plan(p["regular"]["spec"]).gbs == 64 for p in data["points"])
    assert main(["show", str(out / "front.json"), "--best", "runtime"]) == 0
    shown = capsys.readouterr().out
    assert "--plan" in shown and "moplace export" in shown and "apply" not in shown
    assert main(["export", str(out / "front.json"), "--point", "0", "--format",
                 "megatron"]) == 0
    flags = capsys.readouterr().out
    assert "--tensor-model-parallel-size" in flags and "--global-batch-size 64" in flags
    assert main(["export", str(out / "front.json"), "--point", "0", "--format",
                 "torchtitan"]) == 0
    assert "[parallelism]" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["--searcher", "heft", "--space", "megatron", "--gbs", "64"], "places ops one by one"),
    (["--searcher", "random", "--gbs", "64"], "--space"),
    (["--searcher", "random", "--space", "megatron"], "--gbs"),
    (["--searcher", "random", "--space", "megatron", "--gbs", "12"], "multiple"),
])
def test_what_a_search_on_a_pod_cannot_take_is_one_line(tmp_path, capsys, argv, words):
    pod = _pod(tmp_path, 4)
    assert main(["search", str(TINY), "--cluster", str(pod), "--out", str(tmp_path / "o"),
                 *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err
    assert not (tmp_path / "o").exists()


def test_gbs_on_a_listed_cluster_is_refused(capsys, tmp_path):
    assert main(["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher",
                 "random", "--gbs", "64", "--out", str(tmp_path)]) == 2
    assert "pod" in capsys.readouterr().err


def test_a_regular_plan_exports_as_megatron_flags_and_torchtitan_keys():
    from moplace.io.regularexport import regular_megatron, regular_torchtitan

    plan = parse_plan("tp=8,pp=16,dp=128,mbs=1,gbs=2048,first=7,last=7,tp_overlap=1,"
                      "grad_fp32=1,recompute=full")
    args = regular_megatron(plan, 126)["args"]
    text = " ".join(args)
    for flag in ("--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 16",
                 "--decoder-first-pipeline-num-layers 7", "--decoder-last-pipeline-num-layers 7",
                 "--sequence-parallel", "--tp-comm-overlap", "--use-distributed-optimizer",
                 "--overlap-grad-reduce", "--overlap-param-gather", "--global-batch-size 2048",
                 "--recompute-granularity full", "--bf16"):
        assert flag in text, flag
    virtual = " ".join(regular_megatron(parse_plan("tp=1,pp=2,v=3,dp=4,mbs=1,gbs=8"),
                                        12)["args"])
    assert "--num-layers-per-virtual-pipeline-stage 2" in virtual
    titan = regular_torchtitan(plan, 126)
    assert titan["tables"]["parallelism"]["data_parallel_shard_degree"] == 128
    assert titan["tables"]["training"]["local_batch_size"] == 16
    assert "uneven stages" in " ".join(titan["notes"])


def _layers(tiny, count: int):
    """tiny's graph, saying it has ``count`` layers (what the plans' stage counts read)."""
    from moplace.core.graph import OpGraph

    meta = dict(tiny.metadata)
    meta["layers"] = {**meta["layers"], "count": count}
    return OpGraph(tiny.ops, tiny.edges, name=tiny.name, metadata=meta)


def test_virtual_stages_with_uneven_ends(tiny):
    """Interleaved 1F1B over virtual stages whose first and last hold fewer layers, as Llama 3
    405B was cut (126 layers on 16 ranks x 2 chunks: 3, 4 x 30, 3; x 4: 1, 2 x 62, 1): the
    space offers them, Megatron-Core's pipeline layout exports them, and on a model whose
    layers divide they are the even plan."""
    plan = parse_plan("tp=8,pp=16,v=2,dp=128,mbs=8,gbs=16384,first=3,last=3")
    assert plan.stage_layers(126) == (3,) + (4,) * 30 + (3,)
    g126 = _layers(tiny, 126)  # traced at 8 sequences
    assert plan.misfit(g126, 16384) is None
    assert "not a whole number" in parse_plan(
        "tp=8,pp=16,v=2,dp=128,mbs=8,gbs=16384,first=7,last=7").misfit(g126, 16384)
    plans = RegularSpace(g126, 16384, 16384).all()
    uneven = {(p.v, p.first) for p in plans if p.pp == 16 and p.tp == 8}
    assert {(1, 7), (2, 3), (4, 1)} <= uneven
    assert all(p.misfit(g126, 16384) is None for p in plans)
    from moplace.io.regularexport import regular_megatron

    args = regular_megatron(plan, 126)["args"]
    layout = args[args.index("--pipeline-model-parallel-layout") + 1]
    assert layout == "Et*3|(t*4|)*30t*3L"
    assert "--decoder-first-pipeline-num-layers" not in args
    from moplace.io.regularexport import regular_text

    point = {"regular": {"text": plan.text(), "summary": "", "spec": plan.spec()}}
    shown = regular_text(point, "t", regular_megatron(plan, 126),
                         {"tables": {"parallelism": {}}, "notes": []})
    assert "--pipeline-model-parallel-layout 'Et*3|(t*4|)*30t*3L'" in shown  # safe to paste
    layer_layout = pytest.importorskip(
        "megatron.core.transformer.pipeline_parallel_layer_layout")
    stages = layer_layout.PipelineParallelLayerLayout.parse_str_to_list(layout)
    assert [sum(t.name == "decoder" for t in s) for s in stages] == list(plan.stage_layers(126))
    # 4 layers on 2 ranks x 2 chunks, first and last 1: the even v2 plan
    pod = load_target("pod:H100:16")
    a = evaluate_regular(tiny, pod, parse_plan("tp=1,pp=2,v=2,dp=8,mbs=8,gbs=128,first=1,last=1"))
    b = evaluate_regular(tiny, pod, parse_plan("tp=1,pp=2,v=2,dp=8,mbs=8,gbs=128"))
    assert a.runtime_s == pytest.approx(b.runtime_s, rel=1e-12)
    assert np.array_equal(a.trace.peak_memory, b.trace.peak_memory)


def test_micro_batch_size_is_a_gene_with_a_graph_per_size(tmp_path, capsys, tiny_llama_file,
                                                           tiny_llama_batch2_file):
    """With the model traced at two micro-batch sizes the space is both sizes' plans, each
    evaluated on its own size's graph (the same plan at mbs 2 runs half the micro-batches
    of twice the sequences); front.json names each size's graph, and show's and export's
    commands the one of the point's size. A graph of another model or of a size given twice
    is refused in one line before any work."""
    g1, g2 = load_graph(str(tiny_llama_file)), load_graph(str(tiny_llama_batch2_file))
    pod = load_target(str(_pod(tmp_path, 4)))
    both = search_regular(g1, pod, 8, graph_spec=str(tiny_llama_file), pod_spec=str(pod.name),
                          budget=10**6, more_graphs=((g2, str(tiny_llama_batch2_file)),))
    alone = [RegularSpace(g, 4, 8).all() for g in (g1, g2)]
    assert both.n_plans == len(alone[0]) + len(alone[1])
    assert {p.plan.mbs for p in both.points} == {1, 2}
    for p in both.points[:6]:
        again = evaluate_regular({1: g1, 2: g2}[p.plan.mbs], pod, p.plan)
        assert np.array_equal(again.values, p.values)
    podfile = _pod(tmp_path, 4)
    out = tmp_path / "f"
    argv = ["search", str(tiny_llama_file), "--cluster", str(podfile), "--space", "megatron",
            "--gbs", "8", "--searcher", "random", "--out", str(out)]
    assert main(argv + ["--micro-batch-graphs", str(tiny_llama_batch2_file)]) == 0
    assert "micro-batches of 1, 2 sequences" in capsys.readouterr().out
    data = json.loads((out / "front.json").read_text())
    assert set(data["micro_batch_graphs"]) == {"1", "2"}
    k = next(i for i, p in enumerate(data["points"]) if p["regular"]["degrees"]["mbs"] == 2)
    assert main(["export", str(out / "front.json"), "--point", str(k)]) == 0
    assert str(Path(tiny_llama_batch2_file).resolve()) in capsys.readouterr().out
    for other, words in ((TINY, "not the same model"), (tiny_llama_file, "each size once")):
        bad = tmp_path / "bad"
        assert main(argv[:-1] + [str(bad), "--micro-batch-graphs", str(other)]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and "\n" not in err and not bad.exists()


def test_precision_is_a_gene_of_a_search_on_a_pod(tiny_llama_file, tmp_path, capsys):
    """``--precision bf16,fp16`` searches both: the space is twice BF16's, and FP16's plans,
    as fast as BF16's but reducing FP16 gradients (Megatron keeps them so) where BF16's reduce
    FP32 ones, make the front; export writes --fp16 for its points. A precision not searched, or a
    --precision on a listed cluster, is refused in one line before any work."""
    podfile = _pod(tmp_path, 4)
    out = tmp_path / "f"
    argv = ["search", str(tiny_llama_file), "--cluster", str(podfile), "--space", "megatron",
            "--gbs", "8", "--searcher", "random", "--budget", "100000", "--out", str(out)]
    assert main(argv + ["--precision", "bf16,fp16", "--json"]) in (0, 3)
    data = json.loads(capsys.readouterr().out)
    bf16 = RegularSpace(load_graph(str(tiny_llama_file)), 4, 8).all()
    assert "in BF16 and FP16" in " ".join(data["notes"])
    assert f"of {2 * len(bf16):,} (" in " ".join(data["notes"])
    specs = [p["regular"]["spec"] for p in data["points"]]
    assert specs and all("precision=fp16" in s and "grad_fp32=1" not in s for s in specs)
    assert main(["export", str(out / "front.json"), "--point", "0"]) == 0
    assert "--fp16" in capsys.readouterr().out
    for extra in (["--precision", "fp8"], ["--precision", ","]):
        bad = tmp_path / "bad"
        assert main(argv[:-1] + [str(bad)] + extra) == 2
        err = capsys.readouterr().err.strip()
        assert "--precision" in err and "\n" not in err and not bad.exists()
