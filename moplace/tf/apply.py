"""Run a strategy for real: FastT's device placer and order enforcement.

Each node of the traced step is put on its op's device (folded constants follow the op they
were folded into). The order is enforced with control dependencies between consecutive ops
on each device, in the order the simulator started them; that order is a linear extension of
the graph, so the added edges cannot create a cycle. Splits change the graph itself (parts,
slices, concatenations, all-reduces); this version does not rewrite graphs, so a strategy with
splits is reported as not expressible instead of being run as something else.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from ..core.graph import OpGraph
from ..core.strategy import Strategy
from ..errors import MoplaceError
from ..progress import Report, Ticker
from ..simulator.engine import Trace
from .profile import quiet_stderr
from .session import StepRunner, session_config
from .trace import TracedStep


class ApplyError(MoplaceError):
    """A strategy cannot be applied to this model."""


@dataclass
class ApplyResult:
    """What running a strategy for real gave (times in seconds)."""

    expressible: bool
    reason: str = ""
    step_seconds: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    peak_memory_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def measured_step_s(self) -> float | None:
        return statistics.median(self.step_seconds) if self.step_seconds else None

    @property
    def trained(self) -> bool:
        """True when the loss changed over the run (the update ops really ran)."""
        return len(set(np.round(self.losses, 7))) > 1


def apply_strategy(traced: TracedStep, graph: OpGraph, strategy: Strategy, trace: Trace,
                   devices: list[str], *, steps: int = 10, warmup: int = 2,
                   progress: Report | None = None) -> ApplyResult:
    """Place and order ``traced`` as ``strategy`` says (``trace`` is its simulation) and run it.

    ``progress(stage, done, total)`` (see `moplace.progress`) hears of every step run."""
    if steps < 1:
        raise ApplyError(f"steps must be at least 1, got {steps}")
    if strategy.splits:
        names = ", ".join(graph.ops[i].name for i in list(strategy.splits)[:3])
        return ApplyResult(False, f"{len(strategy.splits)} ops are split ({names}, ...): "
                                  "splits cannot be expressed in the real graph yet")
    placed = placed_graph_def(traced, graph, strategy, trace, devices)
    config = session_config(inter_op_threads=max(len(set(strategy.placement.tolist())), 1))
    result = ApplyResult(True)
    ticker = Ticker(progress, warmup + steps + 1)
    ticker.stage("starting the session")
    with StepRunner(traced, placed, config=config) as runner:
        ticker.stage("warm-up steps")
        for _ in range(warmup):
            result.losses.append(runner.step().loss)
            ticker.tick()
        ticker.stage("timed steps")
        for _ in range(steps):
            step = runner.step()
            result.step_seconds.append(step.seconds)
            result.losses.append(step.loss)
            ticker.tick()
        ticker.stage("memory step")
        with quiet_stderr():
            result.peak_memory_bytes = _peak_memory(runner.step(trace=True).metadata)
        ticker.tick()
    return result


def placed_graph_def(traced: TracedStep, graph: OpGraph, strategy: Strategy, trace: Trace,
                     devices: list[str]):
    """A copy of the traced GraphDef with devices set and per-device order enforced."""
    strategy.validate(graph, len(devices))
    nodes = {n.name: n for n in traced.graph_def.node}
    missing = [op.name for op in graph.ops if op.name not in nodes]
    if missing:
        raise ApplyError(f"graph {graph.name!r} does not match the model: op {missing[0]!r} is "
                         f"not in its traced step ({len(missing)} ops missing)")
    out = type(traced.graph_def)()
    out.CopyFrom(traced.graph_def)
    by_name = {n.name: n for n in out.node}
    folded = graph.metadata.get("folded", {}).get("into", {})
    for i, op in enumerate(graph.ops):
        device = devices[int(strategy.placement[i])]
        for name in [op.name, *folded.get(op.name, ())]:
            by_name[name].device = device
    # fed inputs are replaced by their feeds, and variable handles must stay runnable on
    # their own (the variables are loaded through them before the first step): leave both out
    _enforce_order(by_name, graph, strategy, trace, skip=set(traced.feeds) | set(traced.variables))
    return out


def _enforce_order(by_name, graph: OpGraph, strategy: Strategy, trace: Trace, skip) -> None:
    order = np.lexsort((graph.arrays.topo.argsort(), trace.op_start))
    last: dict[int, str] = {}
    for i in order.tolist():
        d = int(strategy.placement[i])
        name = graph.ops[i].name
        if name in skip:
            continue
        if d in last and f"^{last[d]}" not in by_name[name].input:
            by_name[name].input.append(f"^{last[d]}")
        last[d] = name


def _peak_memory(metadata) -> dict[str, int]:
    peaks: dict[str, int] = {}
    for dev in metadata.step_stats.dev_stats:
        for ns in dev.node_stats:
            for mem in ns.memory:
                peaks[dev.device] = max(peaks.get(dev.device, 0), int(mem.peak_bytes))
    return peaks
