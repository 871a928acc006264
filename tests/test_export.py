"""`moplace export`: a front point as the plan a user trains with (moplace.core.planshape,
moplace.io.export, moplace.cli.export), on fronts searched on the bundled VGG-16.

The Megatron and torchtitan checks load the exported values with those projects' own
configuration classes; they skip when the projects are not installed. They install, without
pulling another torch, with:

    pip install megatron-core==0.16.1 torchtitan==0.2.2     (the test extra; triton not)

(torchtitan 0.2.x reads a job-config TOML with ``--job.config_file``; 0.3 dropped TOML files.)
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from moplace.cli import main
from moplace.core.baselines import group_order, layer_split
from moplace.core.degrees import Degrees, regular_plan
from moplace.core.graph import Op, OpGraph
from moplace.core.planshape import plan_shape
from moplace.core.recompute import recomputable_heads
from moplace.core.strategy import Split, Strategy, spread_groups
from moplace.io import load_graph
from moplace.io.export import megatron_flags, plan_document, torchtitan_toml

GRAPH, CLUSTER = "pipedream:vgg16", "4xV100-NVLink"
#: a 4-layer Llama traced at batch 8 (its layers named: pipelines of equal stages run)
TINY = Path(__file__).parent / "data" / "tiny-llama.json"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def fronts(tmp_path_factory):
    """front.json of data-parallel, pipedream and random searches of VGG-16 on 4 V100s."""
    folder = tmp_path_factory.mktemp("fronts")
    made = {}
    for searcher, budget in (("data-parallel", 5), ("pipedream", 40), ("random", 40)):
        out = folder / searcher
        code = main(["search", GRAPH, "--cluster", CLUSTER, "--searcher", searcher, "--budget",
                     str(budget), "--out", str(out), "--no-mlflow", "--quiet", "--figures",
                     "off"])
        assert code == 0
        made[searcher] = out / "front.json"
    return made


@pytest.fixture(scope="module")
def vgg():
    return load_graph(GRAPH)


@pytest.fixture(scope="module")
def tiny():
    return load_graph(str(TINY))


def two_by_two(graph, **options) -> Strategy:
    """The first half of the layers data-parallel on devices 0-1, the rest on 2-3."""
    order = group_order(graph).tolist()
    half = len(order) // 2
    device = np.zeros(len(order), np.int64)
    splits = {}
    for k, g in enumerate(order):
        devs = (0, 1) if k < half else (2, 3)
        device[g] = devs[0]
        splits[g] = Split("batch", devs)
    return spread_groups(graph, device, splits).with_options(**options)


def test_data_parallel_front_exports_dp4_flags(capsys, fronts, tmp_path):
    code, out, err = run(capsys, "export", fronts["data-parallel"], "--point", 0, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["regular"] and doc["degrees"] == {"data": 4, "tensor": 1, "pipeline": 1,
                                                     "virtual": 1, "expert": 1, "context": 1}
    assert doc["megatron"]["args"][:4] == ["--tensor-model-parallel-size", "1",
                                          "--pipeline-model-parallel-size", "1"]
    assert "--global-batch-size" in doc["megatron"]["args"]  # VGG-16's profile names batch 128
    assert doc["torchtitan"]["tables"]["parallelism"]["data_parallel_replicate_degree"] == 4
    assert len(doc["placement"]) == len(load_graph(GRAPH).ops)
    code, out, err = run(capsys, "export", fronts["data-parallel"], "--point", 0)
    assert code == 0 and "shape: data 4 x tensor 1 x pipeline 1" in out
    assert "megatron: --tensor-model-parallel-size 1" in out
    toml = tmp_path / "dp.toml"
    code, out, err = run(capsys, "export", fronts["data-parallel"], "-o", toml)
    assert code == 0 and f"wrote {toml} (torchtitan)" in out
    assert tomllib.loads(toml.read_text())["parallelism"]["data_parallel_replicate_degree"] == 4


def test_pipedream_front_exports_every_point(capsys, fronts, tmp_path):
    front = json.loads(fronts["pipedream"].read_text())
    for k in range(len(front["points"])):
        path = tmp_path / f"p{k}.json"
        code, _, err = run(capsys, "export", fronts["pipedream"], "--point", k, "-o", path)
        assert code == 0, err
        doc = json.loads(path.read_text())
        strategy = front["points"][k]["strategy"]
        assert doc["micro_batches"] == strategy["options"]["micro_batches"]
        assert doc["placement"] == strategy["placement"]  # device names, as the front
        if doc["regular"]:
            d = doc["degrees"]
            assert d["data"] * d["tensor"] * d["pipeline"] == len(doc["devices"])
        else:  # uneven stages (3 replicas and 1, say): the reason and no flags
            assert doc["megatron"] is None and doc["why_no_flags"]
            assert len(doc["stages"]) >= 1 and doc["irregular"]


def test_random_points_that_are_irregular_say_why_and_refuse_flags(capsys, fronts, tmp_path):
    front = json.loads(fronts["random"].read_text())
    irregular = 0
    for k in range(len(front["points"])):
        code, out, err = run(capsys, "export", fronts["random"], "--point", k, "--json")
        assert code == 0, err
        doc = json.loads(out)
        if not doc["regular"]:
            irregular += 1
            code, out, err = run(capsys, "export", fronts["random"], "--point", k,
                                 "--format", "megatron")
            assert code == 2 and not out and err.count("\n") == 1
            assert "has no megatron flags" in err and "Traceback" not in err
    assert irregular  # random plans scatter layers over overlapping device sets


def test_regular_pipeline_two_by_two(vgg, tiny):
    strategy = two_by_two(vgg, micro_batches=4, schedule=1, zero_stage=1)
    shape = plan_shape(vgg, strategy.with_recompute(recomputable_heads(vgg)))
    assert (shape.pp, shape.dp, shape.tp) == (2, 2, 1) and shape.recompute_mode == "full"
    assert shape.stages[0].first == vgg.ops[vgg.groups[group_order(vgg)[0]][0]].name
    # a graph that names no layers cannot say its stages are equal: no framework's flags
    assert megatron_flags(shape, vgg) is None and torchtitan_toml(shape, vgg) is None
    doc = plan_document(vgg, strategy, shape, [f"gpu{i}" for i in range(4)])
    assert "layers" in doc["why_not"]["torchtitan"][0] and doc["runs"] == []
    plan = regular_plan(tiny, Degrees(4, 2, "data", 4, "gpipe", "full", 1))
    shape = plan_shape(tiny, plan)
    assert (shape.pp, shape.dp, shape.tp) == (2, 2, 1) and shape.recompute_mode == "full"
    assert megatron_flags(shape, tiny) is None  # Megatron runs no GPipe
    tt = torchtitan_toml(shape, tiny)["tables"]
    assert tt["parallelism"]["pipeline_parallel_schedule"] == "GPipe"
    assert tt["parallelism"]["pipeline_parallel_layers_per_stage"] == 2
    assert tt["activation_checkpoint"]["mode"] == "full"
    shape = plan_shape(tiny, plan.with_options(schedule=0))
    flags = megatron_flags(shape, tiny)
    assert flags["args"][flags["args"].index("--pipeline-model-parallel-size") + 1] == "2"
    assert "--use-distributed-optimizer" in flags["args"]
    assert flags["args"][flags["args"].index("--micro-batch-size") + 1] == str(8 // 2 // 4)


def test_layer_split_is_a_four_stage_pipeline(vgg):
    shape = plan_shape(vgg, layer_split(vgg, 4))
    assert (shape.pp, shape.dp, shape.tp) == (4, 1, 1)
    assert [s.devices for s in shape.stages] == [(0,), (1,), (2,), (3,)]
    lasts = [s.last_group for s in shape.stages]
    firsts = [s.first_group for s in shape.stages]
    assert firsts[0] == 0 and lasts[-1] == shape.groups - 1
    assert all(b == a + 1 for a, b in zip(lasts, firsts[1:]))  # contiguous stages


def test_channel_splits_give_tensor_parallel_degree():
    ops = [Op(f"l{i}", compute={"V100": 1e-3}, colocation=f"l{i}", role="forward",
              splittable=("batch", "channel"), output_bytes=8) for i in range(3)]
    graph = OpGraph(ops, [(0, 1, 8), (1, 2, 8)], name="chain")
    split = Split("channel", (0, 1))
    strategy = Strategy(np.zeros(3, np.int64), splits={i: split for i in range(3)})
    shape = plan_shape(graph, strategy)
    assert (shape.pp, shape.dp, shape.tp) == (1, 1, 2)
    mixed = Strategy(np.zeros(3, np.int64), splits={0: split, 1: Split("batch", (0, 1)),
                                                    2: split})
    assert "channel" in plan_shape(graph, mixed).why_text()


def test_uneven_stages_name_their_replicas(vgg):
    order = group_order(vgg).tolist()
    device = np.zeros(len(order), np.int64)
    splits = {}
    for k, g in enumerate(order):
        if k < 10:
            splits[g] = Split("batch", (0, 1, 2))
        else:
            device[g] = 3
    shape = plan_shape(vgg, spread_groups(vgg, device, splits))
    assert not shape.regular and "stage 0 has 3 replicas, stage 1 has 1 replica" in shape.why[0]
    doc = plan_document(vgg, spread_groups(vgg, device, splits), shape,
                        [f"gpu{i}" for i in range(4)])
    assert doc["megatron"] is None and doc["torchtitan"] is None and doc["degrees"] is None


@pytest.mark.parametrize("argv, message", [
    (["--point", "999"], "out of range"),
    ([], "choose one with --point"),
])
def test_bad_points_are_one_line(capsys, fronts, argv, message):
    code, out, err = run(capsys, "export", fronts["random"], *argv)
    assert code == 2 and message in err and err.count("\n") == 1


def test_not_a_front_and_existing_output_are_refused_before_work(capsys, tmp_path, fronts):
    other = tmp_path / "other.json"
    other.write_text('{"format": "moplace-strategy"}')
    code, _, err = run(capsys, "export", other)
    assert code == 2 and "not a front.json" in err
    taken = tmp_path / "taken.toml"
    taken.write_text("keep")
    code, _, err = run(capsys, "export", fronts["random"], "--point", "999", "-o", taken)
    assert code == 2 and "exists" in err and taken.read_text() == "keep"


def test_megatron_core_transformer_config_takes_the_exported_values(tiny):
    pytest.importorskip("torch", reason="megatron-core needs torch")
    tc = pytest.importorskip("megatron.core.transformer.transformer_config",
                             reason="megatron-core is not installed (see the module docstring)")
    import torch

    for d in (Degrees(4, 2, "data", 4, "1f1b", "full", 0), Degrees(4, 4, "data", 1, "1f1b",
                                                                   "none", 0),
              Degrees(8, 2, "data", 1, "1f1b", "none", 1),
              Degrees(4, 2, "data", 4, "interleaved", "none", 0, 2)):
        flags = megatron_flags(plan_shape(tiny, regular_plan(tiny, d)), tiny)
        config = flags["config"]
        pp = config["pipeline_model_parallel_size"]
        made = tc.TransformerConfig(num_layers=4 * pp, hidden_size=64, num_attention_heads=4,
                                    **({"pipeline_dtype": torch.float32} if pp > 1 else {}),
                                    **config)
        assert made.pipeline_model_parallel_size == pp
        assert made.tensor_model_parallel_size == config["tensor_model_parallel_size"]
        assert made.recompute_granularity == config.get("recompute_granularity")
        assert made.virtual_pipeline_model_parallel_size == config.get(
            "virtual_pipeline_model_parallel_size")


def _torchtitan_config_manager():
    """torchtitan's own ConfigManager class, its package's ``__init__`` not run: torchtitan
    0.2's ``__init__`` registers quantization kernels written in triton, whose bundled LLVM
    aborts any process that also loaded TensorFlow's (the suite's workers do), so triton is
    not installed; the configuration modules need none of it."""
    import importlib
    import importlib.util
    import sys
    import types

    if "torchtitan" not in sys.modules:  # else made here already (find_spec would refuse it)
        spec = importlib.util.find_spec("torchtitan")
        if spec is None:
            pytest.skip("torchtitan is not installed (the test extra installs it)")
        package = types.ModuleType("torchtitan")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["torchtitan"] = package
    return importlib.import_module("torchtitan.config.manager").ConfigManager


def test_torchtitan_config_manager_reads_the_exported_toml(tiny, tmp_path):
    ConfigManager = _torchtitan_config_manager()
    for k, d in enumerate((Degrees(4, 2, "data", 4, "gpipe", "none", 0),
                           Degrees(4, 4, "data", 8, "1f1b", "none", 0),
                           Degrees(8, 2, "data", 1, "1f1b", "none", 3))):
        shape = plan_shape(tiny, regular_plan(tiny, d))
        path = tmp_path / f"job{k}.toml"
        path.write_text(torchtitan_toml(shape, tiny)["toml"])
        config = ConfigManager().parse_args(["--job.config_file", str(path)])
        par = config.parallelism
        assert (par.pipeline_parallel_degree, par.tensor_parallel_degree) == (shape.pp, shape.tp)
        assert par.data_parallel_replicate_degree * par.data_parallel_shard_degree == shape.dp
        assert par.pipeline_parallel_schedule == {"1f1b": "1F1B", "gpipe": "GPipe"}[
            shape.schedule]
        assert config.training.local_batch_size == 8 // shape.dp
        assert config.training.local_batch_size // par.pipeline_parallel_microbatch_size \
            == shape.micro_batches
        assert par.pipeline_parallel_layers_per_stage * shape.pp == 4
        assert par.fsdp_reshard_after_forward == ("always" if d.zero == 3 else "default")


def test_export_writes_nothing_heavy_at_import():
    import subprocess
    import sys

    code = ("import sys, moplace.core.planshape, moplace.io.export, moplace.cli.export; "
            "print(any(m in sys.modules for m in ('torch', 'tensorflow', 'matplotlib')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.strip() == "False", done.stderr


def test_fp8_plans_export_as_each_framework_names_them(tiny, tmp_path):
    """FP8 all / inner: Megatron's --fp8-format hybrid (with --first-last-layers-bf16),
    torchtitan's float8 linear converter skipping the output head (and the first and last
    layers); both frameworks' own configuration classes take them."""
    ConfigManager = _torchtitan_config_manager()
    s = regular_plan(tiny, Degrees(4, 2, "data", 4, "interleaved", "none", 0, 2, "inner"))
    assert s.fp8_mode == "inner"
    doc = plan_document(tiny, s, plan_shape(tiny, s), [f"gpu{i}" for i in range(4)])
    args = doc["megatron"]["args"]
    assert args[args.index("--fp8-format") + 1] == "hybrid" and "--first-last-layers-bf16" in args
    path = tmp_path / "fp8.toml"
    path.write_text(doc["torchtitan"]["toml"])
    config = ConfigManager().parse_args(["--job.config_file", str(path)])
    assert config.model.converters == ["quantize.linear.float8"]
    count = tiny.metadata["layers"]["count"]
    assert config.quantize.linear.float8.filter_fqns == ["output", "layers.0.",
                                                         f"layers.{count - 1}."]
    assert doc["fp8"] == "inner" and "moplace-apply" not in doc["runs"]
    pytest.importorskip("torch", reason="megatron-core needs torch")
    tc = pytest.importorskip("megatron.core.transformer.transformer_config",
                             reason="megatron-core is not installed")
    import torch

    config = doc["megatron"]["config"]
    made = tc.TransformerConfig(num_layers=8, hidden_size=64, num_attention_heads=4,
                                pipeline_dtype=torch.float32, **config)
    assert made.fp8 == "hybrid" and made.first_last_layers_bf16
