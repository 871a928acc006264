"""Search at scale: a framework's regular plans of a graph on a pod, each evaluated at scale
(`moplace.simulator.atscale.evaluate_regular`), their Pareto front kept: what ``moplace search
GRAPH --cluster pod:H100:16384 --space megatron --gbs 2048`` runs.

The plans are `moplace.core.regularspace.RegularSpace`'s (TP, CP, PP with virtual or uneven
stages, DP, EP, recomputation, ZeRO, schedule, precision at the fixed global batch), of each
graph given: the model traced at one micro-batch size each, so the micro-batch size is a gene
too (each plan evaluated on the graph of its size). A plan
whose weights, gradients and optimizer state alone (the fullest stage's, per GPU) exceed the
GPUs' memory cannot fit: it is counted and never simulated, and spends none of the budget.

The search starts from `framework_seeds`, the configurations the frameworks' documents
recommend where the space has them. Then, with method ``random``, the other plans in a seeded
random order; with ``nsga2``, ``mcmc`` or one of Optuna's samplers (``optuna-tpe``,
``optuna-random``, ``optuna-nsga2``), the proposals of `moplace.optimize.regularwalks` over a
genome of one gene per degree and lever, indexing the values the space offers, told the
seeds first. A genome that decodes to a plan not in the space or already evaluated is
replaced by the next plan of the random order, so no plan is evaluated twice and a budget at
least the space's size evaluates all of it. A plan the simulator refuses (a replica of more
GPUs than it runs op by op) is counted with its reason. Either way the same seed gives the
same result, with any number of workers.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from objectives import DEFAULT

from ..core.regular import RegularPlan
from ..core.regularspace import RegularSpace
from .archive import no_worse
from .hypervolume import normalized_hypervolume
from .regularwalks import PROPOSERS, make_proposer

#: the methods a regular space is searched with
METHODS = ("random",) + PROPOSERS
#: the genes of the genome (`RegularPlan` fields that vary across a space)
GENES = ("tp", "cp", "pp", "v", "ep", "mbs", "recompute", "zero", "schedule", "precision")


@dataclass
class RegularPoint:
    """One evaluated plan: its objective ``values``, feasibility and memory ``violation``,
    and the `moplace.simulator.atscale.ScaledEvaluation` behind them."""

    plan: RegularPlan
    values: np.ndarray
    feasible: bool
    violation: float
    evaluation: object


@dataclass
class RegularSearchResult:
    """What a search at scale found: every evaluated point in evaluation order, the indices
    of the feasible front (least runtime first), how many plans the space has and how many
    could not hold their static state (``unfit``), those the simulator refused, the seeds,
    seconds and status."""

    space: RegularSpace
    method: str
    seed: int
    objectives: tuple[str, ...]
    points: list[RegularPoint] = field(default_factory=list)
    front: list[int] = field(default_factory=list)
    n_plans: int = 0
    unfit: int = 0
    seeds: list[tuple[str, RegularPlan]] = field(default_factory=list)
    #: plans the simulator refused, and why (a replica past its devices)
    refused: list[tuple[RegularPlan, str]] = field(default_factory=list)
    seconds: float = 0.0
    status: str = "finished"
    #: the front's hypervolume, normalized against ``reference`` (1.1 times the worst
    #: evaluated feasible value of each objective; None: nothing fits)
    hypervolume: float = 0.0
    reference: list | None = None

    @property
    def infeasible_front(self) -> list[int]:
        """When nothing fits: the least-violating points."""
        if self.front or not self.points:
            return []
        least = min(p.violation for p in self.points)
        return [k for k, p in enumerate(self.points) if p.violation == least]


def static_bytes(graph, plan: RegularPlan, pod) -> float:
    """The fullest stage's weights, gradients and optimizer state per GPU under ``plan`` (a
    lower bound of its peak memory: what every step holds)."""
    from ..simulator.atscale import replica_strategy
    from ..simulator.replica import replica_graph

    rg = replica_graph(graph, plan, pod, 1)  # the weights are the same in any micro-batch
    s = replica_strategy(rg.graph, plan, 1)
    w = plan.tp * plan.cp
    stage = s.placement // w
    a = rg.graph.arrays
    cut = np.ones(len(a.param_bytes))
    for op, split in s.splits.items():
        if split.dim in ("tensor", "expert"):
            cut[op] = len(split.devices)
    held = a.param_bytes / cut
    return float(max(held[stage == k].sum() for k in range(plan.pp)))


def framework_seeds(plans: list[RegularPlan], framework: str) -> list[tuple[str, RegularPlan]]:
    """The configurations the frameworks' documents recommend, where ``plans`` has them:
    tensor parallelism inside a server (8), pipeline stages across servers only as many as
    the model needs, data parallelism over the rest with the distributed optimizer (Megatron-LM's
    README, "Parallelism" and its scaling runs; torchtitan's docs: FSDP first, then TP inside a
    server (2-D), then PP (3-D)); each the fewest stages of its kind, no recomputation, 16-bit
    (BF16 or FP16, as the space has them; no FP8)."""
    def pick(label, ok, key=lambda p: (p.pp, p.v)):
        found = sorted((p for p in plans if ok(p) and p.recompute == "none"
                        and p.fp8 == "none" and p.cp == 1 and p.ep == 1), key=key)
        return [(label, found[0])] if found else []

    out = pick("data parallel, distributed optimizer" if framework == "megatron" else "FSDP",
               lambda p: p.tp == 1 and p.pp == 1 and p.zero == 1)
    out += pick("TP8 in the server" + (", distributed optimizer" if framework == "megatron"
                                       else ", FSDP (2-D)"),
                lambda p: p.tp == 8 and p.pp == 1 and p.zero == 1)
    out += pick("TP8, pipeline stages across servers (3-D)",
                lambda p: p.tp == 8 and p.pp > 1 and p.v == 1 and p.zero == 1)
    out += pick("TP8, interleaved stages",
                lambda p: p.tp == 8 and p.pp > 1 and p.v > 1 and p.zero == 1,
                key=lambda p: (p.pp, -p.v))
    seen, unique = set(), []
    for label, p in out:
        if p not in seen:
            seen.add(p)
            unique.append((label, p))
    return unique


_STATE: dict = {}


def _init(graph_specs: dict, pod_spec: str, objectives, memory_limit) -> None:
    from ..core.pod import load_target
    from ..io import load_graph

    _STATE.update(graphs={mbs: load_graph(spec) for mbs, spec in graph_specs.items()},
                  pod=load_target(pod_spec), objectives=objectives, memory_limit=memory_limit)


def _evaluate_one(plan: RegularPlan):
    """(plan, ScaledEvaluation) in a worker (`_init`); (plan, None) for a plan that cannot
    hold its static state; (plan, the reason as a string) for one the simulator refuses."""
    from ..errors import MoplaceError
    from ..simulator.atscale import evaluate_regular

    g, pod = _STATE["graphs"][plan.mbs], _STATE["pod"]
    cap = _STATE["memory_limit"] or pod.memory_bytes
    try:
        if static_bytes(g, plan, pod) > cap:
            return plan, None
        return plan, evaluate_regular(g, pod, plan, objectives=_STATE["objectives"],
                                      memory_limit=_STATE["memory_limit"])
    except MoplaceError as exc:  # a string: exceptions of ours need not pickle
        return plan, str(exc)


class _Genome:
    """One gene per `GENES` field, indexing the sorted values the space's plans take."""

    def __init__(self, plans: list[RegularPlan]):
        self.values = {g: sorted({getattr(p, g) for p in plans}, key=str) for g in GENES}
        self.by_key = {self.key(p): p for p in plans}
        self.lo = np.zeros(len(GENES))
        self.hi = np.array([len(self.values[g]) - 1 for g in GENES], float)

    def key(self, plan: RegularPlan) -> tuple:
        return tuple(getattr(plan, g) for g in GENES)

    def encode(self, plan: RegularPlan) -> np.ndarray:
        return np.array([self.values[g].index(getattr(plan, g)) for g in GENES], float)

    def decode(self, x) -> RegularPlan | None:
        idx = np.clip(np.round(np.asarray(x, float)).astype(int), 0, self.hi.astype(int))
        return self.by_key.get(tuple(self.values[g][i] for g, i in zip(GENES, idx)))


def search_regular(graph, pod, gbs: int, *, graph_spec: str, pod_spec: str,
                   framework: str = "megatron", method: str = "random", budget: int = 2000,
                   seconds: float | None = None, seed: int = 0, objectives=DEFAULT,
                   memory_limit: float | None = None, workers: int = 1, pop_size: int = 16,
                   progress=None, precisions: tuple[str, ...] = ("bf16",),
                   more_graphs: tuple = ()) -> RegularSearchResult:
    """Search ``framework``'s regular plans of ``graph`` (one micro-batch) on ``pod`` at
    ``gbs`` sequences a step (module docstring), in ``precisions``, with ``budget``
    evaluations or ``seconds``; ``more_graphs``: ``(graph, spec)`` pairs of the same model
    traced at other micro-batch sizes (each a batch of its own), whose plans join the
    space. Workers load the graphs and pod again from their specs and ``pod_spec``.
    ``progress`` is called with (evaluated, unfit, plans, seconds, best runtime) after each
    batch."""
    t0 = time.perf_counter()
    graphs = {graph.metadata.get("batch_size"): (graph, graph_spec)}
    graphs.update({g.metadata.get("batch_size"): (g, spec) for g, spec in more_graphs})
    graphs = dict(sorted(graphs.items()))
    spaces = [RegularSpace(g, pod.gpus, gbs, framework, precisions=tuple(precisions))
              for g, _ in graphs.values()]
    space = spaces[0]
    plans = [p for sp in spaces for p in sp.all()]
    rng = np.random.default_rng(seed)
    order = [plans[i] for i in rng.permutation(len(plans))]
    seeds = framework_seeds(plans, framework)
    result = RegularSearchResult(space, method, seed, tuple(objectives), n_plans=len(plans),
                                 seeds=seeds)
    asked: set[RegularPlan] = set()
    genome = _Genome(plans) if plans else None
    proposer = None

    def fresh(p: RegularPlan | None) -> RegularPlan | None:
        if p is not None and p not in asked:
            return p
        while order and order[-1] in asked:
            order.pop()
        return order.pop() if order else None

    def next_batch() -> list[RegularPlan]:
        nonlocal proposer
        if not asked:
            wanted = [p for _, p in seeds]
        elif method == "random" or genome is None:
            wanted = [None] * pop_size
        else:
            if proposer is None:
                proposer = make_proposer(method, genome, result, pop_size, rng)
            wanted = proposer.ask(pop_size)
        batch = []
        for p in wanted:
            p = fresh(p)
            if p is None:
                break
            asked.add(p)
            batch.append(p)
        return batch

    specs = {mbs: spec for mbs, (_, spec) in graphs.items()}
    pool = (ProcessPoolExecutor(workers, initializer=_init,
                                initargs=(specs, pod_spec, tuple(objectives), memory_limit))
            if workers > 1 else None)
    if pool is None:
        _STATE.update(graphs={mbs: g for mbs, (g, _) in graphs.items()}, pod=pod,
                      objectives=tuple(objectives), memory_limit=memory_limit)
    try:
        while len(result.points) < budget:
            if seconds is not None and time.perf_counter() - t0 >= seconds:
                result.status = "time"
                break
            batch = next_batch()[:budget - len(result.points)]
            if not batch:
                break
            done = (pool.map(_evaluate_one, batch) if pool else map(_evaluate_one, batch))
            told = []
            for plan, ev in done:
                if ev is None:
                    result.unfit += 1
                    continue
                if isinstance(ev, str):
                    result.refused.append((plan, ev))
                    continue
                point = RegularPoint(plan, ev.values, ev.feasible, ev.violation, ev)
                result.points.append(point)
                told.append(point)
            if proposer is not None and told:
                proposer.tell(told)
            if progress:
                best = min((p.evaluation.runtime_s for p in result.points if p.feasible),
                           default=None)
                progress(len(result.points), result.unfit, len(plans),
                         time.perf_counter() - t0, best)
    except KeyboardInterrupt:
        result.status = "interrupted"
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    result.front = pareto_front(result.points)
    feasible = [p.values for p in result.points if p.feasible]
    if feasible:  # normalized against 1.1 times the worst evaluated feasible values
        ref = 1.1 * np.max(feasible, axis=0)
        result.reference = ref.tolist()
        result.hypervolume = float(normalized_hypervolume(
            np.array([result.points[k].values for k in result.front]), ref))
    result.seconds = time.perf_counter() - t0
    return result


def pareto_front(points: list[RegularPoint]) -> list[int]:
    """The indices of the feasible points no other feasible point dominates, one of equal
    ones, least runtime first."""
    ok = [k for k, p in enumerate(points) if p.feasible]
    out = []
    for k in ok:
        v = points[k].values
        if any(no_worse(points[j].values, v).all() and (not no_worse(v, points[j].values).all()
                                                          or j < k)
               for j in ok if j != k):
            continue
        out.append(k)
    return sorted(out, key=lambda k: tuple(points[k].values))

