"""Restarts: where a stalled chain goes on from, and which kind of restart is learned to win.

See "Restart" in the package docstring for the kinds and the Thompson sampling among them.
`Restarts` holds the Pareto sets restarts start from and the kinds' record: the searcher calls
`Restarts.record` for every evaluation told and `Restarts.restart` for every chain that has
stalled.
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


class Restarts:
    """The restarts of the chains of an MCMC search on ``space`` (a `GenomeSpace`).

    ``kinds``: the restart kinds allowed (`RESTARTS` names); those that cannot do anything
    (relabel with one device, repair with one op) are dropped, and best is used when none is
    left. ``reweight``: a restart gives the chain new weights. Per kind (in `RESTARTS` order)
    ``tries`` counts the runs started with it and ``wins`` those that found a point of the
    front; ``seen`` is the Pareto set of everything evaluated and ``unfit`` that of the
    infeasible points on their objectives alone (entries carry (genome, evaluation))."""

    def __init__(self, space, n_chains: int, n_objectives: int, kinds, reweight: bool):
        self.space, self.reweight = space, reweight
        self.tries = np.zeros(len(RESTARTS), np.int64)
        self.wins = np.zeros(len(RESTARTS), np.int64)
        # per chain the kind of its current run (-1: the first) and whether it won
        self.run_kind = np.full(n_chains, -1, np.int64)
        self.run_won = np.zeros(n_chains, bool)
        usable = [r for r in kinds
                  if (r != "relabel" or space.n_devices > 1) and (r != "repair" or space.n_ops > 1)]
        self.usable = np.array([RESTARTS.index(r) for r in usable or ["best"]], np.int64)
        self.seen = ParetoArchive(n_objectives, max_infeasible=10)
        self.unfit = ParetoArchive(n_objectives, max_infeasible=0)
        self.front_visits: dict[int, int] = {}  # restarts from each front point (by index)
        self.repair_visits: dict[int, int] = {}  # repairs of each infeasible point (by index)

    def record(self, c: int, x: np.ndarray, ev) -> None:
        """Keep genome ``x`` (evaluated ``ev``, proposed by chain ``c``, -1: a seed) in the
        Pareto sets restarts start from, and credit chain ``c``'s run with a win when it
        enters the front."""
        if ev.violation > 0:
            self.unfit.add(ev.values, 0.0, (x, ev))
        if self.seen.add(ev.values, ev.violation, (x, ev)) and c >= 0 \
                and not self.run_won[c] and self.run_kind[c] >= 0:
            self.run_won[c] = True
            self.wins[self.run_kind[c]] += 1

    def restart(self, c: int, chains, scalarization, rng) -> None:
        """Chain ``c`` of ``chains`` has stalled: a new weight vector in ``scalarization``
        (with ``reweight``), and a new start of the kind chosen by Thompson sampling over the
        kinds' past success (see the package docstring): its best strategy, that strategy
        relabelled, a random one, the best infeasible one to repair, or a point of the front
        under the weights it is best for."""
        chains.restarts[c] += 1
        chains.stalled[c] = 0
        space = self.space
        wins, tries = self.wins[self.usable], self.tries[self.usable]
        kind = int(self.usable[int(np.argmax(rng.beta(wins + 1, tries - wins + 1)))])
        self.tries[kind] += 1
        self.run_kind[c], self.run_won[c] = kind, False
        chains.repairing[c] = False
        start = unfit = None
        if RESTARTS[kind] == "frontier":
            start = _least_visited(self.seen.front, self.front_visits, rng)
        elif RESTARTS[kind] == "repair":  # infeasible points no feasible one dominates
            ref = scalarization.reference
            fits = np.array([e.values for e in self.seen.front]).reshape(-1, ref.size)
            unfit = _least_visited([e for e in self.unfit.front
                                    if not np.any(np.all(fits <= e.values, axis=1))],
                                   self.repair_visits, rng)
        aim = start if start is not None else unfit
        if self.reweight:
            self._reweight(c, aim, chains, scalarization, rng)
        if start is not None:
            chains.genome[c], chains.evaluation[c] = start.payload
            chains.strategy[c] = None
            chains.cost[c] = chains.run_best[c] = scalarization.costs(chains.evaluation[c])[c]
            return
        best = chains.best_genome[c]
        if unfit is not None:
            chains.restart_start[c], chains.repairing[c] = unfit.payload[0], True
        elif RESTARTS[kind] == "random":
            chains.restart_start[c] = space.sample(1, rng)[0]
        elif RESTARTS[kind] == "relabel":
            y = best.copy()
            G = space.n_groups
            y[:G] = _other_permutation(space.n_devices, rng)[best[:G].astype(np.int64)]
            chains.restart_start[c] = y
        else:  # best (and repair when nothing infeasible beats it)
            chains.genome[c] = best
            chains.cost[c] = chains.run_best[c] = chains.best_cost[c]
            chains.strategy[c] = None
            chains.evaluation[c] = chains.best_evaluation[c]

    def _reweight(self, c: int, aim, chains, scalarization, rng) -> None:
        """Chain ``c``'s new weights: those under which ``aim`` (a front or repair point) is
        Chebyshev-optimal, or uniform on the simplex; then its best and costs under them."""
        weights = scalarization.weights
        if aim is not None:  # (an objective at 0 makes any weight right: the floor keeps
            # the others')
            w = 1.0 / np.maximum(aim.values / scalarization.reference, FRONTIER_FLOOR)
            weights[c] = w / w.sum()
        else:
            weights[c] = rng.dirichlet(np.ones(weights.shape[1]))
        entries = self.seen.front or self.seen.infeasible(10)
        costs = [scalarization.costs(e.payload[1])[c] for e in entries]
        k = int(np.argmin(costs))
        chains.best_genome[c], chains.best_evaluation[c] = entries[k].payload
        chains.best_cost[c] = costs[k]
        chains.cost[c] = chains.run_best[c] = scalarization.costs(chains.evaluation[c])[c]


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
