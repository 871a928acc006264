"""Synthetic op graphs for tests and benchmarks (not models of any real network)."""

from __future__ import annotations

import numpy as np

from .graph import Edge, Op, OpGraph


def layered_dag(n_ops: int, *, width: int = 8, fan_in: int = 2, kind: str = "V100",
                seed: int = 0, splittable=("batch", "channel")) -> OpGraph:
    """A random DAG of ``n_ops`` ops in layers of ``width``; each op reads ``fan_in`` ops of the
    previous layer. Compute 0.1-2 ms, outputs 64 KiB-16 MiB, a third of ops with parameters."""
    rng = np.random.default_rng(seed)
    compute = rng.uniform(1e-4, 2e-3, n_ops)
    out = rng.integers(1 << 16, 1 << 24, n_ops)
    params = np.where(rng.random(n_ops) < 1 / 3, rng.integers(1 << 16, 1 << 22, n_ops), 0)
    ops = [Op(f"op{i}", "synthetic", {kind: float(compute[i])}, int(out[i]), int(params[i]),
              int(params[i]), splittable=splittable, role="other") for i in range(n_ops)]
    edges = []
    for i in range(width, n_ops):
        layer_start = (i // width - 1) * width
        srcs = rng.choice(width, size=min(fan_in, width), replace=False) + layer_start
        edges.extend(Edge(int(s), i, int(out[s])) for s in srcs)
    return OpGraph(ops, edges, name=f"layered-{n_ops}-w{width}-s{seed}",
                   metadata={"format": "synthetic", "profiled_on": kind})


def random_dag(n_ops: int, *, edge_prob: float = 0.3, seed: int = 0, kind: str = "V100") -> OpGraph:
    """A small random DAG (edges only from lower to higher index), for exhaustive tests."""
    rng = np.random.default_rng(seed)
    ops = [Op(f"op{i}", "synthetic", {kind: float(rng.uniform(0.5, 2.0))},
              int(rng.integers(1, 1000)), int(rng.integers(0, 100))) for i in range(n_ops)]
    edges = [Edge(i, j, int(rng.integers(1, 1000))) for i in range(n_ops)
             for j in range(i + 1, n_ops) if rng.random() < edge_prob]
    return OpGraph(ops, edges, name=f"random-{n_ops}-s{seed}", metadata={"profiled_on": kind})


def training_chain(n_layers: int, *, kind: str = "V100", seed: int = 0) -> OpGraph:
    """A training step of ``n_layers`` layers in a chain (3 ops a layer): each layer's forward
    reads the previous one's output, its backward reads that output and the next layer's
    gradient, and its update reads its weight gradient; a layer's three ops share a
    co-location group, the forward and backward split on batch and channel. Compute 0.1-1 ms
    forward, twice that backward; outputs 1-8 MiB; weights 64 KiB-4 MiB."""
    rng = np.random.default_rng(seed)
    fwd = rng.uniform(1e-4, 1e-3, n_layers)
    out = rng.integers(1 << 20, 1 << 23, n_layers)
    w = rng.integers(1 << 16, 1 << 22, n_layers)
    ops, edges = [], []
    both = ("batch", "channel")
    for k in range(n_layers):
        g = f"L{k}"
        ops += [Op(f"{g}/f", "synthetic", {kind: float(fwd[k])}, int(out[k]), int(w[k]),
                   colocation=g, splittable=both, role="forward"),
                Op(f"{g}/b", "synthetic", {kind: float(2 * fwd[k])}, int(out[k] + w[k]),
                   grad_bytes=int(w[k]), colocation=g, splittable=both, role="backward"),
                Op(f"{g}/u", "synthetic", {kind: 5e-6}, 0, int(w[k]), colocation=g,
                   splittable=("batch",), role="update")]
        edges += [Edge(f"{g}/f", f"{g}/b", int(out[k])), Edge(f"{g}/b", f"{g}/u", int(w[k]))]
        if k:
            edges += [Edge(f"L{k - 1}/f", f"{g}/f", int(out[k - 1])),
                      Edge(f"{g}/b", f"L{k - 1}/b", int(out[k - 1]))]
    return OpGraph(ops, edges, name=f"training-chain-{n_layers}-s{seed}",
                   metadata={"format": "synthetic", "profiled_on": kind})


def pipeline_chain(n_layers: int, micro_batches: int, *, forward_s: float = 1e-3,
                   backward_s: float = 1e-3, weight_s: float = 1e-3, kind: str = "V100",
                   edge_bytes: int = 8) -> OpGraph:
    """A chain of ``n_layers`` equal layers, each a forward op, an input-gradient op, a
    weight-gradient op and an update (free), with a free loss: the balanced pipeline the
    schedules' bubble formulas are stated for. Each layer's ops take ``forward_s``,
    ``backward_s`` and ``weight_s`` per micro-batch of ``micro_batches`` (the graph's times
    are the whole batch's). Op names: ``f{i}``, ``b{i}``, ``w{i}``, ``u{i}``, ``x`` (the
    input) and ``loss``; `pipeline_chain_placement` lays them out."""
    m, ops, edges = micro_batches, [Op("x", "Input", {kind: 0.0}, edge_bytes, role="other")], []
    for i in range(n_layers):
        ops.append(Op(f"f{i}", "MatMul", {kind: m * forward_s}, edge_bytes, edge_bytes,
                      role="forward"))
        edges.append(Edge("x" if i == 0 else f"f{i - 1}", f"f{i}", edge_bytes))
    ops.append(Op("loss", "Loss", {kind: 0.0}, edge_bytes, role="forward"))
    edges.append(Edge(f"f{n_layers - 1}", "loss", edge_bytes))
    for i in reversed(range(n_layers)):
        grad, before = ("loss" if i == n_layers - 1 else f"b{i + 1}"), ("x" if i == 0
                                                                         else f"f{i - 1}")
        ops += [Op(f"b{i}", "MatMulGrad", {kind: m * backward_s}, edge_bytes, role="backward"),
                Op(f"w{i}", "MatMulGradWeight", {kind: m * weight_s}, edge_bytes,
                   grad_bytes=edge_bytes, role="backward"),
                Op(f"u{i}", "Apply", {kind: 0.0}, role="update")]
        edges += [Edge(grad, f"b{i}", edge_bytes), Edge(f"f{i}", f"b{i}", edge_bytes),
                  Edge(grad, f"w{i}", edge_bytes), Edge(before, f"w{i}", edge_bytes),
                  Edge(f"w{i}", f"u{i}", edge_bytes)]
    return OpGraph(ops, edges, name=f"pipeline-chain-{n_layers}",
                   metadata={"format": "synthetic", "profiled_on": kind})


def pipeline_chain_placement(graph: OpGraph, devices: int) -> np.ndarray:
    """Layer i of `pipeline_chain`'s ``graph`` (and the loss with the last) on device
    ``i mod devices``: stage i of an interleaved pipeline, one layer a stage."""
    last = sum(1 for op in graph.ops if op.name.startswith("f")) - 1

    def layer(name):
        return 0 if name == "x" else last if name == "loss" else int(name[1:])

    return np.array([layer(op.name) % devices for op in graph.ops], np.int64)
