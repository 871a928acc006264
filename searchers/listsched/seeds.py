"""The strategies every seeded searcher starts from, each with a label a person reads.

`seed_strategies(problem)` lists, without repeats (strategies the simulator runs alike count
once; the first label is kept):

1. every candidate schedule of DPOS, HEFT and m-ETF (`candidates.schedule_candidates`: three
   memory budgets, groups kept or regrouped);
2. the four baselines on the whole cluster (single, data-parallel, round-robin, layer-split);
3. with ``subsets``, data parallelism and layer-split on each device subset of
   `moplace.core.subsets.device_subsets` (each server, the best-connected k devices for every
   k): using fewer devices than the cluster has is often faster (one server's 4 GPUs against
   8 GPUs whose all-reduce crosses InfiniBand);
4. every op on one device, in an order that keeps few outputs resident
   (`moplace.core.baselines.memory_priority`), once for each kind of device (kind, memory,
   speed): the zero-communication end of the front lies among single-device placements, and
   the topological order of ``single`` can need far more memory.

OS-DPOS's first batch is this list; the other seeded searchers evaluate it as their first
batch through `searchers.seeding.SeedPhase`.
"""

from __future__ import annotations

from typing import NamedTuple

from moplace.core.baselines import BASELINES, baseline, on_devices, one_device_each_kind
from moplace.core.strategy import Strategy
from moplace.core.subsets import device_subsets

from .candidates import schedule_candidates
from .metf import metf
from .schedule import dpos, heft

#: the baselines that are also run on each device subset
SUBSET_BASELINES = ("data-parallel", "layer-split")


class Seed(NamedTuple):
    """A strategy a search starts from, and where it comes from ("dpos: static memory,
    grouped", "data-parallel on gpu0-3")."""

    label: str
    strategy: Strategy


def seed_strategies(problem, *, subsets: bool = True) -> list[Seed]:
    """The seeds of ``problem`` (see the module docstring), in that order."""
    graph = problem.graph
    out: list[Seed] = []
    if len(graph.ops):
        for name, schedule in (("dpos", dpos), ("heft", heft), ("m-etf", metf)):
            out += [Seed(f"{name}: {c.label}", c.strategy)
                    for c in schedule_candidates(problem, schedule)]
    out += [Seed(name, baseline(name, graph, problem.n_devices)) for name in BASELINES]
    if subsets and len(graph.ops):
        for subset in device_subsets(problem.cluster):
            out += [Seed(f"{name} on {subset.label}", on_devices(name, graph, subset.devices))
                    for name in SUBSET_BASELINES]
    out += [Seed(f"all on {name}, memory order", s)
            for name, s in one_device_each_kind(graph, problem.cluster)]
    return _distinct(out)


def _distinct(seeds: list[Seed]) -> list[Seed]:
    seen, out = set(), []
    for seed in seeds:
        key = seed.strategy.simulation_key
        if key not in seen:
            seen.add(key)
            out.append(seed)
    return out
