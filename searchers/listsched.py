"""List-scheduling searchers: HEFT, FastT's DPOS and Baechi's m-ETF, one strategy each
(placement + order).

The numeric work is in `searchers._listsched`; these classes only adapt it to the searcher
contract. The scheduler's own finish-time estimate is kept (``estimated_makespan``) so it can
be compared with the simulator's makespan for the same strategy.
"""

from __future__ import annotations

from moplace.searcher import OneShot
from moplace.strategy import Strategy

from ._listsched import ListSchedInput, dpos, heft
from ._metf import metf


class _ListScheduler(OneShot):
    schedule = None  # the scheduling function
    estimated_makespan = None

    def propose(self) -> Strategy:
        p = self.problem
        result = type(self).schedule(ListSchedInput.from_problem(p.graph, p.cluster, p.costs))
        self.estimated_makespan = result.makespan
        return Strategy(result.placement, result.priority())


class HeftSearcher(_ListScheduler):
    """HEFT: upward rank on mean costs, insertion-based earliest-finish-time device choice."""

    name = "heft"
    schedule = staticmethod(heft)


class DposSearcher(_ListScheduler):
    """FastT's DPOS: critical path on its own device, EFT with insertion for the rest, memory
    capacity respected."""

    name = "dpos"
    schedule = staticmethod(dpos)


class MetfSearcher(_ListScheduler):
    """Baechi's m-ETF: Earliest Time First list scheduling (the ready op and device that can
    start soonest go first) restricted to devices whose remaining memory fits the op. Memory
    comes first, so it is meant for models that fit no single device."""

    name = "m-etf"
    schedule = staticmethod(metf)
