"""The searcher contract: propose strategies, learn from their evaluations.

A searcher never simulates, logs or keeps the budget: `moplace.search` asks it for strategies,
evaluates them on the shared `Problem`, and tells it the results. This is the ask/tell shape
of optuna's samplers and pymoo's algorithms, and it is what makes searchers interchangeable
and their fronts comparable point by point.

A one-shot heuristic (HEFT, DPOS, a baseline) answers its first `ask` and then returns an
empty list, which tells the driver it is done.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Sequence

import numpy as np

from .errors import MoplaceError
from .evaluate import Evaluation
from .registry import Registry
from .strategy import Strategy

#: Searcher factories by name: ``SEARCHERS[name](**settings) -> Searcher``.
SEARCHERS: Registry[Callable[..., "Searcher"]] = Registry("searcher")


class Searcher(ABC):
    """Base class of all searchers; subclasses implement `ask` (and usually `tell`)."""

    name = "searcher"

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


def make_searcher(name: str, **settings) -> Searcher:
    """A new searcher by registered name with ``settings`` (unknown names, and settings the
    searcher does not have, are refused with the known ones listed)."""
    import searchers  # noqa: F401  (registers the built-in searchers)

    factory = SEARCHERS[name]
    known = setting_names(name)
    unknown = [k for k in settings if k not in known]
    if unknown:
        raise MoplaceError(f"searcher {name!r} has no setting {unknown[0]!r}; its settings: "
                           f"{', '.join(known) or 'none'}")
    return factory(**settings)


def setting_names(name: str) -> list[str]:
    """The keyword settings searcher ``name`` accepts (those its registration fixes left out)."""
    import functools
    import inspect

    import searchers  # noqa: F401

    factory, fixed, n_args = SEARCHERS[name], set(), 0
    if isinstance(factory, functools.partial):  # e.g. the baselines: partial(cls, name)
        fixed |= set(factory.keywords)
        factory, n_args = factory.func, len(factory.args)
    if hasattr(factory, "target"):  # a lazily imported searcher: its class's signature
        fixed |= set(factory.fixed)
        factory = factory.target()
    params = list(inspect.signature(factory).parameters.values())[n_args:]
    return [p.name for p in params if p.name not in fixed
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
