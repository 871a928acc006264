"""Proposals: a chain's next strategy, one move away from its current one (or a few).

See "Moves" in the package docstring for the move kinds and when compound moves are made.
`MovesMixin` holds the moves; `McmcSearcher` mixes it in and calls `_setup_moves` from its
setup, `_propose` (with `_extra`'s probability) from ``ask`` and while stepping through known
proposals.
"""

from __future__ import annotations

import numpy as np

from moplace.core.genome import group_neighbours


class MovesMixin:
    """The proposals of an MCMC searcher.

    Uses the searcher's ``problem``, ``rng``, ``_space`` (the genome space), ``_stalled``
    (per chain, proposals since it improved) and its settings ``move_weights``,
    ``neighbour_prob``, ``adjacent_prob``, ``extra_move`` and ``restart_after``.
    """

    def _setup_moves(self) -> None:
        """Per group its graph neighbours and the groups with more than one split option, the
        group of every op, and the probability of each move kind (None: no move can change
        anything)."""
        p, space = self.problem, self._space
        self._neighbours = group_neighbours(p.graph)
        self._group = p.graph.arrays.group
        G, N, D = space.n_groups, space.n_ops, space.n_devices
        self._splittable = np.array([g for g in range(G) if len(space.options[g]) > 1], np.int64)
        weights = tuple(self.move_weights) + (0.0,) * (4 - len(self.move_weights))
        kinds = np.array(weights) * np.array(
            [G > 0 and D > 1, self._splittable.size > 0, N > 1,
             G > 0 and D >= space.RESIZE_MIN_DEVICES],
            dtype=np.float64)
        self._move_p = kinds / kinds.sum() if kinds.sum() > 0 else None

    def _extra(self, c: int) -> float:
        """Chain ``c``'s probability of one more move per proposal: ``extra_move`` once it
        has gone half of ``restart_after`` proposals without improving, else 0."""
        return self.extra_move if 2 * self._stalled[c] >= self.restart_after else 0.0

    def _propose(self, x: np.ndarray, order_only: bool = False, extra: float = 0.0) -> np.ndarray:
        """A neighbour of ``x``: one move, and with probability ``extra`` each one more (see
        the package docstring)."""
        y = self._move(x, order_only)
        while extra > 0 and self.rng.random() < extra:
            y = self._move(y, order_only)
        return y

    def _move(self, x: np.ndarray, order_only: bool = False) -> np.ndarray:
        """``x`` changed by one move; with ``order_only`` a priority swap (a repairing chain
        keeps its placement and splits)."""
        space, rng = self._space, self.rng
        G, N, D = space.n_groups, space.n_ops, space.n_devices
        y = x.copy()
        kind = 2 if order_only else rng.choice(self._move_p.size, p=self._move_p)
        if kind == 3:  # the whole strategy onto a run of devices of another length
            return space.random_resize(y, rng)
        if kind == 0:  # one group to another device
            g = int(rng.integers(G))
            here = int(y[g])
            near = [int(y[h]) for h in self._neighbours[g] if int(y[h]) != here]
            if near and rng.random() < self.neighbour_prob:
                y[g] = near[int(rng.integers(len(near)))]
            else:
                y[g] = (here + 1 + int(rng.integers(D - 1))) % D
        elif kind == 1:  # one group's split option
            g = int(self._splittable[int(rng.integers(self._splittable.size))])
            n_opt = len(space.options[g])
            y[G + g] = (int(y[G + g]) + 1 + int(rng.integers(n_opt - 1))) % n_opt
        else:  # swap two ops' priorities, preferably two on the same device
            group = self.problem.graph.arrays.group
            i = int(rng.integers(N))
            same = np.flatnonzero(y[:G][group] == y[group[i]])
            same = same[same != i]
            if same.size and rng.random() < self.adjacent_prob:  # next in the device's order
                gap = y[2 * G + same] - y[2 * G + i]
                side = gap > 0 if rng.random() < 0.5 else gap < 0
                if not side.any():
                    side = ~side
                cand = same[side]
                j = int(cand[int(np.argmin(np.abs(gap[side])))])
            elif same.size:
                j = int(same[int(rng.integers(same.size))])
            else:
                j = (i + 1 + int(rng.integers(N - 1))) % N
            y[2 * G + i], y[2 * G + j] = y[2 * G + j], y[2 * G + i]
        return y

