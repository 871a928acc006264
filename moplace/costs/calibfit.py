"""Fitting a calibration (`moplace.costs.calibration`) from measured ops and kernel
benchmarks."""

from __future__ import annotations

import math

import numpy as np

from .calibration import STATE_TENSORS, Calibration, attention_flops, misaligned
from .devicespecs import roofline_seconds


def measured_samples(graph, kind: str, features: dict) -> tuple[list, list]:
    """``([(op name, measured seconds, cost features)], [names of timed ops without
    features])`` of ``graph``'s ops measured on ``kind``."""
    samples, missing = [], []
    for op in graph.ops:
        seconds = op.compute.get(kind)
        if seconds is None:
            continue
        f = features.get(op.name)
        if f is None:
            if seconds > 0:
                missing.append(op.name)
            continue
        samples.append((op.name, float(seconds), f))
    return samples, missing


#: the memory-bound family of each element-wise benchmark of ``kernels-*.json``
BENCH_FAMILY = {"add": "elementwise", "mul": "elementwise", "gelu": "elementwise",
                "silu": "elementwise", "copy_fp32": "copy", "softmax": "softmax",
                "layer_norm": "norm", "rms_norm": "norm"}
#: a benchmark timed between CUDA events counts the host's launch when that is longer than
#: the kernel (a 2^20-element add: 17 µs between events, 1-5 µs as a kernel in the measured
#: graphs; an 8192 × 768 × 768 GEMM 38 µs, 17 µs in the graphs): of each benchmark family
#: only the calls this many times its fastest one say the kernel's throughput
BENCH_OVER_FASTEST = 2.0
#: fused attention's benchmark calls are kept from this many times the host's launch of one
#: kernel (``tiny_kernel``: 11.8 µs on the H200) rather than from twice the fastest call:
#: the fastest SDPA call (GPT-2's 8 × 12 heads at 1,024 tokens, 81 µs) is seven launches
#: long, and dropping every call under twice it left only 4,096 tokens and longer, so
#: 1,024-token attention was read at 4 times its measured speed (GPT-2 small's SDPA step
#: 9.0% short of the real one). Such a call may still hold up to about 20 µs of the host's
#: (an 8192 × 768 × 768 GEMM's event time over its kernel's), so it errs slow
SDPA_OVER_LAUNCH = 2.0
#: memory-bound ops are binned by log2 of their bytes in steps this wide
BYTES_BIN = 0.5
#: an aten op measured this many times has a bandwidth table of its own (else its family's)
MIN_OWN = 8
#: the optimizer's fixed time and bandwidth are fitted over these grids
_T0 = np.concatenate([[0.0], np.geomspace(0.3e-6, 300e-6, 90)])
_GBPS = np.geomspace(30.0, 8000.0, 120)
def fit(measured: list, kind: str, measured_on: str, kernels: dict | None = None,
        sources=()) -> Calibration:
    """The calibration of ``kind`` fitted on ``measured`` (a list of `measured_samples`'
    sample lists, one per graph) and ``kernels`` (a ``kernels-*.json``'s content: ``gemm``,
    ``sdpa_causal_bf16``, ``elementwise_bf16``, ``adamw``), measured on ``measured_on``."""
    kernels = kernels or {}
    samples = [s for graph in measured for s in graph]
    timed = [s for _, s, f in samples if f.get("cls") in ("matmul", "memory", "attention")
             and s > 0]
    if not timed and not kernels.get("gemm"):
        raise ValueError("nothing to fit: no measured kernel and no GEMM benchmark")
    floor = float(min(timed)) if timed else None
    matmul: dict = {}
    for _, s, f in samples:
        if f.get("cls") == "matmul" and s > 0:
            dims = [max(int(f[d]), 1) for d in ("m", "n", "k")]
            _add(matmul, f["dtype"], dims, int(f.get("batch", 1)), s)
    for g in _kernel_bound(kernels.get("gemm", ()), "s"):
        _add(matmul, g["dtype"], (g["m"], g["n"], g["k"]), 1, g["s"])
    attention: dict = {}
    for _, s, f in samples:
        if f.get("cls") == "attention" and s > 0:
            attention.setdefault("bwd" if f.get("bwd") else "fwd", {}).setdefault(
                (f["bh"], f["s_q"], f["d"]), []).append(attention_flops(f) / s / 1e12)
    sdpa = [{**a, "bwd_s": a["fwd_bwd_s"] - a["fwd_s"]} for a in kernels.get("sdpa_causal_bf16", ())]
    launch = (kernels.get("tiny_kernel") or {}).get("gpu_s_each")
    for way in ("fwd", "bwd"):
        for a in _kernel_bound(sdpa, f"{way}_s", launch and SDPA_OVER_LAUNCH * launch):
            attention.setdefault(way, {}).setdefault((a["b"] * a["heads"], a["s"], a["d"]),
                                                      []).append(a[f"{way}_tflops"])
    families: dict = {}  # family or "op:NAME" -> [(bytes, seconds)]
    for _, s, f in samples:
        if f.get("cls") == "memory" and s > 0:
            families.setdefault(f.get("sub", "elementwise"), []).append((f["bytes"], s))
            families.setdefault(f"op:{f['op']}", []).append((f["bytes"], s))
            families.setdefault(f"op:{f['op']}:{f['dtype']}", []).append((f["bytes"], s))
    for e in _kernel_bound(kernels.get("elementwise_bf16", ()), "s"):
        if e["op"] in BENCH_FAMILY:
            families.setdefault(BENCH_FAMILY[e["op"]], []).append((e["gbps"] * 1e9 * e["s"],
                                                                   e["s"]))
    memory = {key: _bandwidths(points) for key, points in sorted(families.items())
              if len(points) >= (MIN_OWN if key.startswith("op:") else 1)}
    if "elementwise" not in memory:
        raise ValueError("nothing to fit memory-bound ops on: no element-wise op measured")
    if floor is None:  # kernels only: the fastest memory-bound call benchmarked
        floor = min(2.0 ** t[0][0] / (t[0][1] * 1e9) for t in memory.values())
    return Calibration(kind, measured_on, len(samples), floor,
                       {d: _table(p) for d, p in sorted(matmul.items())},
                       {d: _table(p) for d, p in sorted(attention.items())},
                       memory,
                       _optimizer(measured, kernels), None, tuple(sources))


def _add(matmul: dict, dtype: str, dims, batch: int, seconds: float) -> None:
    flops = 2.0 * batch * dims[0] * dims[1] * dims[2]
    matmul.setdefault(dtype, {}).setdefault((*dims, batch, misaligned(dims)), []).append(
        flops / seconds / 1e12)


def _table(points: dict) -> list:
    """``{key: [TFLOP/s, ...]}`` as interpolation points: log2 of each size (a GEMM's
    ``misaligned`` flag as it is), the median."""
    return [[*(round(math.log2(v), 6) for v in key[:4]), *key[4:], round(float(np.median(t)), 4)]
            for key, t in sorted(points.items())]


def _kernel_bound(rows, key: str, at_least: float | None = None) -> list:
    """The benchmark ``rows`` whose ``key`` seconds are at least ``at_least`` (without it,
    `BENCH_OVER_FASTEST` times the fastest row's): the kernel's time, not the host's
    launch."""
    rows = [r for r in rows if r.get(key, 0) > 0]
    if at_least is None:
        at_least = BENCH_OVER_FASTEST * min((r[key] for r in rows), default=0.0)
    return [r for r in rows if r[key] >= at_least]


def _bandwidths(points) -> list:
    """``[(bytes, seconds)]`` as a bandwidth table: per bin of log2 bytes (`BYTES_BIN`), the
    bin's bytes over its seconds, summed (so the bin's total time is kept)."""
    bins: dict = {}
    for b, s in points:
        key = round(math.log2(max(b, 1)) / BYTES_BIN) * BYTES_BIN
        got = bins.setdefault(key, [0.0, 0.0, 0])
        got[0] += max(b, 1)
        got[1] += s
        got[2] += 1
    return [[round(math.log2(b / n), 6), round(b / s / 1e9, 4)]
            for _, (b, s, n) in sorted(bins.items())]


def _affine(points) -> dict:
    """``t0 + bytes / bandwidth`` fitted to ``[(bytes, seconds)]`` by least squares in log
    time (a grid: deterministic, and never NaN)."""
    b = np.array([p[0] for p in points], dtype=float)[:, None, None]
    s = np.log(np.array([p[1] for p in points], dtype=float))[:, None, None]
    pred = _T0[None, :, None] + b / (_GBPS[None, None, :] * 1e9)
    err = ((np.log(np.maximum(pred, 1e-12)) - s) ** 2).sum(axis=0)
    i, j = np.unravel_index(int(np.argmin(err)), err.shape)
    return {"t0_s": float(_T0[i]), "gbps": round(float(_GBPS[j]), 3)}


def _optimizer(measured: list, kernels: dict) -> dict:
    """The update of all parameters: ``t0 + state bytes / bandwidth``, from the measured
    graphs' update ops summed per graph; without any, from the fused AdamW benchmarks."""
    points = []
    for graph in measured:
        ups = [(s, f) for _, s, f in graph if f.get("cls") == "optimizer"]
        if ups and sum(s for s, _ in ups) > 0:
            f = ups[0][1]
            tensors = STATE_TENSORS.get(str(f.get("op", "")).removesuffix("_update"), 7)
            points.append((tensors * f["element_size"] * f["total"], sum(s for s, _ in ups)))
    if not points:
        points = [(7 * (2 if a["dtype"] == "bfloat16" else 4) * a["params"], a["s"])
                  for a in kernels.get("adamw", ()) if a.get("fused")]
    if not points:
        raise ValueError("nothing to fit the optimizer's update on: no update op measured and "
                         "no fused AdamW benchmark")
    return _affine(points)


def class_of(f: dict) -> str:
    """The class an op's fit is reported under: ``matmul``, ``attention``, ``optimizer`` or
    ``memory:FAMILY``."""
    cls = f.get("cls", "memory")
    return f"memory:{f.get('sub', 'elementwise')}" if cls == "memory" else cls


def roofline(f: dict, spec) -> float:
    """The roofline's seconds for an op with features ``f`` on ``spec``, as ``moplace profile``
    costed it without a calibration (an update: 12 FLOPs and 7 tensors per element, FP32)."""
    if f.get("cls") == "optimizer":
        return roofline_seconds(12.0 * f["numel"], 7.0 * f["numel"] * f["element_size"], spec,
                                "float32")
    return roofline_seconds(f.get("flops", 0.0), f.get("bytes", 0), spec, f.get("dtype",
                                                                             "float32"))


def fit_report(cal: Calibration, samples: list, spec) -> dict:
    """Per class (`class_of`) of ``samples`` (``(name, seconds, features)``, measured): how
    many ops, their measured seconds, and estimate / measured per op before (the roofline on
    ``spec``) and after (``cal``): median, p10, p90, and the sums' ratio."""
    by: dict = {}
    for _, s, f in samples:
        if s > 0:
            by.setdefault(class_of(f), []).append((s, roofline(f, spec), cal.seconds(f)))
    out = {}
    for cls in sorted(by, key=lambda c: -sum(r[0] for r in by[c])):
        rows = np.array(by[cls])
        out[cls] = {"ops": len(rows), "measured_s": float(rows[:, 0].sum()),
                    "before": _ratios(rows[:, 1], rows[:, 0]),
                    "after": _ratios(rows[:, 2], rows[:, 0])}
    return out


def _ratios(est, measured) -> dict:
    r = est / measured
    return {"median": float(np.median(r)), "p10": float(np.quantile(r, 0.1)),
            "p90": float(np.quantile(r, 0.9)), "sum": float(est.sum() / measured.sum())}


def read_joined(path) -> tuple[dict, list]:
    """``(what, samples)`` of a joined measurement file (``experiments/calibration_join.py``
    writes them: a measured graph's ops with their cost features, gzipped JSON)."""
    import gzip
    import json

    with gzip.open(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    return {k: v for k, v in data.items() if k != "ops"}, [tuple(s) for s in data["ops"]]


def calibrated_graph(graph, kind: str, cal: Calibration, features: dict):
    """``graph`` with each op that has cost ``features`` costed on ``kind`` by ``cal`` (the
    others keep their ``kind`` time), and its ``metadata.estimated`` saying so."""
    from dataclasses import replace

    from ..core.graph import OpGraph

    ops = [replace(op, compute={**op.compute, kind: cal.seconds(features[op.name])})
           if op.name in features else op for op in graph.ops]
    meta = {**graph.metadata, "estimated": {**(graph.metadata.get("estimated") or {}),
                                            kind: cal.note()}}
    return OpGraph(ops, graph.edges, name=graph.name, metadata=meta)
