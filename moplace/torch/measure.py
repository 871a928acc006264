"""Measure a traced step's aten ops on a GPU or this machine's CPU with ``torch.profiler``.

The model is built for real on the device (`moplace.torch.realstep`: a model file's
``build(batch_size)`` moved there, an ``hf:`` model's random weights allocated there), and the
very graph the tracer exported (`moplace.torch.trace`) runs on its parameters and batch, its
factory ops' ``device=cpu`` pointed at the device (`moplace.torch.device.on_device`), each node
inside a ``record_function`` named after it, so the profiler's time per node is the time of
that op of the graph, nothing to match by guesswork.

On a GPU a node's time is the device time of the kernels its range launched: the profiler's
``device_time_total`` of the range's CPU-side event, which sums the kernels of the ops inside
it (torch/autograd/profiler_util.py, the same in torch 2.11 and 2.13). The event list is read
rather than ``key_averages()``, which would add the range's GPU-side copy (a
``gpu_user_annotation`` of the same name, where the profiler records one) to it and count the
time twice. CUDA events around each node give a cross-check (kernels plus the gaps of a
Python interpreter launching them). On a CPU a node's time is its range's CPU time.

The optimizer's step, which the graph does not hold, is timed as a whole and shared among the
update ops by their weights' bytes. The real training step (forward, backward, optimizer step)
is timed too (CUDA events, median) with its peak memory: the simulator's one-device step and
peak on these times are held against them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys

from ..errors import MoplaceError
from ._torch import torch
from .device import device_info, on_device, oom_message, requested_bytes
from .realstep import build_real, time_steps
from .trace import TracedTorchStep

PREFIX = "moplace::"


@dataclasses.dataclass
class Measured:
    """Seconds per graph node (mean over the profiled runs), of the optimizer's step, and of a
    whole real training step (median), where and how they were measured."""

    node_seconds: dict
    optimizer_seconds: float
    step_seconds: float
    steps: int
    threads: int
    kind: str = "cpu"  # the device kind the graph's measured times are filed under
    device_name: str = ""
    memory_bytes: int = 0  # the device's
    peak_bytes: int | None = None  # max_memory_allocated over the real steps (GPU only)
    kernel_sum_s: float = 0.0  # the nodes' times summed
    stream_sum_s: float = 0.0  # CUDA events around each node, summed (GPU only)
    spread_s: tuple = ()
    #: micro-batches -> the real step run as that many, accumulating gradients
    #: (`moplace.torch.realstep.StepTimes`), or why it could not run
    plans: dict = dataclasses.field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        """Whether a GPU measured it."""
        return self.kind != "cpu"

    def metadata(self) -> dict:
        """What the graph's ``metadata.measured`` says of this measurement."""
        how = ("torch.profiler device time (kernels) of each node's record_function range; "
               "real step by CUDA events" if self.on_gpu else
               "torch.profiler CPU time of each node's record_function range; real step by "
               "the wall clock")
        out = {"kind": self.kind, "device": self.device_name, "torch": torch.__version__,
               "how": how + "; the optimizer's step timed whole, shared by bytes",
               "steps": self.steps, "threads": self.threads,
               "step_median_s": self.step_seconds, "optimizer_s": self.optimizer_seconds,
               "kernel_sum_s": self.kernel_sum_s}
        if self.on_gpu:
            out.update(memory_bytes=self.memory_bytes, peak_bytes=self.peak_bytes,
                       stream_sum_s=self.stream_sum_s)
        return out


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
    """Runs the graph node by node, each call in a profiler range named after its node; with
    ``events`` (a dict), CUDA events around each call too."""

    events = None

    def run_node(self, n):
        if n.op != "call_function":
            return super().run_node(n)
        if self.events is not None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = super().run_node(n)
            end.record()
            self.events[n.name] = (start, end)
            return out
        with torch.profiler.record_function(PREFIX + n.name):
            return super().run_node(n)


def measure(setup, batch_size: int, traced: TracedTorchStep, *, device: str = "cpu",
            steps: int = 3, warmup: int = 1, ticker=None, micro_batches=(),
            step_runs: int | None = None) -> Measured:
    """Time every node of ``traced`` and the real step of ``setup`` (the fake-built model the
    trace came from) on ``device`` (``cuda`` or ``cpu``), the real step over ``step_runs``
    (default: ``steps``, at least 3); with ``micro_batches`` (counts above 1) also the real
    step run as that many micro-batches accumulating their gradients (``Measured.plans``; one
    that does not fit the GPU says so there). ``ticker`` (a `moplace.progress.Ticker`) hears
    of each stage. A model whose single step does not fit the GPU is a `MoplaceError` saying
    how much it held and asked for."""
    info = device_info(device)
    say = ticker.stage if ticker is not None else (lambda name: None)
    cuda = info.device.startswith("cuda")
    stage, real = "building the model", None
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    try:
        say(f"building the model for real on {info.name}")
        real = build_real(setup, batch_size, info.device)
        stage = "running the traced graph"
        say(f"timing every op of the graph on {info.name} ({steps} runs)")
        seconds, stream = _time_nodes(real, traced, info.device, steps, warmup)
        stage = "the real training step"
        say(f"timing the real step on {info.name}")
        runs = step_runs or max(steps, 3)
        times = time_steps(real, steps=runs, warmup=warmup)
        plans = {1: times}
        for k in micro_batches:
            say(f"timing the real step as {k} micro-batches on {info.name}")
            plans[k] = _plan(real, runs, warmup, k, info)
    except torch.cuda.OutOfMemoryError as exc:
        held = int(torch.cuda.max_memory_allocated()) if cuda else 0
        failed = oom_message(f"{setup.source} at batch {batch_size}", info, stage, held,
                             requested_bytes(str(exc)))
    else:
        failed = None
    real = None
    _let_go(cuda)
    if failed:  # raised past the except block: no context holding the frames' tensors
        raise MoplaceError(failed)
    return Measured(seconds, times.optimizer_s, times.step_s, steps, torch.get_num_threads(),
                    info.kind, info.name, info.memory_bytes, times.peak_bytes,
                    float(sum(seconds.values())), stream, times.spread_s, plans)


def _let_go(cuda: bool) -> None:
    """Free what a measurement allocated (reference cycles of a model and its optimizer
    included) and hand the GPU's cached blocks back."""
    import gc

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def _plan(real, runs: int, warmup: int, k: int, info):
    """The real step as ``k`` micro-batches (`time_steps`), or why it did not run."""
    if real.y.shape[0] % k:
        return f"a batch of {real.y.shape[0]} does not make {k} equal micro-batches"
    try:
        return time_steps(real, steps=runs, warmup=warmup, micro_batches=k)
    except torch.cuda.OutOfMemoryError as exc:
        asked = requested_bytes(str(exc))
        del exc
        torch.cuda.empty_cache()
        return (f"out of memory on the {info.name}"
                + (f" (asked for {asked / 2**30:.2f} GiB more)" if asked else ""))


def _time_nodes(real, traced, device: str, steps: int, warmup: int) -> tuple[dict, float]:
    """Seconds per node of ``traced`` run on ``real``'s tensors (mean over ``steps`` profiled
    runs), and on a GPU the sum of CUDA events around each node (one more run)."""
    args = []
    inputs = iter((*real.x, real.y))
    for node in traced.graph.nodes:
        if node.op != "placeholder":
            continue
        name = traced.parameters.get(node.name)
        args.append(next(inputs) if name is None else real.parameters_by_name(name))
    cuda = device.startswith("cuda")
    runner = _Timed(on_device(traced.module, device) if cuda else traced.module)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.no_grad():
        for _ in range(warmup):
            runner.run(*args)
        with _native_stderr_silenced(), torch.profiler.profile(activities=activities) as prof:
            for _ in range(steps):
                runner.run(*args)
            if cuda:
                torch.cuda.synchronize()
        stream = 0.0
        if cuda:
            runner.events = {}
            runner.run(*args)
            torch.cuda.synchronize()
            stream = sum(a.elapsed_time(b) for a, b in runner.events.values()) * 1e-3
    return _node_seconds(prof.events(), cuda), stream


def _node_seconds(events, device_time: bool) -> dict:
    """Per node: its ranges' time (device time of their kernels, or CPU time) over the runs
    that profiled it, in seconds. Only the ranges' CPU-side events count: a GPU-side copy of a
    range (``gpu_user_annotation``) would count the same kernels again."""
    from torch.autograd import DeviceType

    total: dict = {}
    count: dict = {}
    for event in events:
        if not event.name.startswith(PREFIX) or event.device_type != DeviceType.CPU:
            continue
        name = event.name[len(PREFIX):]
        total[name] = total.get(name, 0.0) + (event.device_time_total if device_time
                                              else event.cpu_time_total)
        count[name] = count.get(name, 0) + 1
    return {name: total[name] / count[name] * 1e-6 for name in total}
