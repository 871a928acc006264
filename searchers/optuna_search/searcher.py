"""`OptunaSearcher`: an optuna study driven ask/tell, and its registered variants.

`OptunaNsga2Searcher` (``optuna-nsga2``) and `OptunaTpeSearcher` (``optuna-tpe``) are
`OptunaSearcher` with their sampler and that sampler's settings (`.settings`: every one with
its meaning). How the study is set up, seeded, polished and resumed: the package docstring.
"""

from __future__ import annotations

from moplace.core.baselines import topological_priority
from moplace.core.strategy import Strategy
from moplace.optimize.known import KnownEvaluations
from moplace.optimize.searcher import Searcher
from searchers.seeding import SeedPhase

from .polish import POLISH_SHARE, TrialPolish
from .settings import Nsga2SamplerSettings, OptunaSettings, TpeSamplerSettings
from .study import TrialSpace, check_study, make_sampler, open_storage


class OptunaSearcher(Searcher):
    """An optuna study as a searcher, with optuna's random sampler (see the package docstring).

    Registered nowhere: the base of the registered variants, which set ``sampler``, their
    ``Settings`` and `_sampler_options`. Settings: see `searchers.optuna_search.settings`.
    """

    name = "optuna-random"
    seeded = True
    #: optuna's sampler (one of `SAMPLERS`), in the study's default name
    sampler = "random"
    Settings = OptunaSettings
    study = None

    def _setup(self) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        p = self.problem
        self._space = p.genome
        cfg = self.config
        self._search_priorities = (self._space.n_ops <= cfg.max_priority_ops) \
            if cfg.priorities is None else bool(cfg.priorities)
        self._fixed_priority = topological_priority(p.graph)
        self._trials = TrialSpace(self._space, self._search_priorities, self._fixed_priority)
        seed = int(self.rng.integers(2**31 - 1))
        sampler = self._sampler(seed)
        name = cfg.study_name
        if name is None and cfg.storage is not None:
            name = f"moplace:{p.graph.name}:{p.cluster.name}:{self.sampler}"
        # the storage as the study holds it (a database storage wrapped in optuna's cache)
        storage = optuna.storages.get_storage(open_storage(cfg.storage))
        self.study = optuna.create_study(directions=["minimize"] * len(p.objectives),
                                         sampler=sampler, storage=storage,
                                         study_name=name, load_if_exists=True)
        check_study(self.study, p, self._search_priorities)
        # trials of an earlier search on this study that were asked but never told
        running = self.study.get_trials(deepcopy=False,
                                        states=(optuna.trial.TrialState.RUNNING,))
        study_id = storage.get_study_id_from_name(self.study.study_name)
        trial_id = storage.get_trial_id_from_study_id_trial_number
        self._pending = [optuna.trial.Trial(self.study, trial_id(study_id, t.number))
                         for t in running]
        self._asked: list = []
        self._known = KnownEvaluations()
        self.known_taken = 0  # trials told from _known instead of simulated
        self.seeds_taken = 0  # trials of the seeds, told their seed batch's scores
        #: the polish queue (`TrialPolish`)
        self.polish = TrialPolish(p, self.rng, self.study, self._trials, self._known,
                                  per_point=cfg.polish,
                                  search_priorities=self._search_priorities)
        #: every seed, evaluated as the first batch; the encodable ones are then enqueued as
        #: trials, told their known scores instead of simulated again (`_seed_known`)
        self.seeding = SeedPhase(p, enabled=cfg.seed_heuristics, subsets=cfg.seed_subsets,
                                 baselines=cfg.seed_baselines)
        self._seed_known: dict[bytes, object] = {}

    def _sampler(self, seed: int):
        """The study's sampler, seeded with ``seed``."""
        return make_sampler(self.sampler, seed, **self._sampler_options())

    def _sampler_options(self) -> dict:
        """The sampler's options (`make_sampler`'s keywords) from the settings: none for
        optuna's random sampler."""
        return {}

    def ask(self) -> list[Strategy]:
        if self.seeding.active:
            return self.seeding.ask()
        batch_size = self.config.batch_size
        trials = self._pending[:batch_size]
        self._pending = self._pending[batch_size:]
        strategies = [self._strategy(t) for t in trials]
        told = polished = 0
        while len(trials) < batch_size:
            if polished < max(1, int(batch_size * POLISH_SHARE)) and self.polish.enqueue():
                polished += 1
            trial = self.study.ask()
            strategy = self._strategy(trial)
            key = strategy.simulation_key
            seeded = self._seed_known.pop(key, None)
            if seeded is not None:  # a seed, scored in the seed batch
                self._tell(trial, seeded)
                self.seeds_taken += 1
                continue
            known = self._known.get(key) if told < self.config.known_trials else None
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
        if self.seeding.active:
            self._seeded(self.seeding.tell(strategies, evaluations))
            return
        asked, self._asked = self._asked, []
        cfg = self.config
        for trial, strategy, ev in zip(asked, strategies, evaluations):
            self._tell(trial, ev)
            if cfg.known_trials or cfg.polish:
                self._known.add(strategy.simulation_key, ev)
            self.polish.tell(trial.params, strategy, ev)
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
        if self.config.known_trials or self.config.polish:
            for seed, ev in evaluated:
                self._known.add(seed.strategy.simulation_key, ev)

    def notes(self) -> list[str]:
        note = self.seeding.note(self._space) if hasattr(self, "seeding") else None
        return [note] if note else []

    def __setstate__(self, state: dict) -> None:
        """Restore from a checkpoint, also one written before `TrialSpace` held the groups'
        parameters (moplace 0.1 before issue 13: ``_devices`` and ``_splits`` on the searcher)
        or before the searcher held its polish queue as a `TrialPolish` (its fields on the
        searcher)."""
        state = dict(state)
        if "_trials" not in state and "_space" in state:
            state.pop("_devices", None), state.pop("_splits", None)
            state["_trials"] = TrialSpace(state["_space"], state["_search_priorities"],
                                          state["_fixed_priority"])
        if "polish" not in state and "_polish" in state:
            state["polish"] = TrialPolish.from_searcher_state(state)
        vars(self).clear()
        vars(self).update(state)

    @property
    def polished(self) -> int:
        """Polish trials asked."""
        return self.polish.asked

    def _strategy(self, trial) -> Strategy:
        """Suggest (or read back, for a trial that has them) every parameter; decode."""
        return self._trials.strategy(trial)

    def _tell(self, trial, ev) -> None:
        violation = float(ev.violation)
        trial.set_user_attr("violation_bytes", violation)
        trial.set_constraint("violation_bytes", violation)
        self.study.tell(trial, [float(v) for v in ev.values])


class OptunaNsga2Searcher(OptunaSearcher):
    """Optuna's NSGA-II sampler over the genome, memory as a constraint.

    Settings: see `searchers.optuna_search.settings.Nsga2SamplerSettings`.
    """

    name = "optuna-nsga2"
    sampler = "nsga2"
    Settings = Nsga2SamplerSettings

    def _sampler_options(self) -> dict:
        n_params, mutations = self._trials.n_params, self.config.mutations
        mutation_prob = None if mutations is None or n_params == 0 \
            else min(1.0, mutations / n_params)
        return {"population_size": self.config.population_size, "mutation_prob": mutation_prob}


class OptunaTpeSearcher(OptunaSearcher):
    """Optuna's TPE sampler over the genome, memory as a constraint, its front polished.

    Settings: see `searchers.optuna_search.settings.TpeSamplerSettings`.
    """

    name = "optuna-tpe"
    sampler = "tpe"
    Settings = TpeSamplerSettings

    def _sampler_options(self) -> dict:
        return {"n_startup_trials": self.config.n_startup_trials,
                "ei_candidates": self.config.ei_candidates}
