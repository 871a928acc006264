"""Proposals: a chain's next strategy, one move away from its current one (or a few).

See "Moves" in the package docstring for the move kinds and when compound moves are made.
"""

from __future__ import annotations

import numpy as np

from moplace.core.genome import group_neighbours


class Moves:
    """The moves on the genomes of ``space`` (a `GenomeSpace` of ``graph``).

    ``move_weights``: the odds of a device move, a split move, a priority swap and a device-set
    resize (a missing fourth is 0); kinds that cannot change anything are never drawn, and
    ``possible`` is False when no kind can. ``neighbour_prob``: the odds that a device move
    goes to a graph neighbour's device; ``adjacent_prob``: that a swap takes the op next in its
    device's order."""

    def __init__(self, space, graph, move_weights, neighbour_prob: float, adjacent_prob: float):
        self.space, self.neighbour_prob, self.adjacent_prob = space, neighbour_prob, adjacent_prob
        self.neighbours = group_neighbours(graph)
        self.group = graph.arrays.group  # each op's co-location group
        G, N, D = space.n_groups, space.n_ops, space.n_devices
        self.splittable = np.array([g for g in range(G) if len(space.options[g]) > 1], np.int64)
        #: the split move also changes a strategy-wide lever (`GenomeSpace.lever_genes`: the
        #: gradient bucket size, the ZeRO stage, whether a group is recomputed)
        self.levers = space.lever_genes.size
        weights = tuple(move_weights) + (0.0,) * (4 - len(move_weights))
        kinds = np.array(weights) * np.array(
            [G > 0 and D > 1,
             self.splittable.size > 0 or self.levers > 0,
             N > 1,
             G > 0 and D >= space.RESIZE_MIN_DEVICES],
            dtype=np.float64)
        #: the probability of each move kind (None: no move can change anything)
        self.kind_p = kinds / kinds.sum() if kinds.sum() > 0 else None

    @property
    def possible(self) -> bool:
        return self.kind_p is not None

    def propose(self, x: np.ndarray, rng, order_only: bool = False,
                extra: float = 0.0) -> np.ndarray:
        """A neighbour of ``x``: one move, and with probability ``extra`` each one more; with
        ``order_only`` priority swaps only (a repairing chain keeps placement and splits)."""
        y = self.move(x, rng, order_only)
        while extra > 0 and rng.random() < extra:
            y = self.move(y, rng, order_only)
        return y

    def move(self, x: np.ndarray, rng, order_only: bool = False) -> np.ndarray:
        """``x`` changed by one move (a priority swap with ``order_only``)."""
        space = self.space
        G, N, D = space.n_groups, space.n_ops, space.n_devices
        y = x.copy()
        kind = 2 if order_only else rng.choice(self.kind_p.size, p=self.kind_p)
        if kind == 3:  # the whole strategy onto a run of devices of another length
            return space.random_resize(y, rng)
        if kind == 0:  # one group to another device
            g = int(rng.integers(G))
            here = int(y[g])
            near = [int(y[h]) for h in self.neighbours[g] if int(y[h]) != here]
            if near and rng.random() < self.neighbour_prob:
                y[g] = near[int(rng.integers(len(near)))]
            else:
                y[g] = (here + 1 + int(rng.integers(D - 1))) % D
        elif kind == 1:  # one group's split option, or a strategy-wide lever
            n_split = self.splittable.size
            pick = int(rng.integers(n_split + self.levers))
            if pick >= n_split:
                space.other_lever_value(y, pick - n_split, rng)
                return y
            g = int(self.splittable[pick])
            n_opt = len(space.options[g])
            y[G + g] = (int(y[G + g]) + 1 + int(rng.integers(n_opt - 1))) % n_opt
        else:  # swap two ops' priorities, preferably two on the same device
            group = self.group
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
