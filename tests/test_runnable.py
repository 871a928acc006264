"""Fronts of runnable plans (issue 48): the runners of a plan (`moplace.core.runners`), the
framework spaces (`moplace.core.degrees`), ``show --where runs=``, ``search --space`` and the
export of irregular plans as disjoint runs of groups.

The torchtitan test loads each export with torchtitan 0.2.2's own ``ConfigManager`` (its
``torchtitan/config`` package, loaded without the package's ``__init__``, which imports
triton); it skips, saying so, where torchtitan and tyro are not installed
(``pip install --no-deps torchtitan==0.2.2 tyro``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import moplace
from moplace.cli import main
from moplace.core.baselines import baseline
from moplace.core.degrees import DegreeSpace, Degrees, regular_plan
from moplace.core.planshape import plan_shape
from moplace.core.runners import misfit, runners
from moplace.io.export import megatron_flags, plan_document, torchtitan_toml

TINY = Path(__file__).parent / "data" / "tiny-llama.json"


@pytest.fixture(scope="module")
def tiny():
    return moplace.load_graph(str(TINY))


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_runner_rule(tiny):
    vgg = moplace.load_graph("pipedream:vgg16")
    assert runners(vgg, baseline("data-parallel", vgg, 4)) == ["torchtitan", "megatron"]
    # a Keras graph runs on moplace apply, whatever its plan
    keras = type(vgg)(vgg.ops, vgg.edges, name="k", metadata={"format": "tensorflow"})
    assert runners(keras, baseline("round-robin", keras, 4)) == ["moplace-apply"]
    dp = baseline("data-parallel", tiny, 8)
    # a PyTorch graph's plans run on the PyTorch testbed, tensor-parallel blocks too
    assert runners(tiny, dp.with_options(zero_stage=3)) == ["torchtitan", "moplace-apply"]
    assert "megatron" in runners(tiny, dp.with_options(zero_stage=1))  # no Megatron FSDP
    assert "moplace-apply" in runners(tiny, baseline("tensor-parallel", tiny, 8))
    # but for a batch that does not cut into the micro-batches
    odd_batch = dp.with_options(micro_batches=tiny.metadata["source"]["batch_size"] * 2)
    assert "moplace-apply" not in runners(tiny, odd_batch)
    some = regular_plan(tiny, Degrees(8, 1, "data", 1, "1f1b", "none", 0))
    heads = DegreeSpace(tiny, 8, "torchtitan").recompute_heads["full"][:3]
    # a set of groups: no flag names it
    assert runners(tiny, some.with_recompute(heads)) == ["moplace-apply"]
    # a GPipe pipeline: torchtitan only; an uneven one (3 layers and 1): neither
    gpipe = regular_plan(tiny, Degrees(4, 2, "data", 4, "gpipe", "none", 0))
    assert runners(tiny, gpipe) == ["torchtitan", "moplace-apply"]
    assert "gpipe" in misfit(tiny, plan_shape(tiny, gpipe), "megatron")[0]
    odd = regular_plan(tiny, Degrees(4, 4, "data", 1, "1f1b", "none", 0))
    stage = np.asarray(odd.placement)
    placement = np.where(stage == 3, 2, stage)  # the last stage merged into the third
    uneven = odd.derive(placement=placement)
    assert "unequal" in " ".join(misfit(tiny, plan_shape(tiny, uneven), "torchtitan"))


@pytest.mark.parametrize("framework", ["torchtitan", "megatron"])
def test_every_plan_of_a_space_runs_and_exports(tiny, framework):
    space = DegreeSpace(tiny, 8, framework)
    plans = space.all()
    assert len(plans) > 50 and len(set(plans)) == len(plans)
    assert any(d.pp > 1 for d in plans) and any(d.mode == "tensor" for d in plans)
    for d in plans[::3]:
        x = space.encode_degrees(d)
        assert space.degrees(x) == d
        s = space.decode(x)
        shape = plan_shape(tiny, s)
        assert shape.regular and shape.pp == d.pp and not misfit(tiny, shape, framework), d
        doc = plan_document(tiny, s, shape, [f"gpu{i}" for i in range(8)])
        assert doc[framework] is not None and framework in doc["runs"]
        assert space.encode(s).tolist() == x.tolist()
    rng = np.random.default_rng(0)
    for x in space.sample(40, rng):  # any genome decodes to a plan of the space
        assert space.degrees(x) in set(plans)


def test_the_space_seeds_stay_in_it(tiny):
    from searchers.degrees import space_seeds

    for framework in ("torchtitan", "megatron"):
        space = DegreeSpace(tiny, 8, framework)
        seeds = space_seeds(space)
        assert seeds and all(d in set(space.all()) for _, d in seeds)
        assert ("FSDP" in {label for label, _ in seeds}) == (framework == "torchtitan")


def test_runs_filter(capsys, tmp_path):
    front = tmp_path / "s" / "front.json"
    code, _, err = run(capsys, "search", TINY, "--cluster", "8xH100-80GB-NVLink", "--searcher",
                       "nsga2", "--budget", 60, "--out", front.parent, "--no-mlflow", "--quiet")
    assert code == 0, err
    data = json.loads(front.read_text())
    runs = [p["runs"] for p in data["points"]]
    assert any("torchtitan" in r for r in runs) and any("torchtitan" not in r for r in runs)
    code, out, err = run(capsys, "show", front, "--where", "runs=torchtitan", "--json")
    assert code == 0, err
    left = json.loads(out)["left"]
    assert left == [k for k, r in enumerate(runs) if "torchtitan" in r]
    code, out, err = run(capsys, "show", front, "--where", "runs=deepspeed")
    assert code == 2 and err.count("\n") == 1 and "not a runner" in err
    code, out, err = run(capsys, "show", front)
    assert code == 0 and "runs" in out.splitlines()[1] and "titan" in out
    # a front written before runners were recorded still loads; runs= says why it cannot
    for p in data["points"]:
        p.pop("runs")
    front.write_text(json.dumps(data))
    code, out, err = run(capsys, "show", front)
    assert code == 0 and "runs" not in out.splitlines()[1]
    code, out, err = run(capsys, "show", front, "--where", "runs=megatron")
    assert code == 2 and "records no runners" in err


def test_irregular_exports_list_disjoint_runs_in_data_flow_order():
    """The front point that listed `0: layers 0-40 (38)` and then `1: layers 34-34 (1)`:
    data parallel with two groups placed alone on one device."""
    vgg = moplace.load_graph("pipedream:vgg16")
    dp = baseline("data-parallel", vgg, 4)
    from moplace.core.baselines import group_order

    order = group_order(vgg)
    placement = np.array(dp.placement)
    splits = dict(dp.splits)
    for g in order[[19, 33]].tolist():
        for op in vgg.groups[g]:
            splits.pop(op, None)
            placement[op] = 2
    plan = moplace.Strategy(placement, dp.priority, splits, **dp.options)
    shape = plan_shape(vgg, plan)
    assert not shape.regular
    doc = plan_document(vgg, plan, shape, [f"gpu{i}" for i in range(4)])
    spans = [tuple(s["groups"]) for s in doc["stages"]]
    assert spans[0][0] == 1 and spans[-1][1] == doc["groups"] == len(order)
    assert all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:]))  # disjoint, in order
    assert [s["group_count"] for s in doc["stages"]] == [b - a + 1 for a, b in spans]
    assert len(spans) == 5 and spans[1] == (20, 20) and spans[3] == (34, 34)
    for s, (a, b) in zip(doc["stages"], spans):  # names of the first ops of those groups
        assert s["first_op"] == vgg.ops[vgg.groups[order[a - 1]][0]].name
        assert s["last_op"] == vgg.ops[vgg.groups[order[b - 1]][0]].name
    from moplace.io.export import plan_text

    assert "  1: groups 20-20 (1), node20 .. node20" in plan_text(doc, title="t")


def _torchtitan_available() -> bool:
    return (importlib.util.find_spec("torchtitan") is not None
            and importlib.util.find_spec("tyro") is not None)


def _load_in_torchtitan(texts, tmp_path) -> list:
    """Each TOML text of ``texts`` parsed by torchtitan 0.2.2's ``ConfigManager``: its config
    package loaded without torchtitan's ``__init__`` (which imports its models, and triton),
    the modules taken out again afterwards."""
    spec = importlib.util.find_spec("torchtitan")
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "torchtitan"}
    stub = types.ModuleType("torchtitan")
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules["torchtitan"] = stub
    try:
        from torchtitan.config import ConfigManager

        jobs = []
        for k, text in enumerate(texts):
            path = tmp_path / f"p{k}.toml"
            path.write_text(text)
            jobs.append(ConfigManager().parse_args(["--job.config_file", str(path)]))
        return jobs
    finally:
        for k in [k for k in sys.modules if k.split(".")[0] == "torchtitan"]:
            del sys.modules[k]
        sys.modules.update(saved)


def _torchtitan_front(capsys, graph, out, budget) -> tuple[Path, list]:
    """A ``--space torchtitan`` search of ``graph`` on 8xH100 into ``out``: its front.json
    and each point's export (`moplace.cli.export.export_point`), every one on torchtitan."""
    code, _, err = run(capsys, "search", graph, "--cluster", "8xH100-80GB-NVLink", "--searcher",
                       "nsga2", "--space", "torchtitan", "--budget", budget, "--out", out,
                       "--no-mlflow", "--quiet")
    assert code == 0, err
    from moplace.cli.export import export_point

    front = out / "front.json"
    data = json.loads(front.read_text())
    assert data["space"] == "torchtitan" and data["points"]
    docs = [export_point(str(front), k)[0] for k in range(len(data["points"]))]
    assert all("torchtitan" in doc["runs"] and doc["torchtitan"] for doc in docs)
    return front, docs


def _read_by_torchtitan(docs, tmp_path) -> None:
    """Each plan of ``docs`` (its torchtitan TOML) read by torchtitan's ConfigManager, as the
    degrees, batch sizes and activation checkpointing it states; a skip where torchtitan is
    not installed."""
    if not _torchtitan_available():
        pytest.skip("torchtitan 0.2.2 and tyro are not installed: the exports were written, "
                    "not read by torchtitan (pip install --no-deps torchtitan==0.2.2 tyro)")
    from moplace.cli.export import render

    jobs = _load_in_torchtitan([render(doc, "torchtitan", "") for doc in docs], tmp_path)
    for job, doc in zip(jobs, docs):
        par, tables = job.parallelism, doc["torchtitan"]["tables"]
        assert (par.pipeline_parallel_degree, par.tensor_parallel_degree) == (
            doc["degrees"]["pipeline"], doc["degrees"]["tensor"])
        assert (par.data_parallel_replicate_degree * par.data_parallel_shard_degree
                == doc["degrees"]["data"])
        assert job.activation_checkpoint.mode == tables["activation_checkpoint"]["mode"]
        if "training" in tables:
            assert job.training.local_batch_size == tables["training"]["local_batch_size"]
            assert job.training.global_batch_size == doc["batch_size"]["global"]


@pytest.mark.slow
def test_a_torchtitan_front_exports_and_torchtitan_reads_each(capsys, tmp_path):
    front, docs = _torchtitan_front(capsys, TINY, tmp_path / "tt", 40)
    from moplace.cli.export import render

    code, toml, err = run(capsys, "export", front, "--point", 0, "--format", "torchtitan")
    assert code == 0, err
    assert toml == render(docs[0], "torchtitan", "")  # the command writes what the test reads
    code, _, err = run(capsys, "search", TINY, "--cluster", "8xH100-80GB-NVLink", "--searcher",
                       "mcmc", "--space", "megatron", "--out", tmp_path / "m", "--no-mlflow")
    assert code == 2 and "nsga2 or random" in err and err.count("\n") == 1
    _read_by_torchtitan(docs, tmp_path)


def test_show_against_says_what_the_other_front_buys(capsys, tmp_path):
    for space, out in (("torchtitan", "a"), ("any", "b")):
        code, _, err = run(capsys, "search", TINY, "--cluster", "8xH100-80GB-NVLink",
                           "--searcher", "random", "--space", space, "--budget", 25, "--out",
                           tmp_path / out, "--no-mlflow", "--quiet")
        assert code == 0, err
    code, out, err = run(capsys, "show", tmp_path / "a" / "front.json", "--against",
                         tmp_path / "b" / "front.json")
    assert code == 0, err
    assert "the best unconstrained plan" in out and "the best torchtitan one" in out
    assert len(out.splitlines()) == 3


def test_virtual_stages_export_as_each_framework_names_them(tiny):
    """Interleaved 1F1B over 2 stages of 2 virtual stages (the tiny Llama's 4 layers, one
    each): Megatron's --num-layers-per-virtual-pipeline-stage, torchtitan's Interleaved1F1B
    with a layer a stage; zero-bubble is torchtitan's only; one stage per device under an
    interleaved schedule, or virtual stages under 1F1B, run on neither."""
    inter = plan_shape(tiny, regular_plan(tiny, Degrees(4, 2, "data", 4, "interleaved", "none",
                                                        0, 2)))
    assert inter.regular and (inter.pp, inter.vp, len(inter.chunks)) == (2, 2, 4)
    args = megatron_flags(inter, tiny)["args"]
    assert args[args.index("--num-layers-per-virtual-pipeline-stage") + 1] == "1"
    par = torchtitan_toml(inter, tiny)["tables"]["parallelism"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_layers_per_stage"] == 1
    zb = plan_shape(tiny, regular_plan(tiny, Degrees(4, 2, "data", 4, "zero-bubble", "none",
                                                     0, 2)))
    assert misfit(tiny, zb, "megatron") == ("megatron runs no zero-bubble pipeline schedule",)
    assert torchtitan_toml(zb, tiny)["tables"]["parallelism"][
        "pipeline_parallel_schedule"] == "InterleavedZeroBubble"
    one = plan_shape(tiny, regular_plan(tiny, Degrees(4, 2, "data", 4, "zero-bubble", "none",
                                                      0)))
    assert "one stage per device" in misfit(tiny, one, "torchtitan")[0]
    v_1f1b = plan_shape(tiny, regular_plan(tiny, Degrees(4, 2, "data", 4, "1f1b", "none", 0,
                                                         2)))
    assert "need the interleaved or zero-bubble schedule" in misfit(tiny, v_1f1b, "megatron")[0]


def test_torchtitan_toml_follows_the_rule(tiny):
    s = regular_plan(tiny, Degrees(8, 2, "data", 2, "1f1b", "full", 1))
    tables = torchtitan_toml(plan_shape(tiny, s), tiny)["tables"]
    assert tables["parallelism"]["pipeline_parallel_layers_per_stage"] == 2
    assert tables["parallelism"]["fsdp_reshard_after_forward"] == "never"
    assert tables["training"] == {"local_batch_size": 2, "global_batch_size": 8}
    acc = regular_plan(tiny, Degrees(4, 1, "data", 2, "1f1b", "none", 0))
    assert torchtitan_toml(plan_shape(tiny, acc), tiny)["tables"]["training"] == {
        "local_batch_size": 1, "global_batch_size": 8}  # 2 micro-batches: accumulation


@pytest.mark.slow
def test_llama_3_8b_torchtitan_front_exports_and_torchtitan_reads_each(capsys, tmp_path):
    """The issue's figure: ``search --space torchtitan`` on hf:llama-3-8b (8 x 4096 tokens,
    bf16, calibrated H100 estimates) over 8xH100: every front point runs on torchtitan, and
    torchtitan's ConfigManager reads each export (21 minutes here on 2 shared cores, most of
    it the profile and the search)."""
    graph = tmp_path / "llama8b.json"
    code, _, err = run(capsys, "profile", "hf:llama-3-8b", "--batch", 8, "--seq-len", 4096,
                       "--dtype", "bf16", "--estimate", "H100", "-o", graph, "--quiet")
    assert code == 0, err
    _, docs = _torchtitan_front(capsys, graph, tmp_path / "tt", 60)
    assert len(docs) >= 5
    _read_by_torchtitan(docs, tmp_path)


@pytest.mark.slow
def test_megatron_core_config_classes_take_every_plan_of_the_megatron_space(tiny):
    """megatron-core 0.16.1's TransformerConfig, DistributedDataParallelConfig and
    OptimizerConfig built from every fifth plan of the Megatron space (megatron-core installs
    with --no-deps; its import alone takes half a minute on 2 cores)."""
    pytest.importorskip("torch", reason="megatron-core needs torch")
    tc = pytest.importorskip("megatron.core.transformer.transformer_config",
                             reason="megatron-core 0.16.1 is not installed "
                                    "(pip install --no-deps megatron-core==0.16.1)")
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    import torch

    from moplace.io.export import megatron_flags

    space = DegreeSpace(tiny, 8, "megatron")
    for d in space.all()[::5]:
        flags = megatron_flags(plan_shape(tiny, space.decode(space.encode_degrees(d))), tiny)
        config = flags["config"]
        made = tc.TransformerConfig(num_layers=4, hidden_size=64, num_attention_heads=4,
                                    **({"pipeline_dtype": torch.bfloat16} if d.pp > 1 else {}),
                                    **config)
        assert made.pipeline_model_parallel_size == d.pp
        assert made.tensor_model_parallel_size == (d.width if d.mode == "tensor" else 1)
        assert made.recompute_granularity == (None if d.recompute == "none" else d.recompute)
        ddp = DistributedDataParallelConfig(**flags["ddp"])
        opt = OptimizerConfig(**flags["ddp"])
        assert ddp.use_distributed_optimizer == opt.use_distributed_optimizer == (d.zero == 1)


def test_a_pipeline_of_a_joint_graph_lists_its_stages_by_layer(tiny):
    s = regular_plan(tiny, Degrees(8, 2, "data", 1, "1f1b", "none", 0))
    stages = plan_document(tiny, s, plan_shape(tiny, s), [f"gpu{i}" for i in range(8)])["stages"]
    assert [st["layers"] for st in stages] == [[1, 2], [3, 4]]
    assert all(st["groups"] is None for st in stages)  # each stage's backward comes last
    assert sum(st["group_count"] for st in stages) == tiny.arrays.n_groups


def test_a_damaged_runs_field_is_named():
    from moplace.errors import FormatError
    from moplace.io.frontcheck import check_front

    point = {"runtime_s": 1.0, "feasible": True, "violation_bytes": 0.0}
    check_front({"objectives": ["runtime"], "points": [point]}, "f.json")  # none: an old front
    for runs in (["deepspeed"], "torchtitan"):
        with pytest.raises(FormatError, match=r"points\[0\]\.runs"):
            check_front({"objectives": ["runtime"], "points": [{**point, "runs": runs}]},
                        "f.json")


@pytest.mark.parametrize("method", ["nsga2", "random"])
def test_a_space_search_is_the_same_for_the_same_seed(tiny, method):
    from searchers.degrees import SpaceSearcher

    cluster = moplace.load_cluster("8xH100-80GB-NVLink")
    fronts = []
    for _ in range(2):
        result = moplace.search(moplace.Problem(tiny, cluster),
                                SpaceSearcher(space="megatron", method=method, pop_size=8),
                                budget=30, seed=3)
        assert all("megatron" in runners(tiny, p.strategy) for p in result.front)
        fronts.append([p.strategy.simulation_key for p in result.front])
    assert fronts[0] == fronts[1] and fronts[0]
