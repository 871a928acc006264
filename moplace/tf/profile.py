"""Measure every node of a traced training step on the device at hand.

Runs warm-up steps, then several steps with full tracing, and takes per node the median of
its measured time (``all_end_rel`` from `step_stats`: the kernel plus the executor's own work
for the node, in nanoseconds where TensorFlow reports them). Profile with one inter-op thread
so that ops run one at a time and do not inflate each other's times. Nodes that never appear in the step stats did not run (dead branches
TensorFlow prunes); they are reported, not guessed.
"""

from __future__ import annotations

import os
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import MoplaceError
from .session import StepRunner, session_config
from .trace import TracedStep


class ProfileError(MoplaceError):
    """Profiling cannot give per-node times for the traced graph."""


@dataclass(frozen=True)
class StepProfile:
    """Median seconds per node, the device they ran on, and step wall times."""

    node_seconds: dict[str, float]
    node_device: dict[str, str]
    step_seconds: list[float]
    losses: list[float]
    steps: int
    warmup: int

    @property
    def step_median_s(self) -> float:
        return statistics.median(self.step_seconds)


def profile_step(traced: TracedStep, *, steps: int = 5, warmup: int = 2, graph_def=None,
                 config=None) -> StepProfile:
    """Profile ``traced`` (optionally a placed ``graph_def``) over ``steps`` traced steps."""
    samples: dict[str, list[float]] = {}
    device: dict[str, str] = {}
    walls, losses = [], []
    with StepRunner(traced, graph_def, config=config or session_config()) as runner:
        for _ in range(warmup):
            losses.append(runner.step().loss)
        for _ in range(steps):
            with quiet_stderr():
                result = runner.step(trace=True)
            walls.append(result.seconds)
            losses.append(result.loss)
            for dev in result.metadata.step_stats.dev_stats:
                for ns in dev.node_stats:
                    _check_not_rewritten(ns)
                    samples.setdefault(ns.node_name, []).append(_node_seconds(ns))
                    device[ns.node_name] = dev.device
    return StepProfile({n: statistics.median(v) for n, v in samples.items()}, device, walls,
                       losses, steps, warmup)


def _check_not_rewritten(ns) -> None:
    # oneDNN fuses nodes (Conv2D + BiasAdd run under the BiasAdd's name), so times would be
    # credited to the wrong ops; it is on when TensorFlow was imported before moplace.tf
    if "= _Mkl" in ns.timeline_label:
        raise ProfileError(
            f"TensorFlow rewrote node {ns.node_name!r} with oneDNN "
            f"({ns.timeline_label.split('=')[1].split('(')[0].strip()}), so measured times "
            "would not match the graph's ops; set TF_ENABLE_ONEDNN_OPTS=0 before TensorFlow is "
            "imported (import moplace.tf before keras or tensorflow)")


def _node_seconds(ns) -> float:
    # all_end_rel: from the executor starting the node to its outputs being ready, i.e. the
    # kernel plus the per-node work of the executor, which the step pays for every op
    if ns.all_end_rel_nanos:
        return ns.all_end_rel_nanos * 1e-9
    return ns.all_end_rel_micros * 1e-6


@contextmanager
def quiet_stderr():
    """Silence TensorFlow's C++ profiler chatter on stderr for the duration."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
