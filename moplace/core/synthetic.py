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
