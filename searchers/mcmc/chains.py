"""The chains' state, their costs and their Metropolis-Hastings steps.

`Scalarization` turns an evaluation into a cost per chain (the augmented Chebyshev
scalarization under the chain's weights, plus the penalty of an infeasible strategy);
`Chains` holds where each chain is and what it has found, and makes its steps.
"""

from __future__ import annotations

import numpy as np


class Scalarization:
    """Costs under each chain's weight vector: ``max_k w_k f_k / ref_k + rho * sum_k w_k f_k /
    ref_k``, plus ``penalty * (1 + violation / capacity)`` for an infeasible strategy.

    ``weights`` [chains, objectives] change when a chain restarts with new weights."""

    def __init__(self, weights: np.ndarray, reference, rho: float, penalty: float,
                 capacity: float):
        self.weights = weights
        self.reference = np.asarray(reference, dtype=np.float64)
        self.rho, self.penalty, self.capacity = rho, penalty, capacity

    def scalar(self, values) -> np.ndarray:
        """Objective values scalarized under every chain's weights [chains] (no penalty)."""
        wf = self.weights * (np.asarray(values, dtype=np.float64) / self.reference)
        return wf.max(axis=1) + self.rho * wf.sum(axis=1)

    def costs(self, ev) -> np.ndarray:
        """The evaluation's cost under every chain's weights [chains]."""
        cost = self.scalar(ev.values)
        if ev.violation > 0:
            cost = cost + self.penalty * (1.0 + ev.violation / self.capacity)
        return cost


class Chains:
    """Where each of ``n`` chains is, and what it has found.

    Per chain ``c``: ``genome[c]`` (None before the seeds are told), its ``evaluation[c]``,
    its ``strategy[c]`` when the chain holds the strategy object that was evaluated (the
    parent its proposals name; None otherwise), its ``cost[c]`` under its weights, the best
    cost since it (re)started ``run_best[c]`` and the proposals since that improved
    ``stalled[c]``; ``restart_start[c]``, a restart's genome to evaluate next, and
    ``drawn[c]``, a proposal drawn while stepping through known ones (None: none waiting);
    ``repairing[c]`` (order moves only until it fits); the best genome under its weights
    seen by any chain (``best_genome``, ``best_evaluation``, ``best_cost``); and the counts
    ``accepted``, ``proposed`` and ``restarts``.
    """

    def __init__(self, n: int):
        self.n = n
        self.genome: list[np.ndarray | None] = [None] * n
        self.evaluation: list = [None] * n
        self.strategy: list = [None] * n
        self.cost = np.full(n, np.inf)
        self.run_best = np.full(n, np.inf)
        self.stalled = np.zeros(n, np.int64)
        self.restart_start: list[np.ndarray | None] = [None] * n
        self.drawn: list[np.ndarray | None] = [None] * n
        self.repairing = np.zeros(n, bool)
        self.best_genome: list[np.ndarray | None] = [None] * n
        self.best_evaluation: list = [None] * n
        self.best_cost = np.full(n, np.inf)
        self.accepted = np.zeros(n, np.int64)
        self.proposed = np.zeros(n, np.int64)
        self.restarts = np.zeros(n, np.int64)

    @property
    def started(self) -> bool:
        """True once the chains have their first strategies (the seeds were told)."""
        return self.genome[0] is not None

    def __getstate__(self) -> dict:
        """What a checkpoint keeps: not the strategy objects (after a resume a chain's next
        proposal names no parent and is simulated in full, with the same result)."""
        state = dict(vars(self))
        state["strategy"] = [None] * self.n
        return state

    def start(self) -> None:
        """Every chain goes on from the best seen under its weights (after the seeds)."""
        self.genome, self.evaluation = list(self.best_genome), list(self.best_evaluation)
        self.cost = self.best_cost.copy()
        self.run_best = self.best_cost.copy()

    def note_best(self, x: np.ndarray, ev, cost: np.ndarray) -> None:
        """Genome ``x`` (evaluated ``ev``, costing ``cost`` [chains]) becomes the best of every
        chain it is cheaper for."""
        for c in np.flatnonzero(cost < self.best_cost):
            self.best_genome[c], self.best_cost[c], self.best_evaluation[c] = x, cost[c], ev

    def take(self, c: int, x: np.ndarray, ev, cost: float, strategy=None) -> None:
        """Chain ``c`` goes on from a restart's genome ``x``, whatever it costs."""
        self.genome[c], self.evaluation[c], self.strategy[c] = x, ev, strategy
        self.cost[c] = self.run_best[c] = cost
        self.stalled[c] = 0

    def step(self, c: int, x: np.ndarray, ev, cost: float, strategy, temperature: float,
             restart_after: int, rng) -> bool:
        """Chain ``c``'s Metropolis-Hastings test of proposal ``x`` (evaluated ``ev``, costing
        ``cost`` under its weights; ``strategy``: the object evaluated, or None); True when
        the chain has now stalled."""
        self.proposed[c] += 1
        delta = cost - self.cost[c]
        if delta <= 0 or rng.random() < np.exp(-delta / temperature):
            self.genome[c], self.cost[c], self.evaluation[c] = x, cost, ev
            self.strategy[c] = strategy
            self.accepted[c] += 1
            if ev.violation == 0:  # repaired: every kind of move again
                self.repairing[c] = False
        if cost < self.run_best[c]:
            self.run_best[c], self.stalled[c] = cost, 0
            return False
        self.stalled[c] += 1
        return self.stalled[c] >= restart_after
