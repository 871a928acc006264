"""One part of an op split on channel, computed from its whole inputs, as the PyTorch testbed
runs it (`moplace.torch.applyrun`): part ``p`` of ``n`` computes channel slice ``p`` of its
output (the simulator's channel split, `moplace.simulator.taskgraph`), cut as
`torch.tensor_split` cuts (the first ``size % n`` parts one larger).

What a channel is, per kernel:

- ``mm``, ``addmm``, ``bmm``, ``baddbmm``: the output's columns (its last dimension), made from
  the second matrix's columns (and the bias's, where it has them);
- ``convolution`` (not transposed, one group): the output's channels (dimension 1), made from
  the weight's filters and the bias's entries;
- ``convolution_backward`` (one group): the input's channels (dimension 1 of the input's and
  the weight's gradients, made from the input's and the weight's channels); the bias's
  gradient needs every output channel, so every part computes it whole;
- scaled dot-product attention on CPU, forward and backward: the heads (dimension 1 of every
  tensor but a mask that has one head), key and value heads cut as the query's (grouped-query
  attention: in as many parts).

An op of another kernel is refused by name before any process starts (`channel_refusal`).
"""

from __future__ import annotations

from ._torch import torch

__all__ = ["channel_dims", "channel_refusal", "channel_part", "piece_sizes"]

_MATMULS = {"aten.mm.default": (1, None), "aten.addmm.default": (2, 0),
            "aten.bmm.default": (1, None), "aten.baddbmm.default": (2, 0)}
_CONV = "aten.convolution.default"
_CONV_BACKWARD = "aten.convolution_backward.default"
_ATTENTION = "aten._scaled_dot_product_flash_attention_for_cpu.default"
_ATTENTION_BACKWARD = "aten._scaled_dot_product_flash_attention_for_cpu_backward.default"
#: per kernel, the dimension each of its outputs is cut along (None: every part holds it whole)
_OUT_DIMS = {_CONV: (1,), _CONV_BACKWARD: (1, 1, None), _ATTENTION: (1, 1),
             _ATTENTION_BACKWARD: (1, 1, 1)}


def piece_sizes(size: int, n: int) -> list[int]:
    """The sizes of the ``n`` parts `torch.tensor_split` cuts ``size`` into."""
    return [size // n + (k < size % n) for k in range(n)]


def _piece(x, dim: int, p: int, n: int):
    return torch.tensor_split(x, n, dim)[p]


def channel_dims(target: str, shapes: list) -> tuple:
    """The dimension each output of kernel ``target`` is cut along (``shapes``: its outputs'
    shapes, as traced)."""
    if target in _MATMULS:
        return (len(shapes[0]) - 1,)
    return _OUT_DIMS[target]


def channel_refusal(target: str, args: tuple, kwargs: dict, parts: int, shape_of) -> str | None:
    """Why the testbed cannot cut kernel ``target`` into ``parts`` channel parts, or None;
    ``shape_of``: an argument's traced shape (None: not a tensor)."""
    if target in _MATMULS:
        return None
    if target in (_CONV, _CONV_BACKWARD):
        groups = args[8] if target == _CONV else args[9]
        transposed = args[6] if target == _CONV else args[7]
        if groups != 1 or transposed:
            return "a grouped or transposed convolution is not cut on channel on the testbed"
        return None
    if target in (_ATTENTION, _ATTENTION_BACKWARD):
        q = 0 if target == _ATTENTION else 1
        heads = [shape_of(args[q + k])[1] for k in range(3)]
        if any(h % parts for h in heads):
            return (f"attention of {heads[0]} query and {heads[1]} key and value heads does not "
                    f"cut into {parts} equal channel parts")
        return None
    return f"kernel {target} is not cut on channel on the testbed"


def channel_part(target: str, fn, args: tuple, kwargs: dict, p: int, n: int):
    """Part ``p`` of ``n`` of kernel ``target`` (callable ``fn``) on whole ``args``."""
    if target in _MATMULS:
        second, bias = _MATMULS[target]
        args = list(args)
        columns = args[second].shape[-1]
        args[second] = _piece(args[second], -1, p, n)
        if bias is not None:
            b = args[bias]
            if isinstance(b, torch.Tensor) and b.dim() >= 1 and b.shape[-1] == columns > 1:
                args[bias] = _piece(b, -1, p, n)
        return fn(*args, **kwargs)
    if target == _CONV:
        args = list(args)
        args[1] = _piece(args[1], 0, p, n)
        if args[2] is not None:
            args[2] = _piece(args[2], 0, p, n)
        return fn(*args, **kwargs)
    if target == _CONV_BACKWARD:
        args = list(args)
        args[1], args[2] = _piece(args[1], 1, p, n), _piece(args[2], 1, p, n)
        return fn(*args, **kwargs)
    if target in (_ATTENTION, _ATTENTION_BACKWARD):
        args = [_piece(a, 1, p, n) if isinstance(a, torch.Tensor) and a.dim() >= 3 else a
                for a in args]
        kwargs = dict(kwargs)
        mask = kwargs.get("attn_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 4 and mask.shape[1] > 1:
            kwargs["attn_mask"] = _piece(mask, 1, p, n)
        return fn(*args, **kwargs)
    raise ValueError(f"kernel {target} is not cut on channel")
