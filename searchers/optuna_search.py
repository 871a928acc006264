"""Optuna's multi-objective samplers (NSGA-II, TPE, random) as an ask/tell searcher.

The study minimizes the problem's objectives (``directions=["minimize"] * m``) over the
genome (`moplace.genome`):

- ``d{g}``: device of co-location group g, ``trial.suggest_int(0, D - 1)``;
- ``s{g}``: split option of group g, ``trial.suggest_int(0, len(options[g]) - 1)``;
- ``p{i}``: priority of op i, ``trial.suggest_float(0, 1)``.

Genes with one possible value (one device; a group with no split option) are not suggested.
With ``priorities=False`` (the default when the graph has more than ``max_priority_ops`` ops)
no ``p{i}`` is suggested and every trial runs the ops in topological order: a trial's cost in
optuna grows with its number of parameters (TPE's most; see below), and per-op priorities are
the bulk of them on large graphs.

**Constraint.** The violation in bytes (device memory over capacity plus the user's limits,
0 = feasible) is set with ``trial.set_constraint("violation_bytes", v)`` before
``study.tell``. This is how optuna 5 takes constraints: ``NSGAIISampler`` and ``TPESampler``
read ``FrozenTrial.constraints`` (stored in the trial's system attributes) and treat a trial
as feasible when every value is <= 0; their ``constraints_func`` argument is deprecated since
optuna 5.0 and is not used. NSGA-II ranks by constrained domination, TPE (c-TPE) puts
infeasible trials in the "bad" group ordered by violation. The violation is also kept in the
trial's user attribute ``violation_bytes``; the random sampler ignores it.

**Seeding.** DPOS, HEFT and the baselines are enqueued (``study.enqueue_trial(params,
skip_if_exists=True)``), so they are the first trials asked; priorities are mapped
order-preservingly (dense rank) into [0, 1], so each seed decodes to a strategy that
simulates exactly like the heuristic. The sampler's seed is drawn from the driver's rng:
same seed, same result (for a new study).

**Mutation.** optuna's NSGA-II resamples each parameter of a child with probability
``mutation_prob`` (default 1 / number of parameters: one parameter per child). ``mutations``
(default 4) sets the expected number per child instead, ``mutation_prob = min(1, mutations /
n_params)``: with one, on tiny problems the population settled on the mirror image of a good
placement (ops on the slow device) and one instance of the 20 in `moplace.tiny` stayed at 93%
of the exact hypervolume; with four every instance reached 99% (2000 evaluations, seed 0), and
VGG-16 / 4xV100 went from 0.590 to 0.602 at 2000 evaluations. ``mutations=None`` keeps
optuna's default. TPE and random sampling do not mutate.

**TPE's start.** TPE (multivariate, constant liar) samples at random until
``n_startup_trials`` trials are complete, the enqueued heuristics included; moplace's default
is 100 (optuna's is 10). With 10, the heuristics and a handful of random trials made TPE's
"good" group, and it searched around them: on instance 0 of `moplace.tiny` (2000 trials, seed
0) it reached 77.1% of the exact hypervolume; with 100, 95.1% (200: 89.1%, 300: 95.8%). At
500 trials: 74.6% with 10, 89.1% with 100; other knobs did not help (10 startup trials with
``multivariate=False``: 77.1%, with ``n_ei_candidates=128``: 74.4%).

**Strategies simulated before.** The samplers often draw a configuration whose strategy
was simulated already: on instance 2 of `moplace.tiny` (seed 0) TPE's 2000 trials held 643
distinct priority orders and 382 distinct strategies by `Strategy.simulation_key` (which
ignores priority differences that do not change any device's order). ``ask`` tells such a
trial at once from memory (`moplace.known`: its values and violation), without simulating it
or counting it as an evaluation, up to ``known_trials`` of them per ask; after that the
batch is filled with whatever the sampler draws, so a sampler that keeps drawing known
strategies costs evaluations again rather than looping. ``known_trials=0`` turns it off; by
default it is 8 for NSGA-II and random sampling and 0 for TPE. Measured at 2000
evaluations, seed 0: optuna-nsga2 on the 20 tiny instances, lowest 98.8% of the exact
hypervolume and 19 reach 99% (without: 97.8%, 18); on VGG-16 / 4xV100 it rarely repeats a
strategy (13 of 2000; hypervolume 0.6005, without 0.5921). TPE on tiny instances 0-4: 91.0%,
97.7%, 98.3%, 100%, 100% (without: 95.1%, 97.7%, 94.4%, 100%, 100%), no better on the whole,
while it ran twice as many trials (3900), each costlier than a simulation, so about twice
the time: off by default.

**Batches.** ``ask`` returns ``batch_size`` trials (``study.ask()`` each); TPE uses the
constant liar for trials asked but not yet told. Trials the driver did not evaluate (it cuts
the last batch to the budget) are asked again first by the next ``ask``, never lost.

**Persistence and resume.** ``storage`` is None (in memory), a database URL
(``"sqlite:///study.db"``), a file name ending in ``.log`` or ``.journal`` (optuna's journal
file storage), or an optuna storage object. With a storage the study is
created with ``load_if_exists=True`` under ``study_name`` (default
``"moplace:{graph}:{cluster}:{sampler}"``). Running a search again with the same storage and
study name resumes it: completed trials stay in the study and the sampler learns from them
(NSGA-II rebuilds its population from them), the heuristics are not enqueued again when they
already exist, trials left RUNNING by the earlier search (asked but never told, e.g. after
Ctrl-C or at the end of its budget) are evaluated first, and the driver's budget counts only
the new evaluations. The driver's archive (so the new run's front and hypervolume) holds only
the new run's points; the whole history is in the study (``searcher.study.best_trials``). A
resumed study must belong to the same graph, cluster and objectives (checked through the
study's user attribute ``moplace_genome``). One search at a time per study: a second process
on the same study would take over the first one's RUNNING trials.

**Speed.** On VGG-16 (41 groups, 98 ops: 180 parameters) on 4xV100, in memory: NSGA-II
and random run about 130 evaluations/s (optuna's per-parameter bookkeeping, not the
simulator, dominates); multivariate TPE's cost per trial grows with the number of trials and
parameters (about 0.1 s per trial after 200 trials, 13 evaluations/s over 300), so TPE is by
far the slowest searcher on large genomes (``priorities=False`` about doubles its speed).
Persistent storages write every parameter as it is suggested: SQLite costs about 2 ms per
parameter (0.3 s per trial of 120 parameters), the journal file about 0.4 ms.
"""

from __future__ import annotations

import numpy as np

from moplace.baselines import topological_priority
from moplace.errors import MoplaceError, StrategyError
from moplace.known import KnownEvaluations
from moplace.searcher import Searcher
from moplace.strategy import Strategy

from ._listsched import heuristic_strategies

SAMPLERS = ("nsga2", "tpe", "random")


class OptunaSearcher(Searcher):
    """An optuna study as a searcher (see module docstring)."""

    name = "optuna"

    def __init__(self, sampler: str = "nsga2", storage=None, study_name: str | None = None,
                 batch_size: int = 8, priorities: bool | None = None, max_priority_ops: int = 500,
                 population_size: int = 32, n_startup_trials: int = 100, seed_heuristics: bool = True,
                 mutations: float | None = 4.0, known_trials: int | None = None):
        if sampler not in SAMPLERS:
            raise MoplaceError(f"unknown optuna sampler {sampler!r}; known: {', '.join(SAMPLERS)}")
        if int(batch_size) < 1:
            raise MoplaceError(f"batch_size must be at least 1, got {batch_size}")
        if int(population_size) < 2:
            raise MoplaceError(f"population_size must be at least 2, got {population_size}")
        self.sampler, self.storage, self.study_name = sampler, storage, study_name
        self.batch_size, self.priorities = int(batch_size), priorities
        self.max_priority_ops, self.population_size = int(max_priority_ops), int(population_size)
        self.n_startup_trials, self.seed_heuristics = int(n_startup_trials), bool(seed_heuristics)
        if mutations is not None and not float(mutations) > 0:
            raise MoplaceError(f"mutations must be a positive number (or None), got {mutations}")
        self.mutations = None if mutations is None else float(mutations)
        if known_trials is None:
            known_trials = 0 if sampler == "tpe" else 8
        if int(known_trials) < 0:
            raise MoplaceError(f"known_trials must be at least 0, got {known_trials}")
        self.known_trials = int(known_trials)
        self.name = f"optuna-{sampler}"
        self.study = None

    def _setup(self) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        p = self.problem
        space = self._space = p.genome
        G, N = space.n_groups, space.n_ops
        self._search_priorities = (N <= self.max_priority_ops) if self.priorities is None \
            else bool(self.priorities)
        self._fixed_priority = topological_priority(p.graph)
        self._devices = [g for g in range(G)] if space.n_devices > 1 else []
        self._splits = [g for g in range(G) if len(space.options[g]) > 1]
        seed = int(self.rng.integers(2**31 - 1))
        n_params = len(self._devices) + len(self._splits) + \
            (space.n_ops if self._search_priorities else 0)
        mutation_prob = None if self.mutations is None or n_params == 0 \
            else min(1.0, self.mutations / n_params)
        sampler = _make_sampler(self.sampler, seed, self.population_size, self.n_startup_trials,
                                mutation_prob)
        name = self.study_name
        if name is None and self.storage is not None:
            name = f"moplace:{p.graph.name}:{p.cluster.name}:{self.sampler}"
        self.study = optuna.create_study(directions=["minimize"] * len(p.objectives),
                                         sampler=sampler, storage=_storage(self.storage),
                                         study_name=name,
                                         load_if_exists=True)
        self._check_study()
        # trials of an earlier search on this study that were asked but never told
        self._pending = [optuna.trial.Trial(self.study, t._trial_id) for t in
                         self.study.get_trials(deepcopy=False,
                                               states=(optuna.trial.TrialState.RUNNING,))]
        self._asked: list = []
        self._known = KnownEvaluations()
        self.known_taken = 0  # trials told from _known instead of simulated
        if self.seed_heuristics:
            for params in self._heuristic_params():
                self.study.enqueue_trial(params, skip_if_exists=True)

    def ask(self) -> list[Strategy]:
        trials = self._pending[:self.batch_size]
        self._pending = self._pending[self.batch_size:]
        strategies = [self._strategy(t) for t in trials]
        told = 0
        while len(trials) < self.batch_size:
            trial = self.study.ask()
            strategy = self._strategy(trial)
            known = self._known.get(strategy.simulation_key) if told < self.known_trials \
                else None
            if known is not None:  # simulated before: told at once, not simulated again
                self._tell(trial, known)
                told += 1
                continue
            trials.append(trial)
            strategies.append(strategy)
        self.known_taken += told
        self._asked = trials
        return strategies

    def tell(self, strategies, evaluations) -> None:
        asked, self._asked = self._asked, []
        for trial, strategy, ev in zip(asked, strategies, evaluations):
            self._tell(trial, ev)
            if self.known_trials:
                self._known.add(strategy.simulation_key, ev)
        self._pending = asked[len(evaluations):] + self._pending

    def _tell(self, trial, ev) -> None:
        violation = float(ev.violation)
        trial.set_user_attr("violation_bytes", violation)
        trial.set_constraint("violation_bytes", violation)
        self.study.tell(trial, [float(v) for v in ev.values])

    def settings(self) -> dict:
        storage = self.storage if self.storage is None or isinstance(self.storage, str) \
            else type(self.storage).__name__
        return {"sampler": self.sampler, "storage": storage, "study_name": self.study_name,
                "batch_size": self.batch_size, "priorities": self.priorities,
                "max_priority_ops": self.max_priority_ops, "population_size": self.population_size,
                "n_startup_trials": self.n_startup_trials, "seed_heuristics": self.seed_heuristics,
                "mutations": self.mutations, "known_trials": self.known_trials}

    # -- genome <-> trial --------------------------------------------------------------------

    def _strategy(self, trial) -> Strategy:
        """Suggest (or read back, for a trial that has them) every parameter; decode."""
        space = self._space
        G, D = space.n_groups, space.n_devices
        x = np.zeros(space.size)
        for g in self._devices:
            x[g] = trial.suggest_int(f"d{g}", 0, D - 1)
        for g in self._splits:
            x[G + g] = trial.suggest_int(f"s{g}", 0, len(space.options[g]) - 1)
        if self._search_priorities:
            for i in range(space.n_ops):
                x[2 * G + i] = trial.suggest_float(f"p{i}", 0.0, 1.0)
        else:
            x[2 * G:] = self._fixed_priority
        return space.decode(x)

    def _params(self, x: np.ndarray) -> dict:
        G = self._space.n_groups
        params = {f"d{g}": int(x[g]) for g in self._devices}
        params.update({f"s{g}": int(x[G + g]) for g in self._splits})
        if self._search_priorities:
            params.update({f"p{i}": float(v) for i, v in enumerate(_unit_rank(x[2 * G:]))})
        return params

    def _heuristic_params(self) -> list[dict]:
        out = []
        for s in heuristic_strategies(self.problem):
            try:
                params = self._params(self._space.encode(s))
            except StrategyError:
                continue
            if params not in out:
                out.append(params)
        return out

    def _check_study(self) -> None:
        p, space = self.problem, self._space
        key = {"graph": p.graph.name, "cluster": p.cluster.name, "objectives": list(p.objectives),
               "n_ops": space.n_ops, "n_groups": space.n_groups, "n_devices": space.n_devices,
               "priorities": self._search_priorities}
        if len(self.study.directions) != len(p.objectives):
            raise MoplaceError(f"study {self.study.study_name!r} has {len(self.study.directions)} "
                               f"objectives, the problem {len(p.objectives)}")
        have = self.study.user_attrs.get("moplace_genome")
        if have is None:
            self.study.set_user_attr("moplace_genome", key)
        elif have != key:
            raise MoplaceError(f"study {self.study.study_name!r} was made for {have}, "
                               f"not for this problem ({key})")


def _storage(storage):
    """An optuna storage: None (in memory), a database URL (``sqlite:///study.db``), a file
    name ending in ``.log`` or ``.journal`` (optuna's journal file storage), or a storage."""
    if isinstance(storage, str) and storage.endswith((".log", ".journal")) and "://" not in storage:
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(storage))
    return storage


def _make_sampler(kind: str, seed: int, population_size: int, n_startup_trials: int,
                  mutation_prob: float | None = None):
    import optuna

    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=population_size, seed=seed,
                                             mutation_prob=mutation_prob)
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                          n_startup_trials=n_startup_trials)
    return optuna.samplers.RandomSampler(seed=seed)


def _unit_rank(priority: np.ndarray) -> np.ndarray:
    """Priorities mapped into [0, 1] keeping their order and their ties (dense rank)."""
    if priority.size == 0:
        return priority.astype(np.float64)
    _, rank = np.unique(priority, return_inverse=True)
    top = rank.max()
    return rank / top if top > 0 else np.zeros(priority.size)
