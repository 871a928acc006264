"""`OptunaSearcher`: an optuna study driven ask/tell, and its registered variants.

`OptunaNsga2Searcher` (``optuna-nsga2``) and `OptunaTpeSearcher` (``optuna-tpe``) are
`OptunaSearcher` with the sampler fixed and that sampler's defaults; their docstrings document
every setting. How the study is set up, seeded, polished and resumed: the package docstring.
"""

from __future__ import annotations

from moplace.core.baselines import topological_priority
from moplace.core.strategy import Strategy
from moplace.errors import MoplaceError
from moplace.optimize.known import KnownEvaluations
from moplace.optimize.searcher import Searcher
from searchers.seeding import SeedPhase

from .polish import POLISH_SHARE, PolishMixin
from .study import SAMPLERS, TrialSpace, check_study, make_sampler, open_storage


class OptunaSearcher(PolishMixin, Searcher):
    """An optuna study as a searcher (see the package docstring).

    ``sampler`` is one of `SAMPLERS` ("nsga2", "tpe", "random"); the other settings are those
    of `OptunaNsga2Searcher` and `OptunaTpeSearcher`, documented there. ``known_trials`` and
    ``polish`` default (None) to the sampler's own: 0 and 32 for TPE, 8 and 0 otherwise.
    """

    name = "optuna"
    seeded = True

    def __init__(self, sampler: str = "nsga2", storage: str | object | None = None,
                 study_name: str | None = None,
                 batch_size: int = 8, priorities: bool | None = None, max_priority_ops: int = 500,
                 population_size: int = 32, n_startup_trials: int = 100,
                 seed_heuristics: bool = True, mutations: float | None = 4.0,
                 known_trials: int | None = None, polish: int | None = None,
                 ei_candidates: int = 8, seed_subsets: bool = True):
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
        if polish is None:
            polish = 32 if sampler == "tpe" else 0
        if int(polish) < 0:
            raise MoplaceError(f"polish must be at least 0, got {polish}")
        self.polish = int(polish)
        if int(ei_candidates) < 1:
            raise MoplaceError(f"ei_candidates must be at least 1, got {ei_candidates}")
        self.ei_candidates = int(ei_candidates)
        self.seed_subsets = bool(seed_subsets)
        self.name = f"optuna-{sampler}"
        self.study = None

    def _setup(self) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        p = self.problem
        self._space = p.genome
        self._search_priorities = (self._space.n_ops <= self.max_priority_ops) \
            if self.priorities is None else bool(self.priorities)
        self._fixed_priority = topological_priority(p.graph)
        self._trials = TrialSpace(self._space, self._search_priorities, self._fixed_priority)
        seed = int(self.rng.integers(2**31 - 1))
        n_params = self._trials.n_params
        mutation_prob = None if self.mutations is None or n_params == 0 \
            else min(1.0, self.mutations / n_params)
        sampler = make_sampler(self.sampler, seed, self.population_size, self.n_startup_trials,
                               mutation_prob, self.ei_candidates)
        name = self.study_name
        if name is None and self.storage is not None:
            name = f"moplace:{p.graph.name}:{p.cluster.name}:{self.sampler}"
        self.study = optuna.create_study(directions=["minimize"] * len(p.objectives),
                                         sampler=sampler, storage=open_storage(self.storage),
                                         study_name=name, load_if_exists=True)
        check_study(self.study, p, self._search_priorities)
        # trials of an earlier search on this study that were asked but never told
        self._pending = [optuna.trial.Trial(self.study, t._trial_id) for t in
                         self.study.get_trials(deepcopy=False,
                                               states=(optuna.trial.TrialState.RUNNING,))]
        self._asked: list = []
        self._known = KnownEvaluations()
        self.known_taken = 0  # trials told from _known instead of simulated
        self.seeds_taken = 0  # trials of the seeds, told their seed batch's scores
        self._setup_polish()
        #: every seed, evaluated as the first batch; the encodable ones are then enqueued as
        #: trials, told their known scores instead of simulated again (`_seed_known`)
        self.seeding = SeedPhase(p, enabled=self.seed_heuristics, subsets=self.seed_subsets)
        self._seed_known: dict[bytes, object] = {}

    def ask(self) -> list[Strategy]:
        if self.seeding.active:
            return self.seeding.ask()
        trials = self._pending[:self.batch_size]
        self._pending = self._pending[self.batch_size:]
        strategies = [self._strategy(t) for t in trials]
        told = polished = 0
        while len(trials) < self.batch_size:
            if polished < max(1, int(self.batch_size * POLISH_SHARE)) and self._enqueue_polish():
                polished += 1
            trial = self.study.ask()
            strategy = self._strategy(trial)
            key = strategy.simulation_key
            seeded = self._seed_known.pop(key, None)
            if seeded is not None:  # a seed, scored in the seed batch
                self._tell(trial, seeded)
                self.seeds_taken += 1
                continue
            known = self._known.get(key) if told < self.known_trials else None
            if known is not None:  # simulated before: told at once, not simulated again
                self._tell(trial, known)
                told += 1
                continue
            trials.append(trial)
            strategies.append(strategy)
        self.known_taken += told
        self.polished += polished
        self._asked = trials
        return strategies

    def tell(self, strategies, evaluations) -> None:
        if self.seeding.active:
            self._seeded(self.seeding.tell(strategies, evaluations))
            return
        asked, self._asked = self._asked, []
        for trial, strategy, ev in zip(asked, strategies, evaluations):
            self._tell(trial, ev)
            if self.known_trials or self.polish:
                self._known.add(strategy.simulation_key, ev)
            if self.polish and self._search_priorities and self._worth_polishing(ev):
                self._queue_polish(trial.params, strategy)
        self._pending = asked[len(evaluations):] + self._pending

    def _seeded(self, evaluated) -> None:
        """Enqueue the seeds the genome encodes as the first trials (parameters of equal
        order: each decodes to a strategy that simulates as the seed; without searched
        priorities it runs in the fixed order, and is simulated as a new strategy)."""
        seen = []
        for seed, ev, x in self.seeding.encoded(self._space):
            params = self._trials.params(x)
            if params in seen:
                continue
            seen.append(params)
            self._seed_known[seed.strategy.simulation_key] = ev
            self.study.enqueue_trial(params, skip_if_exists=True)
        if self.known_trials or self.polish:
            for seed, ev in evaluated:
                self._known.add(seed.strategy.simulation_key, ev)

    def notes(self) -> list[str]:
        note = self.seeding.note(self._space) if hasattr(self, "seeding") else None
        return [note] if note else []

    def __setstate__(self, state: dict) -> None:
        """Restore from a checkpoint, also one written before `TrialSpace` held the groups'
        parameters (moplace 0.1 before issue 13: ``_devices`` and ``_splits`` on the searcher)."""
        state = dict(state)
        if "_trials" not in state and "_space" in state:
            state.pop("_devices", None), state.pop("_splits", None)
            state["_trials"] = TrialSpace(state["_space"], state["_search_priorities"],
                                          state["_fixed_priority"])
        vars(self).clear()
        vars(self).update(state)

    def _strategy(self, trial) -> Strategy:
        """Suggest (or read back, for a trial that has them) every parameter; decode."""
        return self._trials.strategy(trial)

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
                "mutations": self.mutations, "known_trials": self.known_trials,
                "polish": self.polish, "ei_candidates": self.ei_candidates,
                "seed_subsets": self.seed_subsets}


# The variants list every setting of OptunaSearcher but the sampler, with that sampler's
# defaults, so that `moplace searchers` shows them; both accept every setting.


class OptunaNsga2Searcher(OptunaSearcher):
    """Optuna's NSGA-II sampler over the genome, memory as a constraint.

    Settings:
        storage: where the study lives: none (in memory), a database URL
            ("sqlite:///study.db"), a file name ending in .log or .journal (optuna's journal
            file), or an optuna storage object; a second search on the same storage and study
            name resumes the study.
        study_name: the study's name in the storage; none: "moplace:GRAPH:CLUSTER:nsga2" when
            there is a storage.
        batch_size: trials asked per ask (at least 1).
        priorities: search one priority per op (true) or run the ops in topological order
            (false); none: search them when the graph has at most max_priority_ops ops.
        max_priority_ops: with priorities none, the most ops whose priorities are searched.
        population_size: NSGA-II's population: trials per generation (at least 2).
        n_startup_trials: no effect for NSGA-II (TPE's random start).
        seed_heuristics: evaluate the seeds first (each candidate of the list schedulers,
            the baselines on the whole cluster and on device subsets; `searchers.seeding`),
            then enqueue those the genome encodes as the first trials (told their scores,
            not simulated again).
        seed_subsets: include the baselines on device subsets among the seeds.
        mutations: expected parameters resampled per child, mutation_prob = min(1, mutations /
            parameters per trial) (a positive number); none: optuna's default, one per child.
        known_trials: most trials per ask whose strategy was simulated before, told at once
            from memory instead of simulated (not counted as evaluations); 0: off.
        polish: most one-step neighbours queued per trial that enters the front (of the
            feasible trials, or of the infeasible ones when no feasible trial dominates it),
            with its placement in three standard orders; polish trials take at most a quarter
            of each batch. 0: off. Only when priorities are searched.
        ei_candidates: no effect for NSGA-II (TPE's candidates per parameter group; at least 1).
    """

    def __init__(self, storage: str | object | None = None,
                 study_name: str | None = None, batch_size: int = 8,
                 priorities: bool | None = None, max_priority_ops: int = 500,
                 population_size: int = 32, n_startup_trials: int = 100,
                 seed_heuristics: bool = True, mutations: float | None = 4.0,
                 known_trials: int = 8, polish: int = 0, ei_candidates: int = 8,
                 seed_subsets: bool = True):
        super().__init__(sampler="nsga2", storage=storage, study_name=study_name,
                         batch_size=batch_size, priorities=priorities,
                         max_priority_ops=max_priority_ops, population_size=population_size,
                         n_startup_trials=n_startup_trials, seed_heuristics=seed_heuristics,
                         mutations=mutations, known_trials=known_trials, polish=polish,
                         ei_candidates=ei_candidates, seed_subsets=seed_subsets)


class OptunaTpeSearcher(OptunaSearcher):
    """Optuna's TPE sampler over the genome, memory as a constraint, its front polished.

    Settings:
        storage: where the study lives: none (in memory), a database URL
            ("sqlite:///study.db"), a file name ending in .log or .journal (optuna's journal
            file), or an optuna storage object; a second search on the same storage and study
            name resumes the study.
        study_name: the study's name in the storage; none: "moplace:GRAPH:CLUSTER:tpe" when
            there is a storage.
        batch_size: trials asked per ask (at least 1); TPE's constant liar stands in for
            trials asked but not yet told.
        priorities: search one priority per op (true) or run the ops in topological order
            (false, about twice as fast); none: search them when the graph has at most
            max_priority_ops ops.
        max_priority_ops: with priorities none, the most ops whose priorities are searched.
        population_size: no effect for TPE (NSGA-II's population; still at least 2).
        n_startup_trials: complete trials (the enqueued heuristics included) sampled at random
            before TPE starts modelling good and bad trials (optuna's default: 10).
        seed_heuristics: evaluate the seeds first (each candidate of the list schedulers,
            the baselines on the whole cluster and on device subsets; `searchers.seeding`),
            then enqueue those the genome encodes as the first trials (told their scores,
            not simulated again).
        seed_subsets: include the baselines on device subsets among the seeds.
        mutations: no effect for TPE (NSGA-II's mutation; still a positive number or none).
        known_trials: most trials per ask whose strategy was simulated before, told at once
            from memory instead of simulated (not counted as evaluations); 0: off (measured
            no better for TPE, and slower).
        polish: most one-step neighbours (two ops of a device swapped, a group moved, two
            devices trading their groups) queued per trial that enters the front (of the
            feasible trials, or of the infeasible ones when no feasible trial dominates it),
            with its placement in three standard orders; polish trials take at most a quarter
            of each batch. 0: off. Only when priorities are searched.
        ei_candidates: candidates TPE draws per parameter group, keeping the one of best
            expected improvement (at least 1; optuna's default: 24); fewer explore more.
    """

    def __init__(self, storage: str | object | None = None,
                 study_name: str | None = None, batch_size: int = 8,
                 priorities: bool | None = None, max_priority_ops: int = 500,
                 population_size: int = 32, n_startup_trials: int = 100,
                 seed_heuristics: bool = True, mutations: float | None = 4.0,
                 known_trials: int = 0, polish: int = 32, ei_candidates: int = 8,
                 seed_subsets: bool = True):
        super().__init__(sampler="tpe", storage=storage, study_name=study_name,
                         batch_size=batch_size, priorities=priorities,
                         max_priority_ops=max_priority_ops, population_size=population_size,
                         n_startup_trials=n_startup_trials, seed_heuristics=seed_heuristics,
                         mutations=mutations, known_trials=known_trials, polish=polish,
                         ei_candidates=ei_candidates, seed_subsets=seed_subsets)
