"""One trial of a sweep: its parameters -> a problem, a searcher, a search, the values it returns.

`build` turns the parameters into what `moplace.search` needs (the cluster generated when
the device count or link parameters vary; a zoo model profiled with TensorFlow at the trial's
batch size, once per model and batch, kept beside the sweep file); `run_trial` runs the
search and `returns` reads the values a trial can return from its result.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import MoplaceError
from .spec import GENERATED, relative

GIB = 2.0 ** 30


def build(params: dict, folder: Path):
    """(problem, searcher, budget, seed) of a trial's parameters; paths are relative to
    ``folder`` (the sweep file's)."""
    from ..optimize.driver import Budget
    from ..optimize.plugins import make_searcher
    from ..optimize.problem import Problem

    cluster = _cluster(params, folder)
    graph = _graph(params, folder, tuple(sorted(set(cluster.kinds))))
    settings = {k.partition(".")[2]: v for k, v in params.items()
                if "." in k and k.partition(".")[0] == params["searcher"]}
    searcher = make_searcher(params["searcher"], **settings)
    budget = Budget(evaluations=int(params.get("budget", 1000)))
    return Problem(graph, cluster), searcher, budget, int(params.get("seed", 0))


def _graph(params, folder, kinds):
    from ..io import load_graph

    name = params.get("graph")
    if not name:
        raise MoplaceError("the sweep gives no graph (set graph in [fixed] or [space])")
    if name.startswith("zoo:"):
        # the zoo source's loader, told the trial's batch and the cluster's kinds, keeping
        # each profiled graph in graphs/ beside the sweep file for every trial to reuse
        from ..tf.graphsource import zoo_graph

        return zoo_graph(name[4:], batch=int(params.get("batch", 32)), kinds=kinds,
                         cache=folder / "graphs")
    return load_graph(relative(name, folder))


def _cluster(params, folder):
    from ..core.cluster import Cluster
    from ..core.presets import load_cluster

    if not any(k in params for k in GENERATED):
        if "cluster" not in params:
            raise MoplaceError("the sweep gives no cluster (set cluster, or devices, in [fixed] "
                               "or [space])")
        return load_cluster(relative(params["cluster"], folder))
    n = int(params.get("devices", 4))
    kind = str(params.get("device_kind", "V100"))
    memory = float(params.get("device_memory_gib", 16.0))
    bw = float(params.get("link_bandwidth_gbps", 24.0)) * 1e9
    latency = float(params.get("link_latency_us", 2.0)) * 1e-6
    if not 1 <= n <= 256:
        raise MoplaceError(f"devices must be from 1 to 256, got {n}")
    return Cluster.uniform(n, kind=kind, memory_bytes=memory * GIB, bandwidth=bw,
                           latency=latency, name=f"{n}x{kind}-{memory:g}GiB-{bw / 1e9:g}GBps")


def returns(result, params: dict) -> dict[str, float]:
    """Every value a trial can return, from its `SearchResult` (inf when no feasible point:
    a minimized value that no feasible strategy reached)."""
    objectives = result.problem.objectives
    front = np.array([p.values for p in result.front]).reshape(-1, len(objectives))
    rt = objectives.index("runtime") if "runtime" in objectives else 0
    best = float(front[:, rt].min()) if len(front) else float("inf")
    within = best
    limit = params.get("memory_limit_gib")
    if limit is not None and "peak_memory" in objectives:
        fits = front[front[:, objectives.index("peak_memory")] <= float(limit) * GIB]
        within = float(fits[:, rt].min()) if len(fits) else float("inf")
    return {"hypervolume": float(result.hypervolume), "best_runtime": best,
            "best_runtime_within_memory": within, "search_seconds": float(result.seconds)}


def run_trial(params: dict, folder: Path, *, callbacks=(), evaluator=None):
    """Run the search of a trial's parameters: (problem, searcher, result)."""
    from ..optimize.driver import search

    problem, searcher, budget, seed = build(params, folder)
    result = search(problem, searcher, budget=budget, seed=seed, callbacks=callbacks,
                    evaluator=evaluator)
    return problem, searcher, result
