"""What applying a strategy to a PyTorch graph needs before any process starts: the model the
graph was profiled from, traced again at every batch the plan's tasks run at (the step's batch
over the micro-batches and each split's parts; the same nodes at every batch, only their
sizes differ), each node's op and batch dimension (`NodeInfo`), and every rank's program
(`moplace.torch.applyplan`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.runners import pytorch_refusal
from ..errors import MoplaceError
from ._torch import torch
from .applyplan import NodeInfo, PlanRefused, Task, plan_program


def model_source(graph) -> dict:
    """The model, batch, sequence length, dtype and attention ``graph`` was profiled from."""
    source = graph.metadata.get("source")
    source = dict(source) if isinstance(source, dict) else {}
    if source.get("framework") != "pytorch" or "model" not in source:
        raise MoplaceError(f"graph {graph.name!r} was not profiled from a PyTorch model "
                           "(`moplace profile MODEL.py` or hf:NAME)")
    attention = graph.metadata.get("attention") or {}
    source["attention"] = attention.get("implementation")
    source["kind"] = attention.get("for_kind")
    return source


def load_setup(source: dict, batch: int):
    """The fake-built step of ``source`` (`model_source`) at ``batch``, its mixture-of-experts
    layers under the routing the graph was traced with (`moplace.torch.routing`)."""
    from .routing import routing_from

    model = str(source["model"])
    routing = routing_from(source.get("routing"))
    if model.startswith("hf:"):
        from .hf import load_hf_setup

        impl = source.get("attention")
        return load_hf_setup(model[3:], batch, source.get("seq_len"), source.get("dtype", "fp32"),
                             impl if impl in ("sdpa", "eager") else None, routing)
    from .modelfile import load_setup as from_file

    return from_file(model, batch, routing)


def ordered_tasks(graph, strategy, trace) -> list[Task]:
    """The compute tasks of ``trace`` (``strategy`` simulated on ``graph``) in the order they
    started (ties: the op's topological position, then the task's index)."""
    n_compute = int(np.count_nonzero(trace.task_device >= 0))
    first_clone = n_compute - int(trace.n_recomputed)
    parts_of = {int(i): (split.parts, split.dim) for i, split in strategy.splits.items()}
    mbs = trace.task_micro_batch[:n_compute] if trace.task_micro_batch.size else \
        np.zeros(n_compute, np.int64)
    ops = trace.task_op[:n_compute]
    key = ops * (int(strategy.micro_batches) + 1) + mbs + (np.arange(n_compute) >= first_clone) \
        * (1 << 40)
    change = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    part = np.arange(n_compute) - np.repeat(change, np.diff(np.r_[change, n_compute]))
    topo = graph.arrays.topo.argsort()
    order = np.lexsort((np.arange(n_compute), topo[ops], trace.task_start[:n_compute]))
    out = []
    for t in order.tolist():
        i = int(ops[t])
        clone = t >= first_clone
        parts, dim = parts_of.get(i, (1, "batch"))
        out.append(Task(i, int(mbs[t]), int(part[t]), parts, int(trace.task_device[t]), clone,
                        dim))
    return out


def same_steps(traced: dict, batch: int) -> None:
    """`PlanRefused` unless every step of ``traced`` (batch -> trace) is the one traced at
    ``batch`` with other sizes: the same nodes calling the same ops."""
    mine = [(n.name, str(n.target)) for n in traced[batch].graph.nodes]
    for b, t in traced.items():
        names = [(n.name, str(n.target)) for n in t.graph.nodes]
        if names != mine:
            bad = next((a for a, b2 in zip(mine, names) if a != b2), mine[len(names):][:1])
            raise PlanRefused(f"the step traced at batch {b} is not the step traced at batch "
                              f"{batch} with other sizes (node {bad!r}): its parts cannot run")


def plan_refusal(graph, strategy, kind: str = "cpu") -> str | None:
    """Why the testbed cannot run ``strategy`` on ``graph``, found without planning it
    (`moplace.core.runners.pytorch_refusal`, and the model traced at each batch its tasks
    would run at: another graph at one of them is refused); None when nothing says so."""
    why = pytorch_refusal(graph, strategy)
    if why:
        return why
    source = model_source(graph)
    batch, m = int(source["batch_size"]), int(strategy.micro_batches)
    cuts = {s.parts for s in strategy.splits.values() if s.dim == "batch"} | {1}
    batches = sorted({batch} | {batch // (m * c) for c in cuts if batch % (m * c) == 0},
                     key=lambda b: (b != batch, b))
    try:
        same_steps(trace_batches(source, batches, kind), batch)
    except PlanRefused as exc:
        return str(exc)
    return None


def batches_of(tasks: list[Task], batch: int, micro_batches: int) -> list[int]:
    """The batches the tasks run at, the traced one first."""
    out = {batch}
    for t in tasks:
        out.add(batch // (micro_batches * t.cut))
    return sorted(out, key=lambda b: (b != batch, b))


#: traces and batch layouts kept in this process, by source, batch and kind (a fidelity run
#: applies tens of plans of one model)
_KEPT: dict = {}
_KEEP = 16


def _kept(key, make):
    if key not in _KEPT:
        if len(_KEPT) >= _KEEP:
            _KEPT.pop(next(iter(_KEPT)))
        _KEPT[key] = make()
    return _KEPT[key]


def _source_key(source: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in source.items()))


def trace_batches(source: dict, batches, kind: str = "cpu") -> dict:
    """batch -> the step traced at that batch (its SDPA as ``kind``'s kernels)."""
    from .trace import trace_step

    return {b: _kept(("trace", _source_key(source), b, kind),
                     lambda b=b: trace_step(load_setup(source, b), kind)) for b in batches}


def node_infos(traced: dict, graph, batch: int, layouts: dict | None = None,
               channel: dict | None = None) -> tuple[list[NodeInfo], dict]:
    """The graph's nodes as `NodeInfo` (their ops in ``graph``, batch dimensions found by
    comparing the traces at two batches, their outer factors in ``layouts``,
    `batch_layouts`, their places in their ops and the dimensions a channel split cuts), and
    gradient node -> update op index; ``channel``: op index -> the parts of its channel split
    (`PlanRefused` where the testbed cannot cut its kernel so)."""
    from .convert import _fold, _op_name

    main = traced[batch]
    nodes = [n for n in main.graph.nodes if n.op in ("placeholder", "call_function")]
    rep, _ = _fold(nodes, main)
    other = next((t for b, t in traced.items() if b != batch), None)
    shapes = {}
    if other is not None:
        for n in other.graph.nodes:
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor):
                shapes[n.name] = tuple(val.shape)
    same_steps(traced, batch)
    index = graph.index
    out = []
    for n in nodes:
        kept = rep.get(n)
        if kept is None:
            raise PlanRefused(f"node {n.name!r} of the traced step belongs to no op")
        name = _op_name(kept, main)
        if name not in index:
            raise MoplaceError(f"graph {graph.name!r} does not match the model: op {name!r} is "
                               "not in it (profile the model again)")
        val = n.meta.get("val")
        dim = None
        if isinstance(val, torch.Tensor) and n.name in shapes:
            diff = [k for k, (a, b) in enumerate(zip(val.shape, shapes[n.name])) if a != b]
            dim = diff[0] if diff else None
        kind = "call"
        if n.op == "placeholder":
            kind = "param" if n.name in main.parameters else "input"
        inputs = tuple(dict.fromkeys(a.name for a in n.all_input_nodes))
        outer = 1
        if layouts is not None and dim is not None and kind == "call":
            found = layouts.get(n.name)
            outer = found[1] if found is not None and found[0] == dim else None
        place, cut = _place(n, kept, index[name], channel or {}, graph)
        out.append(NodeInfo(n.name, index[name], inputs, dim, kind, outer, place, cut))
    gradients = {}
    for node, param in main.gradients.items():
        param = main.tied.get(param, param)
        update = f"update/{param}"
        if update not in index:
            raise MoplaceError(f"graph {graph.name!r} has no update op {update!r}")
        gradients[node] = index[update]
    return out, gradients


def _place(n, kept, op: int, channel: dict, graph) -> tuple[str, int | None]:
    """Node ``n``'s place in its op (core, item or view) and, where its op is split on
    channel, the dimension its output is cut along."""
    import operator

    from .channelsplit import channel_dims, channel_refusal

    src = n.all_input_nodes[0] if n.all_input_nodes else None
    core = n if kept is n else kept
    several = isinstance(core.meta.get("val"), (tuple, list))
    item = n.target is operator.getitem and src is kept and several
    place = "core" if kept is n else "item" if item else "view"
    if op not in channel or place == "view" or n.op != "call_function":
        return place, None
    target = str(core.target)
    shape = lambda a: tuple(a.meta["val"].shape) if isinstance(a, torch.fx.Node) and \
        isinstance(a.meta.get("val"), torch.Tensor) else None  # noqa: E731
    why = channel_refusal(target, core.args, core.kwargs, channel[op], shape)
    if why:
        raise PlanRefused(f"op {graph.ops[op].name!r} is split on channel: {why}")
    outs = core.meta["val"] if several else [core.meta["val"]]
    dims = channel_dims(target, [tuple(v.shape) for v in outs])
    if place == "core":
        return place, None if several else dims[0]
    return place, dims[n.args[1]]


@dataclass(frozen=True)
class Ref:
    """A node's output, named, in a `Row`'s arguments."""

    name: str


@dataclass(frozen=True)
class Row:
    """One node of a traced step as a worker runs it without tracing: ``op`` (placeholder or
    call_function), ``target`` (its aten op by name, e.g. ``aten.mm.default``), ``args`` and
    ``kwargs`` (nodes as `Ref`), and its output's ``shape``, ``dtype`` and ``stride`` (a
    tensor's; a kernel may lay its output out other than contiguously, and the views after it
    may rely on that)."""

    op: str
    target: str
    args: tuple
    kwargs: dict
    shape: tuple | None
    dtype: object
    stride: tuple | None = None


def node_rows(traced) -> dict:
    """name -> `Row` for every placeholder and call of ``traced``'s graph (picklable)."""
    def plain(a):
        return torch.fx.node.map_arg(a, lambda n: Ref(n.name))

    rows = {}
    for n in traced.graph.nodes:
        if n.op not in ("placeholder", "call_function"):
            continue
        val = n.meta.get("val")
        tensor = isinstance(val, torch.Tensor)
        target = "" if n.op == "placeholder" else (
            f"operator.{n.target.__name__}" if n.target.__module__ == "_operator"
            else str(n.target))
        rows[n.name] = Row(n.op, target, plain(n.args), plain(n.kwargs),
                           tuple(val.shape) if tensor else None,
                           val.dtype if tensor else None,
                           tuple(val.stride()) if tensor else None)
    return rows


def batch_layouts(traced, source: dict, batch: int, seed: int = 0) -> dict:
    """node -> (batch dimension, outer factor) for every node of ``traced`` (the step at
    ``batch``, at least 2) whose output has a batch dimension: a dimension of ``outer * batch *
    inner`` elements holds sample ``i`` in its ``i``-th block of ``inner`` within each of its
    ``outer`` blocks (1: the batch is outermost, slices are contiguous; a sequence-first
    attention's (tokens x batch) rows have ``outer`` = tokens). Found by running the step for
    real twice, on the batch and on the batch in reverse order: the layout under which the
    second output is the first reversed along the batch. A node no layout explains (an op
    mixing samples) is None."""
    real = real_step(source, batch, seed)
    runs = [step_values(traced, real, flip) for flip in (False, True)]
    out = {}
    for name, a in runs[0].items():
        b = runs[1].get(name)
        if not isinstance(a, torch.Tensor) or not a.is_floating_point() and a.dtype != \
                torch.int64 or b is None or a.shape != b.shape:
            continue
        out[name] = _layout(a, b, batch)
    return out


def real_step(source: dict, batch: int, seed: int = 0):
    """The model of ``source`` built for real on this CPU at ``batch`` (the seed's weights and
    batch: every rank's and the reference's)."""
    from .realstep import build_real

    torch.manual_seed(seed)
    return build_real(load_setup(source, batch), batch, "cpu")


def step_values(traced, real, flip: bool = False) -> dict:
    """Every node's value (placeholders too) in the step ``traced`` run for real on the model
    and batch of ``real`` (`real_step`; ``flip``: the batch in reverse order)."""
    data = (*real.x, real.y)
    args, inputs = [], iter(t.flip(0) if flip else t for t in data)
    for n in traced.graph.nodes:
        if n.op == "placeholder":
            name = traced.parameters.get(n.name)
            args.append(next(inputs) if name is None else real.parameters_by_name(name))
    return _values(traced.module, args)


def _values(module, args) -> dict:
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            values[n.name] = value
            return value

    with torch.no_grad():
        Recorder(module).run(*args)
    return values


def _layout(a, b, batch: int):
    """The first (dimension, outer factor) under which ``b`` is ``a`` with its samples
    reversed; None when none is (or the tensor has no dimension a multiple of ``batch``)."""
    tol = dict(rtol=1e-3, atol=1e-4) if a.is_floating_point() else dict(rtol=0, atol=0)
    for dim, size in enumerate(a.shape):
        if size % batch:
            continue
        per = size // batch
        for outer in [d for d in range(1, per + 1) if per % d == 0]:
            blocks = a.unflatten(dim, (outer, batch, per // outer))
            if torch.allclose(blocks.flip(dim + 1).flatten(dim, dim + 2), b, **tol):
                return dim, outer
    return None


def _tensor_specs(strategy, graph, infos, traced, source, batch) -> dict:
    """parts -> node -> its spec, for the tensor-parallel blocks ``strategy`` cuts
    (`moplace.torch.tensorprobe`), found once per model, batch, blocks and parts."""
    from .tensorprobe import block_name, blocks_of, tensor_specs

    cut = {int(i): s.parts for i, s in strategy.splits.items() if s.dim == "tensor"}
    if not cut:
        return {}
    names = {block_name(graph.ops[i].colocation) for i in cut}
    blocks = {name: nodes for name, nodes in blocks_of(infos, graph).items() if name in names}
    out = {}
    for n in sorted(set(cut.values())):
        def probe(n=n):
            real = real_step(source, batch)
            values = step_values(traced, real)
            weights = {m.name: values[m.name] for m in traced.graph.nodes
                       if m.op == "placeholder" and m.name in traced.parameters}
            return tensor_specs(traced, values, weights, infos, graph, blocks, n)

        out[n] = _kept(("tensor", _source_key(source), batch, n, tuple(sorted(blocks))), probe)
    return out


def prepare(graph, strategy, trace, n_ranks: int, kind: str = "cpu"):
    """(programs, source, batches, updates): every rank's program for ``strategy`` (simulated
    as ``trace``) on ``n_ranks`` processes, the model source, the batches to trace, and
    update op index -> parameter name. `PlanRefused` says what cannot run."""
    source = model_source(graph)
    if source.get("kind") not in (None, kind) and graph.metadata.get("attention", {}).get(
            "kernels"):
        raise PlanRefused(f"graph {graph.name!r} holds the attention kernels of "
                          f"{source['kind']}, not of this testbed's {kind}: profile it with "
                          "`moplace profile ... --testbed K`")
    if strategy.used_devices and max(strategy.used_devices) >= n_ranks:
        raise PlanRefused(f"the strategy uses device {max(strategy.used_devices)}; the testbed "
                          f"has {n_ranks} processes")
    why = pytorch_refusal(graph, strategy)
    if why:
        raise PlanRefused(why)
    batch = int(source["batch_size"])
    tasks = ordered_tasks(graph, strategy, trace)
    m = int(strategy.micro_batches)
    if batch % m:
        raise PlanRefused(f"a batch of {batch} does not make {m} equal micro-batches")
    batches = batches_of(tasks, batch, m)
    traced = trace_batches(source, batches, kind)
    split = any(t.cut > 1 for t in tasks)
    layouts = _kept(("layouts", _source_key(source), batch, kind),
                    lambda: batch_layouts(traced[batch], source, batch)) \
        if split and batch > 1 else None
    channel = {int(i): s.parts for i, s in strategy.splits.items() if s.dim == "channel"}
    infos, gradients = node_infos(traced, graph, batch, layouts, channel)
    micro = batch // m  # the batch tensor parts run at: what their shards' runs are of
    tensor = _tensor_specs(strategy, graph, infos, traced[micro], source, micro)
    programs = plan_program(infos, graph, strategy, tasks, gradients, batch, n_ranks, tensor)
    updates = {i: op.name.removeprefix("update/") for i, op in enumerate(graph.ops)
               if op.role == "update"}
    return programs, source, batches, updates, traced
