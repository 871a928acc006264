"""FP8 matmuls as a precision lever (issue 49): a matmul-bound step's time and memory as worked
out by hand from the datasheet FP8 peak, the BF16 efficiency its times show and the FP8
weight copies; which matmuls each mode takes; FP8 refused where it cannot run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import moplace
from moplace import OpGraph, simulate
from moplace.core.graph import Edge, Op
from moplace.core.strategy import Strategy
from moplace.costs.costmodel import CostModel
from moplace.costs.devicespecs import DEFAULT_MEMORY_EFFICIENCY, DEVICE_SPECS
from moplace.costs.fp8 import CAST_BYTES, fp8_matmuls
from moplace.errors import StrategyError

MS = 1e-3
M, K, N = 8192, 4096, 4096  # a token batch times a 4096 x 4096 weight
WEIGHT = K * N * 2  # BF16


def _layers(n: int, kind: str = "H100") -> OpGraph:
    """``n`` layers, each a weight, a forward matmul (2 ms), an input-gradient and a
    weight-gradient matmul (2 ms each) and an update, the matmuls' shapes in the graph's cost
    features and the layers named, as a PyTorch trace names them."""
    ops = [Op("x", "Input", {kind: 0.0}, M * K * 2, role="other")]
    edges, features = [], {}
    mm = {"cls": "matmul", "m": M, "k": K, "n": N, "batch": 1, "dtype": "bfloat16",
          "flops": 2.0 * M * K * N}
    for i in range(n):
        ops += [Op(f"w{i}", "Param", {kind: 0.0}, WEIGHT, param_bytes=WEIGHT, role="forward"),
                Op(f"f{i}", "mm", {kind: 2 * MS}, M * N * 2, role="forward")]
        edges += [Edge("x" if i == 0 else f"f{i - 1}", f"f{i}", M * K * 2),
                  Edge(f"w{i}", f"f{i}", WEIGHT)]
        features[f"f{i}"] = mm
    ops.append(Op("loss", "Loss", {kind: 0.0}, 8, role="forward"))
    edges.append(Edge(f"f{n - 1}", "loss", M * N * 2))
    for i in reversed(range(n)):
        grad = "loss" if i == n - 1 else f"b{i + 1}"
        ops += [Op(f"b{i}", "mm", {kind: 2 * MS}, M * K * 2, role="backward"),
                Op(f"g{i}", "mm", {kind: 2 * MS}, WEIGHT, grad_bytes=WEIGHT, role="backward"),
                Op(f"u{i}", "Apply", {kind: 0.0}, role="update")]
        edges += [Edge(grad, f"b{i}", M * N * 2), Edge(f"w{i}", f"b{i}", WEIGHT),
                  Edge(grad, f"g{i}", M * N * 2),
                  Edge("x" if i == 0 else f"f{i - 1}", f"g{i}", M * K * 2),
                  Edge(f"g{i}", f"u{i}", WEIGHT), Edge(f"w{i}", f"u{i}", WEIGHT)]
        features[f"b{i}"] = features[f"g{i}"] = mm
    layers = {"count": n, "period": 1, "boundaries": ["x"] + [f"f{i}" for i in range(n)]}
    return OpGraph(ops, edges, name="fp8-layers",
                   metadata={"cost_features": features, "layers": layers})


def _one(kind: str = "H100"):
    return moplace.Cluster.uniform(1, kind=kind, memory_bytes=80 * 2**30)


def test_a_matmul_bound_step_by_hand():
    g, c = _layers(4), _one()
    costs = CostModel(g, c, split_overhead_s=0.0)
    s = Strategy(np.zeros(len(g.ops), np.int64))
    bf16 = simulate(g, c, s, costs=costs)
    fp8 = simulate(g, c, s.with_options(fp8=1), costs=costs)
    spec = DEVICE_SPECS["H100"]
    scale = spec.peak("bfloat16") / spec.peak_flops["float8"]  # 989.5 / 1979 = 1/2
    cast = (M * K + K * N) * CAST_BYTES / (spec.mem_bandwidth_Bps * DEFAULT_MEMORY_EFFICIENCY)
    assert bf16.makespan == pytest.approx(12 * 2 * MS)
    assert fp8.makespan == pytest.approx(12 * (2 * MS * scale + cast))
    # every weight keeps an FP8 copy, one byte an element, for the whole step
    assert fp8.peak_memory.max() - bf16.peak_memory.max() == pytest.approx(4 * K * N)


def test_inner_keeps_the_first_and_last_layers_in_bf16():
    g = _layers(4)
    names = lambda mask: sorted(g.ops[i].name for i in np.flatnonzero(mask))  # noqa: E731
    assert names(fp8_matmuls(g, "all")) == sorted(f"{p}{i}" for p in "fbg" for i in range(4))
    assert names(fp8_matmuls(g, "inner")) == sorted(f"{p}{i}" for p in "fbg" for i in (1, 2))
    c = _one()
    costs = CostModel(g, c, split_overhead_s=0.0)
    s = Strategy(np.zeros(len(g.ops), np.int64))
    times = [simulate(g, c, s.with_options(fp8=f), costs=costs).makespan for f in (0, 2, 1)]
    assert times[0] > times[1] > times[2]


def test_a_traced_llama_keeps_fp8_weight_copies_where_its_weights_are():
    from moplace.core.degrees import Degrees, regular_plan

    g = moplace.load_graph(str(Path(__file__).parent / "data" / "tiny-llama.json"))
    c = moplace.load_cluster("8xH100-80GB-NVLink")
    for d in (Degrees(1, 1, "data", 1, "1f1b", "none", 0),
              Degrees(4, 2, "data", 4, "1f1b", "none", 0),
              Degrees(4, 1, "tensor", 1, "1f1b", "none", 0),
              Degrees(4, 1, "data", 1, "1f1b", "none", 3)):
        s = regular_plan(g, d)
        plain, fp8 = (simulate(g, c, s.with_options(fp8=f)) for f in (0, 1))
        assert fp8.peak_memory.max() > plain.peak_memory.max()
        assert fp8.makespan != plain.makespan


def test_fp8_is_refused_where_it_cannot_run():
    g = _layers(2)
    s = Strategy(np.zeros(len(g.ops), np.int64), fp8=1)
    with pytest.raises(StrategyError, match="A100: the kind has no FP8"):
        simulate(g, _one("A100"), s)
    bare = OpGraph(g.ops, g.edges, name="bare")
    with pytest.raises(StrategyError, match="matmul shapes and layers"):
        simulate(bare, _one(), Strategy(np.zeros(len(g.ops), np.int64), fp8=1))
    with pytest.raises(StrategyError, match="fp8 must be one of"):
        s.with_options(fp8=3).validate(g, 1)


def test_strategy_files_name_the_precision(tmp_path):
    from moplace.io.strategies import load_strategy, save_strategy, strategy_to_json

    g = _layers(2)
    s = Strategy(np.zeros(len(g.ops), np.int64), fp8=2)
    assert strategy_to_json(g, s)["options"]["fp8"] == "inner"
    save_strategy(tmp_path / "s.json", g, s)
    assert load_strategy(tmp_path / "s.json", g, _one()).fp8_mode == "inner"


def test_the_degree_space_offers_fp8_where_the_devices_have_it():
    from moplace.core.degrees import DegreeSpace
    from moplace.costs.fp8 import has_fp8

    g = moplace.load_graph(str(Path(__file__).parent / "data" / "tiny-llama.json"))
    assert has_fp8(moplace.load_cluster("8xH100-80GB-NVLink"))
    assert not has_fp8(moplace.load_cluster("4xV100-NVLink"))
    assert {d.fp8 for d in DegreeSpace(g, 4, "megatron").all()} == {"none"}
    space = DegreeSpace(g, 4, "megatron", fp8=True)
    plans = [d for d in space.all() if d.fp8 != "none"]
    assert {d.fp8 for d in plans} == {"all", "inner"}
    c = moplace.load_cluster("8xH100-80GB-NVLink")
    for d in plans[::max(1, len(plans) // 12)]:
        s = space.decode(space.encode_degrees(d))
        assert s.fp8_mode == d.fp8 and space.of_strategy(s) == d
        simulate(g, c, s)
