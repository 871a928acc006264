"""Known proposals: a proposal whose genome was evaluated before is answered from memory.

See "Known proposals" in the package docstring: `KnownGenomes` is the memory (a digest of each
genome's bytes and its objective values); the searcher steps its chains through known
proposals.
"""

from __future__ import annotations

import hashlib

import numpy as np

from moplace.optimize.known import KnownEvaluations

#: Most genomes whose evaluation a search remembers (the oldest are forgotten first).
KNOWN_LIMIT = 200_000


class KnownGenomes:
    """The evaluations of the genomes told, by genome; ``taken`` counts the proposals
    answered from memory instead of simulated. ``on=False`` remembers nothing."""

    def __init__(self, on: bool = True, limit: int = KNOWN_LIMIT):
        self.on = on
        self.evaluations = KnownEvaluations(limit)
        self.taken = 0

    def get(self, x: np.ndarray):
        """The remembered evaluation of genome ``x`` (values and violation), or None."""
        return self.evaluations.get(_digest(x))

    def add(self, x: np.ndarray, ev) -> None:
        """Remember genome ``x``'s evaluation ``ev``."""
        if self.on:
            self.evaluations.add(_digest(x), ev)


def _digest(x: np.ndarray) -> bytes:
    """The key a genome's evaluation is remembered by: a 16-byte digest of its bytes."""
    return hashlib.blake2b(x.tobytes(), digest_size=16).digest()
