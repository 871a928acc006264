"""Searching a framework's space of plans (`moplace.core.degrees.DegreeSpace`): what
``moplace search --space torchtitan|megatron`` runs.

The search starts from the space's own seeds (`space_seeds`: the plans people run, as the
framework names them: data parallel on every device, with ZeRO or FSDP, with each layer
checkpointed, and tensor parallel with selective recomputation; on a mixture of experts, data
parallel with expert parallelism; on a graph of fused attention, context parallelism; nothing
outside the space).
Then, with method ``nsga2``, NSGA-II (pymoo: integer genes, simulated binary crossover and
polynomial mutation, rounded) over the degree genome, its first population the seeds; with
method ``random``, the space's plans in a random order. Either way a plan is evaluated once:
a genome decoding to a plan already asked is replaced by one of the plans not asked yet (in
the seeded random order), and the search ends when every plan of the space was evaluated
(a space of a few hundred plans is searched exhaustively within a usual budget).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moplace.core.degrees import Degrees, DegreeSpace, regular_plan
from moplace.core.strategy import Strategy
from moplace.costs.fp8 import FP8_NOTE, has_fp8
from moplace.optimize.searcher import Searcher
from moplace.optimize.settings import Settings, setting

#: the methods a space is searched with
METHODS = ("nsga2", "random")


@dataclass(frozen=True)
class SpaceSettings(Settings):
    space: str = setting("torchtitan", "the framework whose plans are searched",
                         choices=("torchtitan", "megatron"))
    method: str = setting("nsga2", "nsga2 (over the degree genome) or random",
                          choices=METHODS)
    pop_size: int = setting(16, "NSGA-II's population", low=2)


def space_seeds(space: DegreeSpace) -> list[tuple[str, Degrees]]:
    """The plans people run, where the space has them: on every device it offers, data
    parallel plain, with ZeRO-1 and FSDP, FSDP with each layer checkpointed, tensor parallel
    plain and with selective recomputation; one device alone."""
    n = max(space.shapes)
    wanted = [("data parallel", Degrees(n, 1, "data", 1, "1f1b", "none", 0)),
              ("data parallel, ZeRO-1", Degrees(n, 1, "data", 1, "1f1b", "none", 1)),
              ("FSDP", Degrees(n, 1, "data", 1, "1f1b", "none", 3)),
              ("FSDP, layers checkpointed", Degrees(n, 1, "data", 1, "1f1b", "full", 3)),
              ("tensor parallel", Degrees(n, 1, "tensor", 1, "1f1b", "none", 0)),
              ("tensor parallel, selective", Degrees(n, 1, "tensor", 1, "1f1b", "selective", 0)),
              ("one device", Degrees(1, 1, "data", 1, "1f1b", "none", 0))]
    wanted += _expert_seeds(space) + _context_seeds(space)
    out = []
    for label, d in wanted:
        try:
            space.encode_degrees(d)
        except Exception:  # noqa: BLE001 - not in this space
            continue
        out.append((label, d))
    return out


def _expert_seeds(space: DegreeSpace) -> list[tuple[str, Degrees]]:
    """Expert parallelism as people run it, where the space offers it: on every device, over
    the fewest pipeline stages whose width divides the experts, with ZeRO-1 (Megatron's
    distributed optimizer, torchtitan's FSDP), as many micro-batches as stages, twice as
    many where the batch allows."""
    if not space.experts:
        return []
    n = max(space.shapes)
    for pp in sorted(space.shapes[n]):
        w = n // pp
        if w < 2 or space.experts % w:
            continue
        m = next((m for m in (2 * pp, pp) if m in space._choices((n, pp, "data"))), 1)
        return [(f"expert parallel x{w}" + (f", {pp} stages" if pp > 1 else ""),
                 Degrees(n, pp, "data", m, "1f1b", "none", 1, ep=w))]
    return []


def _context_seeds(space: DegreeSpace) -> list[tuple[str, Degrees]]:
    """Context parallelism where the space offers it: every device on sequence over the fewest
    pipeline stages that offer it (ring, and all-to-all where offered), with ZeRO-1 (FSDP on
    torchtitan, which runs CP only so), as many micro-batches as stages where the batch
    allows."""
    n = max(space.shapes)
    for pp in sorted(space.shapes[n]):
        modes = [m for m in space.shapes[n][pp] if m.startswith("context")]
        if not modes:
            continue
        m = pp if pp in space._choices((n, pp, modes[0])) else 1
        stages = f", {pp} stages" if pp > 1 else ""
        return [(f"context parallel x{n // pp}" + (" all-to-all" if mode != "context" else "")
                 + stages, Degrees(n, pp, mode, m, "1f1b", "none", 1)) for mode in modes]
    return []


class SpaceSearcher(Searcher):
    """Plans a training framework runs (torchtitan, Megatron-LM): seeded, then NSGA-II or
    random over the genome of degrees."""

    name = "space"
    Settings = SpaceSettings

    def _setup(self) -> None:
        p, cfg = self.problem, self.config
        self.space = DegreeSpace(p.graph, p.cluster.n_devices, cfg.space,
                                 fp8=has_fp8(p.cluster))
        self.plans = self.space.all()
        self.asked: set[Degrees] = set()
        self.order = [self.plans[i] for i in self.rng.permutation(len(self.plans))]
        self.seeds = space_seeds(self.space)
        self.algorithm = None
        self.pending: list[np.ndarray] = []

    def _fresh(self, d: Degrees) -> Degrees | None:
        """``d`` when not asked yet, else the next plan of the random order not asked."""
        if d not in self.asked:
            return d
        while self.order and self.order[-1] in self.asked:
            self.order.pop()
        return self.order.pop() if self.order else None

    def _strategies(self, plans) -> list[Strategy]:
        out = []
        for d in plans:
            d = self._fresh(d)
            if d is None:
                break
            self.asked.add(d)
            out.append(regular_plan(self.problem.graph, d, self.space.recompute_heads))
            self.pending.append(self.space.encode_degrees(d))
        return out

    def ask(self) -> list[Strategy]:
        self.pending = []
        if not self.asked:
            return self._strategies([d for _, d in self.seeds] or self.plans[:1])
        if self.config.method == "random":
            return self._strategies(self.order[-self.config.pop_size:][::-1])
        if self.algorithm is None:
            self._start()
        pop = self.algorithm.ask()
        self._pop = pop
        return self._strategies([self.space.degrees(x) for x in pop.get("X")])

    def _start(self) -> None:
        from pymoo.algorithms.moo.nsga2 import NSGA2
        from pymoo.core.problem import Problem as PymooProblem
        from pymoo.core.termination import NoTermination
        from pymoo.operators.crossover.sbx import SBX
        from pymoo.operators.mutation.pm import PM
        from pymoo.operators.repair.rounding import RoundingRepair
        from pymoo.operators.sampling.rnd import IntegerRandomSampling

        lo, hi = self.space.bounds
        self.shell = PymooProblem(n_var=lo.size, n_obj=len(self.problem.objectives),
                                  n_ieq_constr=1, xl=lo, xu=np.maximum(hi, lo + 1e-9),
                                  vtype=int)
        start = np.array(self.told_x) if self.told_x else None
        self.algorithm = NSGA2(
            pop_size=self.config.pop_size,
            sampling=start if start is not None and len(start) >= self.config.pop_size
            else IntegerRandomSampling(),
            crossover=SBX(prob=0.9, eta=3.0, vtype=float, repair=RoundingRepair()),
            mutation=PM(eta=3.0, vtype=float, repair=RoundingRepair()),
            eliminate_duplicates=True)
        self.algorithm.setup(self.shell, seed=int(self.rng.integers(2**31)),
                             termination=NoTermination(), verbose=False)
        if start is not None:  # the seeds told as a first population
            from pymoo.core.evaluator import Evaluator
            from pymoo.core.population import Population
            from pymoo.problems.static import StaticProblem

            pop = Population.new(X=start)
            Evaluator().eval(StaticProblem(self.shell, F=np.array(self.told_f),
                                           G=np.array(self.told_g)), pop)
            self.algorithm.ask()
            self.algorithm.tell(infills=pop)

    def tell(self, strategies, evaluations) -> None:
        scale = float(np.sum(self.problem.cluster.memory)) or 1.0
        self.evaluated = getattr(self, "evaluated", 0) + len(evaluations)
        if not hasattr(self, "told_x"):
            self.told_x, self.told_f, self.told_g = [], [], []
        X = self.pending[:len(evaluations)]
        F = [ev.values for ev in evaluations]
        G = [[ev.violation / scale] for ev in evaluations]
        if self.algorithm is None:
            self.told_x += X
            self.told_f += F
            self.told_g += G
            return
        from pymoo.core.evaluator import Evaluator
        from pymoo.core.population import Population
        from pymoo.problems.static import StaticProblem

        if not X:
            return
        pop = Population.new(X=np.array(X))
        Evaluator().eval(StaticProblem(self.shell, F=np.array(F), G=np.array(G)), pop)
        self.algorithm.tell(infills=pop)

    def notes(self) -> list[str]:
        if not hasattr(self, "space"):
            return []
        done = getattr(self, "evaluated", 0)
        fp8 = [FP8_NOTE] if len(self.space.fp8_modes) > 1 else []
        return [f"searched the {self.config.space} space: {done} of its "
                f"{len(self.plans)} plans ({self.config.method} over the degree genome, "
                f"seeded with {len(self.seeds)} of the plans people run)", *fp8]
