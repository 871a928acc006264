"""List scheduling (HEFT and FastT's DPOS) as pure functions over arrays.

`ListSchedInput` holds everything the schedulers read (compute times, edges and their CSR,
links, memory, co-location groups); `heft` and `dpos` return a `ListSchedResult` with a device
and the scheduler's own start/finish estimate per op. The scheduler's timing model is the
classic one: an op runs alone on its device, an edge between devices costs
``latency + bytes / bandwidth`` starting when the producer finishes, links never contend.
The simulator (docs/model.md) sends one transfer per (op, remote device) and queues
transfers on shared links, so its makespan can differ; `ListSchedResult.priority` hands it
the scheduler's order. Memory is a static model: the sum of ``op_memory`` over the ops on a
device must fit its capacity. The kernels live in `searchers.listsched.kernels`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from moplace.arrays import EdgeArrays

from . import kernels as core


def _arr(value, dtype, shape, name) -> np.ndarray:
    a = np.ascontiguousarray(value, dtype=dtype)
    if a.shape != shape:
        raise ValueError(f"ListSchedInput.{name} must have shape {shape}, got {a.shape}")
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class ListSchedInput(EdgeArrays):
    """Arrays a list scheduler reads; n ops, E edges, D devices.

    compute [n, D] seconds; the edges (`EdgeArrays`: src, dst int64, edge_bytes float64 [E] and
    the CSR indexes out_ptr/out_edge, in_ptr/in_edge); latency, bandwidth [D, D]
    (diagonal 0 and inf); op_memory [n] bytes an op pins on its device; capacity [D] bytes;
    group [n] co-location ids (0..n_groups-1). ``topo`` (a topological order) is computed
    when not given.
    """

    compute: np.ndarray
    latency: np.ndarray
    bandwidth: np.ndarray
    op_memory: np.ndarray
    capacity: np.ndarray
    group: np.ndarray
    topo: np.ndarray | None = field(default=None)

    def __post_init__(self):
        compute = np.ascontiguousarray(self.compute, dtype=np.float64)
        if compute.ndim != 2 or compute.shape[1] < 1:
            raise ValueError(f"compute must be [n_ops, n_devices >= 1], got {compute.shape}")
        n, D = compute.shape
        E = np.asarray(self.src).shape[0]
        fix = {"compute": _arr(compute, np.float64, (n, D), "compute")}
        for name, dtype, shape in [
                ("src", np.int64, (E,)), ("dst", np.int64, (E,)), ("edge_bytes", np.float64, (E,)),
                ("out_ptr", np.int64, (n + 1,)), ("out_edge", np.int64, (E,)),
                ("in_ptr", np.int64, (n + 1,)), ("in_edge", np.int64, (E,)),
                ("latency", np.float64, (D, D)), ("bandwidth", np.float64, (D, D)),
                ("op_memory", np.float64, (n,)), ("capacity", np.float64, (D,)),
                ("group", np.int64, (n,))]:
            fix[name] = _arr(getattr(self, name), dtype, shape, name)
        if n and fix["group"].min() < 0:
            raise ValueError("group ids must be >= 0")
        topo = self.topo
        if topo is None:
            topo = core.topo_order(n, fix["in_ptr"], fix["out_ptr"], fix["out_edge"], fix["dst"])
            if n and topo[-1] < 0:
                raise ValueError("the graph has a cycle")
        fix["topo"] = _arr(topo, np.int64, (n,), "topo")
        for name, value in fix.items():
            object.__setattr__(self, name, value)

    @property
    def n_ops(self) -> int:
        """Number of ops."""
        return self.compute.shape[0]

    @property
    def n_devices(self) -> int:
        """Number of devices."""
        return self.compute.shape[1]

    @classmethod
    def from_problem(cls, graph, cluster, costs=None, *, op_memory=None) -> "ListSchedInput":
        """Arrays of an `OpGraph` on a `Cluster`. ``costs``: a `CostModel`, an [n, D] array of
        seconds, or None (a fresh `CostModel`). ``op_memory`` defaults to param + output bytes."""
        if costs is None:
            from moplace.costs.costmodel import CostModel
            costs = CostModel(graph, cluster)
        compute = getattr(costs, "compute", costs)
        a = graph.arrays
        if op_memory is None:
            op_memory = a.param_bytes + a.output_bytes
        return cls(compute=compute, src=a.src, dst=a.dst, edge_bytes=a.edge_bytes,
                   out_ptr=a.out_ptr, out_edge=a.out_edge, in_ptr=a.in_ptr, in_edge=a.in_edge,
                   latency=cluster.latency, bandwidth=cluster.bandwidth, op_memory=op_memory,
                   capacity=cluster.memory, group=a.group, topo=a.topo)


@dataclass(frozen=True, eq=False)
class ListSchedResult:
    """A list schedule: ``placement`` [n] device per op, the scheduler's own ``start`` and
    ``finish`` [n] (seconds), ``makespan`` (max finish), ``feasible`` (False when some op's
    group fit no device's memory and was put where most memory was left). ``order`` lists the
    ops by (start, topological position)."""

    placement: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    makespan: float
    feasible: bool
    order: np.ndarray

    def priority(self) -> np.ndarray:
        """Priorities (higher runs first) that make the simulator follow the scheduler's order:
        minus the op's rank in ``order``."""
        prio = np.empty(self.order.size)
        prio[self.order] = -np.arange(self.order.size, dtype=np.float64)
        return prio


def transfer_weights(inp: ListSchedInput, how: str) -> np.ndarray:
    """Per-edge transfer seconds over ordered device pairs i != j: ``"mean"`` or ``"max"``
    of latency + bytes / bandwidth (zeros on one device)."""
    D = inp.n_devices
    off = ~np.eye(D, dtype=bool)
    if not off.any():
        return np.zeros(inp.edge_bytes.size)
    lat, inv_bw = inp.latency[off], 1.0 / inp.bandwidth[off]
    if how == "mean":  # affine in bytes: the mean of the lines is a line
        return lat.mean() + inp.edge_bytes * inv_bw.mean()
    if how != "max":
        raise ValueError(f"how must be 'mean' or 'max', got {how!r}")
    # the max of lines; distinct (latency, 1/bandwidth) pairs are few (link kinds)
    pairs = np.unique(np.stack([lat, inv_bw], axis=1), axis=0)
    out = np.full(inp.edge_bytes.size, -np.inf)
    for l, ib in pairs:
        np.maximum(out, l + inp.edge_bytes * ib, out=out)
    return out


def upward_rank(inp: ListSchedInput, compute_w, comm_w) -> np.ndarray:
    """rank_u(i) = w_i + max over successors j of (c_ij + rank_u(j)), with ``compute_w`` [n]
    per op and ``comm_w`` [E] per edge; computed in reverse topological order."""
    w = _arr(compute_w, np.float64, (inp.n_ops,), "compute_w")
    c = _arr(comm_w, np.float64, (inp.src.size,), "comm_w")
    return core.upward_rank_kernel(inp.topo, inp.out_ptr, inp.out_edge, inp.dst, w, c)


def critical_path(inp: ListSchedInput, rank) -> np.ndarray:
    """Ops of the critical path: from the entry of largest rank, the successor of largest rank
    each step (ties: lowest op index)."""
    return core.critical_path_kernel(np.asarray(rank, np.float64), inp.in_ptr, inp.out_ptr,
                                     inp.out_edge, inp.dst)


def _schedule(inp: ListSchedInput, rank: np.ndarray, cp: np.ndarray) -> ListSchedResult:
    # decreasing rank; rank(pred) >= rank(succ) as weights are >= 0, and equal ranks fall back
    # to the topological position, so this order always visits producers first
    visit = np.lexsort((topo_positions(inp), -rank)).astype(np.int64)
    place, start, finish, feasible = core.schedule_kernel(
        visit, cp, inp.compute, inp.src, inp.edge_bytes, inp.in_ptr, inp.in_edge, inp.latency,
        inp.bandwidth, group_memory(inp), inp.capacity, inp.group)
    return schedule_result(inp, place, start, finish, feasible)


def topo_positions(inp: ListSchedInput) -> np.ndarray:
    """Each op's position in the topological order."""
    pos = np.empty(inp.n_ops, np.int64)
    pos[inp.topo] = np.arange(inp.n_ops)
    return pos


def group_memory(inp: ListSchedInput) -> np.ndarray:
    """Bytes each co-location group pins (the static memory model)."""
    groups = int(inp.group.max()) + 1 if inp.n_ops else 0
    return np.bincount(inp.group, weights=inp.op_memory, minlength=groups)


def schedule_result(inp: ListSchedInput, place, start, finish, feasible) -> ListSchedResult:
    """A frozen `ListSchedResult`, its order by (start, topological position)."""
    order = np.lexsort((topo_positions(inp), start)).astype(np.int64)
    for a in (place, start, finish, order):
        a.flags.writeable = False
    return ListSchedResult(placement=place, start=start, finish=finish,
                           makespan=float(finish.max()) if inp.n_ops else 0.0,
                           feasible=bool(feasible), order=order)


def heft(inp: ListSchedInput) -> ListSchedResult:
    """HEFT (Topcuoglu et al. 2002): ranks from mean compute and mean transfer time, ops in
    decreasing rank, each to the device of minimum insertion-based EFT (groups and memory
    respected)."""
    rank = upward_rank(inp, inp.compute.mean(axis=1), transfer_weights(inp, "mean"))
    return _schedule(inp, rank, np.empty(0, np.int64))


def dpos(inp: ListSchedInput) -> ListSchedResult:
    """FastT's DPOS (Alg. 1): ranks from max compute and max transfer time; critical-path ops on
    the critical-path device (the one whose memory-fitting share of the remaining path has the
    smallest mean op time, replaced when full); other ops by minimum insertion-based EFT."""
    rank = upward_rank(inp, inp.compute.max(axis=1), transfer_weights(inp, "max"))
    return _schedule(inp, rank, critical_path(inp, rank))


def heuristic_strategies(problem, schedulers=(dpos, heft)) -> list:
    """Each of ``schedulers`` (list schedulers, in that order) on ``problem``, then the
    baselines (single, data-parallel, round-robin, layer-split), then every op on one device
    in a memory-sparing order once for each kind of device
    (`moplace.core.baselines.one_device_each_kind`). Duplicates are kept; an empty graph has
    the baselines only. (The searchers start from the larger set of
    `moplace.optimize.seeds.seed_strategies`.)"""
    from moplace.core.baselines import BASELINES, baseline, one_device_each_kind
    from moplace.core.strategy import Strategy

    graph = problem.graph
    out = []
    if len(graph.ops):
        inp = ListSchedInput.from_problem(graph, problem.cluster, problem.costs)
        for schedule in schedulers:
            result = schedule(inp)
            out.append(Strategy(result.placement, result.priority()))
    out += [baseline(name, graph, problem.n_devices) for name in BASELINES]
    return out + [s for _, s in one_device_each_kind(graph, problem.cluster)]
