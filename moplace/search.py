"""The search driver: one loop for every searcher.

`search(problem, searcher, budget=..., seed=..., callbacks=...)` owns the budget (evaluations
and/or wall seconds), evaluates what the searcher asks for on the shared simulator, keeps the
Pareto archive, records the hypervolume after every batch and calls the callbacks. A search
stopped by Ctrl-C, or whose searcher fails, still returns or reports what it had found:
callbacks see how it ended (``finished``, ``interrupted`` or ``failed``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .archive import ParetoArchive
from .errors import MoplaceError
from .evaluate import Evaluation
from .problem import Problem
from .searcher import Searcher
from .strategy import Strategy


@dataclass(frozen=True)
class Budget:
    """At most ``evaluations`` simulated strategies and/or ``seconds`` of wall time."""

    evaluations: int | None = 1000
    seconds: float | None = None

    def __post_init__(self):
        if self.evaluations is None and self.seconds is None:
            raise MoplaceError("a budget needs a number of evaluations or a time")
        if self.evaluations is not None and (isinstance(self.evaluations, bool)
                                             or int(self.evaluations) != self.evaluations
                                             or self.evaluations < 1):
            raise MoplaceError(f"the evaluation budget must be a positive integer, got {self.evaluations!r}")
        if self.seconds is not None and not (np.isfinite(self.seconds) and self.seconds > 0):
            raise MoplaceError(f"the time budget must be a positive number of seconds, got {self.seconds!r}")


@dataclass(frozen=True)
class Point:
    """One evaluated strategy."""

    strategy: Strategy
    evaluation: Evaluation

    @property
    def values(self) -> np.ndarray:
        return self.evaluation.values

    @property
    def feasible(self) -> bool:
        return self.evaluation.feasible


@dataclass
class SearchResult:
    """The front (feasible, non-dominated), the least-violating infeasible points, and how
    the search went. ``hypervolume`` is normalized by ``reference`` (see moplace.hypervolume)."""

    problem: Problem
    searcher: str
    seed: int
    front: list[Point]
    infeasible: list[Point]
    n_evaluations: int
    seconds: float
    hypervolume: float
    reference: np.ndarray
    hypervolume_history: list[tuple[int, float]] = field(default_factory=list)
    status: str = "finished"

    @property
    def feasible_found(self) -> bool:
        return bool(self.front)


class Callback:
    """Hooks the driver calls; override what you need (MLflow logging, progress)."""

    def on_start(self, problem: Problem, searcher: Searcher, budget: Budget, seed: int) -> None:
        pass

    def on_batch(self, result: SearchResult) -> None:
        pass

    def on_end(self, result: SearchResult) -> None:
        pass


def search(problem: Problem, searcher: Searcher, *, budget: Budget | int = 1000, seed: int = 0,
           callbacks: Sequence[Callback] = ()) -> SearchResult:
    """Run ``searcher`` on ``problem`` within ``budget``; same seed, same result."""
    budget = budget if isinstance(budget, Budget) else Budget(evaluations=budget)
    run = _Run(problem, searcher, budget, seed, callbacks)
    try:
        run.loop()
    except KeyboardInterrupt:
        return run.end("interrupted")
    except BaseException:
        run.end("failed")
        raise
    return run.end("finished")


class _Run:
    def __init__(self, problem, searcher, budget, seed, callbacks):
        self.problem, self.searcher, self.budget = problem, searcher, budget
        self.seed, self.callbacks = int(seed), list(callbacks)
        self.archive = ParetoArchive(len(problem.objectives))
        self.history: list[tuple[int, float]] = []
        self.start = time.perf_counter()
        for cb in self.callbacks:
            cb.on_start(problem, searcher, budget, self.seed)
        searcher.setup(problem, np.random.default_rng(self.seed))

    def loop(self) -> None:
        while not self._spent():
            batch = list(self.searcher.ask())
            if not batch:
                break
            if self.budget.evaluations is not None:
                batch = batch[:self.budget.evaluations - self.archive.n_added]
            evaluations = []
            for strategy in batch:
                ev = self.problem.evaluate(strategy)
                self.archive.add(ev.values, ev.violation, Point(strategy, ev))
                evaluations.append(ev)
                if self._out_of_time():
                    break
            self.searcher.tell(batch[:len(evaluations)], evaluations)
            self.history.append((self.archive.n_added, self._hv()))
            for cb in self.callbacks:
                cb.on_batch(self.result("running"))

    def _spent(self) -> bool:
        return (self.budget.evaluations is not None and self.archive.n_added >= self.budget.evaluations) \
            or self._out_of_time()

    def _out_of_time(self) -> bool:
        return self.budget.seconds is not None and time.perf_counter() - self.start >= self.budget.seconds

    def _hv(self) -> float:
        return self.archive.hypervolume(self.problem.reference)

    def result(self, status: str) -> SearchResult:
        return SearchResult(
            problem=self.problem, searcher=getattr(self.searcher, "name", type(self.searcher).__name__),
            seed=self.seed, front=[e.payload for e in self.archive.front],
            infeasible=[e.payload for e in self.archive.infeasible(10)],
            n_evaluations=self.archive.n_added, seconds=time.perf_counter() - self.start,
            hypervolume=self._hv(), reference=self.problem.reference,
            hypervolume_history=list(self.history), status=status)

    def end(self, status: str) -> SearchResult:
        result = self.result(status)
        for cb in self.callbacks:
            cb.on_end(result)
        return result
