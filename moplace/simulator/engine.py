"""Turn a strategy into a trace: when each op ran, what moved, how much memory was held.

The model, in the spirit of FlexFlow's and Trinity's simulators:

- Each device runs one task at a time. Among tasks whose inputs have all arrived, the one with
  the highest priority starts as soon as the device is free (ties: lower op index first).
- An op's output goes once to each other device that consumes it, as one transfer of
  ``latency + bytes / bandwidth`` (several consumers on one device share it; the largest of
  their edge sizes is sent). A transfer holds every link or port on its route for its duration,
  so transfers sharing a link queue in the order they were issued; transfers overlap compute.
- Split ops run as parts (see `moplace.simulator.taskgraph`); a batch split of an op with weight
  gradients has them all-reduced among its parts' devices, in buckets, as NCCL runs it
  (`moplace.simulator.collectives`: a ring in the order of the fastest links, holding them for
  ``2 (n-1) (latency + bytes / (n * bandwidth))`` and moving ``2 (n-1) / n * bytes`` in and out
  of every ring device; hierarchical across servers); update ops wait for it.
- Memory per device: parameters of every task on it for the whole step (a batch part holds a
  full replica, a channel part its share); a task's output from its start until its last local
  consumer has finished and its transfers have left; a received tensor from its arrival until
  its last consumer on the receiver has finished. The peak is the maximum over time.

Same inputs, same trace: ties are broken by index and event sequence, never by chance.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ..core.graph import OpGraph
from ..core.strategy import Strategy
from ..costs.costmodel import CostModel
from ._simcore import simulate_core, work_sizes
from .build import build_task_graph
from .taskgraph import TaskGraph


class DeviceFigures:
    """What a step's per-device ``sent``, ``received``, ``peak_memory`` and ``capacity`` say
    (a `Trace`'s, and a regular plan's at scale: `moplace.simulator.atscale.ScaledTrace`)."""

    @property
    def traffic(self) -> np.ndarray:
        """Bytes each device sends plus receives."""
        return self.sent + self.received

    @property
    def memory_excess(self) -> np.ndarray:
        """Bytes by which each device's peak memory exceeds its capacity (0 where it fits)."""
        return np.maximum(self.peak_memory - self.capacity, 0.0)

    @property
    def feasible(self) -> bool:
        """True when every device's peak memory fits its capacity."""
        return bool(np.all(self.memory_excess == 0))


@dataclass(frozen=True, eq=False)
class Trace(DeviceFigures):
    """What one simulated training step did. Times in seconds, sizes in bytes.

    Per task (an op or one part of a split op; collectives last): ``task_op``, ``task_device``
    (-1 for a collective), ``task_start``, ``task_end``. Per op: ``op_start`` (first part) and
    ``op_end`` (last part). Per device: ``sent``, ``received``, ``peak_memory``, ``capacity``,
    ``busy`` (compute seconds), and the devices' ``device_names`` and ``device_kinds``.
    Recorded only when simulated with ``record=True`` (for figures; empty otherwise): per
    transfer, in the order they were issued, ``transfers``, an (n, 6) array of producing task,
    source device, destination device, bytes, start and arrival time; and ``memory``, a (k, 3)
    array with one row per change of a device's resident bytes, in event order: time, device,
    bytes resident after the change (each device holds ``static_memory`` at time 0). Task
    ``k``'s kind: a compute part when ``task_device[k] >= 0``, else a collective, the c-th
    of which runs on devices ``collective_dev[collective_ptr[c]:collective_ptr[c + 1]]``
    and is of kind ``KINDS[collective_kind[c]]`` (`moplace.simulator.collectives`). The last
    ``n_recomputed`` compute tasks (just before the collectives) run recomputed forward ops a
    second time (`moplace.simulator.recompute`); ``recomputed`` marks them. With
    micro-batches, ``task_micro_batch`` is each task's micro-batch (-1 for a collective; empty
    without micro-batches), ``stage`` each device's pipeline stage (1 first, 0 for a device
    running no forward copy; empty without micro-batches), and an op's ``op_start``/``op_end``
    span its first micro-batch's start to its last's end.
    """

    makespan: float
    task_op: np.ndarray
    task_device: np.ndarray
    task_start: np.ndarray
    task_end: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    sent: np.ndarray
    received: np.ndarray
    peak_memory: np.ndarray
    capacity: np.ndarray
    busy: np.ndarray
    n_transfers: int
    device_names: tuple[str, ...] = ()
    device_kinds: tuple[str, ...] = ()
    static_memory: np.ndarray = field(default_factory=lambda: np.zeros(0))
    collective_ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    collective_dev: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    collective_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    n_recomputed: int = 0
    task_micro_batch: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    stage: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    transfers: np.ndarray = field(default_factory=lambda: np.empty((0, 6)))
    memory: np.ndarray = field(default_factory=lambda: np.empty((0, 3)))

    #: what a pickled trace leaves out (a checkpoint holds thousands of traces): the per-task,
    #: per-op and recorded arrays, which only a figure of one chosen strategy reads, and
    #: which re-simulating that strategy gives again; the per-device figures stay
    PER_TASK = ("task_op", "task_device", "task_start", "task_end", "op_start", "op_end",
                "task_micro_batch", "transfers", "memory")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for key in self.PER_TASK:
            value = state[key]
            state[key] = np.empty((0,) + value.shape[1:], value.dtype)
        return state

    def __setstate__(self, state: dict) -> None:
        state.setdefault("collective_kind", np.zeros(0, np.int64))  # pickled before kinds
        state.setdefault("n_recomputed", 0)  # pickled before recomputation
        state.setdefault("task_micro_batch", np.zeros(0, np.int64))  # before micro-batches
        state.setdefault("stage", np.zeros(0, np.int64))
        self.__dict__.update(state)

    @property
    def recomputed(self) -> np.ndarray:
        """Per task: does it run a recomputed op again?"""
        flags = np.zeros(self.task_op.size, bool)
        n_compute = int(np.count_nonzero(self.task_device >= 0))
        flags[n_compute - self.n_recomputed:n_compute] = True
        return flags



def compiled_on_disk() -> bool:
    """Whether numba's on-disk cache holds the event loop already (else the first simulation
    of this install compiles it: about a minute of one core). True when that cannot be told."""
    from pathlib import Path

    try:
        return Path(simulate_core._cache._cache_file._index_path).exists()
    except AttributeError:  # another numba's cache layout: assume compiled
        return True


def simulate(graph: OpGraph, cluster, strategy: Strategy, *, costs: CostModel | None = None,
             validate: bool = True, record: bool = False) -> Trace:
    """Simulate one training step of ``graph`` on ``cluster`` under ``strategy``; ``record``
    keeps every transfer and memory change in the trace (for figures, a little slower). To
    simulate a strategy on its parent's task graph, patched, see
    `moplace.simulator.incremental`."""
    if validate:
        strategy.validate(graph, cluster.n_devices)
    costs = costs if costs is not None else CostModel(graph, cluster)
    tg = build_task_graph(graph, strategy, costs)
    return run_task_graph(tg, cluster, len(graph.ops), record=record)


def run_task_graph(tg: TaskGraph, cluster, n_ops: int, record: bool = False) -> Trace:
    """Simulate an already expanded task graph."""
    n_dev = cluster.n_devices
    static = tg.static_memory(n_dev)
    iw, fw = _workspace(tg, cluster, record)
    start, end = np.empty(tg.n_tasks), np.empty(tg.n_tasks)
    out = simulate_core(
        n_dev, tg.dev, tg.dur, tg.prio, tg.out_bytes, tg.n_compute,
        tg.out_ptr, tg.e_src, tg.e_dst, tg.e_bytes, tg.e_srcdev, tg.e_local, tg.in_ptr, tg.in_edge,
        cluster.route_ptr, cluster.route_res, cluster.n_resources,
        cluster.bandwidth, cluster.latency,
        tg.coll_ptr, tg.coll_dev, tg.coll_res_ptr, tg.coll_res, tg.coll_dur, tg.coll_bytes,
        tg.ip_src, tg.scratch, tg.gate, tg.opens, static, record, iw, fw, start, end)
    return trace_from_outputs(tg, cluster, n_ops, static, start, end, *out)


_WORK = threading.local()


def _workspace(tg: TaskGraph, cluster, record: bool) -> tuple[np.ndarray, np.ndarray]:
    """This thread's work buffers, grown (never shrunk) to what ``tg`` needs: a search
    evaluating thousands of strategies allocates them once."""
    ni, nf = work_sizes(tg.n_tasks, tg.n_compute, tg.e_src.size, cluster.n_devices,
                        cluster.n_resources, record)
    iw, fw = getattr(_WORK, "iw", None), getattr(_WORK, "fw", None)
    if iw is None or iw.size < ni:
        iw = _WORK.iw = np.empty(ni, np.int64)
    if fw is None or fw.size < nf:
        fw = _WORK.fw = np.empty(nf)
    return iw, fw


def trace_from_outputs(tg: TaskGraph, cluster, n_ops: int, static, start, end, sent, recv, peak,
                       n_x, n_done, transfers, memory) -> Trace:
    """The `Trace` of a simulated task graph from what the event loop returned."""
    if n_done != tg.n_tasks:  # cannot happen for an acyclic graph; guard against kernel bugs
        raise RuntimeError(f"simulator finished {n_done} of {tg.n_tasks} tasks")
    comp = slice(0, tg.n_compute)
    n_recomputed = tg.n_recomputed if tg.n_recomputed >= 0 else tg.n_compute - tg.op_ptr[n_ops]
    if tg.n_tasks == n_ops:  # no splits: tasks are ops
        op_start, op_end = start, end
    elif tg.task_mb.size:  # micro-batches: an op spans its first copy's start to its last's end
        op_start, op_end = _op_spans(tg.task_op, start, end, tg.n_compute - n_recomputed,
                                     n_ops)
        colls = slice(tg.n_compute, tg.n_tasks)
        op_end[tg.task_op[colls]] = np.maximum(op_end[tg.task_op[colls]], end[colls])
    else:  # an op spans its first part's start to its last part's (or all-reduce's) end;
        first = tg.op_ptr[:n_ops]  # its recomputation (tasks after op_ptr[n_ops]) not counted
        own = slice(0, tg.op_ptr[n_ops])
        op_start = np.minimum.reduceat(start[own], first)
        op_end = np.maximum.reduceat(end[own], first)
        colls = slice(tg.n_compute, tg.n_tasks)
        op_end[tg.task_op[colls]] = np.maximum(op_end[tg.task_op[colls]], end[colls])
    return Trace(
        makespan=float(end.max()) if end.size else 0.0,
        task_op=tg.task_op, task_device=tg.dev, task_start=start, task_end=end,
        op_start=op_start, op_end=op_end, sent=sent, received=recv, peak_memory=peak,
        capacity=np.asarray(cluster.memory, np.float64),
        busy=np.bincount(tg.dev[comp], weights=tg.dur[comp], minlength=cluster.n_devices),
        n_transfers=int(n_x), device_names=cluster.device_names, device_kinds=cluster.kinds,
        static_memory=static, collective_ptr=tg.coll_ptr, collective_dev=tg.coll_dev,
        collective_kind=tg.coll_kind, n_recomputed=int(n_recomputed), task_micro_batch=tg.task_mb,
        stage=tg.stage,
        transfers=transfers, memory=memory)


@njit(cache=True, nogil=True)
def _op_spans(task_op, start, end, n_own, n_ops):
    """Per op, the first start and the last end of its tasks among the first ``n_own``."""
    op_start, op_end = np.full(n_ops, np.inf), np.zeros(n_ops)
    for t in range(n_own):
        o = task_op[t]
        op_start[o] = min(op_start[o], start[t])
        op_end[o] = max(op_end[o], end[t])
    return op_start, op_end
