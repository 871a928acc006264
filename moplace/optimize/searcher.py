"""The searcher contract: propose strategies, learn from their evaluations.

A searcher never logs or keeps the budget and does not simulate for itself: `moplace.search`
asks it for strategies, evaluates them on the shared `Problem`, and tells it the results. (The
one exception: a list-scheduling heuristic simulates its one schedule to check it against the
no-split baselines, which the problem has simulated already, and returns the faster.) This is the ask/tell shape
of optuna's samplers and pymoo's algorithms, and it is what makes searchers interchangeable
and their fronts comparable point by point.

A proposal may name its *parent*, the evaluated strategy it was derived from by a small change
(`Proposal`): the evaluator then simulates it on the parent's task graph, patched, when it still
holds it (`moplace.simulator.incremental`), with the same result as a full simulation. A
searcher names the parent; it never touches simulator state.

A one-shot heuristic (HEFT, DPOS, a baseline) answers its first `ask` and then returns an
empty list, which tells the driver it is done. Searchers are found by name through entry points
(`moplace.optimize.plugins`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

from ..core.strategy import Strategy
from ..simulator.evaluation import Evaluation
from .settings import NoSettings, Settings, make_settings


@dataclass(frozen=True, eq=False)
class Proposal:
    """A strategy to evaluate and the evaluated strategy it was derived from (its parent)."""

    strategy: Strategy
    parent: Strategy | None = None


Asked = Union[Strategy, Proposal]


def unpack(batch: Sequence[Asked]) -> tuple[list[Strategy], list[Strategy | None]]:
    """The strategies of an asked batch, and each one's parent (None where none is named)."""
    strategies, parents = [], []
    for item in batch:
        if isinstance(item, Proposal):
            strategies.append(item.strategy)
            parents.append(item.parent)
        else:
            strategies.append(item)
            parents.append(None)
    return strategies, parents


class Searcher(ABC):
    """Base class of all searchers; subclasses implement `ask` (and usually `tell`).

    A searcher's settings are one frozen dataclass, its class attribute ``Settings`` (see
    `moplace.optimize.settings`); ``Searcher(**values)`` or ``Searcher(settings)`` makes one
    with them checked, held as ``config``."""

    name = "searcher"
    #: the dataclass of this searcher's settings
    Settings: type[Settings] = NoSettings
    #: this searcher's settings (an instance of ``Settings``)
    config: Settings = NoSettings()

    def __init__(self, settings: Settings | None = None, /, **values):
        if settings is None:
            self.config = make_settings(self.Settings, self.name, values)
        elif values:
            self.config = settings.replace(**values)
        else:
            self.config = settings
    #: True for a searcher whose first batch is every seed of
    #: `moplace.optimize.seeds.seed_strategies` with its default settings: its front then
    #: weakly dominates every feasible seed (the contract suite holds it to that)
    seeded = False

    def setup(self, problem, rng: np.random.Generator) -> None:
        """Called once by the driver before the first `ask`."""
        self.problem, self.rng = problem, rng
        self._setup()

    def _setup(self) -> None:
        """Hook for subclasses: prepare for `problem` (available as ``self.problem``)."""

    @abstractmethod
    def ask(self) -> list[Asked]:
        """The next strategies to evaluate (each a `Strategy`, or a `Proposal` naming its
        parent); an empty list means the searcher is done."""

    def tell(self, strategies: Sequence[Strategy], evaluations: Sequence[Evaluation]) -> None:
        """Learn from the evaluations of the strategies of the last `ask` (in asked order, the
        strategies themselves where `ask` gave proposals)."""

    def settings(self) -> dict:
        """The searcher's settings as plain JSON values, for logs, reports and checkpoints."""
        return self.config.as_dict()

    def notes(self) -> list[str]:
        """What the user should know about how this search went, one sentence each (a
        heuristic that fell back to a baseline, say); printed by the command line."""
        return []

    def own_estimates(self) -> dict[str, float]:
        """The searcher's own estimate of objectives (by name, in the objective's unit) for
        the first strategy it proposed, made without the simulator (a list scheduler's
        finish time), which the command line sets beside the simulated value; empty when it
        has none, or when the strategy returned is not the one it estimated."""
        return {}

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
