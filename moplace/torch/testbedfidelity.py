"""How well the simulator predicts real steps on the PyTorch testbed: a model profiled with one
testbed process's threads and its ops timed as the testbed runs them
(`moplace.torch.testbedtimes`; on a testbed of GPUs, profiled on the GPU: its kernels' times), its strategies (`moplace.testbed.fidelity.candidate_strategies`:
baselines, recomputation, micro-batches, the list schedulers, NSGA-II points) applied for real
on the testbed's processes (`moplace.torch.apply`) against the simulator, as measured and
corrected on calibration strategies never judged (`moplace.testbed.calibration`), exactly as
the Keras testbed's report (`moplace.tf.fidelity`) is made.

On CPUs the machine's speed is probed between strategies (`moplace.testbed.probe`): the op
times are taken running the one-device plan, whose step then is the reference speed, and
every strategy's steps are scaled to it; of several rounds each keeps its median. The
one-device plan's own row is its ratio to its probes: it says how steady the machine was, not
how well the simulator does.
"""

from __future__ import annotations

import time

from ..testbed.fidelity import FidelityReport, run_strategies
from ..testbed.probe import probed


def run_testbed_fidelity(model: str, batch: int, testbed, *, steps: int = 10, warmup: int = 2,
                         profile_steps: int = 5, front_points: int = 6, budget: int = 2000,
                         seed: int = 0, calibration: int = 16, rounds: int = 1,
                         seq_len: int | None = None, dtype: str | None = None,
                         progress=None) -> FidelityReport:
    """Profile ``model`` (a PyTorch model file or ``hf:NAME``) at ``batch`` for ``testbed``
    (a `moplace.torch.testbed.TorchTestbed`) and run its strategies there (see the module
    docstring); each strategy runs ``rounds`` rounds (`moplace.testbed.fidelity.run_strategies`)
    and the op times take their least disturbed of as many repeats (`testbed_op_times`); on
    CPUs each strategy's steps are scaled to the machine's speed when the ops were timed and
    keep their median round (module docstring), on GPUs their least disturbed;
    ``progress(stage, done, total)`` hears of each."""
    import torch

    from ..core.baselines import single
    from .apply import apply_torch
    from .applyprep import plan_refusal
    from .frontend import profile_torch_model
    from .testbed import TorchTestbed
    from .testbedtimes import timed_ops

    t0 = time.perf_counter()
    say = progress or (lambda *a: None)
    n = testbed.count
    reference = None  # the one-device step as the ops were timed (CPUs)
    kind = TorchTestbed.trace_kind(testbed.device)
    if testbed.device == "cuda":  # op times: the kernels' device time, measured there
        from .device import device_info

        info = device_info("cuda")
        say(f"profiling on {info.name}", 0, 1)
        traced = profile_torch_model(model, batch, [], seq_len=seq_len, dtype=dtype,
                                     measure_steps=max(profile_steps, 1), device="cuda",
                                     target_kind=info.kind, cache=False)
        graph = traced.graph
        cluster = TorchTestbed.placeholder_cluster(n, info.memory_bytes, kind=info.kind)
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
        # the op times, and the one-device step they were taken in: the reference speed
        graph, reference = timed_ops(traced.graph, testbed, repeats=rounds, progress=say)
        cluster = TorchTestbed.placeholder_cluster(n)
    if n > 1:
        say("measuring the links", 0, 1)
        latency, bandwidth = testbed.measure_links()
        cluster = cluster.with_links(
            {(i, j): (latency, bandwidth) for i in range(n) for j in range(n) if i != j})

    def apply(strategy, n_steps, n_warmup):
        return apply_torch(graph, strategy, cluster, steps=n_steps, warmup=n_warmup,
                           testbed=testbed)[0]

    # CPUs: each strategy at the machine's speed when the ops were timed (a GPU: as it is)
    run = probed(apply, single(graph, n) if reference else None, steps, warmup, reference)

    return run_strategies(graph, cluster, run, model=str(model), batch=batch,
                          testbed=testbed.describe(), device_names=[d.name for d in
                                                                    cluster.devices],
                          steps=steps, step_s=0.0, calibration=calibration, rounds=rounds,
                          front_points=front_points, budget=budget, seed=seed,
                          zero_stages=(0, 1, 3), say=say, t0=t0,
                          round_pick="median" if reference else "least",
                          runnable=lambda s: plan_refusal(graph, s, kind) is None)
