"""Expand (graph, strategy, costs) into the task graph the simulator runs.

An unsplit op is one task. An op split n ways is n tasks, one per part. The (batch, channel)
extent of a tensor is the unit square: part k of a batch split holds batch slice [k/n, (k+1)/n)
of its output, part k of a channel split holds channel slice [k/n, (k+1)/n). A consumer part
split on batch needs its batch slice of every input (all channels); an unsplit or channel-split
consumer needs whole inputs, except update ops: a channel-split update reads its shard of the
gradient, a batch-split update is a replica and reads all of it. Each (producer part, consumer part) pair moves
``edge bytes * area(held & needed)``; pairs with no overlap are not edges.

A batch-split op with ``grad_bytes > 0`` on two or more devices gets a *collective* task: a ring
all-reduce of its weight gradient among its parts' devices, after all its parts. Its consumers
with role ``update`` read the reduced gradient from the collective (locally when they run on one
of the ring's devices); its other consumers read the parts' outputs as usual.

Everything here is vectorised numpy: the Python loops run over distinct split shapes and over
collectives, not over ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .costmodel import CostModel
from .graph import ROLES, SPLIT_DIMS, OpGraph
from .strategy import Strategy

_UPDATE = ROLES.index("update")
_DIM_CODE = {None: -1, **{d: i for i, d in enumerate(SPLIT_DIMS)}}  # batch 0, channel 1


@dataclass(eq=False)
class TaskGraph:
    """Flat arrays describing tasks and their data edges (see module docstring).

    Tasks 0..n_compute-1 are compute tasks (``dev`` >= 0); the rest are collectives
    (``dev`` = -1) whose devices, resources, duration and per-device traffic are in ``coll_*``.
    Edge arrays are sorted by source task; ``e_srcdev`` is the device the data leaves from and
    ``e_local`` marks edges that move nothing (same device, or control edges into a collective).
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
    coll_ptr: np.ndarray
    coll_dev: np.ndarray
    coll_res_ptr: np.ndarray
    coll_res: np.ndarray
    coll_dur: np.ndarray
    coll_bytes: np.ndarray

    @property
    def n_tasks(self) -> int:
        return self.dev.shape[0]


def build_task_graph(graph: OpGraph, strategy: Strategy, costs: CostModel) -> TaskGraph:
    """The task graph of ``strategy`` on ``graph`` (the strategy must be validated)."""
    a = graph.arrays
    parts = np.ones(len(graph.ops), np.int64)
    dims = np.full(len(graph.ops), -1, np.int64)
    for i, s in strategy.splits.items():
        parts[i], dims[i] = s.parts, _DIM_CODE[s.dim]
    ptr = np.zeros(len(graph.ops) + 1, np.int64)
    np.cumsum(parts, out=ptr[1:])
    task_op = np.repeat(np.arange(len(graph.ops)), parts)
    part_k = np.arange(ptr[-1]) - ptr[task_op]
    dev = strategy.placement[task_op].copy()
    for i, s in strategy.splits.items():
        dev[ptr[i]:ptr[i + 1]] = s.devices
    dur = _durations(graph, costs, task_op, dev, parts, dims, strategy)
    out_b, par_b = _memory(a, task_op, parts, dims)
    colls = _collectives(graph, strategy, dims)
    edges = _edges(a, ptr, parts, dims, dev, colls, len(task_op))
    coll_arrays = _collective_arrays(graph, costs, colls)
    n_coll = len(colls)
    return TaskGraph(
        n_compute=len(task_op),
        task_op=np.concatenate([task_op, [c[0] for c in colls]]).astype(np.int64),
        dev=np.concatenate([dev, np.full(n_coll, -1)]).astype(np.int64),
        dur=np.concatenate([dur, coll_arrays[4]]),
        prio=np.concatenate([strategy.priority[task_op], np.zeros(n_coll)]),
        out_bytes=np.concatenate([out_b, np.zeros(n_coll)]),
        param_bytes=par_b, **edges,
        coll_ptr=coll_arrays[0], coll_dev=coll_arrays[1], coll_res_ptr=coll_arrays[2],
        coll_res=coll_arrays[3], coll_dur=coll_arrays[4], coll_bytes=coll_arrays[5])


def _durations(graph, costs, task_op, dev, parts, dims, strategy) -> np.ndarray:
    dur = costs.compute[task_op, dev].copy()
    split_tasks = np.flatnonzero(parts[task_op] > 1)
    if split_tasks.size == 0:
        return dur
    replicated = (graph.arrays.role == _UPDATE) & (dims == _DIM_CODE["batch"])
    for t in split_tasks:  # per split part: measured part profiles are looked up per op
        op = task_op[t]
        if not replicated[op]:  # a batch-"split" update is a full update of each replica
            dur[t] = costs.part_time(int(op), int(dev[t]), int(parts[op]))
    return dur


def _memory(a, task_op, parts, dims) -> tuple[np.ndarray, np.ndarray]:
    n = parts[task_op].astype(np.float64)
    batch = dims[task_op] == _DIM_CODE["batch"]
    grad = a.grad_bytes[task_op]
    out = a.output_bytes[task_op]
    # a batch part holds its slice of activations but a full weight gradient
    out_b = np.where(batch, (out - np.minimum(grad, out)) / n + np.minimum(grad, out), out / n)
    par_b = np.where(batch, a.param_bytes[task_op], a.param_bytes[task_op] / n)
    return out_b, par_b


def _collectives(graph, strategy, dims) -> list[tuple[int, tuple[int, ...]]]:
    a = graph.arrays
    found = []
    for i, s in strategy.splits.items():
        ring = tuple(sorted(set(s.devices)))
        if dims[i] == _DIM_CODE["batch"] and a.grad_bytes[i] > 0 and len(ring) > 1:
            found.append((i, ring))
    return found


@lru_cache(maxsize=256)
def _overlap(n_src: int, dim_src: int, n_dst: int, need_dim: int):
    """(k, j, fraction) of data producer part k gives consumer part j.

    ``need_dim`` is the dimension along which consumer part j needs only its slice (-1: whole).
    """
    held = [_region(k, n_src, dim_src) for k in range(n_src)]
    need = [_region(j, n_dst, need_dim) for j in range(n_dst)]
    ks, js, fs = [], [], []
    for k, (hb, hc) in enumerate(held):
        for j, (nb, nc) in enumerate(need):
            f = _len(hb, nb) * _len(hc, nc)
            if f > 0:
                ks.append(k), js.append(j), fs.append(f)
    return np.array(ks, np.int64), np.array(js, np.int64), np.array(fs)


def _need_dim(role, dim):
    """Slice a consumer part needs: a batch part its batch slice of the input (conv, matmul and
    elementwise ops need all input channels); an update part split on channel only its shard
    of the gradient, a batch-replicated update the whole gradient."""
    update = role == _UPDATE
    batch, channel = _DIM_CODE["batch"], _DIM_CODE["channel"]
    return np.where((dim == batch) & ~update, batch,
                    np.where((dim == channel) & update, channel, -1))


def _region(k, n, dim):
    whole, part = (0.0, 1.0), (k / n, (k + 1) / n)
    return (part, whole) if dim == 0 else (whole, part) if dim == 1 else (whole, whole)


def _len(x, y) -> float:
    return max(0.0, min(x[1], y[1]) - max(x[0], y[0]))


def _edges(a, ptr, parts, dims, dev, colls, n_compute) -> dict:
    gated = np.zeros(a.src.shape[0], bool)
    src, dst, nb, sdev = [], [], [], []
    coll_of = {op: n_compute + c for c, (op, _) in enumerate(colls)}
    for op, ring in colls:  # the parts feed the collective; update consumers read from it
        c = coll_of[op]
        first, last = ptr[op], ptr[op + 1]
        src.append(np.arange(first, last)), dst.append(np.full(last - first, c))
        nb.append(np.zeros(last - first)), sdev.append(dev[first:last])
        out = a.out_edge[a.out_ptr[op]:a.out_ptr[op + 1]]
        to_update = out[a.role[a.dst[out]] == _UPDATE]
        gated[to_update] = True
        for e in to_update:
            v_tasks = np.arange(ptr[a.dst[e]], ptr[a.dst[e] + 1])
            on_ring = np.isin(dev[v_tasks], ring)
            src.append(np.full(v_tasks.size, c)), dst.append(v_tasks)
            nb.append(np.where(on_ring, 0.0, a.edge_bytes[e]))
            sdev.append(np.where(on_ring, dev[v_tasks], ring[0]))
    plain = np.flatnonzero(~gated)
    u, v = a.src[plain], a.dst[plain]
    # one int64 key per edge shape: (parts, dim) of producer and (parts, needed dim) of consumer
    nd = _need_dim(a.role[v], dims[v])
    keys = ((parts[u] * 4 + dims[u] + 1) << 32) | (parts[v] * 4 + nd + 1)
    uniq, inverse = np.unique(keys, return_inverse=True)
    for g, key in enumerate(uniq.tolist()):
        hi, lo = key >> 32, key & 0xFFFFFFFF
        nu, du, nv, dv = hi // 4, hi % 4 - 1, lo // 4, lo % 4 - 1
        sel = plain if len(uniq) == 1 else plain[inverse == g]
        ks, js, fs = _overlap(int(nu), int(du), int(nv), int(dv))
        s = (ptr[a.src[sel]][:, None] + ks[None, :]).ravel()
        src.append(s), dst.append((ptr[a.dst[sel]][:, None] + js[None, :]).ravel())
        nb.append((a.edge_bytes[sel][:, None] * fs[None, :]).ravel()), sdev.append(dev[s])
    return _sorted_edges(src, dst, nb, sdev, dev, n_compute)


def _sorted_edges(src, dst, nb, sdev, dev, n_compute) -> dict:
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    e_src, e_dst = cat(src, np.int64), cat(dst, np.int64)
    e_bytes, e_srcdev = cat(nb, np.float64), cat(sdev, np.int64)
    order = np.lexsort((e_dst, e_src))
    e_src, e_dst, e_bytes, e_srcdev = e_src[order], e_dst[order], e_bytes[order], e_srcdev[order]
    dst_dev = np.where(e_dst < n_compute, dev[np.minimum(e_dst, n_compute - 1)], -1)
    e_local = (e_dst >= n_compute) | (e_srcdev == dst_dev) | (e_bytes <= 0)
    return dict(e_src=e_src, e_dst=e_dst, e_bytes=e_bytes, e_srcdev=e_srcdev, e_local=e_local)


def _collective_arrays(graph, costs, colls):
    """Ring all-reduce per collective: devices, links used, duration, bytes per device."""
    cl = costs.cluster
    ptr, devs, rptr, res, durs, per_dev = [0], [], [0], [], [], []
    for op, ring in colls:
        n, b = len(ring), float(graph.arrays.grad_bytes[op])
        links = [(ring[k], ring[(k + 1) % n]) for k in range(n)]
        step = max(costs.transfer_time(i, j, b / n) for i, j in links)
        used = sorted({int(r) for i, j in links
                       for r in cl.route_res[cl.route_ptr[i * cl.n_devices + j]:
                                             cl.route_ptr[i * cl.n_devices + j + 1]]})
        devs.extend(ring), ptr.append(len(devs))
        res.extend(used), rptr.append(len(res))
        durs.append(2 * (n - 1) * step), per_dev.append(2 * (n - 1) / n * b)
    as_i = (lambda x: np.array(x, np.int64))
    return as_i(ptr), as_i(devs), as_i(rptr), as_i(res), np.array(durs, np.float64), np.array(per_dev)
