"""Run a strategy for real on a PyTorch graph: a testbed of K processes joined by
``torch.distributed``, one per device of the cluster, each running its part of the traced
step in the simulator's order (`moplace.torch.applyplan`, `moplace.torch.applyrun`).

On CPUs the processes talk over gloo, each pinned to its share of the cores
(`moplace.testbed.procs`); this is what the tests run. With ``device="cuda"`` each process
runs on a GPU of its own and they talk over NCCL (the same programs; the peak memory of each
measured): a testbed of one runs on a machine with one GPU; several need as many GPUs, which
our GPU machines do not have, so that is written for and not tested.

    result = apply_torch(graph, strategy, cluster, steps=10)
    result.step_seconds, result.losses      # measured; simulate() gives the simulated step

A strategy the testbed cannot run (a batch that does not cut into its parts, a graph traced
for a GPU's attention kernels...) comes back ``expressible=False`` with the reason, before any
process starts. A process that dies stops the others; the error names its rank and its last words.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile

import numpy as np

from ..core.strategy import Strategy
from ..errors import MoplaceError
from ..progress import Ticker
from ..simulator.engine import simulate
from ..testbed.result import ApplyResult
from .applyplan import PlanRefused


def apply_torch(graph, strategy: Strategy, cluster, *, steps: int = 10, warmup: int = 2,
                progress=None, timeout: float = 600.0, seed: int = 0, weights: bool = False,
                testbed=None, time_ops: bool = False,
                device: str = "cpu") -> tuple[ApplyResult, float]:
    """Run ``strategy`` on as many processes as ``cluster`` has devices (``testbed``: a
    `moplace.torch.testbed.TorchTestbed` of that size to run on; default: one started for
    this run on ``device``, ``cpu`` or ``cuda``: a GPU each, NCCL); returns the result
    (``weights``: also ``result.weights``, every parameter after the last step;
    ``time_ops``: also ``result.op_seconds``, op index -> the median over the timed steps of
    its tasks' mean wall-clock seconds on the rank running it; on GPUs the peak memory of
    each) and the simulator's step on ``cluster`` for the strategy as the testbed runs it
    (`testbed_strategy`)."""
    from .applyprep import node_rows, prepare
    from .testbed import TorchTestbed

    if steps < 1:
        raise MoplaceError(f"steps must be at least 1, got {steps}")
    n = cluster.n_devices
    if testbed is not None and testbed.count != n:
        raise MoplaceError(f"the cluster has {n} devices but the testbed {testbed.count} "
                           "processes")
    device = testbed.device if testbed is not None else device
    if testbed is None:
        TorchTestbed.check_device(device, n)
    strategy.validate(graph, n)
    strategy = testbed_strategy(graph, strategy)
    trace = simulate(graph, cluster, strategy)
    ticker = Ticker(progress, warmup + steps + 2)
    ticker.stage("planning each rank's part (tracing the model at each batch it runs at)")
    try:
        programs, source, _, updates, traced = prepare(graph, strategy, trace, n,
                                                       TorchTestbed.trace_kind(device))
    except PlanRefused as exc:
        return ApplyResult(False, str(exc)), trace.makespan
    ticker.tick()
    groups = sorted({step[1].ranks for prog in programs for step in prog.steps
                     if step[0] in ("reduce", "gather", "regather")
                     and len(step[1].ranks) > 1}
                    | {tuple(sorted(s.devices)) for s in strategy.splits.values()
                       if s.dim == "tensor" and s.parts > 1})
    owned: dict = {}
    for prog in programs:
        for step in prog.steps:
            if step[0] == "update" and step[1].part == 0:
                owned.setdefault(prog.rank, []).append(updates[step[1].op])
    main = traced[int(source["batch_size"])]
    job = {"programs": programs, "source": source, "batch": int(source["batch_size"]),
           "micro_batches": int(strategy.micro_batches), "updates": updates, "groups": groups,
           "owned": owned, "seed": seed, "steps": steps, "warmup": warmup, "weights": weights,
           "time_ops": time_ops,
           "rows": {b: node_rows(t) for b, t in traced.items()},
           "parameters": main.parameters, "inputs": list(main.inputs), "loss": main.loss}

    def heard(k, line):
        if k == 0 and line.startswith("step "):
            done = int(line.split()[1].split("/")[0])
            ticker.stage("warm-up steps" if done <= warmup else "timed steps")
            ticker.tick()

    with tempfile.TemporaryDirectory(prefix="moplace-apply-") as job_dir:
        with open(os.path.join(job_dir, "job.pkl"), "wb") as f:
            pickle.dump(job, f)
        own = testbed is None
        if own:
            ticker.stage(f"starting {n} PyTorch processes "
                         f"({'NCCL' if device == 'cuda' else 'gloo'})")
            testbed = TorchTestbed(n, device=device)
        try:
            testbed.run(job_dir, on_line=heard, timeout=timeout)
        finally:
            if own:
                testbed.close()
        result = _collect(job_dir, n, weights, cluster.device_names)
    ticker.tick()
    return result, trace.makespan


def _collect(job_dir: str, n: int, weights: bool, names: list) -> ApplyResult:
    reports = []
    for k in range(n):
        with open(os.path.join(job_dir, f"rank-{k}.json")) as f:
            reports.append(json.load(f))
    per_rank = [r["seconds"] for r in reports]
    steps = [max(col) for col in zip(*per_rank)]
    losses = []
    for step in zip(*(r["losses"] for r in reports)):
        found = [v for rank in step for v in rank]
        losses.append(sum(found) / len(found) if found else float("nan"))
    result = ApplyResult(True, step_seconds=steps, losses=losses, rank_seconds=per_rank)
    result.op_seconds = {int(op): t for r in reports for op, t in r.get("op_seconds", {}).items()}
    result.peak_memory_bytes = {names[k]: int(r["peak_bytes"]) for k, r in enumerate(reports)
                                if r.get("peak_bytes")}  # measured on GPUs only
    if weights:
        import torch

        merged = {}
        for k in range(n):
            merged.update(torch.load(os.path.join(job_dir, f"rank-{k}.pt")))
        result.weights = merged
    return result


def testbed_strategy(graph, strategy: Strategy) -> Strategy:
    """``strategy`` as the testbed runs it: the loss (the ops ``metadata["loss"]`` names)
    whole on the first device of its batch cut. Each part of a cut loss is the mean of its
    samples' losses, as each data-parallel rank computes its own; the testbed sums the
    parts' weight gradients, which would need weighting by the parts' shares. Run whole, it
    sends the parts' log-probabilities to one device, a little more than the simulated plan
    moves (tests/test_torch_apply.py: such plans compute the one-device step)."""
    names = graph.metadata.get("loss")
    ops = [graph.index[x] for x in names if isinstance(x, str) and x in graph.index] \
        if isinstance(names, list) else []
    cut = [i for i in ops if i in strategy.splits and strategy.splits[i].dim == "batch"]
    if not cut:
        return strategy
    placement = np.array(strategy.placement, copy=True)
    for i in cut:
        placement[i] = strategy.splits[i].devices[0]
    splits = {i: s for i, s in strategy.splits.items() if i not in cut}
    return Strategy(placement, strategy.priority, splits, recompute=strategy.recompute,
                    **strategy.options)
