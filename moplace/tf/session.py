"""Run a traced training step in a `tf.compat.v1.Session`, as it is, placed or ordered.

Grappler and constant folding are off, so the nodes that run are the nodes of the GraphDef
and their names match the op graph. Every variable is loaded with the model's values before
the first step, so each `StepRunner` starts from the same weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import MoplaceError
from ._tf import tf
from .trace import TracedStep


#: how often a step aborted by a testbed worker is run again (see StepRunner._run)
RETRIES = 3


class StepRunError(MoplaceError):
    """A training step failed to run; the message names the op where TensorFlow says."""


@dataclass
class StepResult:
    """One step: wall seconds, the loss, and the RunMetadata when traced."""

    seconds: float
    loss: float
    metadata: object | None


def session_config(*, inter_op_threads: int = 0, intra_op_threads: int = 1):
    """A session config with graph rewriting off (node names must survive)."""
    cfg = tf.compat.v1.ConfigProto(allow_soft_placement=False, log_device_placement=False)
    # a v1 Session sees as many CPU devices as device_count says, whatever tf.config split
    cfg.device_count["CPU"] = max(len(tf.config.list_logical_devices("CPU")), 1)
    cfg.graph_options.rewrite_options.disable_meta_optimizer = True
    cfg.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    cfg.graph_options.optimizer_options.do_constant_folding = False
    cfg.inter_op_parallelism_threads = inter_op_threads
    cfg.intra_op_parallelism_threads = intra_op_threads
    return cfg


class StepRunner:
    """Imports ``graph_def`` (default: the traced one), loads variables, runs steps; in a
    session on ``target`` when given (a `moplace.tf.testbed.Testbed`'s)."""

    def __init__(self, traced: TracedStep, graph_def=None, *, config=None, target: str = ""):
        self.traced = traced
        self.target = target
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.compat.v1.import_graph_def(graph_def or traced.graph_def, name="")
            init_ops, init_feeds = self._initializers()
        self.session = tf.compat.v1.Session(target, graph=self.graph, config=config or session_config())
        self._run(init_ops, init_feeds)
        g = self.graph
        self.feeds = {g.get_tensor_by_name(f"{name}:0"): value for name, value in traced.feeds.items()}
        self.fetch = g.get_tensor_by_name(traced.fetches[0])
        self.targets = [g.get_operation_by_name(name) for name in traced.targets]

    def _initializers(self):
        ops, feeds = [], {}
        for name, info in self.traced.variables.items():
            value = tf.compat.v1.placeholder(tf.as_dtype(info.dtype), info.shape)
            handle = self.graph.get_tensor_by_name(f"{name}:0")
            with tf.control_dependencies(None), self.graph.colocate_with(handle.op):
                ops.append(tf.raw_ops.AssignVariableOp(resource=handle, value=value))
            feeds[value] = info.value
        return ops, feeds

    def variable_values(self) -> dict[str, np.ndarray]:
        """The current value of every variable (weights and optimizer state), by node name."""
        if not hasattr(self, "_reads"):
            with self.graph.as_default():
                self._reads = {}
                for name, info in self.traced.variables.items():
                    handle = self.graph.get_tensor_by_name(f"{name}:0")
                    with tf.control_dependencies(None), self.graph.colocate_with(handle.op):
                        self._reads[name] = tf.raw_ops.ReadVariableOp(
                            resource=handle, dtype=tf.as_dtype(info.dtype))
        return self._run(self._reads, {})

    def step(self, *, trace: bool = False) -> StepResult:
        """Run one training step (the update included); ``trace`` collects step stats."""
        options = metadata = None
        if trace:
            options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
            metadata = tf.compat.v1.RunMetadata()
        t0 = time.perf_counter()
        loss, _ = self._run([self.fetch, self.targets], self.feeds, options, metadata)
        return StepResult(time.perf_counter() - t0, float(np.mean(loss)), metadata)

    def _run(self, fetches, feeds, options=None, metadata=None):
        for attempt in range(RETRIES + 1):
            try:
                return self.session.run(fetches, feeds, options=options, run_metadata=metadata)
            except tf.errors.OpError as exc:
                # a loaded testbed: gRPC may deliver a retried RunGraph twice, and the worker
                # aborts the step; it is run again (a timing is taken of a whole step only)
                if isinstance(exc, tf.errors.AbortedError) and self.target and attempt < RETRIES:
                    continue
                node = getattr(exc, "op", None)
                where = f" at op {node.name!r} ({node.type})" if node is not None else ""
                raise StepRunError(f"TensorFlow failed to run {self.traced.name!r}{where}: "
                                   f"{_first_detail(exc.message)}") from None

    def close(self) -> None:
        self.session.close()
        if self.target:  # free this run's variables on the workers (the next run loads its own)
            tf.compat.v1.Session.reset(self.target)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _first_detail(message: str) -> str:
    """The informative line of a TensorFlow error (its first line is often a bare header)."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.endswith(":") and not ln.startswith("Detected at")]
    return (useful or lines or ["(no message)"])[0][:400]
