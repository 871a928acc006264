"""The genome as optuna trial parameters, and the study around them.

`TrialSpace` maps the genome to trial parameters and back (``d{g}``, ``s{g}``, ``p{i}``: see the
package docstring); `open_storage` opens the storage a study lives in, `make_sampler` builds the
sampler, and `check_study` refuses a resumed study that was made for another problem. optuna is
imported inside the functions that need it, never at import time.
"""

from __future__ import annotations

import os

import numpy as np

from moplace.core.strategy import Strategy
from moplace.errors import MoplaceError

#: The samplers `make_sampler` builds.
SAMPLERS = ("nsga2", "tpe", "random")


class TrialSpace:
    """A problem's genome as optuna trial parameters.

    ``d{g}``: device of co-location group g (only when there is more than one device);
    ``s{g}``: split option of group g (only for groups with more than one option); ``p{i}``:
    priority of op i in [0, 1] (only with ``priorities``; without, every strategy runs the ops
    in ``fixed_priority``); ``bucket``: the gradient bucket size's index into the genome's
    ``bucket_choices`` (only when it has more than one); ``zero``: the ZeRO stage's index into
    ``zero_choices`` (likewise); ``micro``: the micro-batch count's index into
    ``micro_batch_choices``; ``schedule``: 0 (1F1B) or 1 (GPipe); ``r{g}``: 1 when co-location
    group g
    is recomputed (only for groups that can be, `GenomeSpace.recompute_heads`).
    """

    def __init__(self, genome, priorities: bool, fixed_priority: np.ndarray):
        G = genome.n_groups
        self.genome, self.priorities, self.fixed_priority = genome, bool(priorities), fixed_priority
        #: groups with a device parameter, groups with a split parameter
        self.devices = [g for g in range(G)] if genome.n_devices > 1 else []
        self.splits = [g for g in range(G) if len(genome.options[g]) > 1]
        #: the bucket size is a parameter when there is more than one to choose
        self.buckets = len(genome.bucket_choices) > 1
        self.zero = len(genome.zero_choices) > 1
        #: the groups with a recompute parameter
        self.recompute = genome.graph.arrays.group[genome.recompute_heads].tolist()

    @property
    def n_params(self) -> int:
        """Parameters of a trial."""
        return len(self.devices) + len(self.splits) + int(self.buckets) + int(self.zero) + \
            2 + len(self.recompute) + \
            (self.genome.n_ops if self.priorities else 0)

    def strategy(self, trial) -> Strategy:
        """Suggest (or read back, for a trial that has them) every parameter; decode."""
        space = self.genome
        G, D = space.n_groups, space.n_devices
        x = np.zeros(space.size)
        for g in self.devices:
            x[g] = trial.suggest_int(f"d{g}", 0, D - 1)
        for g in self.splits:
            x[G + g] = trial.suggest_int(f"s{g}", 0, len(space.options[g]) - 1)
        if self.priorities:
            for i in range(space.n_ops):
                x[2 * G + i] = trial.suggest_float(f"p{i}", 0.0, 1.0)
        else:
            x[space.priorities] = self.fixed_priority
        if self.buckets:
            x[space.bucket_gene] = trial.suggest_int("bucket", 0, len(space.bucket_choices) - 1)
        if self.zero:
            x[space.zero_gene] = trial.suggest_int("zero", 0, len(space.zero_choices) - 1)
        x[space.micro_batch_gene] = trial.suggest_int("micro", 0,
                                                      len(space.micro_batch_choices) - 1)
        x[space.schedule_gene] = trial.suggest_int("schedule", 0, 1)
        x[space.recompute_genes] = [trial.suggest_int(f"r{g}", 0, 1) for g in self.recompute]
        return space.decode(x)

    def params(self, x: np.ndarray) -> dict:
        """The trial parameters of genome ``x``, priorities as their dense rank in [0, 1]."""
        G = self.genome.n_groups
        params = {f"d{g}": int(x[g]) for g in self.devices}
        params.update({f"s{g}": int(x[G + g]) for g in self.splits})
        if self.priorities:
            params.update({f"p{i}": float(v) for i, v in
                           enumerate(unit_rank(x[self.genome.priorities]))})
        if self.buckets:
            params["bucket"] = int(x[self.genome.bucket_gene])
        if self.zero:
            params["zero"] = int(x[self.genome.zero_gene])
        params["micro"] = int(x[self.genome.micro_batch_gene])
        params["schedule"] = int(x[self.genome.schedule_gene])
        params.update({f"r{g}": int(v) for g, v in
                       zip(self.recompute, x[self.genome.recompute_genes].tolist())})
        return params


def check_study(study, problem, priorities: bool) -> None:
    """Refuse a study made for another graph, cluster, objectives or genome; mark a new one
    (user attribute ``moplace_genome``)."""
    space = problem.genome
    key = {"graph": problem.graph.name, "cluster": problem.cluster.name,
           "objectives": list(problem.objectives), "n_ops": space.n_ops,
           "n_groups": space.n_groups, "n_devices": space.n_devices, "priorities": priorities}
    if len(study.directions) != len(problem.objectives):
        raise MoplaceError(f"study {study.study_name!r} has {len(study.directions)} "
                           f"objectives, the problem {len(problem.objectives)}")
    have = study.user_attrs.get("moplace_genome")
    if have is None:
        study.set_user_attr("moplace_genome", key)
    elif have != key:
        raise MoplaceError(f"study {study.study_name!r} was made for {have}, "
                           f"not for this problem ({key})")


def open_storage(storage):
    """An optuna storage: None (in memory), a database URL (``sqlite:///study.db``), a file
    name ending in ``.log`` or ``.journal`` (optuna's journal file storage), or a storage;
    anything else (``--set storage=true`` reads a bool) is refused by name."""
    if storage is None:
        return None
    if not isinstance(storage, str):
        from optuna.storages import BaseStorage

        if isinstance(storage, BaseStorage):
            return storage
        raise MoplaceError(f"storage {storage!r} is neither a database URL (sqlite:///study.db, "
                           "postgresql://...), a journal file ending in .log or .journal, nor "
                           "an optuna storage")
    if storage.endswith((".log", ".journal")) and "://" not in storage:
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        folder = os.path.dirname(os.path.abspath(storage))
        if not os.path.isdir(folder):
            raise MoplaceError(f"storage {storage!r}: folder {folder} does not exist")
        return JournalStorage(JournalFileBackend(storage))
    if "://" not in storage:
        raise MoplaceError(f"storage {storage!r} is neither a database URL (sqlite:///study.db, "
                           "postgresql://...) nor a journal file ending in .log or .journal")
    import optuna

    try:
        return optuna.storages.RDBStorage(storage)
    except Exception as exc:  # SQLAlchemy's errors for unknown dialects, bad URLs, no server
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MoplaceError(f"storage {storage!r} cannot be opened: {detail}") from None


def make_sampler(kind: str, seed: int, *, population_size: int = 50,
                 mutation_prob: float | None = None, n_startup_trials: int = 10,
                 ei_candidates: int = 24):
    """Optuna's sampler ``kind`` (one of `SAMPLERS`): NSGA-II with ``population_size`` and
    ``mutation_prob``, TPE (multivariate, with the constant liar) with ``n_startup_trials`` and
    ``ei_candidates``, or random; the defaults are optuna's."""
    import optuna

    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=population_size, seed=seed,
                                             mutation_prob=mutation_prob)
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                          n_startup_trials=n_startup_trials,
                                          n_ei_candidates=ei_candidates)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise MoplaceError(f"unknown optuna sampler {kind!r}; known: {', '.join(SAMPLERS)}")


def unit_rank(priority: np.ndarray) -> np.ndarray:
    """Priorities mapped into [0, 1] keeping their order and their ties (dense rank)."""
    if priority.size == 0:
        return priority.astype(np.float64)
    _, rank = np.unique(priority, return_inverse=True)
    top = rank.max()
    return rank / top if top > 0 else np.zeros(priority.size)
