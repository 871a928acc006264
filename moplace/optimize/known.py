"""Evaluations a searcher has seen, by key, so that it need not simulate a strategy twice.

The simulator is deterministic: a strategy simulated once needs no second simulation.
Searchers that often propose what they have tried before (MCMC chains stepping back and
forth, optuna's samplers re-drawing a configuration) keep its objective values and
violation here and spend their evaluation budget on new strategies only. The key is the
caller's: a digest of a genome, or `Strategy.simulation_key`, which is shared by strategies
that simulate alike. Only the values are kept (no trace), and at most ``limit`` entries, the
oldest forgotten first.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Known(NamedTuple):
    """What a searcher needs of an evaluation it has seen."""

    values: np.ndarray
    violation: float


class KnownEvaluations:
    """A bounded map from key (bytes) to `Known`, counting the look-ups it answered."""

    def __init__(self, limit: int = 200_000):
        self.limit = int(limit)
        self.hits = 0
        self._known: dict[bytes, Known] = {}

    def __len__(self) -> int:
        return len(self._known)

    def get(self, key: bytes) -> Known | None:
        known = self._known.get(key)
        if known is not None:
            self.hits += 1
        return known

    def add(self, key: bytes, evaluation) -> None:
        """Remember ``evaluation`` (anything with ``values`` and ``violation``) under ``key``."""
        if key in self._known or self.limit <= 0:
            return
        if len(self._known) >= self.limit:
            del self._known[next(iter(self._known))]
        self._known[key] = Known(np.asarray(evaluation.values, dtype=np.float64),
                                 float(evaluation.violation))
