"""Standard op orders for a placement: what a searcher tries when it finds a new front point.

The order of the ops on a device decides how fast a placement runs and how much memory it
holds; a searcher that varies priorities one swap at a time can miss the order that makes a
placement fast, or makes a memory-tight one fit. `StandardOrders` gives, for a placement, the
three orders worth trying first: topological (`topological_priority`), the memory-lean
`moplace.core.baselines.memory_priority`, and HEFT's upward rank under that placement;
`swap_pairs` lists the one-step changes of an order (two ops of one device, near each other in
its order, swapped).
Optuna's polish (`searchers.optuna_search.polish`) and MCMC's (`searchers.mcmc`) use them.
"""

from __future__ import annotations

import numpy as np

from moplace.core.baselines import memory_priority, topological_priority
from searchers.listsched import ListSchedInput, upward_rank


class StandardOrders:
    """The standard orders of placements of one problem (the placement-free ones computed
    once)."""

    def __init__(self, problem):
        self.problem = problem
        self.topological = topological_priority(problem.graph)
        self.memory = memory_priority(problem.graph)
        self._input = None

    def __call__(self, placement: np.ndarray) -> list[np.ndarray]:
        """Priorities [ops] of the three orders for ``placement`` (device per op)."""
        return [self.topological, self.memory, self.upward_rank(placement)]

    def upward_rank(self, placement: np.ndarray) -> np.ndarray:
        """HEFT's upward rank under ``placement``: an op's compute time on its device plus
        the longest way to an exit through its successors, transfers where devices differ."""
        p = self.problem
        if self._input is None:
            self._input = ListSchedInput.from_problem(p.graph, p.cluster, p.costs)
        inp, a = self._input, p.graph.arrays
        placement = np.asarray(placement, np.int64)
        ps, pd = placement[a.src], placement[a.dst]
        comm = np.where(ps != pd, inp.latency[ps, pd] + a.edge_bytes / inp.bandwidth[ps, pd], 0.0)
        return upward_rank(inp, inp.compute[np.arange(placement.size), placement], comm)


def swap_pairs(placement: np.ndarray, priority: np.ndarray, window: int = 8) -> list:
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
