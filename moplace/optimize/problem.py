"""A search problem: a graph, a cluster, the objectives, and optional user limits.

`Problem.evaluate` scores one strategy through the shared simulator; every searcher is
compared on the same problem, so on the same numbers. A strategy's *violation* is the number
of bytes by which it breaks the constraints, summed: device memory over capacity, plus peak
communication over the user's limit, plus peak memory over the user's limit (Trinity's C^
and M^). Zero means feasible.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from objectives import (
    DEFAULT,
    OBJECTIVES,
    evaluate_trace,
    memory_violation,
    peak_communication,
    peak_memory,
)

from ..core.baselines import BASELINES, baseline
from ..core.genome import GenomeSpace
from ..core.graph import OpGraph
from ..core.strategy import Strategy
from ..costs.costmodel import CostModel
from ..errors import MoplaceError
from ..simulator.incremental import IncrementalSimulator
from ..simulator.evaluation import Evaluation


#: below this many ops, `Problem.evaluate_batch` evaluates one by one: the Python around the
#: event loop (validation, task-graph build, scoring) holds the GIL and would serialise threads
THREADED_MIN_OPS = 2000

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def batch_workers() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _pool(n: int) -> ThreadPoolExecutor:
    with _POOLS_LOCK:
        pool = _POOLS.get(n)
        if pool is None:
            pool = _POOLS[n] = ThreadPoolExecutor(n, thread_name_prefix="moplace-evaluate")
        return pool


@dataclass(frozen=True)
class Limits:
    """User limits in bytes (None: no limit): peak communication and peak memory per device."""

    peak_comm_bytes: float | None = None
    peak_mem_bytes: float | None = None

    def __post_init__(self):
        for name in ("peak_comm_bytes", "peak_mem_bytes"):
            value = getattr(self, name)
            if value is not None and not (np.isfinite(value) and value > 0):
                raise MoplaceError(f"limit {name} must be a positive number of bytes, got {value!r}")


class Problem:
    """Graph + cluster + objectives (+ limits): evaluates strategies. ``inplace=False`` runs
    no op in place (`CostModel`), for comparison; ``costs``, when given, decide it."""

    def __init__(self, graph: OpGraph, cluster, *, objectives=DEFAULT, limits: Limits = Limits(),
                 costs: CostModel | None = None, inplace: bool = True):
        for name in objectives:
            OBJECTIVES[name]  # noqa: B018 - unknown names fail here, listing the known ones
        self.graph, self.cluster = graph, cluster
        self.objectives = tuple(objectives)
        self.limits = limits
        self.costs = costs if costs is not None else CostModel(graph, cluster, inplace=inplace)
        self.costs_given = costs is not None  # else they follow from graph and cluster

    def __repr__(self) -> str:
        return f"Problem({self.graph.name!r} on {self.cluster.name!r}, {self.objectives})"

    @property
    def n_devices(self) -> int:
        return self.cluster.n_devices

    @cached_property
    def genome(self) -> GenomeSpace:
        """The flat encoding of strategies for this graph and cluster."""
        return GenomeSpace(self.graph, self.cluster.n_devices)

    def __getstate__(self) -> dict:  # the simulator's kept task graphs are a cache
        state = dict(self.__dict__)
        state.pop("simulator", None)
        return state

    @cached_property
    def simulator(self) -> IncrementalSimulator:
        """Simulates this problem's strategies, patching a child's task graph from its
        parent's when it holds that (``simulator.patched`` counts those)."""
        return IncrementalSimulator(self.graph, self.cluster, self.costs)

    def evaluate(self, strategy: Strategy, parent: Strategy | None = None) -> Evaluation:
        """Simulate ``strategy`` and score it: objective values and violation. ``parent``: the
        evaluated strategy it was derived from, if any (the same result, sooner)."""
        trace = self.simulator.simulate(strategy, parent)
        return Evaluation(self.objectives, evaluate_trace(trace, self.objectives),
                          self.violation(trace), trace)

    def evaluate_batch(self, strategies, *, workers: int | None = None,
                       parents=None) -> list[Evaluation]:
        """`evaluate` each of ``strategies``, on all cores: the same numbers, in the same order.

        Threads, not processes: the compiled event loop releases the GIL, so threads run it
        side by side on the problem's own arrays, with no copy or pickling of task graphs, and
        each thread keeps its work buffers. ``workers``: threads to use (default:
        `parallel_width`). Graphs too small for the event loop to
        outweigh the Python around it (`THREADED_MIN_OPS`) are evaluated one by one.
        ``parents``: each strategy's parent or None (see `evaluate`)."""
        strategies = list(strategies)
        pairs = [(s,) for s in strategies] if parents is None or not any(parents) \
            else list(zip(strategies, parents))
        n = self.parallel_width() if workers is None else int(workers)
        if n <= 1 or len(strategies) <= 1 or len(self.graph.ops) < THREADED_MIN_OPS:
            return [self.evaluate(*pair) for pair in pairs]
        return list(_pool(n).map(lambda pair: self.evaluate(*pair), pairs))

    def parallel_width(self) -> int:
        """Strategies `evaluate_batch` scores at once: one per core, or 1 for a small graph."""
        return batch_workers() if len(self.graph.ops) >= THREADED_MIN_OPS else 1

    def violation(self, trace) -> float:
        """Bytes by which ``trace`` breaks capacity and the user's limits (0: feasible)."""
        over = memory_violation(trace)
        if self.limits.peak_comm_bytes is not None:
            over += max(peak_communication(trace) - self.limits.peak_comm_bytes, 0.0)
        if self.limits.peak_mem_bytes is not None:
            over += max(peak_memory(trace) - self.limits.peak_mem_bytes, 0.0)
        return float(over)

    @cached_property
    def baselines(self) -> dict[str, Evaluation]:
        """The four baseline strategies, evaluated (they fix the hypervolume reference)."""
        return {name: self.evaluate(baseline(name, self.graph, self.n_devices)) for name in BASELINES}

    @cached_property
    def reference(self) -> np.ndarray:
        """Hypervolume reference point from the baselines (see `moplace.optimize.hypervolume`)."""
        from .hypervolume import reference_point

        return reference_point(np.array([ev.values for ev in self.baselines.values()]))
