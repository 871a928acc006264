"""Simulation that remembers: strategies derived from a recently simulated one are simulated on
its task graph, patched.

A searcher that walks from strategy to neighbouring strategy (MCMC) names, with each proposal,
the strategy it changed (its *parent*). `IncrementalSimulator` keeps the task graphs of the
strategies it simulated last, and simulates a proposal whose parent it still holds on the
parent's task graph patched (`moplace.simulator.delta`); otherwise, or when the patch does not
apply, it builds the task graph as `moplace.simulator.engine.simulate` does. Both give the
same trace, array for array (tests/test_delta.py), so what is kept changes speed only.

Kept: the last `MAX_KEPT` strategies with splits (without splits a build is cheaper than a
patch, and nothing is kept), at most `MAX_BYTES` of their own arrays in all; a parent used
again is kept longer (a chain's current strategy is the parent of its every proposal). Safe
from several threads (`moplace.optimize.problem.Problem.evaluate_batch`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ..core.strategy import Strategy
from .build import PATCHED, build
from .delta import SimulationBase
from .engine import Trace, run_task_graph

MAX_KEPT = 64
MAX_BYTES = 128 * 2**20

#: the arrays a patched or filled task graph has of its own (the rest are the skeleton's)
_OWN = ("dev", "dur", "prio", "e_bytes", "e_srcdev", "e_local")


class IncrementalSimulator:
    """Simulates strategies of one graph on one cluster under one cost model, patching a
    proposal's task graph from its parent's when it holds the parent's.

    ``patched`` and ``simulated`` count the simulations on a patched task graph and all of
    them."""

    def __init__(self, graph, cluster, costs, *, max_kept: int = MAX_KEPT,
                 max_bytes: int = MAX_BYTES):
        self.graph, self.cluster, self.costs = graph, cluster, costs
        self.max_kept, self.max_bytes = max_kept, max_bytes
        self.patched = self.simulated = 0
        self._kept: OrderedDict[int, tuple[SimulationBase, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def simulate(self, strategy: Strategy, parent: Strategy | None = None, *,
                 validate: bool = True, record: bool = False) -> Trace:
        """The trace of ``strategy``; ``parent``: the strategy it was derived from, or None."""
        if validate:
            strategy.validate(self.graph, self.cluster.n_devices)
        base = self._base_of(parent) if parent is not None and strategy.splits else None
        tg, how = build(self.graph, strategy, self.costs, base)
        if strategy.splits:
            self._keep(SimulationBase(strategy, tg, self.graph, self.costs))
        with self._lock:
            self.simulated += 1
            self.patched += how == PATCHED
        return run_task_graph(tg, self.cluster, len(self.graph.ops), record=record)

    def _base_of(self, parent: Strategy) -> SimulationBase | None:
        with self._lock:
            entry = self._kept.get(id(parent))
            if entry is None or entry[0].strategy is not parent:
                return None
            self._kept.move_to_end(id(parent))
            return entry[0]

    def _keep(self, base: SimulationBase) -> None:
        tg = base.task_graph
        size = sum(np.asarray(getattr(tg, name)).nbytes for name in _OWN)
        with self._lock:
            key = id(base.strategy)
            old = self._kept.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._kept[key] = (base, size)
            self._bytes += size
            while len(self._kept) > 1 and (len(self._kept) > self.max_kept
                                           or self._bytes > self.max_bytes):
                self._bytes -= self._kept.popitem(last=False)[1][1]

    def __getstate__(self):  # what is kept is a cache: it does not travel
        return {"graph": self.graph, "cluster": self.cluster, "costs": self.costs,
                "max_kept": self.max_kept, "max_bytes": self.max_bytes}

    def __setstate__(self, state):
        self.__init__(state["graph"], state["cluster"], state["costs"],
                      max_kept=state["max_kept"], max_bytes=state["max_bytes"])
