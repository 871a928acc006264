"""Optuna's multi-objective samplers (NSGA-II, TPE, random) as an ask/tell searcher.

The study minimizes the problem's objectives (``directions=["minimize"] * m``) over the
genome (`moplace.core.genome`):

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

**Seeding.** The first batch is every seed (`searchers.seeding`: each candidate of the list
schedulers, the baselines on the whole cluster and on device subsets), evaluated as they are,
so the archive holds them. Those the genome encodes are then enqueued
(``study.enqueue_trial(params, skip_if_exists=True)``), so they are the first trials asked,
and told the seed's scores instead of simulated again; priorities are mapped
order-preservingly (dense rank) into [0, 1], so each seed decodes to a strategy that
simulates exactly like the seed. The sampler's seed is drawn from the driver's rng:
same seed, same result (for a new study).

**Mutation.** optuna's NSGA-II resamples each parameter of a child with probability
``mutation_prob`` (default 1 / number of parameters: one parameter per child). ``mutations``
(default 4) sets the expected number per child instead, ``mutation_prob = min(1, mutations /
n_params)``: with one, on tiny problems the population settled on the mirror image of a good
placement (ops on the slow device) and one instance of the 20 in `moplace.optimize.tiny` stayed
at 93% of the exact hypervolume; with four every instance reached 99% (2000 evaluations, seed
0), and VGG-16 / 4xV100 went from 0.590 to 0.602 at 2000 evaluations. ``mutations=None`` keeps
optuna's default. TPE and random sampling do not mutate.

**TPE's start.** TPE (multivariate, constant liar) samples at random until ``n_startup_trials``
trials are complete, the enqueued heuristics included; moplace's default is 100 (optuna's is
10). With 10, the heuristics and a handful of random trials made TPE's "good" group, and it
searched around them: on instance 0 of `moplace.optimize.tiny` (2000 trials, seed 0) it reached
77.1% of the exact hypervolume; with 100, 95.1% (200: 89.1%, 300: 95.8%). At 500 trials: 74.6%
with 10, 89.1% with 100; other knobs did not help (10 startup trials with
``multivariate=False``: 77.1%, with ``n_ei_candidates=128``: 74.4%).

**Polish (TPE).** TPE proposes each trial from its model of good and bad trials; on
`moplace.optimize.tiny` it found most placements of the exact front but often missed the one op
order that makes a point fast, or that makes a memory-tight placement fit, and sometimes a whole
placement (2000 trials, seed 0, before polish: 5 of the 19 instances measured below 95% of the
exact hypervolume, the lowest 65.5%). So, with ``polish`` > 0 (default 32 for TPE, 0 otherwise),
each told trial that enters the Pareto set of the feasible trials, or an infeasible one that
enters the Pareto set of the infeasible ones (on objectives alone) and that no feasible trial
dominates, is polished: its placement in the standard orders (topological, the memory-lean
`moplace.core.baselines.memory_priority`, HEFT's upward rank under that placement), the first
time that placement is polished, and up to ``polish`` of its one-step neighbours drawn at random
(two ops of one device swapped, one group moved to another device, two devices trading all their
groups: on devices of mixed kinds or memory the mirror image of a placement) are queued,
skipping strategies simulated or queued before. ``ask`` takes the newest queued ones first, at
most a quarter of each batch (`POLISH_SHARE`), and enqueues them (``study.enqueue_trial``, user
attribute ``moplace_polish``): they are ordinary trials, counted as evaluations, and TPE learns
from them. A polish that improves enters the Pareto set and is polished in turn, so TPE's front
is climbed locally while TPE keeps proposing three quarters of the trials. The queue (at most
`POLISH_QUEUE`) lives in memory: a resumed study starts with an empty one. Polish needs the
priority parameters: without them (``priorities`` off) nothing is polished. TPE also draws
``ei_candidates`` (default 8, optuna's 24) candidates per parameter group and keeps the one of
best expected improvement: fewer candidates explore more; with 24 and polish, instance 4 lost a
whole placement (30.3%).

**Strategies simulated before.** The samplers often draw a configuration whose strategy was
simulated already: on instance 2 of `moplace.optimize.tiny` (seed 0) TPE's 2000 trials held 643
distinct priority orders and 382 distinct strategies by `Strategy.simulation_key` (which ignores
priority differences that do not change any device's order). ``ask`` tells such a trial at once
from memory (`moplace.optimize.known`: its values and violation), without simulating it or
counting it as an evaluation, up to ``known_trials`` of them per ask; after that the batch is
filled with whatever the sampler draws, so a sampler that keeps drawing known strategies costs
evaluations again rather than looping. ``known_trials=0`` turns it off; by default it is 8 for
NSGA-II and random sampling and 0 for TPE. Measured at 2000 evaluations, seed 0: optuna-nsga2 on
the 20 tiny instances, lowest 98.8% of the exact hypervolume and 19 reach 99% (without: 97.8%,
18); on VGG-16 / 4xV100 it rarely repeats a strategy (13 of 2000; hypervolume 0.6005, without
0.5921). TPE on tiny instances 0-4: 91.0%, 97.7%, 98.3%, 100%, 100% (without: 95.1%, 97.7%,
94.4%, 100%, 100%), no better on the whole, while it ran twice as many trials (3900), each
costlier than a simulation, so about twice the time: off by default.

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

**Layout.** `searcher` holds `OptunaSearcher` (setup, ask/tell) and the registered variants
`OptunaNsga2Searcher` and `OptunaTpeSearcher`; `polish` the polish queue (`PolishMixin`);
`study` the genome as trial parameters (`TrialSpace`), the storage, the sampler and the check
of a resumed study. optuna is imported inside functions (when a search starts), never by
importing this package.
"""

from .polish import POLISH_QUEUE, POLISH_SHARE, SWAP_WINDOW, PolishMixin
from .searcher import OptunaNsga2Searcher, OptunaSearcher, OptunaTpeSearcher
from .study import SAMPLERS, TrialSpace, check_study, make_sampler, open_storage, unit_rank

__all__ = ["OptunaSearcher", "OptunaNsga2Searcher", "OptunaTpeSearcher", "SAMPLERS",
           "POLISH_QUEUE", "POLISH_SHARE", "SWAP_WINDOW", "PolishMixin", "TrialSpace",
           "check_study", "make_sampler", "open_storage", "unit_rank"]
