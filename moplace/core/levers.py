"""A strategy's plan at a glance: how many devices it uses, how many co-location groups it
splits (and how many of those on tensor), its gradient bucket size, its ZeRO stage, how many
groups it recomputes, and its micro-batches and their schedule (None with one micro-batch)
(`plan_of`), as data for ``front.json`` and ``--json`` (`moplace.review.units.plan_text`
writes it as a line for the front table)."""

from __future__ import annotations

import numpy as np

from .graph import SPLIT_DIMS, OpGraph
from .strategy import Strategy


def plan_of(strategy: Strategy, graph: OpGraph) -> dict:
    """The levers ``strategy`` pulls on ``graph``, as JSON-ready numbers."""
    t = strategy.split_table
    tensor = t.ops[t.dims == SPLIT_DIMS.index("tensor")]
    return {"devices": len(strategy.used_devices),
            "split_groups": int(np.unique(graph.arrays.group[t.ops]).size),
            "tensor_groups": int(np.unique(graph.arrays.group[tensor]).size),
            "bucket_bytes": float(strategy.bucket_bytes),
            "zero_stage": int(strategy.zero_stage),
            "recomputed_groups": len(strategy.recompute),
            "micro_batches": int(strategy.micro_batches),
            "schedule": strategy.schedule_name if strategy.pipelined else None}

