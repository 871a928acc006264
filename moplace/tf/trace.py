"""Trace one full training step (forward, gradients, optimizer update) into a GraphDef.

The step is a `tf.function` over one batch. Its variables are captured as resource
placeholders; `trace_training_step` maps each capture back to the Keras variable it stands for
(model weights or optimizer state), so the graph can later run on its own in a
`tf.compat.v1.Session`, with every capture turned into a `VarHandleOp` holding the variable's
value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import MoplaceError
from ._tf import tf


class TraceError(MoplaceError):
    """The model's training step cannot be traced into a static graph."""


@dataclass(frozen=True)
class VariableInfo:
    """A variable the step reads or writes: its node, value, and whether it is optimizer state."""

    node: str
    name: str
    shape: tuple[int, ...]
    dtype: str
    value: np.ndarray
    optimizer_state: bool

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * tf.as_dtype(self.dtype).size


@dataclass
class TracedStep:
    """A traced training step: the GraphDef (captures already turned into `VarHandleOp`s),
    the FuncGraph it came from (for shapes), its variables, input placeholders with one batch
    of data, the fetched loss and the ops that must run (updates)."""

    name: str
    batch_size: int
    graph_def: object
    func_graph: object
    variables: dict[str, VariableInfo]
    feeds: dict[str, np.ndarray]
    fetches: list[str]
    targets: list[str]
    optimizer_scope: str
    source: dict = field(default_factory=dict)
    function: object = None  # the tf.function itself, to time the step as Keras users run it
    batch_axes: dict | None = None  # per node, per output: see moplace.tf.splitrules.batch_axes


def trace_training_step(setup, *, source: dict | None = None) -> TracedStep:
    """Trace ``setup`` (a `moplace.tf.zoo.TrainingSetup`) into a `TracedStep`."""
    model, loss_fn, optimizer = setup.model, setup.loss, setup.optimizer
    x, y = setup.data
    optimizer.build(model.trainable_variables)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    specs = tf.nest.map_structure(lambda a: tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)),
                                  (x, y))
    cf = step.get_concrete_function(*specs)
    graph = cf.graph
    _check_static_shapes(graph)
    flat_data = tf.nest.flatten((x, y))
    feeds = {t.op.name: np.asarray(a) for t, a in zip(cf.inputs[:len(flat_data)], flat_data)}
    variables = _captured_variables(graph, model, optimizer)
    return TracedStep(
        name=setup.name, batch_size=int(np.shape(flat_data[0])[0]),
        graph_def=_with_variable_handles(graph.as_graph_def(), variables), func_graph=graph,
        variables=variables, feeds=feeds, fetches=[t.name for t in graph.outputs],
        targets=[op.name for op in graph.control_outputs],
        optimizer_scope=_optimizer_scope(optimizer), source=dict(source or {}), function=step)


def _captured_variables(graph, model, optimizer) -> dict[str, VariableInfo]:
    optimizer_ids = {id(_tf_variable(v)) for v in optimizer.variables}
    by_handle = {}
    for v in list(model.variables) + list(optimizer.variables):
        tv = _tf_variable(v)
        by_handle[id(tv.handle)] = (v, tv)
    found = {}
    for external, internal in graph.captures:
        if internal.dtype != tf.resource:
            continue
        if id(external) not in by_handle:
            raise TraceError(f"captured resource {internal.op.name!r} is not a variable of the "
                             "model or its optimizer (e.g. a lookup table); it cannot be traced")
        v, tv = by_handle[id(external)]
        found[internal.op.name] = VariableInfo(
            node=internal.op.name, name=tv.name, shape=tuple(int(d) for d in tv.shape),
            dtype=tv.dtype.name, value=np.asarray(tv.numpy()), optimizer_state=id(tv) in optimizer_ids)
    return found


def _tf_variable(v):
    """The `tf.Variable` behind a Keras 3 variable (or the variable itself)."""
    for attr in ("value", "_value"):
        inner = getattr(v, attr, None)
        if isinstance(inner, tf.Variable):
            return inner
    return v


def _with_variable_handles(graph_def, variables: dict[str, VariableInfo]):
    """A copy of ``graph_def`` whose capture placeholders are `VarHandleOp`s, and whose loops
    and conditionals stay single ops.

    A session lowers a functional ``While`` or ``If`` into Switch/Merge/Enter/Exit nodes placed
    one by one; a loop whose nodes then land on two devices exchanges messages at every
    iteration (gnmt's layer split on two worker processes: 3,643 RecvTensor calls and 790 ms a
    step, against 209 calls and 69 ms kept whole). The simulator has a loop as one op on one
    device, and so does the real step with lowering off."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    for node in out.node:
        if "_lower_using_switch_merge" in node.attr:
            node.attr["_lower_using_switch_merge"].b = False
        info = variables.get(node.name)
        if info is None:
            continue
        node.op = "VarHandleOp"
        node.ClearField("attr")
        node.attr["dtype"].type = tf.as_dtype(info.dtype).as_datatype_enum
        node.attr["shape"].shape.CopyFrom(tf.TensorShape(info.shape).as_proto())
        node.attr["shared_name"].s = node.name.encode()
        node.attr["container"].s = b""
    return out


def _check_static_shapes(graph) -> None:
    # gradient code computes small integer index vectors (BroadcastGradientArgs) whose length
    # TensorFlow does not know statically even when the model's shapes are fixed: only data
    # tensors (floating point) must have static shapes
    for op in graph.get_operations():
        for t in op.outputs:
            if t.dtype.is_floating and not t.shape.is_fully_defined():
                raise TraceError(f"dynamic shapes are not supported: {op.type} op {op.name!r} "
                                 f"has output shape {t.shape}; give the model fixed input shapes")


def _optimizer_scope(optimizer) -> str:
    return str(getattr(optimizer, "name", "") or type(optimizer).__name__).lower()
