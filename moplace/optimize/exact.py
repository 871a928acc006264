"""The exact Pareto front of a tiny problem, by exhaustive enumeration (no splits).

`exact_front(problem)` evaluates, with `Problem.evaluate`, every strategy that can give a
different trace: every placement (one device per co-location group) times every execution
order that can matter, and returns the non-dominated feasible objective vectors with one
strategy each. It is a yardstick for searchers on graphs of up to about 8 ops on 2-3 devices.

Why the order enumeration is exact
----------------------------------
The simulator (``moplace.simulator._simcore``) keeps one ready queue per device; priorities are only
ever compared between ops *on the same device* that are ready at the same time. So:

1. Only the relative order of same-device ops matters; priorities of ops on different devices
   are never compared (without splits there are no collectives).
2. Take any priority vector P and its trace. On each device, the ops ran in some order R_d,
   and R_d respects the DAG (an op starts after its inputs exist), so R_d is a linear extension
   of the DAG's transitive precedence restricted to that device's ops. Re-run with priorities
   that rank each device's ops by R_d: at every decision the device has the same ready set (by
   induction on decisions, the state so far is identical), the op P chose is next in R_d and
   every other ready op comes later in R_d, so R_d picks the same op. Same decisions in the
   same order give the same events, the same tie-breaking sequence numbers and the same trace.

Hence the set of traces over *all* priority vectors equals the set of traces over priority
vectors that rank each device's ops by a linear extension of the induced precedence. The
smart enumeration (``method="smart"``) takes, per placement, the product over devices of
those linear extensions, and gives op o the priority ``-rank of o on its device``. Pairs of
ops ordered by the DAG (directly or transitively) are never ready together, so their relative
priority never matters, which is where the saving over all n! permutations comes from.

Two further exact reductions:

- A placement whose devices cannot fit, whatever the order, is skipped: a device's peak memory
  is at least its parameters plus the largest output of an op on it (the output is allocated
  when the op starts), so if that bound breaks a capacity or the user's peak-memory limit,
  every order of that placement is infeasible and contributes nothing to the feasible front.
- ``dedupe=True`` remembers the per-device order each evaluated strategy actually ran in; a
  later candidate equal to such an order has that very trace (point 2 above) and is not
  simulated again. It is off by default: it saves about 10 % of the simulations on the tiny
  benchmark but reading the order off each trace costs about as much (measured on a
  2-device 8-op instance: 19768 candidates, 8324 distinct traces, dedupe skipped 1892).
- With a user limit on peak communication, a placement whose first order breaks it is left
  at once: traffic depends on the placement only when nothing is split.

``method="brute"`` is the reference: every placement times every one of the n! permutations
(priority = -position), no pruning. Tests check both give the same front on small cases.

Limits: no splits (graphs whose ops may be split still enumerate only unsplit strategies;
`ExactFront.splits_ignored` says so), and a guard: `MoplaceError` when the enumeration would
take more than ``max_evaluations`` simulations (counted before any is run).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from ..core.strategy import Strategy
from ..errors import MoplaceError
from ..progress import Report, Ticker
from .archive import ParetoArchive
from .hypervolume import normalized_hypervolume
from .problem import Problem

METHODS = ("smart", "brute")


@dataclass(frozen=True, eq=False)
class ExactFront:
    """The exact feasible Pareto front of a problem (unsplit strategies) and how it was found.

    ``values`` [k, m]: distinct non-dominated feasible objective vectors, sorted
    lexicographically; ``strategies[i]`` reaches ``values[i]`` (the first one enumerated).
    ``n_placements``: placements enumerated (device per co-location group, n_devices^groups);
    ``n_pruned``: those skipped because no order can fit in memory (smart only);
    ``n_orders``: candidate (placement, order) pairs; ``n_evaluations``: simulations run
    (``n_orders`` minus the candidates known by ``dedupe`` to repeat a trace);
    ``n_feasible``: feasible evaluations; ``seconds``: wall time.
    """

    objectives: tuple[str, ...]
    values: np.ndarray
    strategies: tuple[Strategy, ...]
    method: str
    n_placements: int
    n_pruned: int
    n_orders: int
    n_evaluations: int
    n_feasible: int
    seconds: float
    splits_ignored: bool

    def __len__(self) -> int:
        return len(self.strategies)

    def hypervolume(self, reference) -> float:
        """Normalized hypervolume of the exact front at ``reference``."""
        return normalized_hypervolume(self.values, reference)

    def summary(self) -> str:
        return (f"{len(self)} front points from {self.n_evaluations} evaluations "
                f"({self.n_placements} placements, {self.n_pruned} pruned, {self.n_orders} "
                f"candidate orders, {self.method}) in {self.seconds:.2f} s")


def exact_front(problem: Problem, *, max_evaluations: int = 2_000_000, method: str = "smart",
                dedupe: bool = False, progress: Report | None = None) -> ExactFront:
    """Every strategy that can give a distinct trace, evaluated; the exact feasible front.

    ``method``: ``"smart"`` (per-device linear extensions, memory pruning; see the module
    docstring) or ``"brute"`` (all placements x all n! priority permutations, the reference).
    Raises `MoplaceError` when more than ``max_evaluations`` simulations would be needed.
    ``progress(stage, done, total)`` (see `moplace.progress`) hears of the candidates done.
    """
    if method not in METHODS:
        raise MoplaceError(f"unknown method {method!r} (known: {', '.join(METHODS)})")
    start = time.perf_counter()
    enum = _Enumeration(problem)
    if method == "smart":
        n_orders, pruned = enum.count_smart()
    else:
        n_orders, pruned = enum.n_placements * math.factorial(enum.n), 0
    if n_orders > max_evaluations:
        raise MoplaceError(
            f"exact enumeration of {problem.graph.name!r} on {problem.n_devices} devices needs "
            f"{n_orders} evaluations ({enum.n_placements} placements, method {method!r}), "
            f"more than max_evaluations={max_evaluations}; use a smaller graph or cluster")
    archive = ParetoArchive(len(problem.objectives), max_infeasible=0)
    stats = {"evaluations": 0, "feasible": 0, "orders": 0}
    ticker = Ticker(progress, n_orders, every=max(n_orders // 400, 1))
    ticker.stage(f"enumerating {enum.n_placements} placements")

    def offer(strategy: Strategy):
        ev = problem.evaluate(strategy)
        ticker.tick(stats["orders"] - ticker.done)
        stats["evaluations"] += 1
        if ev.feasible:
            stats["feasible"] += 1
            archive.add(ev.values, 0.0, strategy)
        return ev

    if method == "smart":
        enum.run_smart(offer, dedupe, stats)
    else:
        enum.run_brute(offer, stats)
    ticker.tick(n_orders - ticker.done)
    entries = archive.front
    values = (np.array([e.values for e in entries]) if entries
              else np.empty((0, len(problem.objectives))))
    return ExactFront(
        objectives=tuple(problem.objectives), values=values,
        strategies=tuple(e.payload for e in entries), method=method,
        n_placements=enum.n_placements, n_pruned=pruned, n_orders=stats["orders"],
        n_evaluations=stats["evaluations"], n_feasible=stats["feasible"],
        seconds=time.perf_counter() - start,
        splits_ignored=bool(np.any(problem.graph.arrays.split_mask != 0)))


def enumeration_size(problem: Problem, method: str = "smart") -> int:
    """Candidate (placement, order) pairs `exact_front` would consider, before ``dedupe``
    (smart: after memory pruning). Cheap: nothing is simulated."""
    enum = _Enumeration(problem)
    if method == "brute":
        return enum.n_placements * math.factorial(enum.n)
    return enum.count_smart()[0]


def linear_extensions(ops, ancestors) -> list[tuple[int, ...]]:
    """All orders of ``ops`` in which no op comes before one of its ``ancestors`` (bitmasks of
    transitive predecessors per op, over all ops of the graph)."""
    out: list[tuple[int, ...]] = []
    ops = tuple(ops)
    mask_all = sum(1 << o for o in ops)

    def extend(prefix: list[int], left: int) -> None:
        if not left:
            out.append(tuple(prefix))
            return
        for o in ops:
            if left >> o & 1 and not ancestors[o] & left:
                prefix.append(o)
                extend(prefix, left & ~(1 << o))
                prefix.pop()

    extend([], mask_all)
    return out


def transitive_ancestors(graph) -> list[int]:
    """Per op, the bitmask of all ops it (transitively) depends on."""
    a = graph.arrays
    anc = [0] * len(graph.ops)
    for o in a.topo.tolist():
        for k in range(a.in_ptr[o], a.in_ptr[o + 1]):
            p = int(a.src[a.in_edge[k]])
            anc[o] |= anc[p] | (1 << p)
    return anc


class _Enumeration:
    """Placements of a problem and the orders that matter for each."""

    def __init__(self, problem: Problem):
        self.problem = problem
        graph, cluster = problem.graph, problem.cluster
        self.n = len(graph.ops)
        if self.n > 62:
            raise MoplaceError(f"exact enumeration is for tiny graphs; {graph.name!r} has {self.n} ops")
        self.n_devices = cluster.n_devices
        self.group = graph.arrays.group
        self.n_groups = int(graph.arrays.n_groups)
        self.n_placements = self.n_devices ** self.n_groups
        self.ancestors = transitive_ancestors(graph)
        self.params = graph.arrays.param_bytes
        self.outputs = graph.arrays.output_bytes
        self.capacity = np.asarray(cluster.memory, np.float64)
        self.mem_limit = problem.limits.peak_mem_bytes
        self._orders: dict[int, list[tuple[int, ...]]] = {}

    def placements(self):
        for assign in itertools.product(range(self.n_devices), repeat=self.n_groups):
            yield np.asarray(assign, np.int64)[self.group]

    def device_ops(self, placement: np.ndarray) -> list[tuple[int, ...]]:
        return [tuple(np.flatnonzero(placement == d).tolist()) for d in range(self.n_devices)]

    def cannot_fit(self, placement: np.ndarray) -> bool:
        """True when every order of ``placement`` violates memory: a device's peak is at least
        its parameters plus the largest output of one of its ops."""
        static = np.bincount(placement, weights=self.params, minlength=self.n_devices)
        largest = np.zeros(self.n_devices)
        np.maximum.at(largest, placement, self.outputs)
        bound = static + largest
        if np.any(bound > self.capacity):
            return True
        return self.mem_limit is not None and bool(bound.max() > self.mem_limit)

    def orders_of(self, ops: tuple[int, ...]) -> list[tuple[int, ...]]:
        key = sum(1 << o for o in ops)
        found = self._orders.get(key)
        if found is None:
            found = self._orders[key] = linear_extensions(ops, self.ancestors)
        return found

    def count_smart(self) -> tuple[int, int]:
        total = pruned = 0
        for placement in self.placements():
            if self.cannot_fit(placement):
                pruned += 1
                continue
            total += math.prod(len(self.orders_of(ops)) for ops in self.device_ops(placement))
        return total, pruned

    def run_smart(self, offer, dedupe: bool, stats: dict) -> None:
        comm_limit = self.problem.limits.peak_comm_bytes
        for placement in self.placements():
            if self.cannot_fit(placement):
                continue
            per_device = [self.orders_of(ops) for ops in self.device_ops(placement)]
            seen: set[tuple[tuple[int, ...], ...]] = set()
            for combo in itertools.product(*per_device):
                stats["orders"] += 1
                if dedupe and combo in seen:
                    continue
                ev = offer(Strategy(placement, _rank_priority(combo, self.n)))
                if comm_limit is not None and _peak_comm(ev.trace) > comm_limit:
                    # traffic depends on the placement only: no order of it is feasible
                    stats["orders"] += _remaining(per_device, combo)
                    break
                if dedupe:
                    realized = _realized(ev.trace, placement, self.n_devices)
                    if realized is not None:
                        seen.add(realized)

    def run_brute(self, offer, stats: dict) -> None:
        perms = [_rank_priority((perm,), self.n) for perm in itertools.permutations(range(self.n))]
        for placement in self.placements():
            for prio in perms:
                stats["orders"] += 1
                offer(Strategy(placement, prio))


def _rank_priority(orders, n: int) -> np.ndarray:
    """Priority -rank for each op by its position in its device's order."""
    prio = np.zeros(n)
    for order in orders:
        for rank, op in enumerate(order):
            prio[op] = -rank
    return prio


def _realized(trace, placement: np.ndarray, n_devices: int):
    """The order the ops actually ran in on each device, or None when two ops of one device
    started at the same instant (zero-length ops): the order is then not read off the trace,
    and nothing is deduplicated, which keeps the enumeration exact."""
    order = np.argsort(trace.op_start, kind="stable")
    dev = placement[order]
    out = []
    for d in range(n_devices):
        mine = order[dev == d]
        if np.any(np.diff(trace.op_start[mine]) <= 0):
            return None
        out.append(tuple(mine.tolist()))
    return tuple(out)


def _peak_comm(trace) -> float:
    traffic = trace.sent + trace.received
    return float(traffic.max()) if traffic.size else 0.0


def _remaining(per_device, combo) -> int:
    """Combos after ``combo`` in ``itertools.product(*per_device)`` order."""
    total = math.prod(len(o) for o in per_device)
    index = 0
    for orders, chosen in zip(per_device, combo):
        index = index * len(orders) + orders.index(chosen)
    return total - index - 1
