"""Restarts: where a stalled chain goes on from, and which kind of restart is learned to win.

See "Restart" in the package docstring for the kinds and the Thompson sampling among them.
`RestartMixin` holds the Pareto sets restarts start from and the kinds' record;
`McmcSearcher` mixes it in and calls `_setup_restarts` from its setup, `_record` for every
evaluation told, and `_restart` for every chain that has stalled.
"""

from __future__ import annotations

import numpy as np

from moplace.optimize.archive import ParetoArchive

#: How a stalled chain can restart: from its best strategy, from it relabelled, from a random
#: one, from the best strategy that does not fit (to repair its op order), or from a point of
#: the front.
RESTARTS = ("best", "relabel", "random", "repair", "frontier")
#: Smallest normalized objective value a frontier restart's weights are computed from.
FRONTIER_FLOOR = 0.01


class RestartMixin:
    """The restarts of an MCMC searcher.

    Uses the searcher's ``problem``, ``rng``, ``chains``, ``restart_kinds``, ``reweight``,
    ``_space``, ``_scale``, ``_weights`` and ``_costs`` (costs under the chains' weights), and
    the chain state it resets: ``_x``, ``_x_ev``, ``_base``, ``_cost``, ``_run_best``,
    ``_stalled``, ``_jump`` (a restart's strategy to evaluate next) and the best so far per
    chain ``_best_x``, ``_best_ev``, ``_best_cost``.
    """

    def _setup_restarts(self) -> None:
        """No restart yet; every usable kind (``restart_kinds`` but relabel with one device
        and repair with one op; best when none is left) may be drawn."""
        p, space = self.problem, self._space
        N, D = space.n_ops, space.n_devices
        # restart kinds (RESTARTS order): runs started with each, and runs that found a point
        # of the front; per chain the kind of its current run (-1: the first) and its success
        self.restart_tries = np.zeros(len(RESTARTS), np.int64)
        self.restart_wins = np.zeros(len(RESTARTS), np.int64)
        self._run_kind = np.full(self.chains, -1, np.int64)
        self._run_won = np.zeros(self.chains, bool)
        usable = [r for r in self.restart_kinds
                  if (r != "relabel" or D > 1) and (r != "repair" or N > 1)]
        self._kinds = np.array([RESTARTS.index(r) for r in usable or ["best"]], np.int64)
        # the Pareto set of everything evaluated, entries carrying (genome, evaluation)
        self._seen = ParetoArchive(len(p.objectives), max_infeasible=10)
        # the infeasible points seen, Pareto-filtered on their objectives alone: where a
        # repair restart starts; per chain, whether it is repairing (order moves only)
        self._unfit = ParetoArchive(len(p.objectives), max_infeasible=0)
        self._repairing = np.zeros(self.chains, bool)
        self._visits: dict[int, int] = {}  # restarts from each front point (by archive index)
        self._repairs: dict[int, int] = {}  # repairs of each infeasible point (by _unfit index)

    def _record(self, c: int, x: np.ndarray, ev) -> None:
        """Keep genome ``x`` (evaluated ``ev``, proposed by chain ``c``, -1: a seed) in the
        Pareto sets restarts start from, and credit chain ``c``'s run with a win when it
        enters the front."""
        if ev.violation > 0:
            self._unfit.add(ev.values, 0.0, (x, ev))
        if self._seen.add(ev.values, ev.violation, (x, ev)) and c >= 0 \
                and not self._run_won[c] and self._run_kind[c] >= 0:
            self._run_won[c] = True
            self.restart_wins[self._run_kind[c]] += 1

    def _restart(self, c: int) -> None:
        """Chain ``c`` has stalled: a new weight vector (with ``reweight``), and a new start of
        the kind chosen by Thompson sampling over the kinds' past success (see the package
        docstring): its best strategy, that strategy relabelled, a random one, the best
        infeasible one to repair, or a point of the front under the weights it is best for."""
        self.restarts[c] += 1
        self._stalled[c] = 0
        space, rng = self._space, self.rng
        wins, tries = self.restart_wins[self._kinds], self.restart_tries[self._kinds]
        kind = int(self._kinds[int(np.argmax(rng.beta(wins + 1, tries - wins + 1)))])
        self.restart_tries[kind] += 1
        self._run_kind[c], self._run_won[c] = kind, False
        self._repairing[c] = False
        start = unfit = None
        if RESTARTS[kind] == "frontier":
            start = _least_visited(self._seen.front, self._visits, self.rng)

        elif RESTARTS[kind] == "repair":  # infeasible points no feasible one dominates
            fits = np.array([e.values for e in self._seen.front]).reshape(-1, self._scale.size)
            unfit = _least_visited([e for e in self._unfit.front
                                    if not np.any(np.all(fits <= e.values, axis=1))],
                                   self._repairs, self.rng)
        aim = start if start is not None else unfit
        if self.reweight:
            if aim is not None:  # weights under which the point is Chebyshev-optimal
                # (an objective at 0 makes any weight right: the floor keeps the others')
                w = 1.0 / np.maximum(aim.values / self._scale, FRONTIER_FLOOR)
                self._weights[c] = w / w.sum()
            else:
                self._weights[c] = rng.dirichlet(np.ones(self._weights.shape[1]))
            entries = self._seen.front or self._seen.infeasible(10)
            costs = [self._costs(e.payload[1])[c] for e in entries]
            k = int(np.argmin(costs))
            self._best_x[c], self._best_ev[c] = entries[k].payload
            self._best_cost[c] = costs[k]
            self._cost[c] = self._run_best[c] = self._costs(self._x_ev[c])[c]  # new weights
        if start is not None:
            self._x[c], self._x_ev[c] = start.payload
            self._base[c] = None
            self._cost[c] = self._run_best[c] = self._costs(self._x_ev[c])[c]
            return
        best = self._best_x[c]
        if unfit is not None:
            self._jump[c], self._repairing[c] = unfit.payload[0], True
        elif RESTARTS[kind] == "random":
            self._jump[c] = space.sample(1, rng)[0]
        elif RESTARTS[kind] == "relabel":
            y = best.copy()
            G = space.n_groups
            y[:G] = _other_permutation(space.n_devices, rng)[best[:G].astype(np.int64)]
            self._jump[c] = y
        else:  # best (and repair when nothing infeasible beats it)
            self._x[c] = best
            self._cost[c] = self._run_best[c] = self._best_cost[c]
            self._base[c] = None
            self._x_ev[c] = self._best_ev[c]


def _least_visited(entries, visits: dict, rng):
    """One of ``entries`` (archive entries) restarted from least often, random among them, its
    count in ``visits`` (by entry index) raised; None when there are none."""
    if not entries:
        return None
    counts = np.array([visits.get(e.index, 0) for e in entries])
    least = np.flatnonzero(counts == counts.min())
    entry = entries[int(least[int(rng.integers(least.size))])]
    visits[entry.index] = visits.get(entry.index, 0) + 1
    return entry


def _other_permutation(n: int, rng) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` other than the identity (n >= 2)."""
    while True:
        p = rng.permutation(n)
        if np.any(p != np.arange(n)):
            return p
