"""Values as a rank of the PyTorch testbed handles them (`moplace.torch.applyrun`): a traced
node's callable, its arguments bound to values, batch slices cut and joined, and values laid
out in memory as the trace has them."""

from __future__ import annotations

from ._torch import torch
from .applyprep import Ref


def resolve_target(name: str):
    """The callable a `moplace.torch.applyprep.Row` names (``aten.mm.default``,
    ``operator.getitem``, ``moplace.moe_dispatch.default``: `moplace.torch.moe`)."""
    import operator

    if name.startswith("operator."):
        return getattr(operator, name.split(".", 1)[1])
    if name.startswith("moplace."):  # a mixture of experts' ops: registered on import
        from . import moe  # noqa: F401
    obj = torch.ops
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def bind(a, values):
    """``a`` (a row's arguments) with each `Ref` replaced by its node's value."""
    if isinstance(a, Ref):
        return values[a.name]
    if isinstance(a, (list, tuple)):
        return type(a)(bind(x, values) for x in a)
    if isinstance(a, dict):
        return {k: bind(v, values) for k, v in a.items()}
    return a


def cut_batch(value, dim: int, outer: int, index: int, count: int):
    """Slice ``index`` of ``count`` of ``value``'s batch along ``dim`` (``outer`` blocks of
    the whole batch each, `moplace.torch.applyprep.batch_layouts`)."""
    if outer == 1:
        size = value.shape[dim] // count
        return value.narrow(dim, index * size, size)
    blocks = value.unflatten(dim, (outer, -1))
    size = blocks.shape[dim + 1] // count
    return blocks.narrow(dim + 1, index * size, size).flatten(dim, dim + 1)


def join_batch(pieces, dim: int, outer: int):
    """The batch slices ``pieces`` joined along ``dim`` (the inverse of `cut_batch`)."""
    if outer == 1:
        return torch.cat(pieces, dim)
    return torch.cat([p.unflatten(dim, (outer, -1)) for p in pieces], dim + 1).flatten(dim,
                                                                                     dim + 1)


def input_shapes(needs, env) -> str:
    """The shapes of the inputs a task's node read (those it made or holds), for an error."""
    held = [env.get((n.source, n.mb, n.pieces[0])) for n in needs]
    return ", ".join(f"{n.node} {tuple(v.shape)}" if isinstance(v, torch.Tensor) else n.node
                     for n, v in zip(needs, held))


def as_traced(value, row):
    """``value`` laid out in memory as ``row`` (the node as traced at that batch) has it: a
    kernel's output depends on its inputs' strides, and a view after it may rely on them,
    while joined and received values are contiguous."""
    if row is None or row.stride is None or not isinstance(value, torch.Tensor) or \
            tuple(value.shape) != row.shape or value.stride() == row.stride or \
            0 in row.stride:
        return value
    return torch.empty_strided(row.shape, row.stride, dtype=value.dtype).copy_(value)


def rows_on_device(rows: dict, device: str) -> dict:
    """``rows`` (name -> `moplace.torch.applyprep.Row`) with every ``torch.device`` among their
    arguments pointed at ``device``: the tracer records factory ops (a causal mask's
    ``arange``, a loss's ``full``) with ``device=cpu`` (as `moplace.torch.device.on_device`
    rewrites a traced module)."""
    import dataclasses

    target = torch.device(device)

    def swap(a):
        return torch.fx.node.map_aggregate(
            a, lambda v: target if isinstance(v, torch.device) else v)

    return {name: dataclasses.replace(row, args=swap(row.args), kwargs=swap(row.kwargs))
            for name, row in rows.items()}
