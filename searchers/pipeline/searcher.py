"""PipeDream's partitioner as a searcher (``pipedream``) and a seed source.

`searchers.pipeline.partition` chooses contiguous stages and how many devices replicate each
(the slowest stage as fast as it can be); `pipeline_candidates` runs that partition as
micro-batched pipelines: 1F1B with each micro-batch count of `MICRO_BATCHES`, and GPipe with 8
(the GPipe paper's count), on every device and, where the partitioner finds a faster slowest
stage on fewer, on those. A replicated stage is its groups split on batch over its devices,
their gradients in DDP's 25 MiB buckets. The searcher asks for every candidate in one batch
and is done: the simulator scores them (the micro-batch count trades time, as the bubble
shrinks and per-task overheads grow, against the stash). The three fastest are seeds, so
every seeded search (OS-DPOS, NSGA-II, MCMC, ...) starts from them.
"""

from __future__ import annotations

import numpy as np

from moplace.core.baselines import DDP_BUCKET_BYTES, topological_priority
from moplace.core.graph import ROLES
from moplace.core.strategy import Split, Strategy
from moplace.optimize.searcher import Searcher
from moplace.optimize.seeds import Seed

from .partition import Partition, PartitionTable

#: the micro-batch counts each partition runs with under 1F1B
MICRO_BATCHES = (4, 8, 16, 32)
#: GPipe's micro-batch count in its paper's experiments
GPIPE_MICRO_BATCHES = 8


def pipeline_strategy(graph, part: Partition, micro_batches: int, schedule: int) -> Strategy:
    """``part``'s stages as a strategy: each stage's groups on its first device, split on
    batch over its devices when it has several; ``micro_batches`` under ``schedule``."""
    group = graph.arrays.group
    device = np.zeros(graph.arrays.n_groups, np.int64)
    splits, replicated = {}, False
    for stage in part.stages:
        device[stage.groups] = stage.first
        if stage.n > 1:
            replicated = True
            split = Split("batch", tuple(range(stage.first, stage.first + stage.n)))
            for op in np.flatnonzero(np.isin(group, stage.groups)).tolist():
                splits[op] = split
    return Strategy(device[group], topological_priority(graph), splits,
                    bucket_bytes=DDP_BUCKET_BYTES if replicated else 0.0,
                    micro_batches=micro_batches, schedule=schedule)


#: how much of a replicated stage's gradient all-reduce the partitioner counts in its time:
#: all of it, as PipeDream does (it synchronises every minibatch), and half (a flushed
#: pipeline reduces once per step, after the last micro-batch, while earlier stages still run)
SYNC_WEIGHTS = (1.0, 0.5)
#: partitions kept per problem (PipeDream's own two, then the best by `flushed_estimate`)
KEEP = 4


def flushed_estimate(part: Partition, ops_per_device: float, overhead_s: float) -> float:
    """A flushed pipeline's step, estimated for its best micro-batch count of `MICRO_BATCHES`:
    the slowest stage times ``(m + S - 1) / m`` (the bubble), plus ``m`` times each device's
    per-task overhead (``ops_per_device`` tasks of ``overhead_s``)."""
    S = len(part.stages)
    return min(part.slowest_s * (m + S - 1) / m + m * ops_per_device * overhead_s
               for m in MICRO_BATCHES)


def partitions(problem) -> list[Partition]:
    """The partitions worth running: over every device, of at most S stages for every S,
    counting all and half the replicated stages' all-reduce (`SYNC_WEIGHTS`), and over fewer
    devices (the first ones); each once: the two of any number of stages first, then the best
    by `flushed_estimate`, `KEEP` in all."""
    p = problem
    compute = p.costs.compute[:, 0]
    tables = [PartitionTable(p.graph, p.cluster, compute, p.n_devices, w) for w in SYNC_WEIGHTS]
    found = [t.best(n_stages=S) for t in tables for S in range(p.n_devices, 0, -1)]
    found += [tables[0].best(d) for d in range(1, p.n_devices)]
    per_device = len(p.graph.ops) / max(p.n_devices, 1)
    seen, kept = set(), []
    plain = [found[0], found[p.n_devices]]  # every stage count, all and half the all-reduce
    for part in plain + sorted(found, key=lambda q: flushed_estimate(
            q, per_device, p.costs.split_overhead_s)):
        key = tuple((tuple(s.groups.tolist()), s.first, s.n) for s in part.stages)
        if key not in seen and np.isfinite(part.slowest_s):
            seen.add(key)
            kept.append(part)
    return kept[:KEEP]


def pipeline_candidates(problem, parts: list[Partition] | None = None) -> list[Seed]:
    """The pipelines of the partitions (``parts``, default `partitions`; see the module
    docstring), labelled."""
    role = problem.graph.arrays.role
    batched = np.any((role == ROLES.index("forward")) | (role == ROLES.index("backward")))
    out = []
    for part in partitions(problem) if parts is None else parts:
        where = f"{len(part.stages)} stages on {part.n_devices} devices"
        if not batched:  # nothing to micro-batch: the stages as a placement
            out.append(Seed(f"pipedream: {where}", pipeline_strategy(problem.graph, part, 1, 0)))
            continue
        for m in MICRO_BATCHES:
            out.append(Seed(f"pipedream: {where}, 1F1B x{m}",
                            pipeline_strategy(problem.graph, part, m, 0)))
        out.append(Seed(f"pipedream: {where}, GPipe x{GPIPE_MICRO_BATCHES}",
                        pipeline_strategy(problem.graph, part, GPIPE_MICRO_BATCHES, 1)))
    return out


#: the pipelines a seeded search starts from: every seed costs each seeded search an
#: evaluation, so fewer than the searcher asks for
N_SEEDS = 3


#: the most micro-batches a seed is simulated with (each costs its count in simulation time)
SEED_MICRO_BATCHES = 16


def pipeline_seeds(problem) -> list[Seed]:
    """The partitioner's `N_SEEDS` fastest pipelines (simulated here, fitting first) of its
    first two partitions with at most `SEED_MICRO_BATCHES` micro-batches, as seeds
    (entry-point group ``moplace.seeds``)."""
    from moplace.simulator.engine import simulate

    p = problem
    scored = []
    for seed in pipeline_candidates(p, partitions(p)[:2]):
        if seed.strategy.micro_batches > SEED_MICRO_BATCHES:
            continue
        trace = simulate(p.graph, p.cluster, seed.strategy, costs=p.costs)
        scored.append((not trace.feasible, trace.makespan, len(scored), seed))
    return [seed for *_, seed in sorted(scored)[:N_SEEDS]]


class PipelineSearcher(Searcher):
    """PipeDream's partitioner: stages by dynamic programming, run as 1F1B and GPipe pipelines.

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
