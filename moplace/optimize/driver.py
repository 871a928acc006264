"""The search driver: one loop for every searcher.

`search(problem, searcher, budget=..., seed=..., callbacks=..., checkpoint=...)` owns the budget
(evaluations and/or wall seconds), evaluates what the searcher asks for on the shared
simulator, keeps the Pareto archive, records the hypervolume after every batch and calls the
callbacks. A search stopped by Ctrl-C, or whose searcher fails, still returns or reports what
it had found: callbacks see how it ended (``finished``, ``interrupted`` or ``failed``). Ctrl-C
in the middle of a batch tells the searcher the evaluations already done, as when the time
budget runs out mid-batch, so nothing evaluated is lost.

**Checkpoints.** With ``checkpoint=PATH`` the search's state (the searcher object with its
internals and random generator, the archive of every point kept, the hypervolume history, the
elapsed seconds; see `moplace.optimize.checkpoint`) is written to PATH atomically right after setup,
after a batch when ``checkpoint_every`` seconds have passed since the last write (0: after
every batch), and at the end (finished, interrupted, or failed when the state is consistent).
When PATH exists the search continues from it instead of starting afresh: it must be the same
problem, searcher, settings and seed (else a `MoplaceError` names the file and the field), the
searcher passed in is restored in place and works on the problem passed in, and the budget
counts the evaluations and the seconds of all the runs together (a larger budget extends a
search; a spent one returns at once). Resuming from a batch boundary gives the same result as
an uninterrupted search with the same seed.

A saved state is always *consistent*: what the searcher was told is exactly what the archive
holds. While checkpointing (in the main thread) Ctrl-C during the searcher's ``ask`` or
``tell``, an archive update or a write is held until it returns: after an ``ask`` the batch
is told with no evaluation, after a ``tell`` the search stops at the batch boundary. A second
Ctrl-C while one is held, or a KeyboardInterrupt raised inside ``ask``/``tell`` by other means,
stops at once; the searcher's state is then unknown, nothing is written at the end, and the
file keeps the last state written (at most ``checkpoint_every`` seconds old; resuming from it
evaluates the points found since then again, it never counts them twice).
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.strategy import Strategy
from ..errors import MoplaceError
from ..simulator.evaluation import Evaluation
from . import checkpoint as _ckpt
from .archive import ParetoArchive
from .problem import Problem
from .searcher import Searcher


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
    the search went. ``hypervolume`` is normalized by ``reference`` (see moplace.optimize.hypervolume)."""

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
    best_history: list[tuple[int, tuple[float, ...]]] = field(default_factory=list)
    status: str = "finished"
    resumed_from: int = 0  # evaluations loaded from a checkpoint (0: a fresh search)

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
           callbacks: Sequence[Callback] = (), checkpoint=None,
           checkpoint_every: float = 30.0) -> SearchResult:
    """Run ``searcher`` on ``problem`` within ``budget``; same seed, same result.

    ``checkpoint``: None, or a file (str or Path) to continue from when it exists and to write
    the state to while running, at most every ``checkpoint_every`` seconds and at the end (see
    the module docstring)."""
    budget = budget if isinstance(budget, Budget) else Budget(evaluations=budget)
    every = checkpoint_every
    if isinstance(every, bool) or not isinstance(every, (int, float)) \
            or not (np.isfinite(every) and every >= 0):
        raise MoplaceError(f"checkpoint_every must be a number of seconds >= 0, got {every!r}")
    run = _Run(problem, searcher, budget, seed, callbacks, checkpoint, float(every))
    with run.sigint:
        try:
            run.loop()
        except KeyboardInterrupt:
            return run.end("interrupted")
        except BaseException:
            run.end("failed")
            raise
        return run.end("finished")


class _HeldSigint:
    """While `held`, a Ctrl-C (SIGINT) is remembered instead of raised, and `check` raises it at
    a safe point; a second one while one is pending raises at once. Active only when asked
    for, in the main thread, and when SIGINT has Python's default handler."""

    def __init__(self, active: bool):
        self.active = (active and threading.current_thread() is threading.main_thread()
                       and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        self.held = self.pending = False
        self._old = None

    def __enter__(self):
        if self.active:
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self.active:
            signal.signal(signal.SIGINT, self._old)
        self.pending = False  # held during the last write: the search is over anyway

    def _handle(self, signum, frame) -> None:
        if self.held and not self.pending:
            self.pending = True
            return
        self.pending = False
        raise KeyboardInterrupt

    @contextmanager
    def hold(self):
        before, self.held = self.held, True
        try:
            yield
        finally:
            self.held = before

    def check(self) -> None:
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt


class _Run:
    def __init__(self, problem, searcher, budget, seed, callbacks, checkpoint=None,
                 checkpoint_every=30.0):
        self.problem, self.searcher, self.budget = problem, searcher, budget
        self.seed, self.callbacks = int(seed), list(callbacks)
        self.archive = ParetoArchive(len(problem.objectives))
        self.history: list[tuple[int, float]] = []
        self.best_history: list[tuple[int, tuple[float, ...]]] = []  # best of each objective
        self.elapsed_before, self.resumed_from = 0.0, 0
        self.checkpoint = None if checkpoint is None else Path(checkpoint)
        self.checkpoint_every = checkpoint_every
        self.sigint = _HeldSigint(self.checkpoint is not None)
        state = None
        if self.checkpoint is not None:
            if self.checkpoint.is_dir():
                raise MoplaceError(f"checkpoint {self.checkpoint} is a directory, not a file")
            self.key = _ckpt.run_key(problem, searcher, self.seed)
            if self.checkpoint.exists():
                _ckpt.check(_ckpt.read_meta(self.checkpoint), self.key, self.checkpoint)
                _, state = _ckpt.load_state(self.checkpoint, problem, searcher)
        self.start = time.perf_counter()
        for cb in self.callbacks:
            cb.on_start(problem, searcher, budget, self.seed)
        if state is None:
            searcher.setup(problem, np.random.default_rng(self.seed))
        else:
            self.archive, self.history = state["archive"], list(state["history"])
            self.best_history = list(state.get("best_history", []))
            self.elapsed_before = float(state["elapsed"])
            self.resumed_from = self.archive.n_added
        self.consistent = True  # the searcher was told exactly what the archive holds
        self.last_save = time.perf_counter()
        self.fresh = state is None

    def loop(self) -> None:
        hold, check = self.sigint.hold, self.sigint.check
        if self.checkpoint is not None and self.fresh:
            with hold():
                self._save("running")  # also finds an unpicklable searcher before any work
            check()
        while not self._spent():
            self.consistent = False
            with hold():
                batch = list(self.searcher.ask())
            if not batch:
                self.consistent = True
                break
            if self.budget.evaluations is not None:
                batch = batch[:self.budget.evaluations - self.archive.n_added]
            evaluations = []
            stop = None
            try:
                check()  # a Ctrl-C held during ask: tell the batch with nothing evaluated
                for strategy in batch:
                    ev = self.problem.evaluate(strategy)
                    with hold():
                        self.archive.add(ev.values, ev.violation, Point(strategy, ev))
                        evaluations.append(ev)
                    check()
                    if self._out_of_time():
                        break
            except BaseException as exc:  # Ctrl-C or a failed evaluation: keep what was done
                stop = exc
            try:
                with hold():
                    self.searcher.tell(batch[:len(evaluations)], evaluations)
                    for strategy in batch:  # a delta hint holds task graphs: not kept
                        strategy.delta = None
                    if evaluations:
                        self.history.append((self.archive.n_added, self._hv()))
                        self.best_history.append((self.archive.n_added, self._best()))
                    self.consistent = True
            except BaseException:
                if stop is None:
                    raise
            if stop is not None:
                raise stop
            if self.checkpoint is not None and \
                    time.perf_counter() - self.last_save >= self.checkpoint_every:
                with hold():
                    self._save("running")
            check()
            for cb in self.callbacks:
                cb.on_batch(self.result("running"))

    def _save(self, status: str) -> None:
        state = {"archive": self.archive, "history": self.history,
                 "best_history": self.best_history, "elapsed": self.elapsed()}
        payload = _ckpt.state_bytes(self.problem, self.searcher, state)
        meta = {"key": self.key, "status": status, "n_evaluations": self.archive.n_added,
                "elapsed": state["elapsed"],
                "budget": {"evaluations": self.budget.evaluations,
                           "seconds": self.budget.seconds}}
        try:
            _ckpt.write(self.checkpoint, meta, payload)
        except OSError as exc:
            raise MoplaceError(f"cannot write checkpoint {self.checkpoint}: "
                               f"{exc.strerror or exc}") from None
        self.last_save = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds of this search, earlier runs continued from a checkpoint included."""
        return self.elapsed_before + time.perf_counter() - self.start

    def _spent(self) -> bool:
        return (self.budget.evaluations is not None and self.archive.n_added >= self.budget.evaluations) \
            or self._out_of_time()

    def _out_of_time(self) -> bool:
        return self.budget.seconds is not None and self.elapsed() >= self.budget.seconds

    def _hv(self) -> float:
        return self.archive.hypervolume(self.problem.reference)

    def _best(self) -> tuple[float, ...]:
        """The best value of each objective among feasible points (nan while there is none)."""
        values = self.archive.front_values()
        if not len(values):
            return (float("nan"),) * len(self.problem.objectives)
        return tuple(float(v) for v in values.min(axis=0))

    def result(self, status: str) -> SearchResult:
        return SearchResult(
            problem=self.problem, searcher=getattr(self.searcher, "name", type(self.searcher).__name__),
            seed=self.seed, front=[e.payload for e in self.archive.front],
            infeasible=[e.payload for e in self.archive.infeasible(10)],
            n_evaluations=self.archive.n_added, seconds=self.elapsed(),
            hypervolume=self._hv(), reference=self.problem.reference,
            hypervolume_history=list(self.history), best_history=list(self.best_history),
            status=status,
            resumed_from=self.resumed_from)

    def end(self, status: str) -> SearchResult:
        error = None
        try:
            with self.sigint.hold():
                self.searcher.close()
        except MoplaceError as exc:
            error = exc
        if self.checkpoint is not None and self.consistent:
            try:
                with self.sigint.hold():
                    self._save(status)
            except MoplaceError as exc:
                error = exc
        result = self.result(status)
        for cb in self.callbacks:
            cb.on_end(result)
        if error is not None and status != "failed":  # a failure's own exception goes on
            raise error
        return result
