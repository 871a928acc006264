"""PipeDream's partitioner as a searcher (``pipedream``) and a seed source.

`searchers.pipeline.partition` chooses contiguous stages and how many devices replicate each
(the slowest stage as fast as it can be); `pipeline_candidates` runs its partitions as
micro-batched pipelines, for each micro-batch count m of `MICRO_BATCHES` (GPipe's paper ran 8)
the partitions made for m (each copy of an op pays its overhead, so the stages balance the
time they take at m) under 1F1B, GPipe and zero-bubble (ZB-H1: one stage a device, its
weight gradients filling the bubble; where the micro-batches fit its rounds), on every device and, where the partitioner finds a
faster flushed pipeline on fewer, on those. A replicated stage is its groups split on batch
over its devices, their gradients in DDP's 25 MiB buckets. The searcher asks for every candidate in one batch
and is done: the simulator scores them (the micro-batch count trades time, as the bubble
shrinks and per-task overheads grow, against the stash). The three fastest are seeds, so
every seeded search (OS-DPOS, NSGA-II, MCMC, ...) starts from them.
"""

from __future__ import annotations

import numpy as np

from moplace.core.baselines import DDP_BUCKET_BYTES, topological_priority
from moplace.core.graph import ROLES
from moplace.core.strategy import SCHEDULE_LABELS, SCHEDULES, Split, Strategy
from moplace.optimize.searcher import Searcher
from moplace.optimize.seeds import Seed

from .partition import Partition, PartitionTable, chain, device_path

#: the micro-batch counts the partitioner makes pipelines for
MICRO_BATCHES = (4, 8, 16, 32)


def pipeline_strategy(graph, part: Partition, micro_batches: int, schedule: int) -> Strategy:
    """``part``'s stages as a strategy: each stage's groups on its first device, split on
    batch over its devices when it has several; ``micro_batches`` under ``schedule``."""
    group = graph.arrays.group
    device = np.zeros(graph.arrays.n_groups, np.int64)
    splits, replicated = {}, False
    for stage in part.stages:
        device[stage.groups] = stage.devices[0]
        if stage.n > 1:
            replicated = True
            split = Split("batch", stage.devices)
            for op in np.flatnonzero(np.isin(group, stage.groups)).tolist():
                splits[op] = split
    return Strategy(device[group], topological_priority(graph), splits,
                    bucket_bytes=DDP_BUCKET_BYTES if replicated else 0.0,
                    micro_batches=micro_batches, schedule=schedule)


#: how much of a replicated stage's gradient all-reduce the partitioner counts in its time:
#: all of it, as PipeDream does (it synchronises every minibatch), and half (a flushed
#: pipeline reduces once per step, after the last micro-batch, while earlier stages still run)
SYNC_WEIGHTS = (1.0, 0.5)
#: partitions kept per micro-batch count (the best by `flushed_estimate`)
KEEP = 2


def flushed_estimate(part: Partition, m: int) -> float:
    """A flushed pipeline's step with ``m`` micro-batches: the slowest stage (its time at m)
    times ``(m + S - 1) / m`` (the bubble)."""
    return part.slowest_s * (m + len(part.stages) - 1) / m


def micro_batch_extra(problem, m: int) -> np.ndarray:
    """Per op, the seconds ``m`` micro-batches add on its device: m copies, each a part's time
    (`CostModel.with_parts`), instead of the op once; 0 for ops run once (not forward or
    backward)."""
    costs, role = problem.costs, problem.graph.arrays.role
    copied = (role == ROLES.index("forward")) | (role == ROLES.index("backward"))
    if m == 1:
        return np.zeros(role.size)
    part = costs.with_parts(m)[role.size:, 0]
    return np.where(copied, m * part - costs.compute[:, 0], 0.0)


def partitions(problem) -> list[tuple[Partition, int]]:
    """The (partition, micro-batch count) pairs worth running: for each m of `MICRO_BATCHES`
    (only 1 for a graph with nothing to micro-batch), the partitions over the device path of
    at most S stages for every S, counting all and half the replicated stages' all-reduce
    (`SYNC_WEIGHTS`), and over fewer devices; the `KEEP` best by `flushed_estimate`, each
    once."""
    p = problem
    compute = p.costs.compute[:, 0]
    role = p.graph.arrays.role
    batched = np.any((role == ROLES.index("forward")) | (role == ROLES.index("backward")))
    path = device_path(p.cluster, p.n_devices)
    chained = chain(p.graph, compute)  # the same for every table
    out = []
    for m in MICRO_BATCHES if batched else (1,):
        extra = micro_batch_extra(p, m)
        tables = [PartitionTable(p.graph, p.cluster, compute, p.n_devices, w, extra, path,
                                 chained) for w in SYNC_WEIGHTS]
        found = [t.best(n_stages=S) for t in tables for S in range(p.n_devices, 0, -1)]
        found += [tables[0].best(d) for d in range(1, p.n_devices)]
        seen, kept = set(), []
        for part in sorted(found, key=lambda q: flushed_estimate(q, m)):
            if part.key not in seen and np.isfinite(part.slowest_s):
                seen.add(part.key)
                kept.append((part, m))
        out += kept[:KEEP]
    return out


def pipeline_candidates(problem, parts: list[tuple[Partition, int]] | None = None
                        ) -> list[Seed]:
    """The pipelines of the (partition, micro-batch count) pairs (``parts``, default
    `partitions`; see the module docstring) under 1F1B, GPipe and zero-bubble, labelled."""
    from moplace.simulator.pipeorder import micro_batch_refusal

    out = []
    for part, m in partitions(problem) if parts is None else parts:
        where = f"{len(part.stages)} stages on {part.n_devices} devices"
        if m == 1:  # nothing to micro-batch: the stages as a placement
            out.append(Seed(f"pipedream: {where}", pipeline_strategy(problem.graph, part, 1, 0)))
            continue
        zero_bubble = SCHEDULES.index("zero-bubble")
        for schedule in (0, 1, zero_bubble):
            if schedule == zero_bubble and micro_batch_refusal("zero-bubble",
                                                               len(part.stages), 1, m):
                continue
            out.append(Seed(f"pipedream: {where}, {SCHEDULE_LABELS[SCHEDULES[schedule]]} x{m}",
                            pipeline_strategy(problem.graph, part, m, schedule)))
    return out


#: the pipelines a seeded search starts from: every seed costs each seeded search an
#: evaluation, so fewer than the searcher asks for
N_SEEDS = 3


#: the most micro-batches a seed is simulated with (each costs its count in simulation time)
SEED_MICRO_BATCHES = 16


def pipeline_seeds(problem) -> list[Seed]:
    """The partitioner's `N_SEEDS` fastest 1F1B and GPipe pipelines (simulated here, fitting
    first) with at most `SEED_MICRO_BATCHES` micro-batches, as seeds (entry-point group
    ``moplace.seeds``): the schedules the per-op genome varies (the pipedream searcher itself
    asks for its zero-bubble pipelines too)."""
    from moplace.simulator.engine import simulate

    p = problem
    scored = []
    kept = [(part, m) for part, m in partitions(p) if m <= SEED_MICRO_BATCHES]
    for seed in pipeline_candidates(p, kept):
        if seed.strategy.schedule_name not in ("1f1b", "gpipe"):
            continue
        trace = simulate(p.graph, p.cluster, seed.strategy, costs=p.costs)
        scored.append((not trace.feasible, trace.makespan, len(scored), seed))
    return [seed for *_, seed in sorted(scored)[:N_SEEDS]]


class PipelineSearcher(Searcher):
    """PipeDream's partitioner: stages by dynamic programming, run as pipelines of each schedule.

    Its pipelines run under 1F1B, GPipe and zero-bubble.

    It asks for its pipelines (`pipeline_candidates`) in one batch and is then done; on one
    device they are gradient accumulation. For a graph without forward or backward ops
    (nothing to micro-batch) it asks for the stages as a placement."""

    name = "pipedream"

    def _setup(self) -> None:
        self._asked = False
        self._labels: list[str] = []

    def ask(self) -> list[Strategy]:
        if self._asked:
            return []
        self._asked = True
        seeds = pipeline_candidates(self.problem)
        self._labels = [s.label for s in seeds]
        return [s.strategy for s in seeds]

    def notes(self) -> list[str]:
        return [f"pipedream: {len(self._labels)} pipelines asked"] if self._labels else []
