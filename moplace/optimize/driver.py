"""The search driver: one loop for every searcher.

`search(problem, searcher, budget=..., seed=..., callbacks=..., checkpoint=...)` owns the budget
(evaluations and/or wall seconds), evaluates what the searcher asks for on the shared
simulator, keeps the Pareto archive, records the hypervolume after every batch and calls the
callbacks. A search stopped by Ctrl-C, or whose searcher fails, still returns or reports what
it had found: callbacks see how it ended (``finished``, ``interrupted`` or ``failed``). Ctrl-C
in the middle of a batch keeps every evaluation already done in the result (the rest of the
batch is left for a resumed search); when the time budget runs out mid-batch the searcher is
told the evaluations done.

**Checkpoints.** With ``checkpoint=PATH`` the search's state (the searcher object with its
internals and random generator, the archive of every point kept, the hypervolume history, the
elapsed seconds, and the batch being evaluated with the evaluations done of it; see
`moplace.optimize.checkpoint`) is written to PATH right after setup, whenever
``checkpoint_every`` seconds (default 30) or ``checkpoint_every_evaluations`` evaluations
(default 500) have passed since the last write, whichever comes first (also inside a batch),
and at the end (finished, interrupted, or failed when the state is known). Writes are atomic
(temporary file, fsync, rename, fsync of the folder): a search killed outright (SIGKILL, power
loss) keeps the last file written and loses at most the evaluations since. When PATH exists
the search continues from it instead of starting afresh: it must be the same problem,
searcher, settings and seed (else a `MoplaceError` names the file and the field), the
searcher passed in is restored in place and works on the problem passed in, and the budget
counts the evaluations and the seconds of all the runs together (a larger budget extends a
search; a spent one returns at once). A batch stopped half-way is finished first, then told
whole, so a resumed search is the uninterrupted search with the same seed, point for point.

**Ctrl-C.** The driver takes SIGINT over (in the main thread, where Python's default handler
is installed) and raises it only at safe points: after the searcher's ``ask`` (the whole batch
left to evaluate), after each evaluation (the rest of the batch left), after ``tell``. It is
never raised inside the simulator's compiled code, not even a second Ctrl-C (an exception
there surfaces as a SystemError); a second Ctrl-C during ``ask``, ``tell`` or a write stops at
once, the searcher's state is then unknown, nothing is written at the end, and the file keeps
the last state written. Either way nothing is counted twice: a resumed search evaluates
exactly the rest of its budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.strategy import Strategy
from ..errors import MoplaceError
from ..simulator.evaluation import Evaluation
from . import checkpoint as _ckpt
from .archive import RTOL, ParetoArchive
from .problem import Problem
from .searcher import Searcher, unpack
from .sigint import HeldSigint


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
           checkpoint_every: float = 30.0, checkpoint_every_evaluations: int = 500,
           evaluator=None) -> SearchResult:
    """Run ``searcher`` on ``problem`` within ``budget``; same seed, same result.

    ``seed``: a non-negative integer. ``checkpoint``: None, or a file (str or Path) to continue
    from when it exists and to write the state to while running, whenever
    ``checkpoint_every`` seconds or ``checkpoint_every_evaluations`` evaluations have passed
    since the last write, whichever comes first, and at the end (see the module docstring).
    ``evaluator``: None (evaluate here with `Problem.evaluate_batch`: one strategy per core at
    a time on graphs large enough to gain from it, else one by one), or an object whose
    ``stream(problem, strategies)`` yields the strategies' evaluations in order (a Dask
    cluster: `moplace.scale.dask.DaskEvaluator`); the result is the same either way."""
    budget = budget if isinstance(budget, Budget) else Budget(evaluations=budget)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise MoplaceError(f"the seed must be a non-negative integer, got {seed!r}")
    every = checkpoint_every
    if isinstance(every, bool) or not isinstance(every, (int, float)) \
            or not (np.isfinite(every) and every >= 0):
        raise MoplaceError(f"checkpoint_every must be a number of seconds >= 0, got {every!r}")
    every_n = checkpoint_every_evaluations
    if isinstance(every_n, bool) or not isinstance(every_n, (int, np.integer)) or every_n < 1:
        raise MoplaceError("checkpoint_every_evaluations must be a positive integer, got "
                           f"{every_n!r}")
    saving = None if checkpoint is None else _Saving(Path(checkpoint), float(every), int(every_n))
    run = _Run(problem, searcher, budget, seed, callbacks, saving, evaluator)
    with run.sigint:
        try:
            run.loop()
        except KeyboardInterrupt:
            return run.end("interrupted")
        except BaseException:
            run.end("failed")
            raise
        return run.end("finished")


@dataclass(frozen=True)
class _Saving:
    """Where a search's checkpoint goes, and how often: after ``every_seconds`` or
    ``every_evaluations``, whichever comes first."""

    file: Path
    every_seconds: float
    every_evaluations: int


class _Run:
    def __init__(self, problem, searcher, budget, seed, callbacks, saving: _Saving | None = None,
                 evaluator=None):
        self.problem, self.searcher, self.budget = problem, searcher, budget
        self.evaluator = evaluator
        self.seed, self.callbacks = int(seed), list(callbacks)
        self.archive = ParetoArchive(len(problem.objectives), rtol=RTOL)
        self.history: list[tuple[int, float]] = []
        self.best_history: list[tuple[int, tuple[float, ...]]] = []  # best of each objective
        self.elapsed_before, self.resumed_from = 0.0, 0
        self.checkpoint = None if saving is None else saving.file
        self.saving = saving
        self.sigint = HeldSigint()
        #: the batch asked and not yet told, with the evaluations done of it so far
        self.pending: tuple[list, list] | None = None
        #: the pending strategies' parents (`Proposal`), None after a resume: a cache hint only
        self.parents: list | None = None
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
            self.pending = state.get("pending")
        # the searcher was told exactly what the archive holds, or `pending` says what it was
        # asked and which of those the archive holds: either way the state can be saved
        self.consistent = True
        self.last_save, self.saved_at = time.perf_counter(), self.archive.n_added
        self.fresh = state is None

    def loop(self) -> None:
        hold, check = self.sigint.hold, self.sigint.check
        if self.checkpoint is not None and self.fresh:
            with hold():
                self._save("running")  # also finds an unpicklable searcher before any work
            check()
        if self.pending is not None:  # stopped inside a batch: finish it first
            self._finish_batch()
        while not self._spent():
            self.consistent = False  # inside ask, the searcher's state is unknown
            with hold():
                batch = list(self.searcher.ask())
                if self.budget.evaluations is not None:
                    batch = batch[:self.budget.evaluations - self.archive.n_added]
                batch, self.parents = unpack(batch)
                self.pending = (batch, [])
                self.consistent = True
            if not batch:
                self.pending = None
                break
            check()  # a Ctrl-C held during ask: stop with the whole batch pending
            self._finish_batch()

    def _finish_batch(self) -> None:
        """Evaluate the rest of the pending batch (until the time runs out), then tell it."""
        hold, check = self.sigint.hold, self.sigint.check
        batch, evaluations = self.pending
        if self.evaluator is None:
            step = self.problem.parallel_width()  # one strategy per core at a time
            while len(evaluations) < len(batch) and not self._out_of_time():
                at = len(evaluations)
                chunk = batch[at:at + step]
                parents = self.parents[at:at + step] if self.parents else None
                with self.sigint.shield():  # every Ctrl-C waits for the compiled simulator
                    done = self.problem.evaluate_batch(chunk, parents=parents)
                for strategy, ev in zip(chunk, done):
                    with self.sigint.shield():
                        self._add(strategy, ev)
                    self._after_evaluation()
        elif len(evaluations) < len(batch) and not self._out_of_time():
            stream = self.evaluator.stream(self.problem, batch[len(evaluations):])
            try:
                while True:
                    with hold():  # a first Ctrl-C waits for the next result, a second stops
                        ev = next(stream, None)
                    if ev is None:
                        break
                    with self.sigint.shield():
                        self._add(batch[len(evaluations)], ev)
                    self._after_evaluation()
                    if self._out_of_time():
                        break
            finally:
                stream.close()  # cancels what is still being evaluated
        self.consistent = False
        with hold():
            self.searcher.tell(batch[:len(evaluations)], evaluations)
            if evaluations:
                self.history.append((self.archive.n_added, self._hv()))
                self.best_history.append((self.archive.n_added, self._best()))
            self.pending, self.parents = None, None
            self.consistent = True
            if self._checkpoint_due():
                self._save("running")
        check()
        for cb in self.callbacks:
            cb.on_batch(self.result("running"))

    def _add(self, strategy: Strategy, ev: Evaluation) -> None:
        self.archive.add(ev.values, ev.violation, Point(strategy, ev))
        self.pending[1].append(ev)

    def _after_evaluation(self) -> None:
        if self._checkpoint_due():
            with self.sigint.hold():
                self._save("running")
        self.sigint.check()

    def _checkpoint_due(self) -> bool:
        return self.checkpoint is not None and (
            time.perf_counter() - self.last_save >= self.saving.every_seconds
            or self.archive.n_added - self.saved_at >= self.saving.every_evaluations)

    def _save(self, status: str) -> None:
        state = {"archive": self.archive, "history": self.history,
                 "best_history": self.best_history, "elapsed": self.elapsed(),
                 "pending": self.pending}
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
        self.last_save, self.saved_at = time.perf_counter(), self.archive.n_added

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
