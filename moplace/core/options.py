"""The strategy-wide options a `moplace.core.strategy.Strategy` carries, their defaults, and the
values each may take: the ZeRO stages, the pipeline schedules (with how each reads), the
precision of the matmuls, and the bounds on micro-batches and bucket sizes."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

#: Strategy-wide options and their defaults (see the module docstring). A strategy pickled or
#: written before an option existed reads as its default.
STRATEGY_OPTIONS: Mapping[str, float] = MappingProxyType({"bucket_bytes": 0.0,
                                                          "zero_stage": 0.0,
                                                          "micro_batches": 1.0,
                                                          "schedule": 0.0,
                                                          "fp8": 0.0})
#: the ZeRO stages a strategy may name
ZERO_STAGES = (0, 1, 2, 3)
#: the pipeline schedules, by their ``schedule`` number: 1F1B (PipeDream-Flush: one forward,
#: one backward in the steady state, stage k of S keeping at most S - k + 1 micro-batches in
#: flight), GPipe (every forward, then every backward), interleaved 1F1B (Megatron-LM's
#: virtual stages: stage j of p * v on the device of stage j mod p) and zero-bubble (the
#: backward cut into input and weight gradients, the latter filling the bubble: PyTorch's
#: ScheduleInterleavedZeroBubble); the last two run each device's actions in a fixed order
#: (`moplace.simulator.pipeorder`)
SCHEDULES = ("1f1b", "gpipe", "interleaved", "zero-bubble")
#: the schedules of fixed per-rank actions, which run virtual stages (several per device):
#: `moplace.simulator.pipeorder` orders them, `moplace.core.runners` exports them
VIRTUAL_SCHEDULES = ("interleaved", "zero-bubble")
#: how each schedule reads in tables and text
SCHEDULE_LABELS = MappingProxyType({"1f1b": "1F1B", "gpipe": "GPipe",
                                    "interleaved": "interleaved 1F1B",
                                    "zero-bubble": "zero-bubble"})
#: the precision of the matmuls, by the ``fp8`` number: BF16 (the graph's), FP8 for every
#: matmul of the model's layers, or for those of every layer but the first and the last
#: (`moplace.costs.fp8`)
FP8_MODES = ("none", "all", "inner")
#: the most micro-batches a strategy may name
MAX_MICRO_BATCHES = 1024
#: the largest gradient bucket a strategy may name (1 TiB: past any model's gradients)
MAX_BUCKET_BYTES = float(2**40)
