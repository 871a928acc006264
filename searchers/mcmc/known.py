"""Known proposals: a proposal whose genome was evaluated before is answered from memory.

See "Known proposals" in the package docstring. `KnownMixin` holds the memory and the walk
through known proposals; `McmcSearcher` mixes it in and calls `_setup_known` from its setup,
`_walk_known` for each chain from ``ask`` and `_remember` for every evaluation told.
"""

from __future__ import annotations

import hashlib

import numpy as np

from moplace.optimize.known import KnownEvaluations

#: Most genomes whose evaluation a search remembers (the oldest are forgotten first).
KNOWN_LIMIT = 200_000


class KnownMixin:
    """The memory of evaluated genomes of an MCMC searcher.

    Uses the searcher's ``chains``, ``known_steps``, the chain state ``_x``, ``_jump`` and
    ``_repairing``, and its ``_propose``, ``_extra``, ``_costs``, ``_step``, ``_take`` and
    ``_restart``.
    """

    def _setup_known(self) -> None:
        """Nothing remembered yet."""
        # the objective values and violation of every genome evaluated (by a digest of its
        # bytes), and per chain a proposal drawn while stepping through known ones
        self._known = KnownEvaluations(KNOWN_LIMIT)
        self._next: list[np.ndarray | None] = [None] * self.chains
        self.known_taken = 0  # proposals answered from _known instead of simulated

    def _walk_known(self, c: int) -> None:
        """Step chain ``c`` through proposals whose genome was evaluated before, answering
        each from memory (the simulator is deterministic, so the chain is the same
        Metropolis-Hastings chain it would be if they were simulated again), until it draws
        one never evaluated (kept in ``_next[c]``) or has taken ``known_steps`` such steps.
        A restart's strategy that is known is taken from memory as well."""
        for _ in range(self.known_steps):
            jump = self._jump[c]
            if jump is not None:
                ev = self._known.get(_digest(jump))
                if ev is None:
                    return
                self._jump[c] = None
                self._take(c, jump, ev, self._costs(ev)[c])
                self.known_taken += 1
                continue
            y = self._propose(self._x[c], self._repairing[c], self._extra(c))
            ev = self._known.get(_digest(y))
            if ev is None:
                self._next[c] = y
                return
            self.known_taken += 1
            if self._step(c, y, ev, self._costs(ev)[c]):
                self._restart(c)

    def _remember(self, x: np.ndarray, ev) -> None:
        """Remember genome ``x``'s evaluation ``ev`` (when known proposals are on)."""
        if self.known_steps:
            self._known.add(_digest(x), ev)


def _digest(x: np.ndarray) -> bytes:
    """The key a genome's evaluation is remembered by: a 16-byte digest of its bytes."""
    return hashlib.blake2b(x.tobytes(), digest_size=16).digest()
