"""Run a strategy for real: FastT's device placer and order enforcement.

Each node of the traced step is put on its op's device (folded constants follow the op they
were folded into). The order is enforced with control dependencies between consecutive ops
on each device, in the order the simulator started them (a split op's parts are ordered as its
tasks). A micro-batched strategy's forward and backward run once per micro-batch
(`moplace.tf.microbatch`; each copy ordered like every task, so the schedule is the
simulator's). Split ops are rewritten into parts first (`moplace.tf.rewrite`), then recomputed
ops cloned (`moplace.tf.recompute`; their clones ordered like every task); an op that cannot be
cut or recomputed as asked makes the strategy not expressible, with a reason naming that op,
and so does a ZeRO stage (not applied here yet). The simulated
order is a linear extension of the task graph, and the rewritten graph's dependencies are the
task graph's, except that a part reading a partial sum (a weight gradient of batch parts)
waits for all of them: a control edge that would close a cycle through such a read is left
out, and counted in the result's ``notes``.
"""

from __future__ import annotations

import numpy as np

from ..core.graph import OpGraph
from ..core.strategy import Strategy
from ..errors import MoplaceError
from ..progress import Report, Ticker
from ..simulator.engine import Trace
from ..testbed.result import ApplyResult
from .memory import device_peaks, largest_scratch
from .microbatch import copied_ops, copy_name, rewrite_micro_batches, split_copies
from .profile import quiet_stderr
from .recompute import recompute_name, rewrite_recompute
from .rewrite import (SplitRefused, part_name, plan_split_ops, rewrite_split_nodes,
                      rewrite_splits)
from .session import StepRunner, session_config
from .trace import TracedStep


class ApplyError(MoplaceError):
    """A strategy cannot be applied to this model."""


def apply_strategy(traced: TracedStep, graph: OpGraph, strategy: Strategy, trace: Trace,
                   devices: list[str], *, steps: int = 10, warmup: int = 2,
                   progress: Report | None = None, target: str = "") -> ApplyResult:
    """Place and order ``traced`` as ``strategy`` says (``trace`` is its simulation) and run it.

    ``progress(stage, done, total)`` (see `moplace.progress`) hears of every step run."""
    if steps < 1:
        raise ApplyError(f"steps must be at least 1, got {steps}")
    try:
        placed, notes = placed_graph_def(traced, graph, strategy, trace, devices)
    except SplitRefused as exc:
        return ApplyResult(False, str(exc))
    config = session_config(inter_op_threads=max(len(set(strategy.placement.tolist())), 1))
    result = ApplyResult(True, notes=notes)
    ticker = Ticker(progress, warmup + steps + 1)
    ticker.stage("starting the session")
    with StepRunner(traced, placed, config=config, target=target) as runner:
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
            metadata = runner.step(trace=True).metadata
        peaks = device_peaks(metadata, devices, _resident(traced, graph, strategy, len(devices)))
        scratch = largest_scratch(metadata, devices)
        result.peak_memory_bytes = {devices[k]: peaks[k] for k in strategy.used_devices}
        result.scratch_bytes = {devices[k]: scratch[k] for k in strategy.used_devices}
        ticker.tick()
    return result


def placed_graph_def(traced: TracedStep, graph: OpGraph, strategy: Strategy, trace: Trace,
                     devices: list[str]):
    """A copy of the traced GraphDef with devices set, split ops rewritten into parts, and
    per-device order enforced; and notes on what could not be kept (see the module
    docstring). `SplitRefused` names an op that cannot be cut as the strategy asks."""
    strategy.validate(graph, len(devices))
    nodes = {n.name: n for n in traced.graph_def.node}
    missing = [op.name for op in graph.ops if op.name not in nodes]
    if missing:
        raise ApplyError(f"graph {graph.name!r} does not match the model: op {missing[0]!r} is "
                         f"not in its traced step ({len(missing)} ops missing)")
    plans = plan_split_ops(traced, graph, strategy) if strategy.splits and \
        not strategy.pipelined else {}
    out = type(traced.graph_def)()
    out.CopyFrom(traced.graph_def)
    by_name = {n.name: n for n in out.node}
    folded = graph.metadata.get("folded", {}).get("into", {})
    for i, op in enumerate(graph.ops):
        device = devices[int(strategy.placement[i])]
        for name in [op.name, *folded.get(op.name, ())]:
            by_name[name].device = device
    if strategy.pipelined:
        rewrite_micro_batches(out, traced, graph, strategy)
        if strategy.splits:
            rewrite_split_nodes(out, *split_copies(out, traced, graph, strategy, devices))
    if plans:
        rewrite_splits(out, traced, graph, strategy, devices, plans)
    if strategy.zero_stage:
        raise SplitRefused(f"ZeRO stage {strategy.zero_stage:g} (sharded optimizer state) is "
                           "not applied on the testbed yet")
    if strategy.recompute:
        rewrite_recompute(out, graph, strategy)
    # fed inputs are replaced by their feeds, and variable handles must stay runnable on
    # their own (the variables are loaded through them before the first step): leave both out
    notes = _enforce_order(out, graph, strategy, trace, skip=set(traced.feeds) | set(traced.variables))
    return out, notes


def _enforce_order(graph_def, graph: OpGraph, strategy: Strategy, trace: Trace, skip) -> list[str]:
    by_name = {n.name: n for n in graph_def.node}
    t = strategy.split_table
    parts = np.ones(len(graph.ops), np.int64)
    parts[t.ops] = t.parts
    first = np.cumsum(parts) - parts
    n = int(parts.sum())
    m = n + trace.n_recomputed  # the recomputed ops' clones come after every op's tasks
    copied = copied_ops(graph) if strategy.pipelined else None
    if strategy.pipelined:  # a task per part of an op's copy, the clones' last
        n = m = int(np.count_nonzero(trace.task_device >= 0))
        key = trace.task_op[:m] * (int(strategy.micro_batches) + 1) + trace.task_micro_batch[:m]
        change = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])  # a copy's parts are a run
        part = np.arange(m) - np.repeat(change, np.diff(np.r_[change, m]))
    task_op = trace.task_op[:m]
    order = np.lexsort((np.arange(m), graph.arrays.topo.argsort()[task_op], trace.task_start[:m]))
    last: dict[int, str] = {}
    added = []
    for task in order.tolist():
        i = int(task_op[task])
        name = graph.ops[i].name
        if copied is not None:
            name = copy_name(name, int(trace.task_micro_batch[task])) if copied[i] else name
            if task >= n - trace.n_recomputed:  # a clone (unsplit: refused otherwise)
                name = recompute_name(name)
            elif parts[i] > 1:
                name = part_name(name, int(part[task]))
        elif task >= n:  # a clone (unsplit: `rewrite_recompute` refuses split ones)
            name = recompute_name(name)
        elif parts[i] > 1:
            name = part_name(name, task - int(first[i]))
        d = int(trace.task_device[task])
        if name in skip:
            continue
        if d in last and f"^{last[d]}" not in by_name[name].input:
            by_name[name].input.append(f"^{last[d]}")
            added.append((last[d], name))
        last[d] = name
    dropped = _drop_cycles(graph_def, by_name, added)
    return [f"{dropped} order edges left out: they would close a cycle through a read of "
            "partial sums"] if dropped else []


def _drop_cycles(graph_def, by_name, added) -> int:
    """Remove added control edges that lie on a cycle; how many were removed."""
    dropped = 0
    while True:
        stuck = _unsorted(graph_def)
        if not stuck:
            return dropped
        bad = [(a, b) for a, b in added if a in stuck and b in stuck]
        if not bad:
            raise ApplyError(f"the rewritten step has a cycle through {sorted(stuck)[0]!r}")
        for a, b in bad:
            by_name[b].input.remove(f"^{a}")
        added = [e for e in added if e not in set(bad)]
        dropped += len(bad)


def _unsorted(graph_def) -> set[str]:
    """Nodes a topological sort of ``graph_def`` cannot reach (those on or after a cycle)."""
    names = {n.name for n in graph_def.node}
    preds = {n.name: {x.lstrip("^").split(":")[0] for x in n.input} & names for n in graph_def.node}
    succs: dict[str, list[str]] = {}
    for name, ps in preds.items():
        for p in ps:
            succs.setdefault(p, []).append(name)
    count = {name: len(ps) for name, ps in preds.items()}
    ready = [name for name, c in count.items() if c == 0]
    while ready:
        name = ready.pop()
        for s in succs.get(name, ()):
            count[s] -= 1
            if count[s] == 0:
                ready.append(s)
    return {name for name, c in count.items() if c > 0}


def _resident(traced: TracedStep, graph: OpGraph, strategy: Strategy, n: int) -> list[int]:
    """Bytes of the variables on each device (they live there all step)."""
    out = [0] * n
    index = graph.index
    for name, info in traced.variables.items():
        if name in index:
            out[int(strategy.placement[index[name]])] += info.nbytes
    return out
