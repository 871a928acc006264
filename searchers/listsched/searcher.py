"""List-scheduling searchers: HEFT, FastT's DPOS and Baechi's m-ETF, one strategy each
(placement + order).

The numeric work is in `searchers.listsched.schedule`; these classes only adapt it to the searcher
contract. The scheduler's own finish-time estimate is kept (``estimated_makespan``) so it can
be compared with the simulator's makespan for the same strategy.
"""

from __future__ import annotations

from moplace.core.strategy import Strategy
from moplace.optimize.searcher import OneShot

from .schedule import ListSchedInput, dpos, heft
from .metf import metf


class _ListScheduler(OneShot):
    schedule = None  # the scheduling function
    estimated_makespan = None

    def propose(self) -> Strategy:
        p = self.problem
        result = type(self).schedule(ListSchedInput.from_problem(p.graph, p.cluster, p.costs))
        self.estimated_makespan = result.makespan
        return Strategy(result.placement, result.priority())


class HeftSearcher(_ListScheduler):
    """HEFT list scheduling: upward rank on mean costs, insertion-based earliest finish time."""

    name = "heft"
    schedule = staticmethod(heft)


class DposSearcher(_ListScheduler):
    """FastT's DPOS: the critical path on one device, earliest finish time for the rest.

    Insertion-based, memory capacity respected.
    """

    name = "dpos"
    schedule = staticmethod(dpos)


class MetfSearcher(_ListScheduler):
    """Baechi's memory-constrained m-ETF: earliest time first, on devices the op still fits.

    The ready op and device that can start soonest go first, restricted to devices whose
    remaining memory fits the op. Memory comes first, so it is meant for models that fit no
    single device.
    """

    name = "m-etf"
    schedule = staticmethod(metf)
