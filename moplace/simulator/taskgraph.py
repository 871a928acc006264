"""Expand (graph, strategy, costs) into the task graph the simulator runs.

An unsplit op is one task. An op split n ways is n tasks, one per part. The (batch, channel)
extent of a tensor is the unit square: part k of a batch split holds batch slice [k/n, (k+1)/n)
of its output, part k of a channel split holds channel slice [k/n, (k+1)/n). A consumer part
split on batch needs its batch slice of every input (all channels); an unsplit or channel-split
consumer needs whole inputs, except update ops: a channel-split update reads its shard of the
gradient, a batch-split update is a replica and reads all of it. Each (producer part, consumer part) pair moves
``edge bytes * area(held & needed)``; pairs with no overlap are not edges.

An ``expert`` split (expert parallelism over a mixture-of-experts layer's ``[E, C, H]``
buffers, whose E is the square's channel axis) is a channel split whose parts read their
experts' slice of every input: from a dispatch split on batch over the same n devices, each
part sends 1/n of its buffer to each other part (an all-to-all, (n-1)/n of its buffer per
device), and a batch-split combine reads its tokens back the same way. Its weights are
sharded, each expert on one device, and never all-reduced (only batch splits are).

A batch-split op with ``grad_bytes > 0`` on two or more devices has its weight gradient
all-reduced among its parts' devices, after all its parts, in a bucket with the gradients
before it on the same devices (the strategy's ``bucket_bytes``; 0: a bucket each), as the
tasks of `moplace.simulator.collectives` (a ring, or reduce-scatter, all-reduces across
servers and all-gather). Its consumers with role ``update`` read the reduced gradient from the
bucket's last task (locally when they run on one of its devices); its other consumers read the
parts' outputs as usual.

Everything here is vectorised numpy, but for the edges, made in one compiled pass already in
order (`moplace.simulator._edgebuild`): the Python loops run over distinct split shapes and
rings, not over ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..arrays import frozen, segment_ranks
from ..core.graph import OpGraph, inplace_sources
from ..core.strategy import Strategy
from ..costs.costmodel import CostModel
from ._edgebuild import build_edges
from ._fill import fill_unsplit
from .buckets import BucketedCollectives
from .gathers import held_while_gathered
from .backward import NO_GATES as _NO_GATES, task_gates
from .context import context_edges
from .holdings import (_BATCH, _CHANNEL, _DIM_CODE, _EXPERT, _HELD, _NEED, _OWN, _PARTIAL,
                       _REPLICA, _SEQ_HELD, _SEQ_NEED, _SEQUENCE, _TENSOR, _UPDATE, held_codes,
                       task_memory, task_scratch)
from .microbatch import microbatch_plan
from .ordering import pipeline_order
from .recompute import recompute_plan



@dataclass(eq=False)
class TaskGraph:
    """Flat arrays describing tasks and their data edges (see module docstring).

    Tasks 0..n_compute-1 are compute tasks (``dev`` >= 0); the rest are collectives
    (``dev`` = -1) whose devices, resources, duration, per-device traffic and kind
    (`moplace.simulator.collectives.KINDS`) are in ``coll_*``.
    Edge arrays are sorted by source task; ``e_srcdev`` is the device the data leaves from and
    ``e_local`` marks edges that move nothing (same device, or control edges into a collective).
    ``out_ptr`` indexes each task's out-edges; ``in_ptr``/``in_edge`` its in-edges (CSR).
    ``op_ptr``: the compute tasks of op i are ``op_ptr[i]:op_ptr[i + 1]``. ``ip_src``: per
    task, the task whose output buffer it writes its output into when the two run on one
    device (-1: none; `moplace.core.graph.inplace_sources`). ``coll_mask``: per collective,
    the devices that read its result locally (a row of bitmask words,
    `moplace.simulator.devsets`) (its bucket's devices, for the
    bucket's last task; they may be more than the task's own, whose last phase can run on a
    part of them). With micro-batches (`moplace.simulator.microbatch`): ``task_mb``, per
    task its micro-batch (-1 for a collective; empty without micro-batches), ``n_recomputed``,
    how many compute tasks (the last) run recomputed ops (-1: those after ``op_ptr[n_ops]``),
    and ``stage``, per device its pipeline stage (1 first, 0: none;
    `moplace.simulator.schedule.stage_limits`). ``scratch``: per task, bytes it holds only
    while it runs (`moplace.core.graph.Op.scratch_bytes`; empty when no op has any).
    ``gate`` and ``opens`` (per compute task; both empty: none): the backward's program order
    (`moplace.simulator.backward.task_gates`, made with the shape): a task with ``gate`` k >= 0
    waits, its inputs in, until a task with ``opens`` k has finished.
    """

    n_compute: int
    task_op: np.ndarray
    dev: np.ndarray
    dur: np.ndarray
    prio: np.ndarray
    out_bytes: np.ndarray
    param_bytes: np.ndarray
    e_src: np.ndarray
    e_dst: np.ndarray
    e_bytes: np.ndarray
    e_srcdev: np.ndarray
    e_local: np.ndarray
    out_ptr: np.ndarray
    in_ptr: np.ndarray
    in_edge: np.ndarray
    coll_ptr: np.ndarray
    coll_dev: np.ndarray
    coll_res_ptr: np.ndarray
    coll_res: np.ndarray
    coll_dur: np.ndarray
    coll_bytes: np.ndarray
    op_ptr: np.ndarray
    coll_kind: np.ndarray
    ip_src: np.ndarray
    coll_mask: np.ndarray
    task_mb: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    n_recomputed: int = -1
    stage: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    scratch: np.ndarray = field(default_factory=lambda: np.zeros(0))
    gate: np.ndarray = field(default_factory=lambda: _NO_GATES[0])
    opens: np.ndarray = field(default_factory=lambda: _NO_GATES[1])

    @property
    def n_tasks(self) -> int:
        return self.dev.shape[0]

    def static_memory(self, n_dev: int) -> np.ndarray:
        """Bytes of parameters each device holds for the whole step."""
        return np.bincount(self.dev[:self.n_compute], weights=self.param_bytes,
                           minlength=n_dev).astype(np.float64)


def build_split_task_graph(graph: OpGraph, strategy: Strategy, costs: CostModel, *,
                           ordered: bool = True) -> tuple[TaskGraph, np.ndarray]:
    """The task graph of a strategy with splits or recomputation, built in full, and the bytes
    each edge moves when it does move data (they differ from ``e_bytes`` only on an edge from
    an all-reduce to an update that runs on one of the ring's devices, which reads the
    gradient locally). Recomputed groups run on the graph of `recompute_plan`: their clones'
    tasks come after every other compute task, with ``task_op`` the op they run again. With
    micro-batches it runs on the graph of `microbatch_plan`, ordered by the strategy's schedule
    (`pipeline_order`) unless ``ordered`` is False (a skeleton orders each instance)."""
    n_ops = len(graph.ops)
    if strategy.pipelined:
        plan = microbatch_plan(graph, strategy.recompute, int(strategy.micro_batches))
    else:
        plan = recompute_plan(graph, strategy.recompute) if strategy.recompute else None
    a = graph.arrays if plan is None else plan.arrays
    orig = np.arange(n_ops) if plan is None else plan.orig
    in_time = plan.in_time if strategy.pipelined else np.ones(orig.size, np.int64)
    parts, dims, split_dev = _split_arrays(strategy, orig)
    ptr = np.zeros(orig.size + 1, np.int64)
    np.cumsum(parts, out=ptr[1:])
    vop = np.repeat(np.arange(orig.size), parts)  # the task's op in the plan's graph
    task_op = orig[vop]
    dev = strategy.placement[task_op].copy()
    dev[parts[vop] > 1] = split_dev  # split ops' parts in op order, so they line up
    held = held_codes(a, graph.arrays, orig, dims)
    raw_dims, dims = dims, np.where(dims == _SEQUENCE, _BATCH, dims)  # else a batch split
    colls = BucketedCollectives(a, costs, ptr, parts, dims, dev, strategy.bucket_bytes,
                                int(strategy.zero_stage), n_ops,
                                plan.partial if strategy.pipelined else None,
                                replica=held == _REPLICA)
    dur = _durations(a, costs, ptr, vop, orig, dev, parts * in_time, dims,
                     colls.sharded_update)
    out_b, par_b = task_memory(a, vop, parts, held, colls.sharded_update | colls.weighted)
    par_b = par_b + held_while_gathered(ptr, parts, dev, colls.weighted, a.param_bytes,
                                        vop.size)
    n_compute, n_coll = len(vop), len(colls.ops)
    edges = _edges(a, ptr, parts, raw_dims, held, dev, colls, n_compute,
                   context_edges(graph), orig)
    moved_bytes = edges.pop("moved_bytes")
    capable = np.concatenate([a.inplace[vop] & costs.inplace, np.zeros(n_coll, bool)])
    ip_src = inplace_sources(edges["e_src"], edges["e_dst"], edges["e_bytes"], edges["out_ptr"],
                             edges["in_edge"], capable, n_compute)
    tg = TaskGraph(
        n_compute=n_compute,
        task_op=np.concatenate([task_op, orig[colls.ops]]),
        dev=np.concatenate([dev, np.full(n_coll, -1, np.int64)]),
        dur=np.concatenate([dur, colls.dur]),
        prio=np.concatenate([strategy.priority[task_op], np.zeros(n_coll)]),
        out_bytes=np.concatenate([out_b, np.zeros(n_coll)]),
        param_bytes=par_b, **edges,
        coll_ptr=colls.ptr, coll_dev=colls.devices, coll_res_ptr=colls.res_ptr,
        coll_res=colls.res, coll_dur=colls.dur, coll_bytes=colls.bytes_per_device, op_ptr=ptr,
        coll_kind=colls.kind, ip_src=ip_src, coll_mask=colls.task_mask,
        scratch=task_scratch(graph.arrays, task_op, vop, parts, held, in_time, n_coll))
    if strategy.pipelined:
        tg.task_mb = np.concatenate([plan.mb[vop], np.full(n_coll, -1, np.int64)])
        tg.n_recomputed = int(ptr[-1] - ptr[orig.size - plan.n_clone_ops])
    tg.gate, tg.opens = task_gates(graph, task_op, tg.task_mb[:n_compute])
    if strategy.pipelined and ordered:
        tg, moved_bytes = pipeline_order(tg, moved_bytes, graph, strategy, costs)
    return tg, moved_bytes


def _split_arrays(strategy: Strategy, orig: np.ndarray):
    """Parts and dimension code per op of the (plan's) graph, and the devices of all split
    parts in its op order: a clone is split as the op it runs again."""
    t = strategy.split_table
    n_ops = strategy.placement.size
    parts = np.ones(n_ops, np.int64)
    dims = np.full(n_ops, -1, np.int64)
    start = np.zeros(n_ops, np.int64)  # each split op's first part in ``t.devices``
    parts[t.ops], dims[t.ops], start[t.ops] = t.parts, t.dims, np.cumsum(t.parts) - t.parts
    clones = orig[n_ops:]
    clones = clones[parts[clones] > 1]  # the split clones' parts, after the graph's
    take = np.repeat(start[clones], parts[clones]) + segment_ranks(parts[clones])
    return parts[orig], dims[orig], np.concatenate([t.devices, t.devices[take]])


def unsplit_task_graph(graph: OpGraph, strategy: Strategy, costs: CostModel) -> TaskGraph:
    """Fast path without splits: tasks are ops and edges the graph's edges, CSR reused."""
    a = graph.arrays
    dev = strategy.placement
    n = dev.shape[0]
    dur, e_srcdev, e_local = np.empty(n), np.empty(a.src.size, np.int64), np.empty(a.src.size, bool)
    fill_unsplit(dev, costs.compute, a.src, a.dst, a.edge_bytes, dur, e_srcdev, e_local)
    gate, opens = task_gates(graph)
    return TaskGraph(
        n_compute=n, task_op=np.arange(n), dev=dev, dur=dur,
        prio=strategy.priority, out_bytes=a.output_bytes, param_bytes=a.param_bytes,
        e_src=a.src, e_dst=a.dst, e_bytes=a.edge_bytes, e_srcdev=e_srcdev, e_local=e_local,
        out_ptr=a.out_ptr, in_ptr=a.in_ptr, in_edge=a.in_edge, op_ptr=np.arange(n + 1),
        ip_src=costs.inplace_source,
        scratch=_NO_SCRATCH if a.scratch_bytes is None else a.scratch_bytes,
        gate=gate, opens=opens, **_NO_COLLECTIVES)


_NO_COLLECTIVES = {k: frozen(v) for k, v in dict(
    coll_ptr=np.zeros(1, np.int64), coll_dev=np.zeros(0, np.int64),
    coll_res_ptr=np.zeros(1, np.int64), coll_res=np.zeros(0, np.int64),
    coll_dur=np.zeros(0), coll_bytes=np.zeros(0), coll_kind=np.zeros(0, np.int64),
    coll_mask=np.zeros((0, 1), np.int64)).items()}
#: read-only as the graph's own scratch is, so the event loop's argument types (and so its
#: compiled specialisation) do not depend on whether the graph has scratch
_NO_SCRATCH = frozen(np.zeros(0))


def _durations(a, costs, ptr, vop, orig, dev, parts, dims, sharded) -> np.ndarray:
    """Each task's duration; ``vop`` is its op in ``a``'s graph, ``orig`` the op that runs."""
    n = parts[vop]
    dur = costs.compute[orig[vop], dev]
    # a batch-"split" update is a full update of each replica, unless ZeRO shards it; other
    # parts do 1/n of the work
    replicated = (a.role == _UPDATE) & (dims == _DIM_CODE["batch"]) & ~sharded
    dur = np.where((n > 1) & ~replicated[vop], dur / n + costs.split_overhead_s, dur)
    profiled = costs.ops_with_part_profiles
    for v in (np.flatnonzero(np.isin(orig, profiled)) if profiled else ()):
        if parts[v] > 1 and not replicated[v]:  # measured part times replace the estimate
            for t in range(ptr[v], ptr[v + 1]):
                dur[t] = costs.part_time(int(orig[v]), int(dev[t]), int(parts[v]))
    return dur


@lru_cache(maxsize=256)
def _overlap(n_src: int, dim_src: int, n_dst: int, need_dim: int):
    """(k, j, fraction) of data producer part k gives consumer part j.

    ``dim_src`` is what a producer part holds (`held_codes`); ``need_dim`` the dimension along
    which consumer part j needs only its slice (-1: whole; `_OWN`: the partial sum of its
    index). A replica, and a partial sum to a partial sum, serves the part of its index (scaled
    when the counts differ) whole; a partial sum read otherwise is read whole from every part
    (its parts on one device: nothing to all-reduce); a tensor shard is a channel slice.
    """
    if dim_src == _REPLICA or (dim_src == _PARTIAL and need_dim == _OWN):
        js = np.arange(n_dst, dtype=np.int64)
        return js * n_src // n_dst, js, np.ones(n_dst)
    dim_src = {_TENSOR: _CHANNEL, _PARTIAL: -1, _SEQ_HELD: _AXIS_SEQ}.get(dim_src, dim_src)
    need_dim = _AXIS_SEQ if need_dim == _SEQ_NEED else need_dim
    held = [_region(k, n_src, dim_src) for k in range(n_src)]
    need = [_region(j, n_dst, need_dim) for j in range(n_dst)]
    ks, js, fs = [], [], []
    for k, h in enumerate(held):
        for j, w in enumerate(need):
            f = _len(h[0], w[0]) * _len(h[1], w[1]) * _len(h[2], w[2])
            if f > 0:
                ks.append(k), js.append(j), fs.append(f)
    return np.array(ks, np.int64), np.array(js, np.int64), np.array(fs)


def _need_dim(a, dims, held):
    """Per graph edge, the slice a consumer part needs: a batch part its batch slice of the
    input (conv, matmul and elementwise ops need all input channels); an update part split on
    channel only its shard of the gradient, a batch-replicated update the whole gradient; a
    tensor part its shard of a tensor-split input (the shards of a Megatron block stay on
    their devices), its own partial sum of a partial sum it adds to, else the whole input; an
    expert part its experts' slice of every input (each is an ``[E, ...]`` tensor: from a
    batch-split dispatch, 1/n of every part, an all-to-all); a sequence part its tokens'
    slice (attention's exceptions: `moplace.simulator.context`)."""
    u, v = a.src, a.dst
    dim = dims[v]
    update = a.role[v] == _UPDATE
    need = np.where((dim == _BATCH) & ~update, _BATCH,
                    np.where(((dim == _CHANNEL) & update) | (dim == _EXPERT), _CHANNEL,
                             np.where((dim == _SEQUENCE) & ~update, _SEQ_NEED, -1)))
    own = (held[u] == _PARTIAL) & a.partial_sums[v]
    return np.where(dim == _TENSOR, np.where(held[u] == _TENSOR, _CHANNEL,
                                             np.where(own, _OWN, -1)), need)


#: the unit cube's axes: batch 0, channel 1, the tokens of each sequence `_AXIS_SEQ`
_AXIS_SEQ = 2


def _region(k, n, axis):
    """Part ``k`` of ``n`` along ``axis`` of the unit cube (another axis: the whole cube)."""
    whole, part = (0.0, 1.0), (k / n, (k + 1) / n)
    return tuple(part if axis == i else whole for i in range(3))


def _len(x, y) -> float:
    return max(0.0, min(x[1], y[1]) - max(x[0], y[0]))


def _edges(a, ptr, parts, dims, held, dev, colls: BucketedCollectives, n_compute, context,
           orig) -> dict:
    """The task edges, sorted by source, and their CSR indexes (`build_edges`); ``context``:
    the graph's `ContextEdges` (attention across the sequence) or None."""
    b = colls.bucket_of_op
    # update ops read the reduced gradient from the bucket's last task, not from the parts;
    # an op other than a partial sum reads an all-reduced partial sum from its last task
    adds = (dims[a.dst] == _TENSOR) & a.partial_sums[a.dst]
    gated = (((b[a.src] >= 0) & (a.role[a.dst] == _UPDATE)) | (colls.summed[a.src] & ~adds)
             | colls.regathered)
    n_coll = colls.ops.size
    serve_ptr = np.zeros(n_coll + 1, np.int64)  # per task: the ops whose updates it feeds
    serve_ptr[colls.exit + 1] = np.diff(colls.serve_ptr)
    np.cumsum(serve_ptr, out=serve_ptr)
    first = np.zeros(n_coll, np.int64)  # per task: its bucket's first device, at its last task
    first[colls.exit] = colls.first
    held_e, need, scale = held[a.src], _need_dim(a, dims, held), None
    if context is not None:
        held_e, need, scale = context.adjust(a, orig, dims, held_e, need)
    edge_shape, shape_rows, row_j, row_f = _edge_shapes(a, parts, held_e, need)
    g_bytes = a.edge_bytes if scale is None else a.edge_bytes * scale
    (e_src, e_dst, e_bytes, e_srcdev, e_moved, e_local, out_ptr, in_ptr, in_edge) = build_edges(
        a.out_ptr, a.out_edge, a.dst, g_bytes, gated, edge_shape, shape_rows, row_j, row_f,
        ptr, parts, dev, n_compute, colls.feeds_ptr, colls.feeds, colls.succ_ptr, colls.succ,
        serve_ptr, colls.serve, colls.task_mask, first, colls.fed_ptr, colls.fed)
    return dict(e_src=e_src, e_dst=e_dst, e_bytes=e_bytes, e_srcdev=e_srcdev, e_local=e_local,
                out_ptr=out_ptr, in_ptr=in_ptr, in_edge=in_edge, moved_bytes=e_moved)


def _edge_shapes(a, parts, held_e, need):
    """Each graph edge's shape (parts and holding of its producer, ``held_e``; parts and
    ``need``, the needed slice of its consumer) as an index ``s``, and per shape the (consumer
    part, fraction) rows of each producer part k: rows ``shape_rows[s, k]:shape_rows[s, k + 1]``
    of ``row_j``, ``row_f``."""
    u, v = a.src, a.dst
    width = int(parts.max()) + 1 if parts.size else 1
    code = ((parts[u] * _HELD + held_e + 1) * width + parts[v]) * _NEED + need + 1
    seen = np.zeros(_HELD * _NEED * width * width, bool)
    seen[code] = True
    present = np.flatnonzero(seen)
    lookup = np.zeros(seen.size, np.int64)
    lookup[present] = np.arange(present.size)
    shape_rows = np.zeros((present.size, width + 1), np.int64)
    row_j, row_f, offset = [], [], 0
    for s, c in enumerate(present.tolist()):
        nd, rest = c % _NEED - 1, c // _NEED
        nv, rest = rest % width, rest // width
        du, nu = rest % _HELD - 1, rest // _HELD
        ks, js, fs = _overlap(nu, du, nv, nd)
        shape_rows[s] = offset + np.searchsorted(ks, np.minimum(np.arange(width + 1), nu))
        row_j.append(js), row_f.append(fs)
        offset += ks.size
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt, copy=False) if xs else np.zeros(0, dt))
    return lookup[code], shape_rows, cat(row_j, np.int64), cat(row_f, np.float64)
