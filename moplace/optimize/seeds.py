"""The strategies every seeded search starts from: one home, filled at run time.

A search that starts from good strategies (the list schedulers' plans, the baselines) finds a
better front sooner, and its front then weakly dominates each of them. The baselines are
moplace's own (`moplace.core.baselines`); the schedules come from *seed sources*, functions
``source(problem) -> list[Seed]`` that packages register under the entry-point group
``moplace.seeds``, the way searchers are registered::

    [project.entry-points."moplace.seeds"]
    dpos = "searchers.listsched.seeds:dpos_seeds"

so that a searcher reaches every seed through `seed_strategies` without importing another
searcher plugin, and this layer (optimize) never imports searchers. Sources are read once, on
first use, moplace's own first, each group in name order.

`seed_strategies(problem)` lists, without repeats (strategies the simulator runs alike count
once; the first label is kept):

1. every registered source's seeds (moplace's: each candidate schedule of DPOS, HEFT and
   m-ETF: three memory budgets, groups kept or regrouped);
2. the baselines on the whole cluster (single, data-parallel, tensor-parallel, round-robin,
   layer-split);
3. with ``subsets``, data and tensor parallelism and layer-split on each device subset of
   `moplace.core.subsets.device_subsets` (each server, the best-connected k devices for every
   k): using fewer devices than the cluster has is often faster (one server's 4 GPUs against
   8 GPUs whose all-reduce crosses InfiniBand);
4. every op on one device, in an order that keeps few outputs resident
   (`moplace.core.baselines.memory_priority`), once for each kind of device (kind, memory,
   speed): the zero-communication end of the front lies among single-device placements, and
   the topological order of ``single`` can need far more memory;
5. data parallelism with ZeRO-1 (optimizer state sharded across the replicas) and FSDP
   (ZeRO-3: the weights too), the latter also with each layer checkpointed when the graph
   names its layers (`moplace.core.recompute.layer_checkpoints`: every group recomputed but
   the layer boundaries), when
   they shard anything (`moplace.core.baselines.shards_updates`); tensor parallelism with
   each attention's core recomputed (Megatron-LM's selective recomputation), when the graph
   names attention cores (`moplace.core.recompute.attention_cores`);
6. when the graph has groups that can be recomputed (`moplace.core.recompute`), data
   parallelism and the first memory-ordered single-device placement with every other such
   group recomputed: the low-memory end of the front, at some more time.

``baselines=False`` leaves out 2, 3, 5 and the data-parallel seed of 6 (to test that a search
finds the plans people run, data, tensor and fully sharded data parallelism, by itself).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ..core.baselines import (BASELINES, baseline, on_devices, one_device_each_kind,
                              reduces_gradients, shards_updates)
from ..core.recompute import attention_cores, layer_checkpoints, recomputable_heads
from ..core.strategy import Strategy
from ..core.subsets import device_subsets
from ..errors import MoplaceError
from .plugins import PluginRegistry

#: the entry-point group seed sources are registered in
GROUP = "moplace.seeds"
#: the baselines that are also run on each device subset
SUBSET_BASELINES = ("data-parallel", "tensor-parallel", "layer-split")


class Seed(NamedTuple):
    """A strategy a search starts from, and where it comes from ("dpos: static memory,
    grouped", "data-parallel on gpu0-3")."""

    label: str
    strategy: Strategy


#: the seed sources installed in this environment
SEED_SOURCES = PluginRegistry(GROUP, "seed source")
_SOURCES: list[tuple[str, Callable]] | None = None


def seed_sources() -> list[tuple[str, Callable]]:
    """The registered seed sources, ``(name, source)``: moplace's own first, then the others,
    each in name order."""
    global _SOURCES
    if _SOURCES is None:
        names = SEED_SOURCES.names()
        if not any(SEED_SOURCES.is_moplaces(name) for name in names):
            # every installed moplace registers its own (the list schedulers'): an install
            # made before the group existed gives no schedules, and searches would quietly
            # start from the baselines alone
            raise MoplaceError(f"moplace's seed sources are not registered (entry-point group "
                               f"{GROUP}): install moplace again (pip install -e .)")
        _SOURCES = [(name, SEED_SOURCES[name]) for name in names]
    return _SOURCES


def seed_strategies(problem, *, subsets: bool = True, baselines: bool = True) -> list[Seed]:
    """The seeds of ``problem`` (see the module docstring), in that order."""
    graph = problem.graph
    out: list[Seed] = []
    if len(graph.ops):
        for _, source in seed_sources():
            out += source(problem)
    kinds = one_device_each_kind(graph, problem.cluster)
    if baselines:
        out += _baselines(problem, subsets)
    out += [Seed(f"all on {name}, memory order", s) for name, s in kinds]
    dp = baseline("data-parallel", graph, problem.n_devices) if baselines else None
    out += _sharded_and_selective(problem, dp) if baselines else []
    every_other = recomputable_heads(graph)[::2]
    if every_other.size:
        if baselines:
            out.append(Seed("data-parallel, every other group recomputed",
                            dp.with_recompute(every_other)))
        name, s = kinds[0]
        out.append(Seed(f"all on {name}, memory order, every other group recomputed",
                        s.with_recompute(every_other)))
    return _distinct(out)


def _baselines(problem, subsets: bool) -> list[Seed]:
    """Every baseline on the whole cluster, and with ``subsets`` those of `SUBSET_BASELINES`
    on each device subset."""
    graph = problem.graph
    out = [Seed(name, baseline(name, graph, problem.n_devices)) for name in BASELINES]
    if subsets and len(graph.ops):
        for subset in device_subsets(problem.cluster):
            out += [Seed(f"{name} on {subset.label}", on_devices(name, graph, subset.devices))
                    for name in SUBSET_BASELINES]
    return out


def _sharded_and_selective(problem, dp: Strategy) -> list[Seed]:
    """ZeRO-1 and FSDP (``dp`` is data parallelism), FSDP with each layer checkpointed, and
    tensor parallelism with the attention cores recomputed, where the graph allows them."""
    graph, n, out = problem.graph, problem.n_devices, []
    if n > 1 and reduces_gradients(graph) and shards_updates(graph):
        out.append(Seed("data-parallel, ZeRO-1", dp.with_options(zero_stage=1)))
        out.append(Seed("FSDP (data-parallel, ZeRO-3)", dp.with_options(zero_stage=3)))
        layers = layer_checkpoints(graph)
        if graph.metadata.get("layers") and layers.size:
            out.append(Seed("FSDP, each layer checkpointed",
                            dp.with_options(zero_stage=3).with_recompute(layers)))
    cores = attention_cores(graph)
    if n > 1 and cores.size:
        out.append(Seed("tensor-parallel, attention cores recomputed (selective)",
                        baseline("tensor-parallel", graph, n).with_recompute(cores)))
    return out


def _distinct(seeds: list[Seed]) -> list[Seed]:
    seen, out = set(), []
    for seed in seeds:
        key = seed.strategy.simulation_key
        if key not in seen:
            seen.add(key)
            out.append(seed)
    return out
