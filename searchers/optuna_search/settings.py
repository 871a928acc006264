"""The settings of the optuna searchers (see the package docstring for what each one does).

`OptunaSettings` holds the settings every sampler reads (the study, the batches, the
priorities, the seeds, known trials and polish), with the defaults of NSGA-II and random
sampling; `Nsga2SamplerSettings` and `TpeSamplerSettings` add the settings that only that
sampler reads (NSGA-II's population and mutation, TPE's random start and candidates). TPE
declares ``known_trials`` and ``polish`` again with its own defaults, and ``batch_size`` with
its constant liar (a field declared again keeps its place).
"""

from __future__ import annotations

from dataclasses import dataclass

from moplace.optimize.settings import Settings, default_of, setting

_KNOWN_TRIALS = ("most trials per ask whose strategy was simulated before, told at once from "
                 "memory instead of simulated (not counted as evaluations); 0: off")
_POLISH = ("most one-step neighbours (two ops of a device swapped, a group moved, two devices "
           "trading their groups) queued per trial that enters the front (of the feasible "
           "trials, or of the infeasible ones when no feasible trial dominates it), with its "
           "placement in three standard orders; polish trials take at most a quarter of each "
           "batch. 0: off. Only when priorities are searched")


@dataclass(frozen=True)
class OptunaSettings(Settings):
    storage: str | object | None = setting(
        None, "where the study lives: none (in memory), a database URL (\"sqlite:///study.db\"), "
        "a file name ending in .log or .journal (optuna's journal file), or an optuna storage "
        "object; a second search on the same storage and study name resumes the study")
    study_name: str | None = setting(
        None, "the study's name in the storage; none: \"moplace:GRAPH:CLUSTER:SAMPLER\" (SAMPLER: "
        "nsga2 or tpe) when there is a storage")
    batch_size: int = setting(8, "trials asked per ask", low=1)
    priorities: bool | None = setting(
        None, "search one priority per op (true) or run the ops in topological order (false; "
        "about twice as fast for TPE); none: search them when the graph has at most "
        "max_priority_ops ops")
    max_priority_ops: int = setting(500, "with priorities none, the most ops whose priorities "
                                    "are searched", low=0)
    seed_heuristics: bool = setting(
        True, "evaluate the seeds first (each candidate of the list schedulers, the baselines "
        "on the whole cluster and on device subsets; `searchers.seeding`), then enqueue those "
        "the genome encodes as the first trials (told their scores, not simulated again)")
    known_trials: int = setting(8, _KNOWN_TRIALS, low=0)
    polish: int = setting(0, _POLISH, low=0)
    seed_subsets: bool = setting(True, "include the baselines on device subsets among the seeds")
    seed_baselines: bool = setting(True, "include the baselines (data, tensor and sharded "
                                   "data parallelism...) among the seeds; false: the list "
                                   "schedulers' plans and the single-device ones only")


@dataclass(frozen=True)
class Nsga2SamplerSettings(OptunaSettings):
    population_size: int = setting(32, "NSGA-II's population: trials per generation", low=2)
    mutations: float | None = setting(
        4.0, "expected parameters resampled per child, mutation_prob = min(1, mutations / "
        "parameters per trial); none: optuna's default, one per child", low=0, low_open=True)


@dataclass(frozen=True)
class TpeSamplerSettings(OptunaSettings):
    batch_size: int = setting(8, "trials asked per ask (TPE's constant liar stands in for "
                              "trials asked but not yet told)", low=1)
    known_trials: int = setting(0, _KNOWN_TRIALS + " (measured no better for TPE, and slower)",
                                low=0)
    polish: int = default_of(OptunaSettings, "polish", 32)
    n_startup_trials: int = setting(
        100, "complete trials (the enqueued heuristics included) sampled at random before TPE "
        "starts modelling good and bad trials (optuna's default: 10)", low=0)
    ei_candidates: int = setting(
        8, "candidates TPE draws per parameter group, keeping the one of best expected "
        "improvement (optuna's default: 24); fewer explore more", low=1)
