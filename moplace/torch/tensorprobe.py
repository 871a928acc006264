"""What part k of a tensor-parallel block (`moplace.torch.megatron`) holds of each of its
nodes, found by running the step for real (`tensor_specs`), as the PyTorch testbed needs it to
run the block in parts (`moplace.torch.applyrun`).

A block's row-parallel linear cuts its input's features into ``n`` equal runs (Megatron-LM:
part k reads run k and yields a partial sum of the output). What each weight of the block
holds for part k is what run k depends on: the entries whose gradient is not zero, for the
input's run k and for the row linear's output from run k alone (a fused query-key-value
projection so gets its rows of part k's heads in three runs, not one; a key projection's bias,
whose gradient the softmax cancels exactly, takes the runs of the weight that holds its
entries). Then every node of the block, forward and backward, is run again on the block's
weights with part k's entries set to NaN, its inputs from outside the block as the step makes
them: the entries that turn NaN depend on part k (entries no part decides, such as the zeros
of a select's backward, turn NaN for none). A node is, for its parts:

- ``("shard", dim, runs)``: part k holds the entries of ``runs[k]`` (index runs, ``(start,
  stop)`` each) along ``dim``, all of every other dimension (each index along ``dim``
  depends on exactly one part);
- ``("partial",)``: every part holds a partial sum of all of it (what depends on one part
  depends on every part: a row-parallel linear, the gradient of the block's input);
- ``("replica",)``: every part computes all of it (it depends on no weight of the block);
- ``("several",)``: a kernel of several outputs, whose items have specs of their own.

A block that fits none of these (a weight every part uses whole, such as a norm over each
head's features; a node whose entries of part k are not one run set along one dimension) is
refused by name (`PlanRefused`).
"""

from __future__ import annotations

from ..core.recompute import CORE_SUFFIX
from ._torch import torch
from .applytypes import PlanRefused

__all__ = ["tensor_specs", "runs_of", "run_indices", "run_size"]


def runs_of(indices) -> tuple:
    """Sorted ``indices`` as (start, stop) runs."""
    out = []
    for i in sorted(int(v) for v in indices):
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return tuple((a, b) for a, b in out)


def run_size(runs) -> int:
    return sum(b - a for a, b in runs)


def run_indices(runs):
    """The indices of ``runs``, as a tensor."""
    if not runs:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat([torch.arange(a, b) for a, b in runs])


#: kernels whose output's entries are not set
_UNSET = frozenset({"aten.empty_like.default", "aten.empty.memory_format",
                    "aten.new_empty.default", "aten.empty_strided.default"})


def block_name(group: str | None) -> str | None:
    """The tensor-parallel block a co-location group belongs to (``tensor:NAME``, an attention
    core's ``tensor:NAME`` + `CORE_SUFFIX`), or None."""
    if not group or not group.startswith("tensor:"):
        return None
    return group[7:].removesuffix(CORE_SUFFIX)


def blocks_of(infos: list, graph) -> dict:
    """Block name -> the names of its nodes (in graph order)."""
    out: dict = {}
    for n in infos:
        name = block_name(graph.ops[n.op].colocation)
        if name is not None:
            out.setdefault(name, []).append(n.name)
    return out


def tensor_specs(traced, values: dict, weights: dict, infos: list, graph, blocks, n: int) -> dict:
    """Node name -> its spec (module docstring) for ``n`` parts, for every node of the
    ``blocks`` named (`blocks_of`); ``values``: every node's value in a real run of the step
    (`moplace.torch.applyprep.step_values`); ``weights``: placeholder name -> its tensor."""
    fx = {node.name: node for node in traced.graph.nodes}
    info = {i.name: i for i in infos}
    out = {}
    for block, names in blocks.items():
        out.update(_block_specs(block, [fx[m] for m in names], info, graph, values, weights,
                                n))
    return out


def _block_specs(block, nodes, info, graph, values, weights, n) -> dict:
    ops = graph.ops
    rows = [m for m in nodes if m.op == "call_function" and ops[info[m.name].op].partial_sums
            and ops[info[m.name].op].role == "forward" and info[m.name].place == "core"]
    if len(rows) != 1:
        raise PlanRefused(f"tensor-parallel block {block!r} has {len(rows)} row-parallel "
                          "linears: it is not cut on tensor on the testbed")
    row = rows[0]
    params = [m for m in nodes if info[m.name].kind == "param"]
    h = row.args[0 if "addmm" not in str(row.target) else 1]
    width = values[h.name].shape[-1]
    if width % n:
        raise PlanRefused(f"the row-parallel linear {row.name!r} reads {width} features: they "
                          f"do not cut into {n} equal parts")
    owned = _weight_runs(block, nodes, row, h, params, values, weights, n, width)
    masks: dict = {}  # node -> per part: which entries depend on the part's weights
    for k in range(n):
        probe = {}
        for m in params:
            w = weights[m.name].detach().clone()
            dim, runs = owned[m.name]
            mine = torch.zeros(w.shape[dim], dtype=torch.bool)
            mine[run_indices(runs[k])] = True
            shape = [1] * w.dim()
            shape[dim] = -1
            w[mine.view(shape).expand_as(w)] = float("nan")
            probe[m.name] = w
        with torch.no_grad():
            _evaluate(nodes, probe, values)
        for m in nodes:
            v = probe.get(m.name)
            masks.setdefault(m.name, []).append(
                torch.isnan(v) if isinstance(v, torch.Tensor) and v.is_floating_point()
                else v if isinstance(v, (tuple, list)) else None)
    return {name: _spec(name, per) for name, per in masks.items()}


def _weight_runs(block, nodes, row, h, params, values, weights, n, width) -> dict:
    """Per weight of the block: (dim, runs per part): what run k of the row linear's input
    depends on (module docstring)."""
    leaves = {m.name: weights[m.name].detach().clone().requires_grad_(True) for m in params}
    forward = [m for m in nodes if m in _forward_of(row, nodes)]
    found: dict = {m.name: [] for m in params}
    with torch.enable_grad():
        env = dict(leaves)
        _evaluate(forward, env, values)
        hv = env.get(h.name, values[h.name])
        size = width // n
        for k in range(n):
            mask = torch.zeros(width, dtype=hv.dtype)
            mask[k * size:(k + 1) * size] = 1
            args = [hv * mask if a is h else _arg(a, env, values) for a in row.args]
            loss = (hv * mask).sum() + row.target(*args).sum()
            grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True,
                                        retain_graph=True)
            for name, g in zip(leaves, grads):
                if g is None:
                    raise PlanRefused(f"weight {name!r} of tensor-parallel block {block!r} is "
                                      "not read by its forward: not cut on tensor")
                found[name].append(_nonzero_runs(g))
    out, loose = {}, {}
    for name, per in found.items():
        dims = {d for d, _ in per}
        if len(dims) != 1 or None in dims or -1 in dims:
            raise PlanRefused(f"weight {name!r} of tensor-parallel block {block!r} is used "
                              "whole by every part: it is not cut on tensor on the testbed")
        dim = dims.pop()
        runs = [r for _, r in per]
        size = leaves[name].shape[dim]
        (out if _partition(runs, size) else loose)[name] = (dim, runs)
    for name, (dim, runs) in loose.items():
        # a gradient exactly zero by the maths (a key projection's bias: softmax ignores a
        # shift of every key) leaves entries out: take the runs of a weight whose runs cut
        # the same size and hold these
        size = leaves[name].shape[dim]
        like = [r for d, r in out.values() if sum(b - a for a, b in r[0]) * n == size
                and _partition(r, size) and all(_within(mine, theirs)
                                                for mine, theirs in zip(runs, r))]
        if not like:
            raise PlanRefused(f"the parts of weight {name!r} of tensor-parallel block "
                              f"{block!r} do not cut it exactly")
        out[name] = (dim, like[0])
    return out


def _within(runs, outer) -> bool:
    return all(any(a <= c and d <= b for a, b in outer) for c, d in runs)


def _forward_of(row, nodes) -> set:
    """The block's nodes the row linear depends on (its forward), the row included."""
    inside = set(nodes)
    seen, stack = set(), [row]
    while stack:
        m = stack.pop()
        if m in seen or m not in inside:
            continue
        seen.add(m)
        stack.extend(m.all_input_nodes)
    return seen


def _arg(a, env, values):
    return env[a.name] if a.name in env else values[a.name]


def _evaluate(nodes, env: dict, values: dict) -> None:
    """Run ``nodes`` (graph order) into ``env``: inputs from ``env`` where they are (the
    block's), else as the real step made them; placeholders already in ``env``."""
    for m in nodes:
        if m.op != "call_function":
            continue
        fetch = lambda a: env[a.name] if a.name in env else values[a.name]  # noqa: E731
        args = torch.fx.node.map_arg(m.args, fetch)
        kwargs = torch.fx.node.map_arg(m.kwargs, fetch)
        value = m.target(*args, **kwargs)
        if str(m.target) in _UNSET and isinstance(value, torch.Tensor):
            value = value.zero_()  # memory not set: its bits could read as NaN
        env[m.name] = value


def _nonzero_runs(g):
    """(dim, runs) of the entries of ``g`` not zero: the one dimension they do not fill
    (None: they fill every one)."""
    nz = g.detach() != 0
    partial = []
    for d in range(nz.dim()):
        proj = nz.movedim(d, 0).reshape(nz.shape[d], -1).any(1)
        if not bool(proj.all()):
            partial.append((d, runs_of(proj.nonzero().flatten().tolist())))
    if len(partial) != 1:
        return (None, ()) if not partial else (-1, ())
    return partial[0]


def _spec(name, masks):
    """A node's spec from, per part, which of its entries depend on the part's weights."""
    if any(isinstance(m, (tuple, list)) for m in masks):
        return ("several",)  # several outputs: their items have specs
    if any(m is None for m in masks) or not any(bool(m.any()) for m in masks):
        return ("replica",)  # no float, or nothing depends on the block's weights
    if all(torch.equal(m, masks[0]) for m in masks[1:]):
        return ("partial",)  # every entry that depends on one part depends on all
    for d in range(masks[0].dim()):
        proj = [m.movedim(d, 0).reshape(m.shape[d], -1).any(1) for m in masks]
        total = torch.stack(proj).sum(0)
        if bool((total == 1).all()):  # each index along d belongs to exactly one part
            return ("shard", d, tuple(runs_of(p.nonzero().flatten().tolist()) for p in proj))
    raise PlanRefused(f"node {name!r} of a tensor-parallel block is not held by its parts as "
                      "index runs along one dimension: not cut on tensor")


def _partition(runs, size) -> bool:
    """Whether the parts' ``runs`` cut range(``size``) exactly."""
    return sorted(i for r in runs for a, b in r for i in range(a, b)) == list(range(size))
