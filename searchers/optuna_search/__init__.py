"""Optuna's multi-objective samplers (NSGA-II, TPE) as an ask/tell searcher.

The study minimizes the problem's objectives (``directions=["minimize"] * m``) over the
genome (`moplace.core.genome`):

- ``d{g}``: device of co-location group g, ``trial.suggest_int(0, D - 1)``;
- ``s{g}``: split option of group g, ``trial.suggest_int(0, len(options[g]) - 1)``;
- ``p{i}``: priority of op i, ``trial.suggest_float(0, 1)``.

Genes with one possible value (one device; a group with no split option) are not suggested.
With ``priorities=False`` (the default when the graph has more than ``max_priority_ops`` ops)
no ``p{i}`` is suggested and every trial runs the ops in topological order: a trial's cost in
optuna grows with its number of parameters (TPE's most), and per-op priorities are the bulk of
them on large graphs.

**Constraint.** The violation in bytes (device memory over capacity plus the user's limits,
0 = feasible) is set with ``trial.set_constraint("violation_bytes", v)`` before
``study.tell``, as optuna 5 takes constraints (``constraints_func`` is deprecated): NSGA-II
ranks by constrained domination, TPE (c-TPE) puts infeasible trials in the "bad" group ordered
by violation. The violation is also kept in the trial's user attribute ``violation_bytes``.

**Seeding.** The first batch is every seed (`searchers.seeding`), evaluated as it is, so the
archive holds them. Those the genome encodes are then enqueued as the first trials
(``study.enqueue_trial(params, skip_if_exists=True)``) and told the seed's scores instead of
simulated again; priorities are mapped order-preservingly (dense rank) into [0, 1], so each
seed decodes to a strategy that simulates exactly like the seed. The sampler's seed is drawn
from the driver's rng: same seed, same result (for a new study).

**Mutation (NSGA-II).** optuna resamples each parameter of a child with probability
``mutation_prob`` (default: one parameter per child); ``mutations`` sets the expected number
per child instead, ``mutation_prob = min(1, mutations / n_params)``: with one, on tiny problems
the population settled on the mirror image of a good placement.

**TPE's start.** TPE (multivariate, constant liar) samples at random until
``n_startup_trials`` trials are complete, the enqueued seeds included; with optuna's 10 the
seeds and a handful of random trials made TPE's "good" group and it searched only around them,
so moplace's default is 100.

**Polish (TPE).** TPE found most placements of the exact front but often missed the one op
order that makes a point fast, or makes a memory-tight placement fit. So (``polish`` > 0,
the default for TPE) each told trial that enters the Pareto set of the feasible trials, or an
infeasible one that enters the Pareto set of the infeasible ones (on objectives alone) and
that no feasible trial dominates, is polished: its placement in the standard orders
(topological, the memory-lean `moplace.core.baselines.memory_priority`, HEFT's upward rank),
the first time that placement is polished, and up to ``polish`` of its one-step neighbours
drawn at random (two ops of one device swapped, one group moved, two devices trading all their
groups: the mirror image of a placement on mixed devices) are queued, skipping strategies
simulated or queued before. ``ask`` enqueues the newest queued ones first, at most a quarter
of each batch (`POLISH_SHARE`), as ordinary trials (user attribute ``moplace_polish``),
counted as evaluations, and TPE learns from them; a polish that improves is polished in turn.
The queue (at most `POLISH_QUEUE`) lives in memory: a resumed study starts with an empty one.
Polish needs the priority parameters. TPE also draws ``ei_candidates`` candidates per
parameter group (default 8, optuna's 24): fewer explore more.

**Strategies simulated before.** The samplers often draw a configuration whose strategy was
simulated already (by `Strategy.simulation_key`). ``ask`` tells such a trial at once from
memory (`moplace.optimize.known`), without simulating it or counting it as an evaluation, up
to ``known_trials`` of them per ask; after that the batch is filled with whatever the sampler
draws, so a sampler that keeps drawing known strategies costs evaluations again rather than
looping. On by default for NSGA-II; off for TPE, where it was no better and slower (more
trials, each costlier than a simulation).

**Batches.** ``ask`` returns ``batch_size`` trials (``study.ask()`` each); TPE uses the
constant liar for trials asked but not yet told. Trials the driver did not evaluate (it cuts
the last batch to the budget) are asked again first by the next ``ask``, never lost.

**Persistence and resume.** ``storage`` is None (in memory), a database URL
(``"sqlite:///study.db"``), a file name ending in ``.log`` or ``.journal`` (optuna's journal
file storage), or an optuna storage object. With a storage the study is created with
``load_if_exists=True`` under ``study_name`` (default ``"moplace:{graph}:{cluster}:{sampler}"``).
Running a search again with the same storage and study name resumes it: completed trials stay
in the study and the sampler learns from them (NSGA-II rebuilds its population from them), the
seeds are not enqueued again when they already exist, trials left RUNNING by the earlier search
(asked but never told) are evaluated first, and the driver's budget counts only the new
evaluations. The driver's archive holds only the new run's points; the whole history is in the
study (``searcher.study.best_trials``). A resumed study must belong to the same graph, cluster
and objectives (the study's user attribute ``moplace_genome``). One search at a time per study:
a second process on the same study would take over the first one's RUNNING trials.

**Speed.** optuna's per-parameter bookkeeping, not the simulator, dominates a trial's cost;
multivariate TPE's cost per trial grows with the number of trials and parameters, so TPE is by
far the slowest searcher on large genomes (``priorities=False`` about doubles its speed).
Persistent storages write every parameter as it is suggested (SQLite far slower than the
journal file).

The measurements behind these choices (mutation counts, startup trials, polish, known trials,
speeds) are in ``docs/history/optuna.md``.

**Layout.** `settings` holds the settings (`OptunaSettings`, shared; `Nsga2SamplerSettings`,
`TpeSamplerSettings`); `searcher` holds `OptunaSearcher` (setup, ask/tell, with optuna's
random sampler; registered nowhere) and the registered variants `OptunaNsga2Searcher` and
`OptunaTpeSearcher`, which set their sampler and settings; `polish` the polish queue
(`TrialPolish`, a part the searcher holds); `study` the genome as trial parameters
(`TrialSpace`), the storage, the sampler and the check of a resumed study. optuna is imported inside functions (when a search
starts), never by importing this package.
"""

from .polish import POLISH_QUEUE, POLISH_SHARE, SWAP_WINDOW, TrialPolish
from .searcher import OptunaNsga2Searcher, OptunaSearcher, OptunaTpeSearcher
from .settings import Nsga2SamplerSettings, OptunaSettings, TpeSamplerSettings
from .study import SAMPLERS, TrialSpace, check_study, make_sampler, open_storage, unit_rank

__all__ = ["OptunaSearcher", "OptunaNsga2Searcher", "OptunaTpeSearcher", "OptunaSettings",
           "Nsga2SamplerSettings", "TpeSamplerSettings", "SAMPLERS",
           "POLISH_QUEUE", "POLISH_SHARE", "SWAP_WINDOW", "TrialPolish", "TrialSpace",
           "check_study", "make_sampler", "open_storage", "unit_rank"]
