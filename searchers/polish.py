"""Front polish: one-step genome neighbours of each new front point, for a searcher whose own
proposals are not local moves (the RL policies: `searchers.rl.agent`).

A policy draws whole placements; it rarely proposes the small change that makes a front point
faster, leaner or a fit, and its fronts fell below random search's hypervolume on some graphs
(hierarchical on pipedream:gnmt, 4 V100s, 2,000 evaluations: 0.143 against random's 0.231).
`FrontPolish` climbs the front locally, as TPE's polish does (`searchers.optuna_search.polish`):

- **What is polished.** Each told strategy that enters the Pareto set of the feasible ones told,
  or an infeasible one that enters the Pareto set of the infeasible ones (on objectives alone)
  and that no feasible one dominates (its order or a move may make it fit). A strategy the
  genome cannot encode (parts on devices that are not consecutive) is counted, not polished.
- **Its neighbours.** Its placement in the standard orders (`searchers.orders.StandardOrders`:
  topological, memory-lean, HEFT's upward rank under that placement), the first time that
  placement is polished, and ``per_point`` one-step neighbours drawn at random, each move kind
  equally likely among those that can change something: two ops of one device near each other
  in its order (8 places at most) swapped (`swap_pairs`); one co-location group moved to another device (half the
  time to the device of a group it exchanges tensors with); one group's split option changed;
  two devices trading all their groups; the whole strategy moved onto a run of devices of
  another length (`GenomeSpace.random_resize`, on 4 devices or more); a share of the groups
  scattered; one strategy-wide lever changed (the gradient bucket size, the ZeRO stage, or one
  group recomputed or not). Strategies told or queued before are skipped.
- **Asking.** The queue (at most ``queue``, the oldest dropped) is taken newest first, so a
  polish that improves is polished in turn before older points; `due` says whether the
  searcher should spend its next batch on it: while polish has taken less than ``share`` of the
  evaluations told. Polish evaluations are ordinary evaluations: they count against the budget.
"""

from __future__ import annotations

import hashlib
from collections import deque

import numpy as np

from moplace.core.genome import GenomeSpace, group_neighbours
from moplace.errors import StrategyError
from moplace.optimize.archive import ParetoArchive
from searchers.orders import StandardOrders, swap_pairs

_KINDS = ("swap", "move", "split", "relabel", "resize", "scatter", "lever")
#: The shares of groups a scatter move sends to random devices, drawn with equal odds.
SCATTER_RATES = (0.05, 0.1, 0.25, 0.5)


class FrontPolish:
    """The polish queue of one search (see the module docstring)."""

    def __init__(self, problem, rng: np.random.Generator, *, share: float, per_point: int = 8,
                 queue: int = 256):
        self.problem, self.rng = problem, rng
        self.share, self.per_point, self.max_queue = float(share), int(per_point), int(queue)
        self.space: GenomeSpace = problem.genome
        m = len(problem.objectives)
        self._fits = ParetoArchive(m, max_infeasible=0)
        self._unfit = ParetoArchive(m, max_infeasible=0)
        self._queue: deque = deque()  # (simulation key, strategy), the newest last
        self._queued: set[bytes] = set()
        self._told: set[bytes] = set()
        self._placements: set[bytes] = set()
        self._orders: StandardOrders | None = None
        self._neighbours: list[np.ndarray] | None = None  # made on the first move of a group
        s = self.space
        G, N, D = s.n_groups, s.n_ops, s.n_devices
        self._splittable = [g for g in range(G) if len(s.options[g]) > 1]
        able = {"swap": N > 1, "move": G > 0 and D > 1, "split": bool(self._splittable),
                "relabel": G > 0 and D > 1, "resize": G > 0 and D >= s.RESIZE_MIN_DEVICES,
                "scatter": G > 1 and D > 1, "lever": False}
        #: what a lever move picks among (`GenomeSpace.lever_genes`, by first index and count):
        #: the bucket size, the ZeRO stage, the recompute genes as one
        n_rec = s.recompute_heads.size
        wide = s.lever_genes.size - n_rec
        self._levers = [(k, 1) for k in range(wide)] + ([(wide, n_rec)] if n_rec else [])
        able["lever"] = bool(self._levers)
        #: the move kinds that can change something on this problem
        self.kinds = [k for k in _KINDS if able[k]]
        self.asked = 0  # polish strategies asked
        self.told = 0  # evaluations told (all of them, polish or not)
        self.polished = 0  # points polished
        self.unencodable = 0  # front points with no genome, not polished

    # -- asking ---------------------------------------------------------------------------------
    def due(self) -> bool:
        """True when strategies are waiting and polish has taken less than ``share`` of the
        evaluations told."""
        return bool(self._queue) and self.asked < self.share * max(self.told, 1)

    def take(self, n: int) -> list:
        """Up to ``n`` queued strategies, the newest first, skipping any told meanwhile."""
        out = []
        while self._queue and len(out) < n:
            key, strategy = self._queue.pop()
            self._queued.discard(key)
            if key not in self._told:
                out.append(strategy)
        self.asked += len(out)
        return out

    # -- telling --------------------------------------------------------------------------------
    def tell(self, strategies, evaluations) -> None:
        """Record what was evaluated and queue the neighbours of each point worth polishing."""
        for strategy, ev in zip(strategies, evaluations):
            self._told.add(strategy.simulation_key)
            self.told += 1
            if self._worth_polishing(ev):
                self._polish(strategy)

    def _worth_polishing(self, ev) -> bool:
        return worth_polishing(self._fits, self._unfit, ev)

    def _polish(self, strategy) -> None:
        try:
            x = self.space.encode(strategy)
        except StrategyError:
            self.unencodable += 1
            return
        self.polished += 1
        kinds, pairs = self.kinds, None
        for _ in range(self.per_point if kinds else 0):
            kind = kinds[int(self.rng.integers(len(kinds)))]
            if kind == "swap" and pairs is None:
                pairs = swap_pairs(strategy.placement, strategy.priority)
            y = self._move(x, kind, pairs)
            if y is not None:
                self._offer(self.space.decode(y))
        digest = hashlib.blake2b(strategy.placement.tobytes(), digest_size=16).digest()
        if digest not in self._placements:  # queued last: asked first
            self._placements.add(digest)
            if self._orders is None:
                self._orders = StandardOrders(self.problem)
            for priority in self._orders(strategy.placement):
                y = x.copy()
                y[self.space.priorities] = priority
                self._offer(self.space.decode(y))

    def _move(self, x: np.ndarray, kind: str, pairs) -> np.ndarray | None:
        """``x`` changed by one move of ``kind`` (``pairs``: the swappable pairs of its order,
        for a swap); None when that move has nothing to change."""
        s, rng = self.space, self.rng
        G, D = s.n_groups, s.n_devices
        y = x.copy()
        if kind == "swap":
            if not pairs:
                return None
            i, j = pairs[int(rng.integers(len(pairs)))]
            y[2 * G + i], y[2 * G + j] = x[2 * G + j], x[2 * G + i]
        elif kind == "move":
            g = int(rng.integers(G))
            here = int(x[g])
            if self._neighbours is None:
                self._neighbours = group_neighbours(self.problem.graph)
            near = [int(x[h]) for h in self._neighbours[g] if int(x[h]) != here]
            y[g] = near[int(rng.integers(len(near)))] if near and rng.random() < 0.5 \
                else (here + 1 + int(rng.integers(D - 1))) % D
        elif kind == "split":
            g = self._splittable[int(rng.integers(len(self._splittable)))]
            n = len(s.options[g])
            y[G + g] = (int(x[G + g]) + 1 + int(rng.integers(n - 1))) % n
        elif kind == "relabel":
            d = int(rng.integers(D))
            e = (d + 1 + int(rng.integers(D - 1))) % D
            dev = x[:G].copy()
            y[:G][dev == d], y[:G][dev == e] = e, d
        elif kind == "resize":
            y = s.random_resize(x, rng)
        elif kind == "lever":  # another bucket size or ZeRO stage, or one group recomputed
            first, count = self._levers[int(rng.integers(len(self._levers)))]
            s.other_lever_value(y, first + int(rng.integers(count)), rng)
        else:  # scatter: a share of the groups to random devices
            rate = SCATTER_RATES[int(rng.integers(len(SCATTER_RATES)))]
            hit = rng.random(G) < rate
            y[:G][hit] = rng.integers(D, size=int(hit.sum()))
        return y

    def _offer(self, strategy) -> None:
        key = strategy.simulation_key
        if key in self._told or key in self._queued:
            return
        if len(self._queue) == self.max_queue:
            self._queued.discard(self._queue.popleft()[0])
        self._queue.append((key, strategy))
        self._queued.add(key)

    def note(self) -> str | None:
        """What polish did, for the search's notes."""
        if not self.polished and not self.unencodable:
            return None
        out = f"polish: {self.asked} evaluations around {self.polished} front points"
        if self.unencodable:
            out += f" ({self.unencodable} front points with no genome were not polished)"
        return out


def worth_polishing(fits: ParetoArchive, unfit: ParetoArchive, ev) -> bool:
    """Whether evaluation ``ev`` is worth polishing (added to ``fits`` or ``unfit``, the Pareto
    sets of the feasible and the infeasible ones told, as it goes): a feasible one that enters
    ``fits``, or an infeasible one that enters ``unfit`` (on objectives alone) and that no
    feasible one dominates (its order or a move may make it fit)."""
    if ev.violation == 0:
        return fits.add(ev.values)
    front = fits.front_values().reshape(-1, len(ev.values))
    return not np.any(np.all(front <= ev.values, axis=1)) and unfit.add(ev.values)
