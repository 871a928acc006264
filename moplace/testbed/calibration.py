"""A testbed's costs the simulator leaves out, fitted on calibration runs (see
`moplace.testbed.fidelity`; either front end's testbed).

A corrected step is ``simulated(link latency L) + step_s + worker_s * (devices used - 1)``:

- ``L``, the latency a transfer adds on the critical path (isolated transfers, which the
  profiled links come from, also pay for a second worker taking part in the step);
- ``worker_s``, that price of each extra worker taking part in a step, paid once per step;
- ``step_s``, the fixed cost of a step (measured when profiling: the step minus its ops).

``L`` and ``worker_s`` are fitted on calibration strategies run for that purpose only
(`calibration_strategies`), by medians: each latency of `LATENCY_GRID` with each candidate
worker cost (a grid of 0-20 ms, the least-squares one, and each run's own), the pair with the
smallest median |relative error| winning. A median, because a run the simulator cannot
explain (a recurrent loop pulled across workers, seconds instead of milliseconds) would
otherwise decide the fit for every other strategy. Every figure is kept per latency
(`simulate_by_latency`), so a saved report can be fitted again without the strategies.
"""

from __future__ import annotations

import numpy as np

from ..simulator.engine import simulate

#: link latencies the calibration tries (seconds)
LATENCY_GRID = (0.0, 10e-6, 25e-6, 50e-6, 75e-6, 100e-6, 150e-6, 200e-6, 300e-6, 400e-6,
                600e-6, 800e-6, 1e-3, 1.5e-3, 2e-3)
#: per-extra-worker costs the calibration tries (seconds), besides the fitted ones
WORKER_GRID = tuple(k * 0.5e-3 for k in range(41))


def with_latency(cluster, latency: float):
    """``cluster`` with every link's latency set to ``latency`` (bandwidths kept)."""
    n = cluster.n_devices
    return cluster.with_links({(i, j): (latency, float(cluster.bandwidth[i, j]))
                               for i in range(n) for j in range(n) if i != j})


def simulate_by_latency(graph, cluster, strategy) -> list[float]:
    """The simulated step at each latency of `LATENCY_GRID`."""
    return [simulate(graph, with_latency(cluster, lat), strategy).makespan for lat in LATENCY_GRID]


def fit(runs: list[dict], step_s: float) -> dict:
    """The corrections fitted to ``runs`` (dicts with ``measured_s``, ``devices_used`` and
    ``simulated_by_latency``); see the module docstring."""
    if not runs:
        return {"latency_s": None, "worker_s": 0.0, "step_s": step_s,
                "calibration_median_abs_error": float("nan"), "calibration_strategies": 0,
                "runs": []}
    meas = np.array([r["measured_s"] for r in runs], float)
    extra = np.array([max(r["devices_used"] - 1, 0) for r in runs], float)
    sims = np.array([r["simulated_by_latency"] for r in runs], float) + step_s
    best = None
    for k, latency in enumerate(LATENCY_GRID):
        sim = sims[:, k]
        a, res = extra / meas, 1.0 - sim / meas
        candidates = set(WORKER_GRID)
        if a @ a > 0:
            candidates.add(max(float(a @ res / (a @ a)), 0.0))
            candidates.update(max(float(v), 0.0) for v in ((meas - sim) / extra)[extra > 0])
        for w in sorted(candidates):
            err = float(np.median(np.abs((sim + w * extra) / meas - 1)))
            if best is None or err < best["calibration_median_abs_error"] - 1e-12:
                best = {"latency_s": latency, "worker_s": w, "calibration_median_abs_error": err}
    return {**best, "step_s": step_s, "calibration_strategies": len(runs), "runs": runs}


def corrected(simulated_by_latency: list[float], used: int, corrections: dict) -> float:
    """A strategy's corrected step from its `simulate_by_latency` figures."""
    latency = corrections.get("latency_s")
    base = simulated_by_latency[LATENCY_GRID.index(latency)] if latency is not None \
        else min(simulated_by_latency)
    return base + corrections["step_s"] + corrections["worker_s"] * max(used - 1, 0)


def corrected_peaks(graph, strategy, trace, used: list[int]) -> list[float]:
    """Simulated liveness peaks plus the largest profiled scratch buffer of an op on the
    device (a split op's parts: their share)."""
    scratch = graph.metadata.get("measured", {}).get("scratch_bytes", {})
    extra = {d: 0.0 for d in used}
    for name, nbytes in scratch.items():
        i = graph.index.get(name)
        if i is None:
            continue
        split = strategy.splits.get(i)
        for d in (split.devices if split else (int(strategy.placement[i]),)):
            if d in extra:
                extra[d] = max(extra[d], nbytes / (split.parts if split else 1))
    return [float(trace.peak_memory[d]) + extra[d] for d in used]


def calibration_strategies(graph, n_devices: int, count: int, seed: int) -> list:
    """``count`` random strategies from few to many transfers: each moves a growing share of
    the co-location groups (3% to 60%) from device 0 to random other devices, and every
    second one also splits as large a share of the batch-splittable groups on batch."""
    from ..core.baselines import topological_priority
    from ..core.strategy import Split, spread_groups

    rng = np.random.default_rng(seed + 7919)
    n_groups = graph.arrays.n_groups
    splittable = [g for g, members in enumerate(graph.groups)
                  if all("batch" in graph.ops[i].splittable for i in members)]
    priority = topological_priority(graph)
    out = []
    for k, share in enumerate(np.geomspace(0.03, 0.6, count) if count > 1 else [0.2]):
        moved = rng.random(n_groups) < share
        devices = np.where(moved, rng.integers(1, max(n_devices, 2), n_groups), 0) % n_devices
        splits = {}
        if k % 2 and n_devices > 1:
            for g in splittable:
                if rng.random() < share:
                    first = int(devices[g])
                    splits[g] = Split("batch", tuple((first + d) % n_devices for d in range(n_devices)))
        out.append(spread_groups(graph, devices, splits, priority))
    return out
