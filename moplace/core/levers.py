"""A strategy's plan at a glance (`plan_of`), as data for ``front.json`` and ``--json``
(`moplace.review.units.plan_text` writes it as a line for the front table and `show`), in
the one vocabulary of tables, `show` and `export`: splits counted in ops (``split_ops``, and
of them ``tensor_ops`` on tensor), recomputation in co-location groups; a regular plan by its
degrees (``degrees``: data, tensor and pipeline, with ``virtual``, ``expert`` and ``context``
(and its ``context_comm``, "p2p" or "a2a") where more than 1, `moplace.core.planshape`), so that a data-parallel point reads "data parallel x8"; and whether the gradient levers act at all
(``replicas``: some op's weights are replicated on batch or sequence, so its gradients are all-reduced in
buckets and ZeRO has something to shard; on one device or a pipeline without replicas they
change nothing and a table leaves them out). The per-group counts of earlier files
(``split_groups``, ``tensor_groups``) are kept."""

from __future__ import annotations

import numpy as np

from .graph import SPLIT_DIMS, OpGraph
from .strategy import Strategy


def plan_of(strategy: Strategy, graph: OpGraph) -> dict:
    """The levers ``strategy`` pulls on ``graph``, as JSON-ready numbers."""
    from .planshape import plan_shape

    t = strategy.split_table
    on_tensor = t.dims == SPLIT_DIMS.index("tensor")
    tensor = t.ops[on_tensor]
    # a sequence split (context parallelism) replicates weights as a batch split does
    batch = t.ops[np.isin(t.dims, [SPLIT_DIMS.index("batch"), SPLIT_DIMS.index("sequence")])]
    a = graph.arrays
    shape = plan_shape(graph, strategy)
    return {"devices": len(strategy.used_devices),
            "split_ops": int(t.ops.size), "tensor_ops": int(tensor.size),
            "split_groups": int(np.unique(a.group[t.ops]).size),
            "tensor_groups": int(np.unique(a.group[tensor]).size),
            "degrees": ({"data": shape.dp, "tensor": shape.tp, "pipeline": shape.pp,
                         **({"virtual": shape.vp} if shape.vp > 1 else {}),
                         **({"expert": shape.ep} if shape.ep > 1 else {}),
                         **({"context": shape.cp, "context_comm": shape.cp_comm}
                            if shape.cp > 1 else {})}
                        if shape.regular else None),
            "replicas": bool(((a.grad_bytes[batch] > 0) | (a.param_bytes[batch] > 0)).any()),
            "bucket_bytes": float(strategy.bucket_bytes),
            "zero_stage": int(strategy.zero_stage),
            "recomputed_groups": len(strategy.recompute),
            "micro_batches": int(strategy.micro_batches),
            "schedule": strategy.schedule_name if strategy.pipelined else None,
            "fp8": strategy.fp8_mode}
