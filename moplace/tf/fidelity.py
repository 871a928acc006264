"""How well the simulator predicts real steps: strategies run on a testbed against simulated.

`run_fidelity` profiles a model on a `moplace.tf.testbed.Testbed` (op costs on worker 0, batch
parts at batch / K, links between the workers), collects strategies (the baselines, the list
schedulers, and points spread along an NSGA-II front), runs each for real and simulates it,
and returns a `FidelityReport` (`moplace.testbed.fidelity`, shared with the PyTorch testbed): per strategy the measured median step and its spread, the
simulated step, and memory peaks per device; per model the median and worst relative error and
Kendall's tau of the ranking.

Two predictions are kept side by side:

- **as measured**: the simulator on the cluster `moplace profile --testbed` writes (links fitted
  from isolated transfers of 1 KiB to 64 MiB);
- **corrected**: the simulator with three costs of the testbed it does not model (a link
  latency, a price per extra worker taking part in a step, the step's fixed cost), fitted on
  *calibration* strategies run on the testbed for this purpose and never among the strategies
  judged (`moplace.testbed.calibration`). The corrected memory peak adds the largest scratch buffer
  (measured per op while profiling) of the ops on the device to the simulated liveness peak.

Every strategy's steps are scaled to the machine's speed just after profiling: the one-device
plan runs a few steps between one strategy and the next (`moplace.testbed.probe`).
"""

from __future__ import annotations

import time

from ..progress import Report
from ..testbed.fidelity import MICRO_BATCHES, FidelityReport, run_strategies
from ..testbed.probe import probed


def run_fidelity(model: str, batch: int, testbed, *, steps: int = 20, warmup: int = 3,
                 profile_steps: int = 5, front_points: int = 6, budget: int = 2000, seed: int = 0,
                 calibration: int = 6, progress: Report | None = None) -> FidelityReport:
    """Profile ``model`` at ``batch`` on ``testbed``, then run and simulate its candidate
    strategies (see the module docstring). ``progress(stage, done, total)`` hears of each."""
    from ..core.baselines import single
    from .frontend import apply_to_model, profile_model

    t0 = time.perf_counter()
    say = progress or (lambda *a: None)
    k = testbed.count
    # batch parts measured: each device's share, and a micro-batch of the candidates'
    parts = tuple(p for p in sorted({k, MICRO_BATCHES}) if p > 1 and batch % p == 0)
    say("profiling", 0, 1)
    pm = profile_model(model, batch, testbed=testbed, steps=profile_steps, part_counts=parts)
    graph, cluster = pm.graph, pm.cluster

    def apply(strategy, n_steps, n_warmup):
        return apply_to_model(graph, strategy, cluster, steps=n_steps, warmup=n_warmup,
                              traced=pm.traced, testbed=testbed)[0]

    # every strategy at the machine's speed just after profiling (`moplace.testbed.probe`)
    run = probed(apply, single(graph, k), steps, warmup, probe_warmup=2)
    return run_strategies(graph, cluster, run, model=model, batch=batch,
                          testbed=testbed.describe(), device_names=testbed.devices, steps=steps,
                          step_s=float(graph.metadata["measured"]["step_overhead_s"]),
                          calibration=calibration, front_points=front_points, budget=budget,
                          seed=seed, say=say, t0=t0, round_pick="median")
