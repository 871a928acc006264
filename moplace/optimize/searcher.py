"""The searcher contract: propose strategies, learn from their evaluations.

A searcher never logs or keeps the budget and does not simulate for itself: `moplace.search`
asks it for strategies, evaluates them on the shared `Problem`, and tells it the results. (The
one exception: a list-scheduling heuristic simulates its one schedule to check it against the
no-split baselines, which the problem has simulated already, and returns the faster.) This is the ask/tell shape
of optuna's samplers and pymoo's algorithms, and it is what makes searchers interchangeable
and their fronts comparable point by point.

A one-shot heuristic (HEFT, DPOS, a baseline) answers its first `ask` and then returns an
empty list, which tells the driver it is done. Searchers are found by name through entry points
(`moplace.optimize.plugins`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from ..core.strategy import Strategy
from ..simulator.evaluation import Evaluation


class Searcher(ABC):
    """Base class of all searchers; subclasses implement `ask` (and usually `tell`)."""

    name = "searcher"
    #: True for a searcher whose first batch is every seed of
    #: `searchers.listsched.seeds.seed_strategies` with its default settings: its front then
    #: weakly dominates every feasible seed (the contract suite holds it to that)
    seeded = False

    def setup(self, problem, rng: np.random.Generator) -> None:
        """Called once by the driver before the first `ask`."""
        self.problem, self.rng = problem, rng
        self._setup()

    def _setup(self) -> None:
        """Hook for subclasses: prepare for `problem` (available as ``self.problem``)."""

    @abstractmethod
    def ask(self) -> list[Strategy]:
        """The next strategies to evaluate; an empty list means the searcher is done."""

    def tell(self, strategies: Sequence[Strategy], evaluations: Sequence[Evaluation]) -> None:
        """Learn from the evaluations of the strategies of the last `ask`."""

    def settings(self) -> dict:
        """The searcher's settings, for logs and reports."""
        return {}

    def notes(self) -> list[str]:
        """What the user should know about how this search went, one sentence each (a
        heuristic that fell back to a baseline, say); printed by the command line."""
        return []

    def progress(self) -> dict[str, float]:
        """Numbers about the searcher's own learning after the last `tell` (a learning
        searcher's reward, loss, entropy...), which tracking callbacks log per batch."""
        return {}

    def close(self) -> None:
        """Called once by the driver when the search ends, however it ends (write what the
        searcher keeps beyond the search, such as a trained policy)."""


class OneShot(Searcher):
    """A searcher that proposes one strategy computed by `propose` and is then done."""

    def _setup(self) -> None:
        self._done = False

    def ask(self) -> list[Strategy]:
        if self._done:
            return []
        self._done = True
        return [self.propose()]

    @abstractmethod
    def propose(self) -> Strategy:
        """The one strategy."""
