"""Split equivalence on the PyTorch testbed: every plan class applied for real
(`moplace.torch.apply`) against the model trained by plain PyTorch on one device, the same
seed giving both the same weights and batch (`moplace.testbed.equivalence` judges)."""

from __future__ import annotations

import time

from ..core import baselines as base
from ..core.recompute import recomputable_heads
from ..core.strategy import Split, Strategy
from ..testbed.equivalence import compare
from ._torch import torch


def reference_step(graph, steps: int, seed: int = 0) -> tuple[list, dict]:
    """The losses of ``steps`` training steps of the model ``graph`` was profiled from, on this
    CPU by plain PyTorch, and its weights after them (name -> float64 numpy array)."""
    from .applyprep import load_setup, model_source
    from .realstep import build_real

    source = model_source(graph)
    batch = int(source["batch_size"])
    torch.manual_seed(seed)
    real = build_real(load_setup(source, batch), batch, "cpu")
    losses = []
    for _ in range(steps):
        real.optimizer.zero_grad(set_to_none=True)
        loss = real.loss(real.model(*real.x), real.y)
        loss.backward()
        real.optimizer.step()
        losses.append(float(loss.detach()))
    weights = {n: p.detach().double().numpy().copy()
               for n, p in real.model.named_parameters()}
    return losses, weights


def without_tensor_blocks(graph):
    """``graph`` with its tensor-parallel blocks (`moplace.torch.megatron`) dissolved: each of
    their ops a group of its own (a weight with its update), none splittable on tensor, so
    that a channel split can reach every matmul and attention of a block."""
    from dataclasses import replace

    from ..core.graph import OpGraph

    def loose(op):
        group = op.colocation
        if group and group.startswith("tensor:"):
            group = "param:" + op.name.split("/", 1)[1] if op.name.startswith(
                ("param/", "update/")) else None
        return replace(op, colocation=group,
                       splittable=tuple(d for d in op.splittable if d != "tensor"))

    return OpGraph([loose(o) for o in graph.ops], graph.edges, name=graph.name,
                   metadata=dict(graph.metadata))


def split_matmuls(graph, n: int, dim: str = "batch") -> Strategy:
    """Every group of matmuls or attention (forward and backward) that can be split on ``dim``
    split so over all devices, the rest on device 0."""
    plan = base.single(graph, n)
    split = Split(dim, tuple(range(n)))
    splits = {}
    for g, members in enumerate(graph.groups):
        ops = [graph.ops[i] for i in members]
        if any(o.type.startswith(("mm", "addmm", "bmm", "_scaled_dot")) for o in ops) and \
                all(dim in o.splittable for o in ops):
            for i in members:
                splits[i] = split
    return Strategy(plan.placement, plan.priority, splits)


def plan_classes(graph, n: int, *, nsga2_points: int = 2, seed: int = 0) -> list:
    """(name, strategy) for every plan class on ``n`` devices, and ``nsga2_points`` points of
    an NSGA-II front the testbed runs (the fastest and the least memory first)."""
    heads = recomputable_heads(graph)
    layer = base.layer_split(graph, n)
    dp = base.data_parallel(graph, n)
    tp = base.tensor_parallel(graph, n)
    plans = [("single", base.single(graph, n)),
             ("data parallel, 25 MiB buckets", dp),
             ("data parallel, a bucket per weight", base.data_parallel(graph, n, 0.0)),
             ("layer split", layer),
             ("round robin", base.round_robin(graph, n)),
             ("matmuls split on batch", split_matmuls(graph, n)),
             ("matmuls and attention split on channel", split_matmuls(graph, n, "channel")),
             ("1F1B pipeline, 2 micro-batches", layer.with_options(micro_batches=2)),
             ("GPipe pipeline, 4 micro-batches", layer.with_options(micro_batches=4,
                                                                     schedule=1)),
             ("data parallel, 2 micro-batches", dp.with_options(micro_batches=2)),
             ("layer split, every other group recomputed", layer.with_recompute(heads[::2])),
             ("single, every group recomputed", base.single(graph, n).with_recompute(heads)),
             ("ZeRO-1", dp.with_options(zero_stage=1)),
             ("ZeRO-3", dp.with_options(zero_stage=3)),
             ("tensor parallel", tp),
             ("tensor parallel, 2 micro-batches", tp.with_options(micro_batches=2)),
             ("tensor parallel, every other group recomputed", tp.with_recompute(heads[::2]))]
    if nsga2_points:
        plans += _front_points(graph, n, nsga2_points, seed)
    return plans


def _front_points(graph, n: int, k: int, seed: int) -> list:
    from ..optimize.driver import search
    from ..optimize.plugins import make_searcher
    from ..optimize.problem import Problem
    from .testbed import TorchTestbed

    problem = Problem(graph, TorchTestbed.placeholder_cluster(n))
    result = search(problem, make_searcher("nsga2"), budget=300, seed=seed)
    from ..core.runners import pytorch_refusal

    points = sorted((p for p in result.front if pytorch_refusal(graph, p.strategy) is None),
                    key=lambda p: p.values[0])
    picked = points[:1] + sorted(points[1:], key=lambda p: p.values[2])[:max(k - 1, 0)]
    return [(f"NSGA-II point {j} ({p.values[0] * 1e3:.1f} ms simulated)", p.strategy)
            for j, p in enumerate(picked[:k])]


def run_plans(graph, plans, n: int, reference, *, steps: int = 2):
    """Each plan applied for ``steps`` steps on one testbed of ``n`` processes, judged against
    ``reference`` (`reference_step`): rows of plan, ran, reason, loss_rel, weight_abs,
    verdict, step_ms."""
    from .apply import apply_torch
    from .testbed import TorchTestbed

    ref_losses, ref_weights = reference
    dtype = str(next(iter(ref_weights.values())).dtype)
    dtype = "float32" if dtype == "float64" else dtype
    with TorchTestbed(n) as bed:
        cluster = bed.cluster()
        for name, strategy in plans:
            t0 = time.perf_counter()
            result, simulated = apply_torch(graph, strategy, cluster, steps=steps, warmup=0,
                                            weights=True, testbed=bed)
            row = {"plan": name, "ran": result.expressible, "reason": result.reason,
                   "seconds": time.perf_counter() - t0, "simulated_ms": simulated * 1e3}
            if result.expressible:
                weights = {k: v.double().numpy() for k, v in result.weights.items()}
                v = compare(ref_losses, result.losses, ref_weights, weights, dtype)
                row.update(loss_rel=v.loss_rel, weight_abs=v.weight_abs,
                           verdict="equal" if v.equal else "DIFFERS", verdict_obj=v,
                           step_ms=1e3 * sum(result.step_seconds) / len(result.step_seconds))
            yield row
