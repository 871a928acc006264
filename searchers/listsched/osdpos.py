"""FastT's OS-DPOS as an ask/tell searcher: DPOS, then split critical-path ops while it pays.

1. The first batch holds every seed (`moplace.optimize.seeds`: the candidate schedules of
   DPOS, HEFT and m-ETF under three memory budgets, groups kept or regrouped; the baselines on
   the whole cluster and on device subsets, such as one server's GPUs); the search goes on
   from the fastest feasible one (FastT starts from DPOS, or from data parallelism when the
   model fits one device; starting from the best seed includes those starts).
2. Critical-path ops (DPOS's upward rank on maximum costs), by descending compute time, are
   tried one at a time: the next batch holds the current strategy with that op's co-location
   group cut by each split option the genome allows (every splittable dimension and part
   count, parts on consecutive devices) or, when it is already split, merged back.
3. The best candidate is kept if the simulator says the step got faster (and stays
   feasible); FastT stops at the first op whose split does not help, and so does this.

Because every candidate is judged by the simulator, the result is never slower than any
strategy of the first batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moplace.core.strategy import Strategy
from moplace.errors import StrategyError
from moplace.optimize.searcher import Searcher
from moplace.optimize.seeds import seed_strategies
from moplace.optimize.settings import Settings, setting

from .schedule import ListSchedInput, critical_path, transfer_weights, upward_rank


@dataclass(frozen=True)
class OsDposSettings(Settings):
    patience: int = setting(1, "critical-path ops tried without improvement before stopping "
                            "(1 is FastT's rule; 0: DPOS's schedule alone)", low=0)


class OsDposSearcher(Searcher):
    """FastT's OS-DPOS: DPOS, then split critical-path ops while the simulator says it pays.

    See the module docstring for the steps.
    """

    name = "os-dpos"
    seeded = True
    Settings = OsDposSettings

    def _setup(self) -> None:
        p = self.problem
        inp = ListSchedInput.from_problem(p.graph, p.cluster, p.costs)
        self._first = [seed.strategy for seed in seed_strategies(p)]
        rank = upward_rank(inp, inp.compute.max(axis=1), transfer_weights(inp, "max"))
        path = critical_path(inp, rank)
        work = inp.compute.max(axis=1)[path]
        groups = p.graph.arrays.group[path[np.argsort(-work, kind="stable")]]
        _, first_seen = np.unique(groups, return_index=True)
        self._queue = [int(g) for g in groups[np.sort(first_seen)]]
        self._best = self._best_runtime = None
        self._misses = 0
        self._asked_first = False

    def ask(self) -> list[Strategy]:
        if not self._asked_first:
            self._asked_first = True
            return list(self._first)
        while self._queue and self._misses < self.config.patience and self._best is not None:
            candidates = self._variants(self._queue.pop(0))
            if candidates:
                return candidates
        return []

    def tell(self, strategies, evaluations) -> None:
        feasible = [(ev.values[0], k) for k, ev in enumerate(evaluations) if ev.feasible]
        if not feasible:
            if self._best is None and evaluations:  # nothing fits: go on from the least violating
                k = int(np.argmin([ev.violation for ev in evaluations]))
                self._best, self._best_runtime = strategies[k], float("inf")
            return
        runtime, k = min(feasible)
        if self._best_runtime is None or runtime < self._best_runtime:
            self._best, self._best_runtime = strategies[k], float(runtime)
            self._misses = 0
        else:
            self._misses += 1

    def _variants(self, group: int) -> list[Strategy]:
        space = self.problem.genome
        try:
            x = space.encode(self._best)
        except StrategyError:  # parts on devices that are not consecutive: no split options
            return []
        gene = space.n_groups + group
        out = []
        for option in range(len(space.options[group])):
            if option != int(x[gene]):
                y = x.copy()
                y[gene] = option
                out.append(space.decode(y))
        return out
