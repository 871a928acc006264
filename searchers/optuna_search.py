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

**Polish (TPE).** TPE proposes each trial from its model of good and bad trials; on
`moplace.tiny` it found most placements of the exact front but often missed the one op order
that makes a point fast, or that makes a memory-tight placement fit, and sometimes a whole
placement (2000 trials, seed 0, before polish: 5 of the 19 instances measured below 95% of the exact
hypervolume, the lowest 65.5%). So, with ``polish`` > 0 (default 32 for TPE, 0 otherwise),
each told trial that enters the Pareto set of the feasible trials, or an infeasible one that
enters the Pareto set of the infeasible ones (on objectives alone) and that no feasible trial
dominates, is polished: its placement in the standard orders (topological, the memory-lean
`moplace.baselines.memory_priority`, HEFT's upward rank under that placement), the first time
that placement is polished, and up to ``polish`` of its one-step neighbours drawn at random
(two ops of one device swapped, one group moved to another device, two devices trading all
their groups: on devices of mixed kinds or memory the mirror image of a placement) are
queued, skipping
strategies simulated or queued before. ``ask`` takes the newest queued ones first, at most a
quarter of each batch (`POLISH_SHARE`), and enqueues them (``study.enqueue_trial``, user
attribute ``moplace_polish``): they are ordinary trials, counted as evaluations, and TPE
learns from them. A polish that improves enters the Pareto set and is polished in turn, so
TPE's front is climbed locally while TPE keeps proposing three quarters of the trials. The
queue (at most `POLISH_QUEUE`) lives in memory: a resumed study starts with an empty one.
TPE also draws ``ei_candidates`` (default 8, optuna's 24) candidates per parameter group and
keeps the one of best expected improvement: fewer candidates explore more; with 24 and polish,
instance 4 lost a whole placement (30.3%).

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

import hashlib
from collections import deque

import numpy as np

from moplace.archive import ParetoArchive
from moplace.baselines import memory_priority, topological_priority
from moplace.errors import MoplaceError, StrategyError
from moplace.known import KnownEvaluations
from moplace.searcher import Searcher
from moplace.strategy import Strategy

from ._listsched import heuristic_strategies

SAMPLERS = ("nsga2", "tpe", "random")
#: Most polish trials waiting to be asked (the oldest are dropped first).
POLISH_QUEUE = 64
#: Most of a batch that polish trials take.
POLISH_SHARE = 0.25
#: Polish swaps ops of one device at most this many places apart in the device's order.
SWAP_WINDOW = 8
_KEY = "\0key"  # the simulation key of a queued polish trial, kept with its parameters


class OptunaSearcher(Searcher):
    """An optuna study as a searcher (see module docstring)."""

    name = "optuna"

    def __init__(self, sampler: str = "nsga2", storage=None, study_name: str | None = None,
                 batch_size: int = 8, priorities: bool | None = None, max_priority_ops: int = 500,
                 population_size: int = 32, n_startup_trials: int = 100, seed_heuristics: bool = True,
                 mutations: float | None = 4.0, known_trials: int | None = None,
                 polish: int | None = None, ei_candidates: int = 8):
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
                                mutation_prob, self.ei_candidates)
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
        # order polish: trial parameters waiting to be enqueued (the newest first), the
        # simulation keys among them, and the Pareto sets that decide what is polished
        self._polish: deque[dict] = deque()
        self._polish_keys: set[bytes] = set()
        self._fits = ParetoArchive(len(p.objectives), max_infeasible=0)
        self._unfit = ParetoArchive(len(p.objectives), max_infeasible=0)
        self.polished = 0  # polish trials asked
        self._polished_placements: set[bytes] = set()
        if self.polish and self._search_priorities:
            from ._listsched import ListSchedInput

            self._memory_priority = memory_priority(p.graph)
            self._sched_input = ListSchedInput.from_problem(p.graph, p.cluster, p.costs)
        if self.seed_heuristics:
            for params in self._heuristic_params():
                self.study.enqueue_trial(params, skip_if_exists=True)

    def ask(self) -> list[Strategy]:
        trials = self._pending[:self.batch_size]
        self._pending = self._pending[self.batch_size:]
        strategies = [self._strategy(t) for t in trials]
        told = polished = 0
        while len(trials) < self.batch_size:
            if polished < max(1, int(self.batch_size * POLISH_SHARE)):
                params = self._next_polish()
                if params is not None:
                    self.study.enqueue_trial(params, user_attrs={"moplace_polish": True})
                    polished += 1
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
        self.polished += polished
        self._asked = trials
        return strategies

    def tell(self, strategies, evaluations) -> None:
        asked, self._asked = self._asked, []
        for trial, strategy, ev in zip(asked, strategies, evaluations):
            self._tell(trial, ev)
            if self.known_trials or self.polish:
                self._known.add(strategy.simulation_key, ev)
            if self.polish and self._search_priorities and self._worth_polishing(ev):
                self._queue_polish(trial.params, strategy)
        self._pending = asked[len(evaluations):] + self._pending

    def _next_polish(self) -> dict | None:
        """The newest queued polish trial whose strategy has not been simulated meanwhile."""
        while self._polish:
            params = self._polish.pop()
            key = params.pop(_KEY)
            self._polish_keys.discard(key)
            if self._known.get(key) is None:
                return params
        return None

    def _worth_polishing(self, ev) -> bool:
        """A feasible trial that enters the Pareto set of those told, or an infeasible one that
        enters the Pareto set of the infeasible ones (on objectives alone) and that no
        feasible trial dominates: its order may make it fit."""
        if ev.violation == 0:
            return self._fits.add(ev.values)
        fits = self._fits.front_values().reshape(-1, len(ev.values))
        return not np.any(np.all(fits <= ev.values, axis=1)) and self._unfit.add(ev.values)

    def _queue_polish(self, params: dict, strategy: Strategy) -> None:
        """Queue neighbours of a trial worth polishing (see the module docstring): its
        placement in the standard orders, the first time the placement is polished, and up to
        ``polish`` of its one-step neighbours (two ops of one device swapped, one group on
        another device, or two devices trading their groups), drawn at random; strategies
        simulated or queued before are skipped. Without priority parameters, only moves."""
        placement, D = strategy.placement, self._space.n_devices
        steps = [("move", g, d) for g in self._devices for d in range(D) if d != params[f"d{g}"]]
        steps += [("relabel", d, e) for d in range(D) for e in range(d + 1, D)]
        orders = []
        if self._search_priorities:
            steps = [("swap", i, j) for i, j in _swap_pairs(placement, strategy.priority)] + steps
            digest = hashlib.blake2b(placement.tobytes(), digest_size=16).digest()
            if digest not in self._polished_placements:
                self._polished_placements.add(digest)
                orders = [self._fixed_priority, self._memory_priority,
                          self._upward_rank(placement)]
        queued = 0
        for k in self.rng.permutation(len(steps)).tolist():
            if queued == self.polish:
                break
            kind, u, v = steps[k]
            if kind == "swap":
                q = {**params, f"p{u}": params[f"p{v}"], f"p{v}": params[f"p{u}"]}
            elif kind == "move":
                q = {**params, f"d{u}": v}
            else:  # devices u and v trade their groups (same structure, other devices)
                swap = {u: v, v: u}
                q = {**params, **{f"d{g}": swap.get(params[f"d{g}"], params[f"d{g}"])
                                  for g in self._devices}}
            queued += self._queue(q)
        for prio in orders:  # asked first: the queue is last in, first out
            self._queue({**params, **{f"p{i}": float(v) for i, v in enumerate(_unit_rank(prio))}})

    def _queue(self, params: dict) -> bool:
        """Queue trial ``params`` unless its strategy was simulated or queued before; True when
        queued."""
        import optuna

        key = self._strategy(optuna.trial.FixedTrial(params)).simulation_key
        if key in self._polish_keys or self._known.get(key) is not None:
            return False
        if len(self._polish) == POLISH_QUEUE:  # the oldest waiting one is dropped
            self._polish_keys.discard(self._polish.popleft()[_KEY])
        self._polish.append({**params, _KEY: key})
        self._polish_keys.add(key)
        return True

    def _upward_rank(self, placement: np.ndarray) -> np.ndarray:
        """HEFT's upward rank under ``placement``: an op's compute time on its device plus
        the longest way to an exit through its successors, transfers where devices differ."""
        from ._listsched import upward_rank

        inp, a = self._sched_input, self.problem.graph.arrays
        ps, pd = placement[a.src], placement[a.dst]
        comm = np.where(ps != pd, inp.latency[ps, pd] + a.edge_bytes / inp.bandwidth[ps, pd], 0.0)
        return upward_rank(inp, inp.compute[np.arange(placement.size), placement], comm)

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
                "polish": self.polish, "ei_candidates": self.ei_candidates}

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
                  mutation_prob: float | None = None, ei_candidates: int = 24):
    import optuna

    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=population_size, seed=seed,
                                             mutation_prob=mutation_prob)
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                          n_startup_trials=n_startup_trials,
                                          n_ei_candidates=ei_candidates)
    return optuna.samplers.RandomSampler(seed=seed)


def _swap_pairs(placement: np.ndarray, priority: np.ndarray, window: int = SWAP_WINDOW) -> list:
    """Pairs (i, j), i < j, of ops on one device at most ``window`` apart in its order
    (priority, ties by index: the simulator's) whose priorities differ (tied ones run in index
    order whatever their values), sorted."""
    n = placement.size
    order = np.lexsort((np.arange(n), -priority, placement))
    pairs = []
    for k in range(1, min(window, n - 1) + 1):
        a, b = order[:-k], order[k:]
        keep = (placement[a] == placement[b]) & (priority[a] != priority[b])
        pairs.append(np.stack([np.minimum(a, b)[keep], np.maximum(a, b)[keep]], axis=1))
    if not pairs:
        return []
    pairs = np.concatenate(pairs)
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))].tolist()


def _unit_rank(priority: np.ndarray) -> np.ndarray:
    """Priorities mapped into [0, 1] keeping their order and their ties (dense rank)."""
    if priority.size == 0:
        return priority.astype(np.float64)
    _, rank = np.unique(priority, return_inverse=True)
    top = rank.max()
    return rank / top if top > 0 else np.zeros(priority.size)
