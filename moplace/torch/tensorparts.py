"""Tensor-parallel parts as a rank of the PyTorch testbed runs them (`moplace.torch.applyrun`):
what part k holds of each node of a block is found beforehand (`moplace.torch.tensorprobe`);
here its nodes run on the part's pieces, the sizes the trace wrote for the whole made the
part's (`local_args`), its weights are the rank's own shards, updated there and gathered whole
only to report them (`TensorShards`).
"""

from __future__ import annotations

from ._torch import torch
from .tensorprobe import run_indices, run_size

dist = torch.distributed

#: kernels that take the output's sizes, and the position of that argument
SIZED = {"aten.view.default": 1, "aten._unsafe_view.default": 1, "aten.reshape.default": 1,
         "aten.expand.default": 1, "aten.new_empty.default": 1, "aten.new_zeros.default": 1,
         "aten.new_ones.default": 1, "aten.new_full.default": 1, "aten.zeros.default": 0,
         "aten.ones.default": 0, "aten.empty.memory_format": 0, "aten.full.default": 0,
         "aten.select_backward.default": 1, "aten.slice_backward.default": 1}
SPLITS = frozenset({"aten.split.Tensor", "aten.split_with_sizes.default"})
#: kernels that add a term once to what they compute: a partial sum's parts but one leave it out
BIASED = frozenset({"aten.addmm.default", "aten.baddbmm.default"})


def local_args(target: str, args, kwargs, row, lay, part: int, rows: dict):
    """``args`` and ``kwargs`` of a node (``row`` as traced) for part ``part`` of layout
    ``lay``: an output size of the whole made the part's (a shard holds ``runs[part]`` along
    its dimension); a split of a dimension the part holds less of, cut in proportion; a row
    linear's bias added by the first part only (the parts' sums are added up). ``rows``: the
    traced nodes, for the inputs' whole sizes."""
    if lay.kind == "shard" and target in SIZED:
        k = SIZED[target]
        local = list(row.shape)
        local[lay.dim] = run_size(lay.runs[part])
        sizes = args[k]
        if isinstance(sizes, (list, tuple)) and len(sizes) == len(local):
            args = list(args)
            args[k] = [v if v == -1 else local[i] for i, v in enumerate(sizes)]
    elif target in SPLITS and isinstance(args[0], torch.Tensor):
        dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
        whole = rows[row.args[0].name].shape[dim]
        mine = args[0].shape[dim]
        if mine != whole:
            args = list(args)
            sizes = args[1]
            args[1] = [v * mine // whole for v in sizes] if isinstance(sizes, (list, tuple)) \
                else sizes * mine // whole
    elif lay.kind == "tpartial" and part > 0 and target in BIASED:
        kwargs = {**kwargs, "beta": 0}
    return args, kwargs


def join_shards(pieces, dim: int, runs, shape, dtype):
    """The whole value of ``shape`` from the parts' ``pieces`` (part q holding ``runs[q]``
    along ``dim``)."""
    out = torch.empty(shape, dtype=dtype, device=pieces[0].device)
    for piece, r in zip(pieces, runs):
        out.index_copy_(dim, run_indices(r).to(out.device), piece)
    return out


class TensorShards:
    """The weights this rank holds a tensor-parallel shard of (parameter name -> [leaf, dim,
    runs of every part, this rank's part, the parts' devices]), cut from ``weights`` (the
    rank's copy of the model's) when first read."""

    def __init__(self, weights: dict):
        self.weights = weights
        self.held: dict = {}

    def weight(self, param: str, lay, part: int):
        held = self.held.get(param)
        if held is None:
            whole = self.weights[param].detach()
            leaf = whole.index_select(lay.dim,
                                      run_indices(lay.runs[part]).to(whole.device)).clone()
            held = self.held[param] = [leaf, lay.dim, lay.runs, part, lay.devices]
        return held[0].detach()

    def unshard(self, groups: dict) -> None:
        """Every shard gathered whole into its weight, on every rank of its parts."""
        for param in sorted(self.held):
            leaf, dim, runs, part, devices = self.held[param]
            order = sorted(devices)
            shapes = []
            for q in range(len(devices)):
                shape = list(leaf.shape)
                shape[dim] = run_size(runs[q])
                shapes.append(shape)
            most = max(torch.Size(s).numel() for s in shapes)
            mine = leaf.detach().reshape(-1)
            mine = torch.cat([mine, mine.new_zeros(most - mine.numel())])
            flat = torch.empty(most * len(devices), dtype=leaf.dtype, device=leaf.device)
            dist.all_gather_into_tensor(flat, mine, group=groups[tuple(order)])
            pieces = []
            for q, d in enumerate(devices):
                at = order.index(d) * most
                pieces.append(flat[at:at + torch.Size(shapes[q]).numel()].view(shapes[q]))
            p = self.weights[param]
            p.data = join_shards(pieces, dim, runs, p.shape, leaf.dtype)
