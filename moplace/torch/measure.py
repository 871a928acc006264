"""Measure a traced step's aten ops on this machine's CPU with ``torch.profiler``.

The model file is built for real (its weights allocated: for models that fit in memory), and
the very graph the tracer exported (`moplace.torch.trace`) runs on its parameters and batch,
each node inside a ``record_function`` named after it, so the profiler's time per node is the
time of that op of the graph, nothing to match by guesswork. The optimizer's step, which the
graph does not hold, is timed as a whole and shared among the update ops by their weights'
bytes. The real training step (forward, backward, optimizer step) is timed too: the
simulator's one-device step on these times is held against it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import sys
import time

from ._torch import torch
from .modelfile import build_model
from .trace import TracedTorchStep

PREFIX = "moplace::"
KIND = "cpu"


@dataclasses.dataclass
class Measured:
    """Seconds per graph node (median over the timed runs), of the optimizer's step, and of a
    whole real training step (median)."""

    node_seconds: dict
    optimizer_seconds: float
    step_seconds: float
    steps: int
    threads: int


@contextlib.contextmanager
def _native_stderr_silenced():
    """The profiler's C++ side writes "profiler_start/stop" lines to the process's stderr
    (file descriptor 2), past Python: sent to /dev/null while it runs. Python's own errors are
    exceptions, not lost."""
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


class _Timed(torch.fx.Interpreter):
    """Runs the graph node by node, each call in a profiler range named after its node."""

    def run_node(self, n):
        if n.op != "call_function":
            return super().run_node(n)
        with torch.profiler.record_function(PREFIX + n.name):
            return super().run_node(n)


def measure(path, batch_size: int, traced: TracedTorchStep, *, steps: int = 3,
            warmup: int = 1) -> Measured:
    """Time every node of ``traced`` and the real step of the model file at ``path``."""
    model, loss_fn, optimizer, x, y = build_model(path, batch_size, meta=False)
    args = []
    inputs = iter((*x, y))
    for node in traced.graph.nodes:
        if node.op != "placeholder":
            continue
        name = traced.parameters.get(node.name)
        if name is None:
            args.append(next(inputs))
        else:
            try:
                args.append(model.get_parameter(name).detach())
            except AttributeError:
                args.append(model.get_buffer(name))
    runner = _Timed(traced.module)
    with torch.no_grad():
        for _ in range(warmup):
            runner.run(*args)
        with _native_stderr_silenced(), torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                runner.run(*args)
    seconds = {}
    for event in prof.key_averages():
        if event.key.startswith(PREFIX):
            seconds[event.key[len(PREFIX):]] = event.cpu_time_total / event.count * 1e-6
    step, opt = [], []
    for k in range(warmup + steps):
        optimizer.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss_fn(model(*x), y).backward()
        t1 = time.perf_counter()
        optimizer.step()
        t2 = time.perf_counter()
        if k >= warmup:
            step.append(t2 - t0)
            opt.append(t2 - t1)
    return Measured(seconds, statistics.median(opt), statistics.median(step), steps,
                    torch.get_num_threads())
