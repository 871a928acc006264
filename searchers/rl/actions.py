"""From the policy's decisions to strategies, and back (imitation targets). numpy only.

The policy decides per *unit* (a co-location group of the graph: ops that must share a device
and a split) the group it joins, and per group a device, a split degree and a priority level
(`policy.Actions`). A strategy follows:

- **placement**: each op on the device of its unit's group;
- **splits**: a group's split degree ``s`` (choice ``s - 1``: 1 = whole) splits each of its
  units ``s`` ways on the batch dimension, or on the channel dimension where the unit allows
  only that, on consecutive devices from the group's device (the genome's convention,
  `moplace.core.genome`); a unit that allows neither stays whole;
- **priority**: the group's level plus the op's place in the list schedulers' order (upward
  rank from mean compute and transfer times, HEFT's, scaled into [0, 1)): among ready ops on a
  device, higher levels run first and, within a level, the op on the longer path to the end.

Without the split and priority heads (placement only) every unit is whole and ops run in the
upward-rank order.
"""

from __future__ import annotations

import numpy as np

from moplace.core.graph import SPLIT_DIMS
from moplace.core.strategy import Strategy


class ActionSpace:
    """Turns `policy.Actions` into strategies of ``problem`` (see the module docstring);
    ``splits`` / ``levels`` are the numbers of choices of those heads (1: no head)."""

    def __init__(self, problem, n_groups: int, *, splits: int = 1, levels: int = 1):
        self.problem, self.space = problem, problem.genome
        self.n_groups, self.n_splits, self.n_levels = int(n_groups), int(splits), int(levels)
        graph = problem.graph
        self.unit_of_op = graph.arrays.group.astype(np.int64)
        self.n_units = self.space.n_groups
        self.base = order_priority(problem)
        self._topo_of_unit = np.full(self.n_units, len(graph.ops), np.int64)
        pos = np.empty(len(graph.ops), np.int64)
        pos[graph.arrays.topo] = np.arange(len(graph.ops))
        np.minimum.at(self._topo_of_unit, self.unit_of_op, pos)
        # option[u, s]: the genome's split option of unit u split s + 1 ways (0: whole)
        self.option = np.zeros((self.n_units, self.n_splits), np.int64)
        for u, opts in enumerate(self.space.options):
            for s in range(1, self.n_splits):
                for dim in SPLIT_DIMS:  # batch first, then channel
                    if (dim, s + 1) in opts:
                        self.option[u, s] = opts.index((dim, s + 1))
                        break

    def genomes(self, actions) -> np.ndarray:
        """The genomes [k, size] of ``actions``."""
        k, U = actions.groups.shape
        rows = np.arange(k)[:, None]
        g = actions.groups
        devices = actions.devices[rows, g]                          # [k, U]
        option = self.option[np.arange(U)[None, :], actions.splits[rows, g]]
        level = actions.levels[rows, g][:, self.unit_of_op]         # [k, n]
        tail = np.zeros((k, self.space.n_tail))  # each gradient alone, nothing recomputed
        return np.concatenate([devices, option, level + self.base[None, :], tail], axis=1)

    def strategies(self, actions) -> list[Strategy]:
        """One strategy per row of ``actions``."""
        return [self.space.decode(x) for x in self.genomes(actions)]

    def targets(self, strategy: Strategy):
        """What the policy would decide to give ``strategy``'s placement (for imitation): units
        grouped by device, each device's units cut into contiguous runs of the topological
        order, as many groups per device as its share of the units; every group whole and at
        a priority level from the quantile of its ops' priority in ``strategy``.

        Returns (groups [U], devices [G], splits [G], levels [G])."""
        G, U = self.n_groups, self.n_units
        heads = self.problem.graph.group_head
        unit_device = np.zeros(U, np.int64)
        unit_device[self.unit_of_op] = strategy.placement[heads]
        order = np.lexsort((self._topo_of_unit, unit_device))
        counts = np.bincount(unit_device, minlength=self.problem.n_devices)
        share = _allot(counts, G)
        groups = np.empty(U, np.int64)
        devices = np.zeros(G, np.int64)
        start, first = 0, 0
        for d, (c, n) in enumerate(zip(counts, share)):
            if c == 0:
                continue
            members = order[start:start + c]
            if n == 0:  # fewer groups than devices in use: join the last group made
                groups[members] = max(first - 1, 0)
            else:
                groups[members] = first + (np.arange(c) * n) // c
                devices[first:first + n] = d
            start, first = start + c, first + n
        levels = np.zeros(G, np.int64)
        if self.n_levels > 1 and U:
            rank = np.argsort(np.argsort(strategy.priority, kind="stable"), kind="stable")
            per_unit = np.bincount(self.unit_of_op, weights=rank, minlength=U) / \
                np.maximum(np.bincount(self.unit_of_op, minlength=U), 1)
            size = np.bincount(groups, minlength=G)
            mean = np.bincount(groups, weights=per_unit, minlength=G) / np.maximum(size, 1)
            q = np.argsort(np.argsort(mean, kind="stable"), kind="stable") / max(G, 1)
            levels = np.minimum((q * self.n_levels).astype(np.int64), self.n_levels - 1)
        return groups, devices, np.zeros(G, np.int64), levels


def _allot(counts: np.ndarray, n: int) -> np.ndarray:
    """``n`` groups shared among devices in proportion to ``counts`` (largest remainder), at
    least one for each device that has units while ``n`` allows (else one each for the devices
    with most units)."""
    counts = np.asarray(counts, np.float64)
    used = np.flatnonzero(counts > 0)
    out = np.zeros(counts.size, np.int64)
    if not used.size:
        return out
    if n < used.size:
        out[used[np.argsort(-counts[used], kind="stable")[:n]]] = 1
        return out
    quota = counts / counts.sum() * n
    out[used] = np.maximum(np.floor(quota[used]).astype(np.int64), 1)
    while out.sum() > n:  # the minimum of one took groups from the largest shares
        out[np.argmax(np.where(out > 1, out - quota, -np.inf))] -= 1
    left = n - out.sum()
    order = used[np.argsort(-(quota[used] - out[used]), kind="stable")]
    out[order[:left]] += 1
    return out


def order_priority(problem) -> np.ndarray:
    """Per op, its place in the order of decreasing upward rank (mean compute and mean transfer
    times, HEFT's), scaled into [0, 1): 1 - epsilon for the op first in line."""
    from searchers.listsched.schedule import ListSchedInput, topo_positions, transfer_weights, \
        upward_rank

    n = len(problem.graph.ops)
    if n == 0:
        return np.zeros(0)
    inp = ListSchedInput.from_problem(problem.graph, problem.cluster, problem.costs)
    rank = upward_rank(inp, inp.compute.mean(axis=1), transfer_weights(inp, "mean"))
    order = np.lexsort((topo_positions(inp), -rank))  # first in line first
    out = np.empty(n)
    out[order] = (n - np.arange(n)) / (n + 1.0)
    return out
