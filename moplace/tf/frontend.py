"""From a model to a profiled op graph, and from a profiled graph back to real training steps.

`profile_model` traces a model's training step, measures every op on the first device (one
op at a time), optionally measures transfers between the devices and estimates costs for
device kinds the user does not have, and returns the op graph with the measured cluster.
The graph records where it came from (zoo name or model file, batch size), so
`apply_to_model` can rebuild exactly the same step later and run a strategy on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..core.graph import OpGraph
from ..core.strategy import Strategy
from ..errors import MoplaceError
from ..progress import Report, Ticker
from ..simulator.engine import simulate
from .apply import ApplyResult, apply_strategy
from .devices import available_devices, device_kind, host_cluster
from .modelfile import trace_model
from .profile import profile_step
from .session import session_config
from .source import profiled_source
from .trace import TracedStep


@dataclass
class ProfiledModel:
    """The op graph, the cluster of the devices used (links measured when there are several),
    the traced step, and how long tracing and profiling took (seconds)."""

    graph: OpGraph
    cluster: object
    traced: TracedStep
    trace_seconds: float
    profile_seconds: float


def profile_model(model_or_path: str, batch_size: int, *, device_count: int = 1, steps: int = 5,
                  warmup: int = 2, estimate_kinds=(), measure_links: bool = True,
                  part_counts=(), progress: Report | None = None, testbed=None) -> ProfiledModel:
    """Trace, profile and convert ``model_or_path``; see the module docstring.

    ``part_counts``: also profile at batch / n for each n, so that batch splits of the
    splittable ops get measured part costs (n must divide the batch size).
    ``progress(stage, done, total)`` (see `moplace.progress`) hears of every trace, step run
    and link measured. ``testbed`` (a `moplace.tf.testbed.Testbed`): profile on its first
    worker and measure the links between its workers (``device_count`` is then its size).
    """
    for n in part_counts:
        if n < 2 or batch_size % n:
            raise MoplaceError(f"part count {n} must be >= 2 and divide the batch size {batch_size}")
    from .convert import to_op_graph

    devices = testbed.devices if testbed is not None else available_devices(device_count)
    target = testbed.target if testbed is not None else ""
    links = len(devices) * (len(devices) - 1) if measure_links and len(devices) > 1 else 0
    per_profile = 1 + warmup + 2 * steps  # a trace and its steps
    ticker = Ticker(progress, per_profile * (1 + len(part_counts)) + bool(part_counts)
                    + bool(estimate_kinds) + links)

    def traced_at(batch: int) -> TracedStep:
        ticker.stage(f"tracing at batch {batch}")
        traced = trace_model(model_or_path, batch)
        ticker.tick()
        return traced

    def profiled(traced: TracedStep, batch: int):
        ticker.prefix = f"batch {batch}: " if part_counts else ""
        out = profile_step(traced, steps=steps, warmup=warmup, ticker=ticker, target=target,
                           config=session_config(inter_op_threads=1),
                           graph_def=on_device(traced.graph_def, devices[0]) if target else None)
        ticker.prefix = ""
        return out

    t0 = time.perf_counter()
    traced = traced_at(batch_size)
    t1 = time.perf_counter()
    profile = profiled(traced, batch_size)
    kind = testbed.workers[0].kind if testbed is not None else device_kind(devices[0])
    extra = None
    if estimate_kinds:
        ticker.stage(f"estimating {', '.join(estimate_kinds)}")
        extra = _estimates(traced, estimate_kinds)
        ticker.tick()
    parts = {n: profiled(traced_at(batch_size // n), batch_size // n).node_seconds
             for n in part_counts}
    traced = traced_at(batch_size) if parts else traced  # names as profiled
    # what a step costs beyond its ops (session.run, feeding, fetching): not simulated, so
    # recorded for reports that want to compare absolute step times
    overhead = max(profile.step_median_s - sum(profile.node_seconds.values()), 0.0)
    graph = to_op_graph(traced, profile.node_seconds, kind, extra_compute=extra,
                        part_seconds=parts, metadata={
        "measured": {"kind": kind, "device": devices[0], "steps": steps, "warmup": warmup,
                     "step_median_s": profile.step_median_s, "step_overhead_s": overhead,
                     "nested_nodes_credited": profile.nested_nodes,
                     "tracing_correction": profile.tracing_correction,
                     # kernels' temporary buffers, which the simulator's liveness peak leaves out
                     "scratch_bytes": {n: b for n, b in sorted((profile.node_scratch or {}).items())
                                       if b > 0},
                     "part_counts": sorted(parts),
                     **({"testbed": {"workers": testbed.count, "gpus": testbed.gpus,
                                     "threads": testbed.threads, "setup": testbed.describe()}}
                        if testbed is not None else {})},
        "estimated": {k: "roofline from op shapes (moplace.costs.analytic)" for k in estimate_kinds}})
    cluster = testbed.cluster() if testbed is not None else host_cluster(devices)
    if measure_links and len(devices) > 1:
        from .commprofile import profile_cluster
        cluster, _ = profile_cluster(devices, base=cluster, ticker=ticker, target=target)
    return ProfiledModel(graph, cluster, traced, t1 - t0, time.perf_counter() - t1)


def apply_to_model(graph: OpGraph, strategy: Strategy, cluster, *, steps: int = 10,
                   warmup: int = 2, traced: TracedStep | None = None,
                   progress: Report | None = None, testbed=None) -> tuple[ApplyResult, float]:
    """Run ``strategy`` for real on the model ``graph`` was profiled from; returns the result
    and the simulator's runtime for the same strategy on ``cluster``. ``progress``: see
    `apply_strategy`. ``testbed``: run on its workers (as many as ``cluster`` has devices)."""
    if traced is None:
        if progress is not None:
            progress("tracing the model", 0, warmup + steps + 1)
        traced = rebuild_traced(graph)
    if testbed is not None and testbed.count != cluster.n_devices:
        raise MoplaceError(f"the cluster has {cluster.n_devices} devices but the testbed "
                           f"{testbed.count} workers")
    devices = testbed.devices if testbed is not None else available_devices(cluster.n_devices)
    trace = simulate(graph, cluster, strategy)
    return apply_strategy(traced, graph, strategy, trace, devices, steps=steps, warmup=warmup,
                          progress=progress, target=testbed.target if testbed else ""), \
        trace.makespan


def on_device(graph_def, device: str):
    """A copy of ``graph_def`` with every node on ``device``."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    for node in out.node:
        node.device = device
    return out


def rebuild_traced(graph: OpGraph) -> TracedStep:
    """Trace again the model that ``graph`` was profiled from (zoo name or file, batch)."""
    return trace_model(*profiled_source(graph))


def _estimates(traced: TracedStep, kinds) -> dict[str, dict[str, float]]:
    from .estimate import estimate_node_seconds

    return estimate_node_seconds(traced, kinds)
