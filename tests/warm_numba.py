"""Compile moplace's numba kernels into their on-disk cache, in two processes side by side.

On a fresh checkout every test worker would compile every kernel it meets (about a minute of
one core each: the event loop alone takes 12 s). `tests/conftest.py` runs this once, before the
workers start, when the cache is missing: each part compiles about half of the kernels, and the
workers then load them from the cache. Run by hand: ``python3 tests/warm_numba.py [0|1]``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _simulator() -> None:
    """The event loop, the task-graph builders, the topological order and recomputation."""
    from moplace import load_cluster, load_graph, simulate
    from moplace.core.baselines import baseline
    from moplace.core.recompute import recomputable_heads

    g, c = load_graph("pipedream:alexnet"), load_cluster("4xV100-NVLink")
    dp = baseline("data-parallel", g, 4)
    simulate(g, c, baseline("single", g, 4))
    simulate(g, c, dp, record=True)
    simulate(g, c, dp.with_recompute(recomputable_heads(g)[::2]).with_options(zero_stage=1))


def _reference_and_schedulers() -> None:
    """The reference event loop and the list schedulers' kernels."""
    from moplace import Problem, load_cluster, load_graph
    from moplace.core.baselines import baseline
    from moplace.costs.costmodel import CostModel
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher
    from moplace.simulator.build import build_task_graph
    from moplace.simulator.reference import reference_trace

    g, c = load_graph("pipedream:alexnet"), load_cluster("4xV100-NVLink")
    reference_trace(build_task_graph(g, baseline("round-robin", g, 4), CostModel(g, c)), c,
                    len(g.ops), record=True)
    problem = Problem(g, c)
    for name in ("heft", "dpos", "m-etf"):
        search(problem, make_searcher(name), budget=4, seed=0)


PARTS = (_simulator, _reference_and_schedulers)


def warm() -> None:
    """Run every part in a process of its own, side by side; wait for them all."""
    procs = [subprocess.Popen([sys.executable, __file__, str(k)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for k in range(len(PARTS))]
    for p in procs:
        p.wait()


#: one kernel of each part, by folder and cache file name: when all are cached, so is the rest
MARKERS = (("moplace/simulator", "_simcore.simulate_core"),
           ("moplace/simulator", "reference.reference_core"),
           ("searchers/listsched", "kernels.schedule_kernel"))


def cached() -> bool:
    """Has every part been compiled into the cache already? (The README's main job compiles
    the event loop, not the reference loop or the list schedulers.)"""
    return all(any((ROOT / folder / "__pycache__").glob(f"{name}-*.nbi"))
               for folder, name in MARKERS)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    PARTS[int(sys.argv[1])]()
