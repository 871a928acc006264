"""The first batch of every seeded searcher: every seed, evaluated as points of the archive.

A seeded searcher (nsga2, mcmc, optuna-*, hierarchical, trinity) answers its first `ask` with
every strategy of `moplace.optimize.seeds.seed_strategies` (each candidate of DPOS, HEFT and
m-ETF, the baselines on the whole cluster and on each device subset, every op on one device in
a memory-sparing order), exactly as they are. The driver evaluates them like any batch, so the
archive holds every seed and the front weakly dominates every feasible seed (with no feasible
seed, the archive keeps the least violating). Only then does the searcher's own method start,
from what the seeds scored: NSGA-II's first population holds the seeds the genome can encode
(told their known scores, not simulated again), MCMC's chains start from the best seed under
their weights, the Optuna studies are told the encodable seeds as trials, the RL policies are
scored against them.

**Budget.** Seed evaluations count against ``--budget`` and ``--time`` like any other: a search
of 2,000 evaluations that starts from 40 seeds has 1,960 left for its own proposals, so that
fronts of seeded and unseeded searchers (random search) compare at equal cost. With a budget
smaller than the number of seeds only the first seeds are evaluated (candidates of the list
schedulers first).

Seeds the genome cannot encode (parts on devices that are not consecutive, say) are evaluated
too and enter the archive; `SeedPhase.note` says how many there were.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from moplace.core.strategy import Strategy
from moplace.errors import StrategyError
from moplace.optimize.seeds import Seed, seed_strategies


class SeedPhase:
    """The seed batch of one search: asked once, told once. ``enabled`` false (a searcher's
    ``seed_heuristics=false``) makes a phase with no seeds, done from the start; ``subsets``
    false leaves out the baselines on device subsets, ``baselines`` false every baseline (to
    test that a search reaches them by itself)."""

    def __init__(self, problem, *, enabled: bool = True, subsets: bool = True,
                 baselines: bool = True):
        self.seeds: list[Seed] = seed_strategies(problem, subsets=subsets,
                                                 baselines=baselines) if enabled else []
        self.asked = False
        self.done = not self.seeds
        #: the seeds that were evaluated, with their evaluations, in the order asked
        self.evaluated: list[tuple[Seed, object]] = []

    @property
    def active(self) -> bool:
        """True until the seeds were told (or there are none)."""
        return not self.done

    def ask(self) -> list[Strategy]:
        """The seeds' strategies, the first time; then nothing."""
        if self.asked or self.done:
            return []
        self.asked = True
        return [seed.strategy for seed in self.seeds]

    def tell(self, strategies: Sequence[Strategy], evaluations: Sequence) -> list[tuple[Seed, object]]:
        """Record the evaluations of the seed batch (the first ``len(evaluations)`` seeds: the
        budget may cut the batch); the phase is then done. Returns the evaluated seeds."""
        self.evaluated = list(zip(self.seeds[:len(evaluations)], evaluations))
        self.done = True
        return self.evaluated

    def encoded(self, space) -> list[tuple[Seed, object, np.ndarray]]:
        """The evaluated seeds the genome ``space`` can encode: (seed, evaluation, genome);
        genomes repeated by more than one seed are listed once."""
        out, seen = [], set()
        for seed, ev in self.evaluated:
            try:
                x = space.encode(seed.strategy)
            except StrategyError:
                continue
            key = x.tobytes()
            if key not in seen:
                seen.add(key)
                out.append((seed, ev, x))
        return out

    def note(self, space=None) -> str | None:
        """One sentence for the user: how many seeds were evaluated, how many the genome
        cannot encode (they are in the archive but the search does not vary them)."""
        if not self.evaluated:
            return None
        n = len(self.evaluated)
        text = f"started from {n} seed strategies (list schedulers' candidates, baselines, " \
               "device subsets), counted in the budget"
        if space is not None:
            outside = sum(1 for seed, _ in self.evaluated if not _encodable(space, seed.strategy))
            if outside:
                text += f"; {outside} of them have no genome (kept on the front, not varied)"
        if len(self.evaluated) < len(self.seeds):
            text += f"; the budget cut {len(self.seeds) - n} more"
        return text


def best_seed(evaluated, objective: int = 0):
    """The evaluated seed with the smallest ``objective`` among feasible ones (the least
    violating when none is feasible), as (seed, evaluation); None when there is none."""
    if not evaluated:
        return None
    feasible = [(ev.values[objective], k) for k, (_, ev) in enumerate(evaluated) if ev.feasible]
    if feasible:
        return evaluated[min(feasible)[1]]
    return min(evaluated, key=lambda pair: pair[1].violation)


def _encodable(space, strategy: Strategy) -> bool:
    try:
        space.encode(strategy)
    except StrategyError:
        return False
    return True
