"""What running a strategy for real on a testbed gave, whichever front end ran it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ApplyResult"]


@dataclass
class ApplyResult:
    """What running a strategy for real gave (times in seconds): whether it could run (else
    ``reason``), ``notes`` on what differs from the plan, each timed step's seconds (the
    slowest rank's, where several ran it: ``rank_seconds`` has each rank's), the loss of every
    step run (warm-up included), and the peak memory and largest kernel scratch per device
    where the front end measures them."""

    expressible: bool
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    peak_memory_bytes: dict[str, int] = field(default_factory=dict)  # see moplace.tf.memory
    scratch_bytes: dict[str, int] = field(default_factory=dict)  # largest kernel scratch
    rank_seconds: list[list[float]] = field(default_factory=list)  # per rank, per timed step
    machine_speed: float = 1.0  # `at_speed`'s factor (1: as the clock said)

    def at_speed(self, slower: float) -> "ApplyResult":
        """This result with its steps scaled to another speed of the machine: ``slower`` is
        how much slower the machine ran them than at the reference (a probe's ratio, on a
        machine other jobs share); the clock's steps are ``step_seconds`` times
        ``machine_speed``, and ``rank_seconds`` stay as it said."""
        from dataclasses import replace

        return replace(self, step_seconds=[s / slower for s in self.step_seconds],
                       machine_speed=slower)

    @property
    def spread_s(self) -> tuple[float, float] | None:
        """The 10th and 90th percentiles of the timed steps (seconds)."""
        if not self.step_seconds:
            return None
        q = np.percentile(self.step_seconds, [10, 90])
        return float(q[0]), float(q[1])

    @property
    def measured_step_s(self) -> float | None:
        return statistics.median(self.step_seconds) if self.step_seconds else None

    @property
    def trained(self) -> bool:
        """True when the loss changed over the run (the update ops really ran)."""
        return len(set(np.round(self.losses, 7))) > 1
