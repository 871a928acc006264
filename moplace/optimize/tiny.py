"""Tiny random problems whose exact Pareto front `moplace.optimize.exact.exact_front` can enumerate,
and `hv_ratio`, a searcher's hypervolume as a fraction of the exact front's.

The generator (`tiny_instance`, `tiny_instances`), all draws from ``numpy.random.default_rng``
seeded by ``(seed, index)``, so the same arguments always give the same problems:

- **graph**: `moplace.core.synthetic.random_dag` with ``n_ops`` ops and edge probability 0.3: compute
  0.5-2 s per op (on a V100), outputs 1-999 bytes, parameters 0-99 bytes, edges 1-999 bytes;
  no co-location groups and no splittable ops (strategies are placement + order only).
  ``n_ops`` is drawn from `OPS_2_DEVICES` on 2 devices and `OPS_3_DEVICES` on 3: with 3
  devices the placements grow as 3^n, so graphs stay smaller to keep enumeration fast.
- **devices**: 2 or 3 (even / odd instance index, so a list mixes both). Each device's kind is
  drawn from V100 (speed 1), P100 (0.68) and A100 (1.24), speeds from `KIND_SPEED`, so compute
  time depends on where an op runs.
- **links**: symmetric per pair, bandwidth 250-1000 B/s and latency 0-0.2 s, so a typical
  tensor (about 500 B) takes 0.5-2 s to move, as long as a typical op runs: communication
  competes with compute and placing everything apart does not pay by default.
- **memory**: capacities have a random shape (each device 0.75-1.25 x a common scale); the
  scale is chosen so that a fraction ``q`` (uniform in `FIT_FRACTION`, 20-50 %) of all
  placements fit when run in topological order. Lopsided placements (everything on one
  device, usually) do not fit, balanced ones do; other orders of a placement may fit or not,
  since peak memory depends on the order. At least one strategy is always feasible.

`hv_ratio` measures against the exact front's own reference point (see `exact_reference`):
1.1 x the exact front's worst value per objective (`moplace.optimize.hypervolume.reference_point`
applied to the exact front), so every exact point counts and a ratio of 1.0 means the front
found dominates as much as the exact front. Any feasible point is weakly dominated by an exact
point, so the ratio never exceeds 1 for feasible fronts. ``problem.reference`` (1.1 x the worst
baseline) can be passed instead; it is the one the search driver reports, but exact points
beyond the baselines' worst values (for example, faster but more memory than any baseline) fall
outside its box and are not counted.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from ..core.baselines import topological_priority
from ..core.cluster import Cluster
from ..core.strategy import Strategy
from ..core.synthetic import random_dag
from ..errors import MoplaceError
from .exact import ExactFront, exact_front
from .hypervolume import normalized_hypervolume, reference_point
from .problem import Problem

#: Op counts drawn (uniformly) for 2-device and 3-device instances.
OPS_2_DEVICES = (5, 6, 7, 8)
OPS_3_DEVICES = (5, 6)
EDGE_PROB = 0.3
#: Range of the fraction of placements (in topological order) that fit in memory.
FIT_FRACTION = (0.2, 0.5)
KINDS = ("V100", "P100", "A100")


def tiny_instance(seed: int = 0, index: int = 0, *, n_devices: int | None = None,
                  n_ops: int | None = None) -> Problem:
    """One tiny random problem (see the module docstring); ``n_devices`` (2 or 3 unless given)
    and ``n_ops`` override the drawn sizes."""
    rng = np.random.default_rng([int(seed), int(index)])
    if n_devices is None:
        n_devices = 2 + int(index) % 2
    if n_ops is None:
        n_ops = int(rng.choice(OPS_2_DEVICES if n_devices == 2 else OPS_3_DEVICES))
    graph = random_dag(n_ops, edge_prob=EDGE_PROB, seed=int(rng.integers(2**31)))
    kinds = [KINDS[int(k)] for k in rng.integers(0, len(KINDS), n_devices)]
    bw = np.full((n_devices, n_devices), math.inf)
    lat = np.zeros((n_devices, n_devices))
    for i in range(n_devices):
        for j in range(i + 1, n_devices):
            bw[i, j] = bw[j, i] = rng.uniform(250.0, 1000.0)
            lat[i, j] = lat[j, i] = rng.uniform(0.0, 0.2)
    shape = rng.uniform(0.75, 1.25, n_devices)  # relative capacities of the devices
    fit_fraction = rng.uniform(*FIT_FRACTION)
    name = f"tiny-s{seed}-i{index}"

    def build(capacity) -> Problem:
        memory = [math.ceil(c) for c in capacity]
        return Problem(graph, Cluster.uniform(n_devices, kind=kinds, memory_bytes=memory,
                                              bandwidth=bw, latency=lat, name=name, prefix="d"))

    # per placement (topological order), the scale of ``shape`` at which it just fits
    roomy = build(np.full(n_devices, 2.0**50))
    prio = topological_priority(graph)
    needed = np.sort([float(np.max(roomy.evaluate(Strategy(np.asarray(p), prio)).trace.peak_memory
                                   / shape))
                      for p in itertools.product(range(n_devices), repeat=n_ops)])
    scale = needed[max(1, int(round(fit_fraction * needed.size))) - 1]
    return build(shape * scale * (1 + 1e-9))


def tiny_instances(count: int = 20, seed: int = 0) -> list[Problem]:
    """``count`` tiny problems (alternating 2 and 3 devices), deterministic in ``seed``."""
    return [tiny_instance(seed, i) for i in range(int(count))]


@functools.lru_cache(maxsize=128)
def tiny_exact(seed: int = 0, index: int = 0) -> tuple[Problem, ExactFront]:
    """`tiny_instance` ``(seed, index)`` with its exact front, computed once per process
    (cached), so several test modules can share it. 0.1-3 s each on one core."""
    problem = tiny_instance(seed, index)
    return problem, exact_front(problem)


def tiny_benchmark(count: int = 20, seed: int = 0) -> tuple[tuple[Problem, ExactFront], ...]:
    """The first ``count`` instances of ``seed`` with their exact fronts (`tiny_exact`, each
    cached). About 10-25 s for the default 20 on one core."""
    return tuple(tiny_exact(seed, i) for i in range(int(count)))


def exact_reference(exact: ExactFront) -> np.ndarray:
    """1.1 x the exact front's worst value per objective (`reference_point` rule, so an
    objective that is 0 all along the front gets 1.0)."""
    if len(exact) == 0:
        raise MoplaceError("the exact front is empty (no feasible strategy): no reference point")
    return reference_point(exact.values)


def hv_ratio(front_values, exact: ExactFront, reference=None) -> float:
    """Normalized hypervolume of ``front_values`` [k, m] (feasible points) divided by the exact
    front's, both at ``reference`` (default `exact_reference(exact)`)."""
    ref = exact_reference(exact) if reference is None else np.asarray(reference, np.float64)
    exact_hv = normalized_hypervolume(exact.values, ref)
    if exact_hv <= 0:
        raise MoplaceError("the exact front has zero hypervolume at this reference point")
    values = np.asarray(front_values, np.float64).reshape(-1, len(ref))
    return normalized_hypervolume(values, ref) / exact_hv
