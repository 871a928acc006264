"""The ways a search at scale proposes regular plans (`moplace.optimize.regularsearch`): each
an ask/tell proposer over the degree genome (one gene per `GENES` field, indexing the values
the space offers), made once the seeds are evaluated and told them.

- ``nsga2``: NSGA-II (pymoo: integer genes, simulated binary crossover and polynomial
  mutation, rounded; constrained by the memory violation), its first population the seeds.
- ``mcmc``: FlexFlow's Markov chain (Jia et al. 2019: simulated annealing on the simulated
  step time): each proposal changes one gene of the current plan to another of its values;
  a proposal is taken with probability ``exp(-(cost' - cost) / T)`` (1 when no worse), the
  cost the log of the step time, a plan over the memory paying 10 plus its violation in
  GPUs' memories; ``T`` 0.05 (a plan 5% slower taken with probability 1/e). A batch proposes
  ``pop_size`` moves from the chain's state and is told in order, so the chain moves up to
  ``pop_size`` times a batch.
- ``optuna-tpe``, ``optuna-random``, ``optuna-nsga2``: Optuna's samplers (multi-objective
  TPE, random, NSGA-II), each gene a categorical parameter, the memory violation their
  constraint. A trial whose genes name no plan of the space, or one already evaluated, fails;
  the plan evaluated in its place is added to the study as a trial of its own.

A proposal that names no plan of the space or one already evaluated is replaced by the next
plan of the search's random order (`regularsearch`), so every proposer is told plans, never
genomes; same seed, same proposals.
"""

from __future__ import annotations

import math

import numpy as np

#: the proposers, by ``--searcher`` name (``random`` has none: the random order alone)
PROPOSERS = ("nsga2", "mcmc", "optuna-tpe", "optuna-random", "optuna-nsga2")
#: the chain's temperature, in log step time
MCMC_TEMPERATURE = 0.05


def make_proposer(method: str, genome, result, pop_size: int, rng):
    """The proposer of ``method`` over ``genome``, told ``result``'s points so far."""
    if method == "nsga2":
        p = _NSGA2(genome, result, pop_size, rng)
    elif method == "mcmc":
        p = _MCMC(genome, rng)
    elif method.startswith("optuna-"):
        p = _Optuna(genome, result, method.split("-", 1)[1], pop_size, rng)
    else:
        raise ValueError(f"no proposer {method!r}; proposers: {', '.join(PROPOSERS)}")
    if result.points:
        p.tell(result.points)
    return p


def _scale(points) -> float:
    return max(p.evaluation.trace.capacity.sum() for p in points) or 1.0


class _NSGA2:
    """NSGA-II over the genome (module docstring)."""

    def __init__(self, genome, result, pop_size: int, rng):
        from pymoo.algorithms.moo.nsga2 import NSGA2
        from pymoo.core.problem import Problem as PymooProblem
        from pymoo.core.termination import NoTermination
        from pymoo.operators.crossover.sbx import SBX
        from pymoo.operators.mutation.pm import PM
        from pymoo.operators.repair.rounding import RoundingRepair
        from pymoo.operators.sampling.rnd import IntegerRandomSampling

        self.genome = genome
        self.shell = PymooProblem(n_var=genome.lo.size, n_obj=len(result.objectives),
                                  n_ieq_constr=1, xl=genome.lo,
                                  xu=np.maximum(genome.hi, genome.lo + 1e-9), vtype=int)
        self.algorithm = NSGA2(pop_size=pop_size, sampling=IntegerRandomSampling(),
                               crossover=SBX(prob=0.9, eta=3.0, vtype=float,
                                             repair=RoundingRepair()),
                               mutation=PM(eta=3.0, vtype=float, repair=RoundingRepair()),
                               eliminate_duplicates=True)
        self.algorithm.setup(self.shell, seed=int(rng.integers(2**31)),
                             termination=NoTermination(), verbose=False)
        self.started = False

    def ask(self, n: int) -> list:
        self.started = True
        return [self.genome.decode(x) for x in self.algorithm.ask().get("X")]

    def tell(self, points) -> None:
        """Their genes, objectives and memory violation (over the replica's memory)."""
        from pymoo.core.evaluator import Evaluator
        from pymoo.core.population import Population
        from pymoo.problems.static import StaticProblem

        if not self.started:  # pymoo takes a first population only after an ask
            self.algorithm.ask()
            self.started = True
        pop = Population.new(X=np.array([self.genome.encode(p.plan) for p in points]))
        scale = _scale(points)
        Evaluator().eval(StaticProblem(self.shell, F=np.array([p.values for p in points]),
                                       G=np.array([[p.violation / scale] for p in points])),
                         pop)
        self.algorithm.tell(infills=pop)


class _MCMC:
    """FlexFlow's chain over the genome (module docstring)."""

    def __init__(self, genome, rng):
        self.genome, self.rng = genome, rng
        self.state: np.ndarray | None = None
        self.cost = math.inf
        self.free = np.flatnonzero(genome.hi > 0)  # genes with more than one value

    def ask(self, n: int) -> list:
        if self.state is None or not self.free.size:
            return [None] * n
        out = []
        for _ in range(n):
            x = self.state.copy()
            g = int(self.free[self.rng.integers(self.free.size)])
            others = [i for i in range(int(self.genome.hi[g]) + 1) if i != int(x[g])]
            x[g] = others[self.rng.integers(len(others))]
            out.append(self.genome.decode(x))
        return out

    def tell(self, points) -> None:
        scale = _scale(points)
        for p in points:
            runtime = max(float(p.evaluation.runtime_s), 1e-12)
            cost = math.log(runtime) + (0.0 if p.feasible else 10.0 + p.violation / scale)
            if (cost <= self.cost
                    or self.rng.random() < math.exp(-(cost - self.cost) / MCMC_TEMPERATURE)):
                self.state, self.cost = self.genome.encode(p.plan), cost


class _Optuna:
    """One of Optuna's samplers over the genome (module docstring)."""

    def __init__(self, genome, result, sampler: str, pop_size: int, rng):
        import optuna
        from optuna.distributions import CategoricalDistribution

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        seed = int(rng.integers(2**31))
        # Optuna 5 reads a trial's constraints as set on it; before, through constraints_func
        self.native = hasattr(optuna.trial.Trial, "set_constraint")
        old = {} if self.native else {"constraints_func": lambda t: (
            t.user_attrs.get("violation", 0.0),)}
        make = {"tpe": lambda: optuna.samplers.TPESampler(seed=seed, **old),
                "random": lambda: optuna.samplers.RandomSampler(seed=seed),
                "nsga2": lambda: optuna.samplers.NSGAIISampler(
                    seed=seed, population_size=max(pop_size, 2), **old)}
        if sampler not in make:
            raise ValueError(f"no Optuna sampler {sampler!r}")
        self.genome = genome
        self.names = [f"g{k}" for k in range(genome.lo.size)]
        self.dists = {n: CategoricalDistribution(list(range(int(h) + 1)))
                      for n, h in zip(self.names, genome.hi)}
        self.study = optuna.create_study(directions=["minimize"] * len(result.objectives),
                                         sampler=make[sampler]())
        self.pending: list = []

    def ask(self, n: int) -> list:
        out = []
        for _ in range(n):
            trial = self.study.ask(self.dists)
            self.pending.append(trial)
            out.append(self.genome.decode([trial.params[k] for k in self.names]))
        return out

    def tell(self, points) -> None:
        import optuna
        from optuna.trial import TrialState, create_trial

        scale = _scale(points)
        asked = [(tuple(t.params[k] for k in self.names), t) for t in self.pending]
        for p in points:
            x = tuple(int(v) for v in self.genome.encode(p.plan))
            hit = next((i for i, (params, _) in enumerate(asked) if params == x), None)
            trial = asked.pop(hit)[1] if hit is not None else None
            values = [float(v) for v in p.values]
            violation = float(p.violation / scale)
            if trial is not None:
                trial.set_user_attr("violation", violation)
                if self.native:
                    trial.set_constraint("memory", violation)
                self.study.tell(trial, values)
            else:
                self.study.add_trial(create_trial(
                    params=dict(zip(self.names, x)), distributions=self.dists, values=values,
                    user_attrs={"violation": violation}, state=TrialState.COMPLETE,
                    **({"constraints": {"memory": violation}} if self.native else {})))
        for _, trial in asked:  # asked for no plan of the space, or one evaluated
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.pending = []
