"""The calibrated cost model (issue 47 part 3): per-op cost features recorded at trace time,
a calibration fitted on kernels measured on an H200 (the shared GPT-2 steps, joined with
their features once by ``experiments/calibration_join.py`` into ``tests/data/calibration``),
the shipped H200 and derived H100 calibrations, ``--estimate`` on them, and
``moplace calibrate``."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from moplace.cli import main
from moplace.costs import calibfit
from moplace.costs.calibfit import fit, fit_report, read_joined
from moplace.costs.calibration import (H100_FROM_H200, SHIPPED, Calibration, from_dict,
                                       load_calibration, shipped)
from moplace.costs.devicespecs import require_spec
from moplace.errors import FormatError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "calibration"
SMALL, FP32, MEDIUM = "gpt2-b8-s1024-bf16", "gpt2-b4-s1024-fp32", "gpt2medium-b4-s1024-bf16"
KERNELS = json.loads((DATA / "kernels-h200.json").read_text())


def joined(case):
    return read_joined(DATA / f"{case}.json.gz")


def crossval_module():
    spec = importlib.util.spec_from_file_location(
        "calibration_crossval", ROOT / "experiments" / "calibration_crossval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_joined_data_is_every_timed_op_of_the_shared_steps():
    for case, ops in ((SMALL, 993), (FP32, 991), (MEDIUM, 1953)):
        what, samples = joined(case)
        assert len(samples) == ops and what["missing"] == [] and what["attention"] == "eager"
        classes = {f["cls"] for _, _, f in samples}
        assert classes == {"matmul", "memory", "optimizer"}  # eager: no fused attention
        # the optimizer's step as measured, shared by the update ops
        updates = sum(s for _, s, f in samples if f["cls"] == "optimizer")
        assert updates == pytest.approx(what["real"]["optimizer_s"], rel=0.2)


def test_a_fit_on_all_three_steps_reproduces_their_measured_times_per_class():
    sets = [joined(c)[1] for c in (SMALL, FP32, MEDIUM)]
    cal = fit(sets, "H200", "H200", KERNELS)
    report = fit_report(cal, [s for x in sets for s in x], require_spec("H200"))
    bounds = {"matmul": 0.1, "memory:elementwise": 0.1, "memory:softmax": 0.15,
              "optimizer": 0.1, "memory:copy": 0.2, "memory:norm": 0.2, "memory:reduce": 0.2}
    for cls, tol in bounds.items():
        after, before = report[cls]["after"], report[cls]["before"]
        assert abs(after["sum"] - 1) < tol, (cls, after)
        assert abs(after["median"] - 1) < tol + 0.05, (cls, after)
        # no worse than the roofline, and the launch-bound classes far better
        assert abs(math.log(after["median"])) <= abs(math.log(before["median"])) + 0.02, cls
    assert report["memory:softmax"]["before"]["sum"] < 0.7  # what the roofline got wrong
    assert report["optimizer"]["before"]["sum"] < 0.5


def test_fitted_on_two_steps_it_predicts_gpt2_medium_within_15_percent():
    # one device runs the ops one after another: the simulator's one-device step is their
    # sum (experiments/calibration_crossval.py simulates it on the shared graphs)
    cal = fit([joined(SMALL)[1], joined(FP32)[1]], "H200", "H200", KERNELS)
    what, samples = joined(MEDIUM)
    predicted = sum(cal.seconds(f) for _, _, f in samples)
    measured = sum(s for _, s, _ in samples)
    assert abs(predicted / what["real"]["step_s"] - 1) < 0.15
    assert abs(predicted / measured - 1) < 0.15
    roofline = sum(calibfit.roofline(f, require_spec("H200")) for _, _, f in samples)
    assert abs(predicted / measured - 1) < abs(roofline / measured - 1)


def test_the_shipped_h200_calibration_is_the_fit_on_the_shared_data():
    refit = crossval_module().shipped_fit()
    shipped_h200 = load_calibration(SHIPPED / "H200.json")
    assert json.loads(json.dumps(refit.as_dict())) == json.loads(
        (SHIPPED / "H200.json").read_text())
    assert shipped_h200.derived is None and shipped_h200.ops_measured == 993 + 991 + 1953
    assert shipped_h200.note() == "calibrated estimate (3937 ops measured on H200)"
    assert shipped_h200.split_overhead_s is None  # no split run measured yet


def test_the_h100_calibration_is_the_h200_one_with_its_bandwidth_scaled():
    h200, h100 = shipped("H200"), shipped("H100")
    assert h100.derived == {"from": "H200", "bandwidth_scale": H100_FROM_H200,
                            "compute_scale": 1.0}
    assert h100.note().startswith("calibrated estimate derived from H200's (3937 ops measured "
                                  "on H200")
    gemm = {"cls": "matmul", "m": 8192, "n": 3072, "k": 768, "batch": 1, "dtype": "bfloat16"}
    assert h100.seconds(gemm) == h200.seconds(gemm)  # same compute
    add = {"cls": "memory", "sub": "elementwise", "op": "add", "dtype": "bfloat16",
           "bytes": 3 * 2**29}
    assert h100.seconds(add) / h200.seconds(add) == pytest.approx(4.8 / 3.35)
    update = {"cls": "optimizer", "op": "adam_update", "numel": 10**6, "total": 10**8,
              "element_size": 2}
    assert h100.seconds(update) > h200.seconds(update)


@pytest.mark.parametrize("features", [
    {"cls": "matmul", "m": 1, "n": 1, "k": 1, "batch": 1, "dtype": "float16"},
    {"cls": "matmul", "m": 10**6, "n": 10**5, "k": 10**5, "batch": 64, "dtype": "float64"},
    {"cls": "attention", "bh": 96, "s_q": 1024, "s_kv": 1024, "d": 64, "causal": True,
     "bwd": True},
    {"cls": "memory", "sub": "norm", "op": "never_seen", "dtype": "float32", "bytes": 0},
    {"cls": "memory", "sub": "elementwise", "op": "add", "dtype": "bfloat16", "bytes": 2**40},
    {"cls": "optimizer", "op": "sgd_update", "numel": 1, "total": 1, "element_size": 4}])
def test_any_op_costs_a_finite_time_of_at_least_the_floor(features):
    cal = shipped("H200")
    seconds = cal.seconds(features)
    assert math.isfinite(seconds) and seconds > 0
    if features["cls"] != "optimizer":
        assert seconds >= cal.floor_s


def test_a_gemm_with_a_dimension_off_the_multiples_of_8_is_costed_as_the_measured_ones():
    # GPT-2's 50,257-word head ran at 95-148 TFLOP/s on the H200; 50,176 words would not
    h200 = shipped("H200")
    head = {"cls": "matmul", "m": 4096, "n": 50257, "k": 1024, "batch": 1, "dtype": "bfloat16"}
    rate = lambda f: 2 * f["m"] * f["n"] * f["k"] / h200.seconds(f) / 1e12  # noqa: E731
    assert 80 < rate(head) < 200
    assert rate({**head, "n": 50176}) > 400


def test_fused_attention_is_kept_from_twice_a_launch_not_twice_the_fastest_call():
    # the fastest SDPA call (GPT-2 small's 8 x 12 heads at 1,024 tokens) is 81 us, seven
    # launches: it is the kernel's time, and GPT-2's attention is read at it, not at 4,096
    # tokens' four times faster rate
    h200 = shipped("H200")
    gpt2 = {"cls": "attention", "bh": 96, "s_q": 1024, "s_kv": 1024, "d": 64, "causal": True}
    bench = next(a for a in KERNELS["sdpa_causal_bf16"] if (a["b"], a["heads"], a["s"]) ==
                 (8, 12, 1024))
    assert h200.seconds(gpt2) == pytest.approx(bench["fwd_s"], rel=1e-3)
    assert h200.seconds({**gpt2, "bwd": True}) == pytest.approx(
        bench["fwd_bwd_s"] - bench["fwd_s"], rel=1e-3)
    # a call within twice one launch (11.8 us) says the host's time, and is left out
    rows = [dict(bench, fwd_s=20e-6, fwd_bwd_s=60e-6, s=512)] + KERNELS["sdpa_causal_bf16"]
    cal = fit([joined(SMALL)[1]], "H200", "H200", {**KERNELS, "sdpa_causal_bf16": rows})
    assert all(p[1] != 9.0 for p in cal.attention["fwd"])  # log2 512: fwd under 23.6 us
    assert any(p[1] == 9.0 for p in cal.attention["bwd"])  # its backward, 40 us, stays


def test_a_dtype_not_measured_takes_another_ones_gemms_scaled_by_the_datasheet_peaks():
    h200 = shipped("H200")
    gemm = {"cls": "matmul", "m": 8192, "n": 3072, "k": 768, "batch": 1}
    bf16 = h200.seconds({**gemm, "dtype": "bfloat16"})
    assert h200.seconds({**gemm, "dtype": "float16"}) == bf16  # same tensor cores
    only_bf16 = Calibration(**{**h200.__dict__, "matmul": {"bfloat16": h200.matmul["bfloat16"]}})
    spec = require_spec("H200")
    assert only_bf16.seconds({**gemm, "dtype": "float32"}) == pytest.approx(
        bf16 * spec.peak("bfloat16") / spec.peak("float32"))
    attention = {"cls": "attention", "bh": 32, "s_q": 4096, "s_kv": 4096, "d": 128,
                 "causal": True, "bwd": False}
    assert h200.seconds({**attention, "dtype": "float32"}) == pytest.approx(  # SDPA: bf16 only
        h200.seconds({**attention, "dtype": "bfloat16"}) * spec.peak("bfloat16")
        / spec.peak("float32"))
    measured_fp32 = h200.seconds({**gemm, "dtype": "float32"})
    assert 0.5 < only_bf16.seconds({**gemm, "dtype": "float32"}) / measured_fp32 < 2


def test_a_calibration_file_is_strict_and_checked(tmp_path):
    good = json.loads((SHIPPED / "H200.json").read_text())
    assert isinstance(from_dict(good, "x"), Calibration)
    for change, word in [({"version": 2}, "version"), ({"floor_s": -1}, "floor_s"),
                         ({"extra": 1}, "extra"), ({"memory": {}}, "elementwise"),
                         ({"matmul": {"bfloat16": [[1, 2]]}}, "matmul.bfloat16"),
                         ({"derived": {"from": 3}}, "derived")]:
        with pytest.raises(FormatError, match=word):
            from_dict({**good, **change}, "cal.json")
    path = tmp_path / "nan.json"
    path.write_text((SHIPPED / "H200.json").read_text().replace('"split_overhead_s": null',
                                                                '"split_overhead_s": NaN'))
    with pytest.raises(FormatError, match="nan.json"):
        load_calibration(path)


TINY = """import torch

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.norm = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32)
        self.b = torch.nn.Linear(32, 10)

    def forward(self, x):
        h = self.norm(self.a(x))
        return self.b(h * torch.softmax(h, dim=-1))

def build(batch_size):
    x, y = torch.randn(batch_size, 16), torch.randint(0, 10, (batch_size,))
    model = Tiny()
    return model, torch.nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()), (x, y)
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny model's step (a linear, a layer norm, a softmax, a linear) traced with
    estimates on H200 (a calibration ships) and A100 (none)."""
    pytest.importorskip("torch")
    from moplace.torch.frontend import profile_torch_model

    path = tmp_path_factory.mktemp("tiny") / "tiny.py"
    path.write_text(TINY)
    return profile_torch_model(path, 4, ["H200", "A100"], cache=False).graph


def test_estimate_on_h200_is_calibrated_and_says_so(tiny):
    from moplace.core.cluster import Cluster
    from moplace.costs.origin import estimated_notes

    g = tiny
    features = g.metadata["cost_features"]
    cal = shipped("H200")
    assert g.metadata["estimated"]["H200"] == cal.note()
    assert g.metadata["estimated"]["A100"].startswith("roofline")
    timed = [op for op in g.ops if op.type not in ("Parameter", "Buffer", "Input", "Output")]
    assert timed and all(op.name in features for op in timed)
    for op in timed:
        assert op.compute["H200"] == cal.seconds(features[op.name])
    mm = [f for f in features.values() if f["cls"] == "matmul"]
    assert mm and all(f["flops"] == 2 * f["m"] * f["n"] * f["k"] * f["batch"] for f in mm)
    ups = [f for f in features.values() if f["cls"] == "optimizer"]
    assert ups and {f["total"] for f in ups} == {sum(f["numel"] for f in ups)}
    assert {"softmax", "norm"} <= {f.get("sub") for f in features.values()}
    notes = estimated_notes(g, Cluster.uniform(1, kind="H200"))
    assert notes and "calibrated estimate (3937 ops measured on H200)" in notes[0]


@pytest.fixture(scope="module")
def measured_graph(tiny, tmp_path_factory):
    """The tiny model's graph with its ops "measured" on the H200 in slot ``cpu`` (their
    calibrated times, 1.5 times over), as ``moplace profile --measure`` writes them."""
    from dataclasses import replace

    from moplace.core.graph import OpGraph
    from moplace.io import save_graph

    g = tiny
    ops = [replace(op, compute={**op.compute, "cpu": 1.5 * op.compute["H200"]}) for op in g.ops]
    g = OpGraph(ops, g.edges, name=g.name, metadata={**g.metadata, "measured": {"kind": "cpu"}})
    path = tmp_path_factory.mktemp("cal") / "measured.json"
    save_graph(g, str(path))
    return path


def test_calibrate_fits_a_file_from_measured_graphs_and_kernels(measured_graph, tmp_path, capsys):
    out = tmp_path / "H200.json"
    argv = ["calibrate", str(measured_graph), "--kind", "H200", "-o", str(out), "--kernels",
            str(DATA / "kernels-h200.json")]
    assert main(argv + ["--json"]) == 0
    result = json.loads(capsys.readouterr().out, parse_constant=lambda c: 1 / 0)
    cal = load_calibration(out)
    assert result["ops_measured"] == cal.ops_measured == result["graphs"][0]["ops"] > 0
    assert result["graphs"][0]["slot"] == "cpu" and cal.note() == result["note"]
    assert result["fit"]["matmul"]["after"]["median"] == pytest.approx(1.0, abs=0.3)
    assert main(argv) == 2  # the file exists now
    assert main(argv + ["--force"]) == 0
    text = capsys.readouterr().out
    assert "matmul" in text and "roofline" in text and f"wrote {out}" in text


def test_calibrate_traces_a_graph_without_features_again_and_joins_it_by_name(
        measured_graph, tmp_path, capsys):
    data = json.loads(measured_graph.read_text())
    data["metadata"].pop("cost_features")  # as the shared H200 graphs: a source, no features
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    runs = []
    for graph in (measured_graph, bare):
        out = tmp_path / f"{graph.stem}.cal.json"
        assert main(["calibrate", str(graph), "--kind", "H200", "-o", str(out), "--json"]) == 0
        runs.append((json.loads(capsys.readouterr().out), load_calibration(out)))
    (kept, cal_kept), (traced, cal_traced) = runs
    assert kept["graphs"][0]["traced_s"] is None and traced["graphs"][0]["traced_s"] > 0
    assert traced["graphs"][0]["ops"] == kept["graphs"][0]["ops"]
    assert cal_traced.as_dict()["memory"] == cal_kept.as_dict()["memory"]


@pytest.mark.parametrize("args, says", [
    (["--kind", "H900"], "--kind"),
    (["--kernels", "missing.json"], "--kernels missing.json"),
    (["--kernels", "BAD"], "gemm[0].s"),
    (["GRAPH2"], "no measured op times"),
    (["no-such-graph.json"], "no-such-graph.json"),
    (["GRAPH3"], "no cost features")])
def test_calibrate_refuses_bad_input_in_one_line_before_any_work(measured_graph, tmp_path,
                                                                 capsys, args, says):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gemm": [{"dtype": "bfloat16", "m": 1, "k": 1, "n": 1}]}))
    plain = tmp_path / "plain.json"
    data = json.loads(measured_graph.read_text())
    data["metadata"].pop("measured")
    data["metadata"]["estimated"]["cpu"] = "x"
    plain.write_text(json.dumps(data))
    bare = tmp_path / "bare.json"
    data = json.loads(measured_graph.read_text())
    for key in ("cost_features", "source"):
        data["metadata"].pop(key)
    bare.write_text(json.dumps(data))
    graphs = {"GRAPH2": str(plain), "GRAPH3": str(bare)}
    args = [graphs.get(a, str(bad) if a == "BAD" else a) for a in args]
    extra = args if args[0].startswith("--") else []
    first = [str(measured_graph)] if extra else args
    out = tmp_path / "cal.json"
    code = main(["calibrate", *first, "--kind", "H200", "-o", str(out), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and len(err.splitlines()) == 1
    assert "Traceback" not in err and not out.exists()


def test_a_large_op_is_not_costed_by_a_table_measured_on_small_tensors_only():
    """GPT-2's factory ops (a fill, an empty_like) were measured up to 8 KiB, launch-bound: a
    Llama 3 8B MLP's 1.9 GB fill at their rate took 0.24 s; at element-wise bandwidth it moves
    in about as long as 1.9 GB take at the H100's 3.35 TB/s."""
    from moplace.costs.calibration import shipped

    h100 = shipped("H100")
    assert max(row[0] for row in h100.memory["factory"]) < 24  # small tensors only
    fill = {"op": "fill", "flops": 0.0, "bytes": 1879048192, "dtype": "bfloat16",
            "cls": "memory", "sub": "factory"}
    assert 1879048192 / 3.35e12 < h100.seconds(fill) < 3 * 1879048192 / 3.35e12


def test_a_users_calibration_stands_in_for_the_shipped_one_of_its_kind(tmp_path, capsys):
    """`profile --calibration FILE` (what `moplace calibrate` wrote on the user's GPU): its
    kind's estimates are its own, and the graph and every result say so; without
    --estimate its kind is the one estimated. A file that is no calibration, or one for a
    kind moplace knows nothing of, is one line and exit 2 before any tracing."""
    pytest.importorskip("torch")
    from moplace.io import load_graph

    data = json.loads((SHIPPED / "H200.json").read_text())
    data.update(kind="A100", measured_on="A100")
    mine = tmp_path / "a100.json"
    mine.write_text(json.dumps(data))
    model = tmp_path / "tiny.py"
    model.write_text(TINY)
    out = tmp_path / "g.json"
    assert main(["profile", str(model), "--batch", "4", "--calibration", str(mine), "-o",
                 str(out), "--quiet", "--no-cache"]) == 0
    assert "on A100: calibrated estimate (3937 ops measured on A100)" in capsys.readouterr().out
    g = load_graph(str(out))
    assert g.metadata["estimated"] == {"A100": "calibrated estimate (3937 ops measured on A100)"}
    cal, features = load_calibration(mine), g.metadata["cost_features"]
    timed = [op for op in g.ops if op.name in features]
    assert timed and all(op.compute["A100"] == cal.seconds(features[op.name]) for op in timed)
    assert main(["profile", str(model), "--batch", "4", "--estimate", "H100", "--calibration",
                 str(mine), "-o", str(out), "--force", "--quiet"]) == 0
    capsys.readouterr()
    assert set(load_graph(str(out)).metadata["estimated"]) == {"H100", "A100"}
    data.update(kind="TPUv5")
    mine.write_text(json.dumps(data))
    for bad, says in ((mine, "calibrated for kind 'TPUv5', which moplace has no device spec"),
                      (model, "tiny.py")):
        assert main(["profile", str(model), "--batch", "4", "--calibration", str(bad), "-o",
                     str(tmp_path / "no.json")]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1
    assert not (tmp_path / "no.json").exists()


#: one op of each kind a calibration costs, at sizes from tiny to huge
FUZZ_FEATURES = [
    {"cls": "matmul", "op": "mm", "dtype": "bfloat16", "m": 8192, "n": 768, "k": 3072,
     "batch": 1},
    {"cls": "matmul", "op": "mm", "dtype": "float16", "m": 7, "n": 50257, "k": 3, "batch": 2},
    {"cls": "attention", "op": "_scaled_dot_product_flash_attention", "dtype": "bfloat16",
     "bh": 96, "s_q": 1024, "s_kv": 1024, "d": 64, "causal": True, "bwd": False},
    {"cls": "attention", "op": "x", "dtype": "float32", "bh": 1, "s_q": 1, "s_kv": 1, "d": 1,
     "causal": False, "bwd": True},
    {"cls": "memory", "op": "fill", "sub": "factory", "dtype": "bfloat16", "bytes": 2**31},
    {"cls": "memory", "op": "add", "sub": "elementwise", "dtype": "float32", "bytes": 0},
    {"cls": "memory", "op": "_softmax", "sub": "softmax", "dtype": "bfloat16", "bytes": 2**20},
    {"cls": "optimizer", "op": "adam_update", "numel": 1000, "total": 10**9,
     "element_size": 2}]


def test_a_damaged_calibration_file_is_refused_or_costs_every_op_finitely(tmp_path):
    """A fuzz of the calibration file (the mutations of tests/fuzz, seeded): each damaged
    file is a `FormatError` naming it, or a calibration that costs every kind of op a finite,
    non-negative time. Found: a file nested 10,000 deep raised RecursionError, and empty or
    huge tables broke the interpolation."""
    import random
    import warnings

    from fuzz import mutate

    seed, rng = (SHIPPED / "H200.json").read_bytes(), random.Random(0)
    tree = [mutate.replace_leaf, mutate.replace_node, mutate.delete_key,
            mutate.duplicate_element, mutate.wrap_in_list, mutate.deep_nesting]
    text = [mutate.flip_bytes, mutate.drop_line, mutate.truncate, mutate.replace_number,
            mutate.replace_all_numbers, mutate.copy_token]
    path, loaded = tmp_path / "cal.json", 0
    for _ in range(300):
        if rng.random() < 0.6:
            doc = mutate._Tree(json.loads(seed))
            for _ in range(rng.choice([1, 1, 2, 3])):
                rng.choice(tree)(doc, rng)
            path.write_bytes(doc.dump(rng))
        else:
            path.write_bytes(rng.choice(text)(seed, rng))
        try:
            cal = load_calibration(path)
        except FormatError as exc:
            assert "cal.json" in str(exc)
            continue
        loaded += 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow on the way either
            for f in FUZZ_FEATURES:
                t = cal.seconds(f)
                assert math.isfinite(t) and t >= 0, (f, t)
    assert 0 < loaded < 300  # some damage is harmless, some is refused
