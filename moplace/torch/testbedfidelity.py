"""How well the simulator predicts real steps on the PyTorch testbed: a model profiled with one
testbed process's threads and its ops timed as the testbed runs them
(`moplace.torch.testbedtimes`; on a testbed of GPUs, profiled on the GPU: its kernels' times), its strategies (`moplace.testbed.fidelity.candidate_strategies`:
baselines, recomputation, micro-batches, the list schedulers, NSGA-II points) applied for real
on the testbed's processes (`moplace.torch.apply`) against the simulator, as measured and
corrected on calibration strategies never judged (`moplace.testbed.calibration`), exactly as
the Keras testbed's report (`moplace.tf.fidelity`) is made.
"""

from __future__ import annotations

import time

from ..errors import MoplaceError
from ..testbed.fidelity import FidelityReport, run_strategies
from ..testbed.result import ApplyResult


def run_testbed_fidelity(model: str, batch: int, testbed, *, steps: int = 10, warmup: int = 2,
                         profile_steps: int = 5, front_points: int = 6, budget: int = 2000,
                         seed: int = 0, calibration: int = 16, rounds: int = 1,
                         seq_len: int | None = None, dtype: str | None = None,
                         progress=None) -> FidelityReport:
    """Profile ``model`` (a PyTorch model file or ``hf:NAME``) at ``batch`` for ``testbed``
    (a `moplace.torch.testbed.TorchTestbed`) and run its strategies there (see the module
    docstring); each strategy keeps its least disturbed of ``rounds`` rounds
    (`moplace.testbed.fidelity.run_strategies`), the op times their least disturbed of as many
    (`testbed_op_times`); ``progress(stage, done, total)`` hears of each."""
    import torch

    from .apply import apply_torch
    from .frontend import profile_torch_model
    from .testbed import TorchTestbed
    from .testbedtimes import testbed_op_times

    t0 = time.perf_counter()
    say = progress or (lambda *a: None)
    n = testbed.count
    if testbed.device == "cuda":  # op times: the kernels' device time, measured there
        from .device import device_info

        info = device_info("cuda")
        say(f"profiling on {info.name}", 0, 1)
        traced = profile_torch_model(model, batch, [], seq_len=seq_len, dtype=dtype,
                                     measure_steps=max(profile_steps, 1), device="cuda",
                                     target_kind=info.kind, cache=False)
        graph = traced.graph
        cluster = TorchTestbed.gpu_cluster(n, info)
    else:
        say("profiling on this CPU with one process's threads", 0, 1)
        before = torch.get_num_threads()
        torch.set_num_threads(len(testbed.cores[0]))
        try:
            traced = profile_torch_model(model, batch, [], seq_len=seq_len,
                                         dtype=dtype or "fp32", measure_steps=profile_steps,
                                         device="cpu", target_kind="cpu", cache=False)
        finally:
            torch.set_num_threads(before)
        say("timing each op on the testbed", 0, 1)
        graph = testbed_op_times(traced.graph, testbed, repeats=rounds, progress=say)
        cluster = TorchTestbed.placeholder_cluster(n)
    if n > 1:
        say("measuring the links", 0, 1)
        latency, bandwidth = testbed.measure_links()
        cluster = cluster.with_links(
            {(i, j): (latency, bandwidth) for i in range(n) for j in range(n) if i != j})

    def run(strategy):
        try:
            return apply_torch(graph, strategy, cluster, steps=steps, warmup=warmup,
                               testbed=testbed)[0]
        except MoplaceError as exc:
            return ApplyResult(False, str(exc))

    return run_strategies(graph, cluster, run, model=str(model), batch=batch,
                          testbed=testbed.describe(), device_names=[d.name for d in
                                                                    cluster.devices],
                          steps=steps, step_s=0.0, calibration=calibration, rounds=rounds,
                          front_points=front_points, budget=budget, seed=seed, say=say, t0=t0)
