"""NSGA-II (pymoo) as an ask/tell searcher over moplace genomes.

pymoo's `NSGA2` runs on a pymoo `Problem` *shell* that only declares the space (``n_var`` =
genome size, ``n_obj`` = the problem's objectives, one inequality constraint, bounds from
`GenomeSpace.bounds`); it never evaluates anything. The searcher drives pymoo's own ask/tell
loop:

- `ask`: ``pop = algorithm.ask()`` (the initial population first, then one generation of
  offspring), every row decoded to a strategy and handed to the driver as one batch;
- `tell`: the driver's evaluations are written onto that population with pymoo's documented
  pattern ``Evaluator().eval(StaticProblem(shell, F=F, G=G), pop)`` and handed back with
  ``algorithm.tell(infills=pop)``, which runs rank-and-crowding survival.

Memory capacity and the user's limits are a pymoo *constraint*, not a penalty: ``G`` is the
problem's violation in bytes divided by the cluster's total device memory (> 0 infeasible), so
pymoo's constrained domination prefers any feasible strategy to any infeasible one and less
violation to more.

The initial population holds HEFT, DPOS and the four baselines (encoded with
`GenomeSpace.encode`, priorities mapped into [0, 1] by rank, which schedules identically),
then uniformly random genomes. Variation uses the structure-aware operators of
`searchers.nsga2.operators` (segment crossover along the topological group order; neighbour-device
moves, block moves, split changes, neighbour priority swaps, rare resets; round-and-clip
repair), so every child decodes to a valid strategy.

pymoo is seeded from the driver's generator, so the same seed gives the same search.

The genome is over co-location groups already; with very many groups (thousands) a generation
moves few of them, and ``coarsen=B`` ties the groups into B contiguous blocks of the
topological order for crossover cuts and device moves (the genome itself, and so the seeds,
stay per group; split changes and priority swaps stay per group and per op).
"""

from __future__ import annotations

import numpy as np

from moplace.core.strategy import Strategy
from moplace.errors import MoplaceError, StrategyError
from moplace.optimize.searcher import Searcher

from .operators import (
    ExactDuplicates,
    GenomeRepair,
    GenomeStructure,
    GroupCrossover,
    MutationRates,
    StructuredMutation,
    mutate,
    normalized_priority,
    random_genomes,
    repair,
)


class Nsga2Searcher(Searcher):
    """NSGA-II (pymoo) seeded with the heuristics, structure-aware variation, memory as a
    constraint.

    See the module docstring for how pymoo's ask/tell loop is driven.

    Settings:
        pop_size: population, and offspring per generation.
        seed_heuristics: start from HEFT, DPOS and the baselines (false: all random).
        crossover_prob: share of matings that cross over (the others copy a parent, then
            mutate).
        rates: mutation rates, a `MutationRates` or a dict of its fields (moves, block,
            splits, copy_split, swaps, jitter, jitter_sigma, reset).
        coarsen: none, or a number of contiguous blocks the groups' device genes are tied into
            (for graphs of thousands of groups).
        mutants: share of the initial population's random part replaced by mutants of the
            heuristic seeds.
    """

    name = "nsga2"

    def __init__(self, pop_size: int = 100, seed_heuristics: bool = True,
                 crossover_prob: float = 0.9, rates: MutationRates | dict | None = None,
                 coarsen: int | None = None, mutants: float = 0.0):
        if isinstance(pop_size, bool) or int(pop_size) < 2:
            raise MoplaceError(f"pop_size must be at least 2, got {pop_size}")
        if not 0.0 <= float(crossover_prob) <= 1.0:
            raise MoplaceError(f"crossover_prob must be in [0, 1], got {crossover_prob}")
        if coarsen is not None and int(coarsen) < 1:
            raise MoplaceError(f"coarsen must be a positive number of blocks, got {coarsen}")
        self.pop_size, self.seed_heuristics = int(pop_size), bool(seed_heuristics)
        self.crossover_prob = float(crossover_prob)
        self.rates = rates if isinstance(rates, MutationRates) else MutationRates(**(rates or {}))
        self.coarsen = None if coarsen is None else int(coarsen)
        if not 0.0 <= float(mutants) <= 1.0:
            raise MoplaceError(f"mutants must be a share in [0, 1], got {mutants}")
        self.mutants = float(mutants)

    # --- setup ---------------------------------------------------------------------------

    def _setup(self) -> None:
        from pymoo.algorithms.moo.nsga2 import NSGA2
        from pymoo.core.problem import Problem as PymooProblem

        p = self.problem
        self.space = p.genome
        self._pending = None
        self._one_shot = None
        lo, hi = self.space.bounds
        self.n_var = lo.size
        self._scale = float(np.sum(p.cluster.memory)) or 1.0
        if self.n_var == 0:  # an empty graph: nothing to search, one strategy
            self._one_shot = [self.space.decode(np.empty(0))]
            return
        self.structure = GenomeStructure.of(self.space, self.coarsen)
        self.shell = PymooProblem(n_var=self.n_var, n_obj=len(p.objectives), n_ieq_constr=1,
                                  xl=lo, xu=hi, vtype=float)
        X0 = self._initial_population()
        self.algorithm = NSGA2(
            pop_size=self.pop_size, sampling=X0,
            crossover=GroupCrossover(self.structure, prob=self.crossover_prob),
            mutation=StructuredMutation(self.structure, self.rates),
            repair=GenomeRepair(self.structure), eliminate_duplicates=ExactDuplicates())
        self.algorithm.setup(self.shell, seed=int(self.rng.integers(2**31)),
                             termination=_no_termination(), verbose=False)

    def _initial_population(self) -> np.ndarray:
        rows = [self._encode(s) for s in self.seed_strategies()] if self.seed_heuristics else []
        rows = [r for r in rows if r is not None]
        n_fill = max(self.pop_size - len(rows), 0)
        n_mutants = int(round(self.mutants * n_fill)) if rows else 0
        parents = [rows[i] for i in self.rng.integers(len(rows), size=n_mutants)] if rows else []
        M = [repair(self.structure, mutate(self.structure, x, self.rng, self.rates)[None])[0]
             for x in parents]
        X = random_genomes(self.structure, n_fill - n_mutants, self.rng)
        return np.vstack(rows + M + [X]) if rows else X

    def seed_strategies(self) -> list[Strategy]:
        """HEFT, DPOS and the four baselines for this problem (what the search starts from)."""
        from searchers.listsched import dpos, heft, heuristic_strategies

        return heuristic_strategies(self.problem, (heft, dpos))

    def _encode(self, strategy: Strategy) -> np.ndarray | None:
        try:
            x = self.space.encode(strategy)
        except StrategyError:
            return None
        G = self.space.n_groups
        x[2 * G:] = normalized_priority(x[2 * G:])
        return x

    def _decode(self, x: np.ndarray) -> Strategy:
        return self.space.decode(x)

    # --- ask / tell ------------------------------------------------------------------------

    def ask(self) -> list[Strategy]:
        if self._one_shot is not None:
            batch, self._one_shot = self._one_shot, []
            return batch
        pop = self.algorithm.ask()
        if pop is None or len(pop) == 0:  # mating made no new child (all duplicates): explore
            from pymoo.core.population import Population

            self.algorithm.termination.force_termination = False
            pop = Population.new(X=random_genomes(self.structure, self.pop_size, self.rng))
        self._pending = pop
        return [self._decode(x) for x in pop.get("X")]

    def tell(self, strategies, evaluations) -> None:
        pop, self._pending = self._pending, None
        if pop is None or not evaluations:
            return
        from pymoo.core.evaluator import Evaluator
        from pymoo.problems.static import StaticProblem

        pop = pop[:len(evaluations)]
        F = np.array([ev.values for ev in evaluations], dtype=np.float64)
        G = np.array([[ev.violation / self._scale] for ev in evaluations], dtype=np.float64)
        Evaluator().eval(StaticProblem(self.shell, F=F, G=G), pop)
        self.algorithm.tell(infills=pop)

    def settings(self) -> dict:
        return {"pop_size": self.pop_size, "seed_heuristics": self.seed_heuristics,
                "crossover_prob": self.crossover_prob, "coarsen": self.coarsen,
                "mutants": self.mutants,
                **{f"rate_{k}": v for k, v in vars(self.rates).items()}}


def _no_termination():
    from pymoo.core.termination import NoTermination

    return NoTermination()

