"""Analytical costs of a traced step's nodes on device kinds the user does not have.

Each TensorFlow op becomes a `moplace.costs.analytic.OpShape` (data inputs and outputs with their
shapes, the attributes the cost rules read); an optimizer apply also gets the size of the
variable it updates, which its resource input does not show.
"""

from __future__ import annotations

from ..costs.analytic import OpShape, estimate_seconds
from ._tf import tf
from .trace import TracedStep

#: Attributes the analytical rules read (see moplace.costs.analytic).
ATTRS = ("data_format", "strides", "padding", "ksize", "dilations", "transpose_a",
         "transpose_b", "adj_x", "adj_y", "is_training", "equation")


def estimate_node_seconds(traced: TracedStep, kinds) -> dict[str, dict[str, float]]:
    """Roofline seconds per node of ``traced`` for each kind in ``kinds``."""
    out: dict[str, dict[str, float]] = {}
    for op in traced.func_graph.get_operations():
        shape = op_shape(op, traced)
        out[op.name] = {kind: float(estimate_seconds(shape, kind)) for kind in kinds}
    return out


def op_shape(op, traced: TracedStep) -> OpShape:
    """The `OpShape` of TensorFlow op ``op`` (resource and variant tensors, and index vectors
    of unknown length, left out)."""
    data = lambda ts: tuple((t.shape.as_list(), t.dtype.name) for t in ts  # noqa: E731
                            if t.dtype not in (tf.resource, tf.variant)
                            and t.shape.is_fully_defined())
    attrs = {a: op.get_attr(a) for a in ATTRS if a in op.node_def.attr}
    variable = _updated_variable(op, traced)
    if variable is not None:
        attrs["param_elements"] = _elements(variable.shape)
        attrs["param_dtype"] = variable.dtype
    return OpShape(op.type, data(op.inputs), data(op.outputs), attrs)


def _updated_variable(op, traced: TracedStep):
    for t in op.inputs:
        if t.dtype == tf.resource and t.op.name in traced.variables:
            return traced.variables[t.op.name]
    return None


def _elements(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
