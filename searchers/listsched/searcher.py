"""List-scheduling searchers: HEFT, FastT's DPOS and Baechi's m-ETF, one strategy each
(placement + order).

The numeric work is in `searchers.listsched.schedule`; these classes only adapt it to the searcher
contract. The scheduler's own finish-time estimate is kept (``estimated_makespan``) and reported
through the contract's `own_estimates`, so that it can be compared with the simulator's
makespan for the same strategy.
"""

from __future__ import annotations

from moplace.core.baselines import baseline
from moplace.core.strategy import Strategy
from moplace.optimize.searcher import OneShot

from .candidates import best_candidate
from .metf import metf
from .schedule import dpos, heft

#: the label of the scheduler's classic schedule (static memory, groups kept)
CLASSIC = "static memory, grouped"


#: The baselines that split nothing: a list schedule must beat them to be returned.
NO_SPLIT_BASELINES = ("single", "round-robin", "layer-split")


class _ListScheduler(OneShot):
    """The scheduler's best candidate schedule (`searchers.listsched.candidates`: three memory
    budgets, groups kept or regrouped, judged by the simulator), or the fastest no-split
    baseline when that is faster (FastT keeps the current strategy when a new one is slower):
    a user who trusts the heuristic never gets a plan slower than one of the plain ones.
    `notes` says which candidate won, and when it fell back."""

    schedule = None  # the scheduling function
    estimated_makespan = None
    fell_back = None  # the baseline returned instead of the schedule, if any
    candidate = None  # the label of the candidate schedule kept

    def propose(self) -> Strategy:
        p = self.problem
        best = best_candidate(p, type(self).schedule)
        self.estimated_makespan, self.candidate = best.estimate, best.label
        scheduled, own = best.strategy, best.evaluation
        self.fell_back, self._note = None, None
        if best.label != CLASSIC:
            self._note = (f"{self.name}: the {best.label} schedule was the fastest that fits "
                          f"({own.values[0] * 1e3:.4g} ms)")
        # the baselines are simulated once per problem (they fix the hypervolume reference)
        rivals = [(ev.values[0], name) for name, ev in p.baselines.items()
                  if name in NO_SPLIT_BASELINES and ev.feasible]
        if not rivals:
            return scheduled
        runtime, name = min(rivals)
        if own.feasible and own.values[0] <= runtime:
            return scheduled
        self.fell_back = name
        why = (f"is slower ({own.values[0] * 1e3:.4g} ms)" if own.feasible
               else "does not fit in memory")
        self._note = (f"{self.name}'s schedule {why} than the {name} baseline "
                      f"({runtime * 1e3:.4g} ms): returned {name} instead (FastT's rule: keep "
                      "the current plan when a new one is slower)")
        return baseline(name, p.graph, p.n_devices)

    def notes(self) -> list[str]:
        return [self._note] if getattr(self, "_note", None) else []

    def own_estimates(self) -> dict[str, float]:
        """The schedule's finish time as the scheduler computed it, unless a baseline was
        returned instead."""
        if self.estimated_makespan is None or self.fell_back is not None:
            return {}
        return {"runtime": float(self.estimated_makespan)}


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
