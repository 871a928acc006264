"""Measure every node of a traced training step on the device at hand.

Runs warm-up steps, then several steps with full tracing, and takes per node the median of
its measured time (``all_end_rel`` from `step_stats`: the kernel plus the executor's own work
for the node, in nanoseconds where TensorFlow reports them). Profile with one inter-op thread
so that ops run one at a time and do not inflate each other's times. Nodes that function calls and
loops run inside them (where step stats list them: ``[Func/]<op>/...``) are credited to the op
that runs them; an LSTM's ``While`` loop runs as one kernel (see
`moplace.tf.trace._with_variable_handles`). Nodes that never appear in the step stats did not run (dead branches
TensorFlow prunes); they are reported, not guessed.
"""

from __future__ import annotations

import os
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import MoplaceError
from ..progress import Ticker
from .memory import node_scratch
from .session import StepRunner, session_config
from .trace import TracedStep


class ProfileError(MoplaceError):
    """Profiling cannot give per-node times for the traced graph."""


@dataclass(frozen=True)
class StepProfile:
    """Median seconds per node (from traced steps), the device they ran on, and the wall
    times of as many untraced steps."""

    node_seconds: dict[str, float]
    node_device: dict[str, str]
    step_seconds: list[float]
    losses: list[float]
    steps: int
    warmup: int
    nested_nodes: int = 0  # nodes per step run inside loops or calls, credited to those ops
    tracing_correction: float = 1.0  # see _tracing_correction
    node_scratch: dict[str, int] | None = None  # bytes a node allocated beyond its outputs

    @property
    def step_median_s(self) -> float:
        return statistics.median(self.step_seconds)


def profile_step(traced: TracedStep, *, steps: int = 5, warmup: int = 2, graph_def=None,
                 config=None, ticker: Ticker | None = None, target: str = "") -> StepProfile:
    """Profile ``traced`` (optionally a placed ``graph_def``) over ``steps`` traced steps.

    ``ticker`` counts ``warmup + 2 * steps`` units: every step run, timed or traced.
    ``target``: run in a session there (a testbed's)."""
    ticker = ticker or Ticker(None, 0)
    names = {n.name for n in (graph_def or traced.graph_def).node}
    owners: dict[str, str | None] = {}
    samples: dict[str, list[float]] = {}
    device: dict[str, str] = {}
    walls, losses = [], []
    nested = 0
    scratch: dict[str, int] = {}
    with StepRunner(traced, graph_def, config=config or session_config(), target=target) as runner:
        ticker.stage("warm-up steps")
        for _ in range(warmup):
            losses.append(runner.step().loss)
            ticker.tick()
        ticker.stage("timed steps")
        for _ in range(steps):  # untraced: tracing itself slows a step down
            step = runner.step()
            walls.append(step.seconds)
            losses.append(step.loss)
            ticker.tick()
        ticker.stage("traced steps")
        for _ in range(steps):
            with quiet_stderr():
                result = runner.step(trace=True)
            losses.append(result.loss)
            ticker.tick()
            this_step: dict[str, list[tuple[int, int]]] = {}
            for dev in result.metadata.step_stats.dev_stats:
                for ns in dev.node_stats:
                    _check_not_rewritten(ns)
                    owner = owners.get(ns.node_name, "")
                    if owner == "":
                        owner = owners[ns.node_name] = _owner(ns.node_name, names)
                    if owner is None:  # the executor's own _SOURCE, _arg_*, _retval_*
                        continue
                    nested += owner != ns.node_name
                    this_step.setdefault(owner, []).append(_interval(ns))
                    device[owner] = dev.device
                    extra = node_scratch(ns)
                    if extra > scratch.get(owner, 0):
                        scratch[owner] = extra
            for name, intervals in this_step.items():
                samples.setdefault(name, []).append(_covered_seconds(intervals))
    seconds = {n: statistics.median(v) for n, v in samples.items()}
    correction = _tracing_correction(seconds, walls)
    seconds = {n: t * correction for n, t in seconds.items()}
    return StepProfile(seconds, device, walls, losses, steps, warmup, nested // max(steps, 1),
                       correction, scratch)



def _tracing_correction(seconds: dict[str, float], walls: list[float]) -> float:
    """Factor (<= 1) that brings traced node times back within the untraced step.

    Ops run one at a time while profiling, so their true times cannot add up to more than an
    untraced step. Tracing costs time per recorded node, which matters when loops run
    thousands of nodes per step (an LSTM); then the times are scaled down in proportion.
    """
    total = sum(seconds.values())
    wall = statistics.median(walls) if walls else 0.0
    return wall / total if total > wall > 0 else 1.0


def _owner(name: str, names: set[str]) -> str | None:
    """The graph node a step-stats node belongs to: itself, or for the nodes a loop or a
    function call runs inside (named ``[Func/]<node>/...``) the longest node name before them."""
    if name in names:
        return name
    parts = name.removeprefix("Func/").split("/")
    for k in range(len(parts) - 1, 0, -1):
        prefix = "/".join(parts[:k])
        if prefix in names:
            return prefix
    return None


def _check_not_rewritten(ns) -> None:
    # oneDNN fuses nodes (Conv2D + BiasAdd run under the BiasAdd's name), so times would be
    # credited to the wrong ops; it is on when TensorFlow was imported before moplace.tf
    if "= _Mkl" in ns.timeline_label:
        raise ProfileError(
            f"TensorFlow rewrote node {ns.node_name!r} with oneDNN "
            f"({ns.timeline_label.split('=')[1].split('(')[0].strip()}), so measured times "
            "would not match the graph's ops; set TF_ENABLE_ONEDNN_OPTS=0 before TensorFlow is "
            "imported (import moplace.tf before keras or tensorflow)")


def _interval(ns) -> tuple[int, int]:
    """(start, end) in nanoseconds of a node: from the executor starting it to its outputs
    being ready, i.e. the kernel plus the executor's own work for the node."""
    if ns.all_start_nanos:
        return ns.all_start_nanos, ns.all_start_nanos + ns.all_end_rel_nanos
    start = ns.all_start_micros * 1000
    return start, start + ns.all_end_rel_micros * 1000


def _covered_seconds(intervals: list[tuple[int, int]]) -> float:
    """Seconds covered by the union of ``intervals``: nodes of one loop may overlap or be
    interleaved with other ops, and neither may be counted twice."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total * 1e-9


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
