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

The first batch is every seed (`searchers.seeding`: each candidate of the list schedulers,
the baselines on the whole cluster and on device subsets), evaluated as they are, so the front
weakly dominates every feasible seed. The initial population then holds the seeds the genome
can encode (priorities mapped into [0, 1] by rank, which schedules identically; told their
known scores, not simulated again), then uniformly random genomes. Variation uses the structure-aware operators of
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

import dataclasses
from dataclasses import dataclass

import numpy as np

from moplace.core.strategy import Strategy
from moplace.errors import MoplaceError
from moplace.optimize.searcher import Searcher
from moplace.optimize.settings import Settings, setting
from searchers.seeding import SeedPhase

from .operators import (
    ExactDuplicates,
    genome_key,
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


@dataclass(frozen=True)
class Nsga2Settings(Settings):
    pop_size: int = setting(100, "population, and offspring per generation", low=2)
    seed_heuristics: bool = setting(True, "evaluate the seeds first (every candidate of the "
                                    "list schedulers, the baselines on the whole cluster and on "
                                    "device subsets; see searchers.seeding) and start the "
                                    "population from them (false: all random)")
    crossover_prob: float = setting(0.9, "share of matings that cross over (the others copy a "
                                    "parent, then mutate)", low=0, high=1)
    rates: MutationRates | dict | None = setting(
        None, "mutation rates, a MutationRates or a dict of its fields (moves, block, splits, "
        "copy_split, swaps, jitter, jitter_sigma, reset, devices); none: the defaults")
    coarsen: int | None = setting(None, "none, or a number of contiguous blocks the groups' "
                                  "device genes are tied into (for graphs of thousands of "
                                  "groups)", low=1)
    mutants: float = setting(0.3, "share of the initial population's random part replaced by "
                             "mutants of the seeds the genome encodes", low=0, high=1)
    seed_subsets: bool = setting(True, "include the baselines on device subsets among the "
                                 "seeds")
    seed_baselines: bool = setting(True, "include the baselines (data, tensor and sharded "
                                   "data parallelism...) among the seeds; false: the list "
                                   "schedulers' plans and the single-device ones only")

    def check(self) -> None:
        rates = self.rates
        if isinstance(rates, MutationRates):
            return
        if rates is not None and not isinstance(rates, dict):
            raise MoplaceError(f"rates must be a dict of mutation rates, got {rates!r}")
        try:
            object.__setattr__(self, "rates", MutationRates(**(rates or {})))
        except TypeError:
            known = ", ".join(f.name for f in dataclasses.fields(MutationRates))
            raise MoplaceError(f"rates takes the fields {known}, got {sorted(rates)}") from None


class Nsga2Searcher(Searcher):
    """NSGA-II (pymoo) seeded with the heuristics, structure-aware variation, memory as a
    constraint.

    See the module docstring for how pymoo's ask/tell loop is driven.

    Settings: see `Nsga2Settings`.
    """

    name = "nsga2"
    seeded = True
    Settings = Nsga2Settings

    # --- setup ---------------------------------------------------------------------------

    def _setup(self) -> None:
        p = self.problem
        self.space = p.genome
        self._pending = None
        self._one_shot = None
        self._known: dict[bytes, object] = {}  # genome -> evaluation, for the seeds' rows
        self._known_rows: dict[int, object] = {}  # rows of the pending population told so
        lo, hi = self.space.bounds
        self.n_var = lo.size
        self._scale = float(np.sum(p.cluster.memory)) or 1.0
        self.seeding = SeedPhase(p, enabled=self.config.seed_heuristics,
                                 subsets=self.config.seed_subsets,
                                 baselines=self.config.seed_baselines)
        if self.n_var == 0:  # an empty graph: nothing to search, one strategy
            self._one_shot = [self.space.decode(np.empty(0))]
            self.seeding.done = True
            return
        self.structure = GenomeStructure.of(self.space, self.config.coarsen)
        self.algorithm = None  # made once the seeds are told (their rows start the population)
        if not self.seeding.active:
            self._start()

    def _start(self) -> None:
        """pymoo's NSGA-II, its first population the encodable seeds (told their scores when
        asked, not simulated again), mutants of them and random genomes."""
        from pymoo.algorithms.moo.nsga2 import NSGA2
        from pymoo.core.problem import Problem as PymooProblem

        lo, hi = self.space.bounds
        self.shell = PymooProblem(n_var=self.n_var, n_obj=len(self.problem.objectives),
                                  n_ieq_constr=1, xl=lo, xu=hi, vtype=float)
        X0 = self._initial_population()
        self.algorithm = NSGA2(
            pop_size=self.config.pop_size, sampling=X0,
            crossover=GroupCrossover(self.structure, prob=self.config.crossover_prob),
            mutation=StructuredMutation(self.structure, self.config.rates),
            repair=GenomeRepair(self.structure), eliminate_duplicates=ExactDuplicates())
        self.algorithm.setup(self.shell, seed=int(self.rng.integers(2**31)),
                             termination=_no_termination(), verbose=False)

    def _initial_population(self) -> np.ndarray:
        rows = []
        for _, ev, x in self.seeding.encoded(self.space):
            row = self._normalized(x)
            self._known[genome_key(row)] = ev
            rows.append(row)
        n_fill = max(self.config.pop_size - len(rows), 0)
        n_mutants = int(round(self.config.mutants * n_fill)) if rows else 0
        parents = [rows[i] for i in self.rng.integers(len(rows), size=n_mutants)] if rows else []
        M = [repair(self.structure, mutate(self.structure, x, self.rng, self.config.rates)[None])[0]
             for x in parents]
        X = random_genomes(self.structure, n_fill - n_mutants, self.rng)
        return np.vstack(rows + M + [X]) if rows else X

    def seed_strategies(self) -> list[Strategy]:
        """The strategies the search starts from (`moplace.optimize.seeds`)."""
        return [seed.strategy for seed in self.seeding.seeds]

    def _normalized(self, x: np.ndarray) -> np.ndarray:
        """Genome ``x`` with its priorities mapped into [0, 1] by rank (the same schedule)."""
        x = x.copy()
        p = self.space.priorities
        x[p] = normalized_priority(x[p])
        return x

    def _decode(self, x: np.ndarray) -> Strategy:
        return self.space.decode(x)

    # --- ask / tell ------------------------------------------------------------------------

    def ask(self) -> list[Strategy]:
        if self._one_shot is not None:
            batch, self._one_shot = self._one_shot, []
            return batch
        if self.seeding.active:
            return self.seeding.ask()
        if self.algorithm is None:
            self._start()
        pop = self.algorithm.ask()
        if pop is None or len(pop) == 0:  # mating made no new child (all duplicates): explore
            from pymoo.core.population import Population

            self.algorithm.termination.force_termination = False
            pop = Population.new(X=random_genomes(self.structure, self.config.pop_size, self.rng))
        self._pending = pop
        X = pop.get("X")
        # rows scored before (the seeds in the first population) are told, not simulated
        self._known_rows = {i: self._known[k] for i, k in enumerate(map(genome_key, X))
                            if k in self._known}
        return [self._decode(x) for i, x in enumerate(X) if i not in self._known_rows]

    def tell(self, strategies, evaluations) -> None:
        if self.seeding.active:
            self.seeding.tell(strategies, evaluations)
            return
        pop, self._pending = self._pending, None
        known, self._known_rows = self._known_rows, {}
        if pop is None or not (evaluations or known):
            return
        from pymoo.core.evaluator import Evaluator
        from pymoo.problems.static import StaticProblem

        new = iter(evaluations)
        rows, evs = [], []  # the rows scored: known ones, and asked ones up to the budget's cut
        for i in range(len(pop)):
            ev = known.get(i)
            if ev is None:
                ev = next(new, None)
                if ev is None:
                    continue
            rows.append(i)
            evs.append(ev)
        pop = pop[rows]
        F = np.array([ev.values for ev in evs], dtype=np.float64)
        G = np.array([[ev.violation / self._scale] for ev in evs], dtype=np.float64)
        Evaluator().eval(StaticProblem(self.shell, F=F, G=G), pop)
        self.algorithm.tell(infills=pop)
        self._known.clear()  # only the first population repeats the seeds

    def notes(self) -> list[str]:
        note = self.seeding.note(self.space) if hasattr(self, "seeding") else None
        return [note] if note else []

    def settings(self) -> dict:
        """The settings, each mutation rate as its own ``rate_NAME`` entry."""
        plain = {k: v for k, v in super().settings().items() if k != "rates"}
        return {**plain, **{f"rate_{k}": v for k, v in vars(self.config.rates).items()}}


def _no_termination():
    from pymoo.core.termination import NoTermination

    return NoTermination()

