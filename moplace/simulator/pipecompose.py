"""A regular plan's pipeline of ``m`` micro-batches composed from one micro-batch simulated op
by op (what `moplace.simulator.atscale` runs: the symmetry of identical micro-batches).

Every micro-batch of a regular plan runs the same ops on the same devices: stage ``j``'s
forward of micro-batch ``k`` is the same work whichever ``k``, and so is its backward. So the
replica's step of one micro-batch is simulated op by op (`blocks_of`: tensor- and
context-parallel collectives, recomputation, the sends between stages, each device's memory
over time), and cut into **blocks**: per stage (``S = pp * v`` of them, stage ``j`` on rank
``j mod pp``) its forward's and its backward's seconds from the arrival of their input to
their last op's end, the seconds from a stage's end to the next one's input (the send), the
activation bytes a forward leaves for its backward on each device, and per rank what runs
once after its last backward (the updates, a context-parallel group's gradient reduction).

`compose` then runs the blocks in each rank's order of actions, strictly, as Megatron-LM and
``torch.distributed.pipelining`` run them: 1F1B (``pp - r`` forwards in flight on rank r),
GPipe, or interleaved 1F1B (`moplace.simulator.pipeorder.rank_actions`). An action starts when
its rank is free and its input has arrived: a forward after the previous stage's forward of
its micro-batch and the send, a backward after the next stage's backward and its send (the
last stage's after its own forward). A rank's peak memory, with two or more micro-batches,
is the most it holds over its actions (at least its one micro-batch's peak): its static
bytes, the weight gradients of the chunks whose backward has run (accumulated from there
on), the activations of the micro-batches in flight, and as a backward runs its working set
(what the one micro-batch held besides its static bytes, gradients and activations).

What this leaves out, against simulating every micro-batch's ops: sends that queue on one
link behind another micro-batch's, and a rank starting one micro-batch's ops while it waits
for another's input (the full simulation's priorities let a ready op run; a runtime's ranks,
and `compose`, run actions in order). Zero-bubble's split backward is not composed: its plans
are simulated whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.graph import ROLES
from .pipeorder import B, F, rank_actions

_FORWARD, _BACKWARD = ROLES.index("forward"), ROLES.index("backward")
#: the schedules `compose` runs
COMPOSED = ("1f1b", "gpipe", "interleaved")


@dataclass(frozen=True)
class Blocks:
    """One micro-batch of a replica cut into blocks (module docstring): ``p`` ranks of ``w``
    devices, ``v`` chunks each; per stage ``fwd``/``bwd`` seconds, ``held`` (stage x device of
    its rank) activation bytes; per stage but the last, ``fwd_send`` (its forward's end to the
    next stage's forward input) and ``bwd_send`` (the next stage's backward's end to this
    one's backward input); per rank ``tail`` (seconds after its last backward) and per
    device ``peak`` (the one micro-batch's peak memory) and ``held_once`` (the activations
    the one micro-batch held at most: every chunk's, as its forwards all run first)."""

    p: int
    v: int
    w: int
    fwd: np.ndarray
    bwd: np.ndarray
    fwd_send: np.ndarray
    bwd_send: np.ndarray
    held: np.ndarray
    tail: np.ndarray
    peak: np.ndarray
    #: per device its static bytes; per stage and device of its rank the weight gradients
    #: the stage's backward makes there (held from its first backward to the update,
    #: accumulated over the micro-batches); per device the most the one micro-batch held at
    #: once besides its static bytes, the gradients made so far and its activations (the
    #: backward's working set)
    static: np.ndarray
    grads: np.ndarray
    transient: np.ndarray


def blocks_of(trace, role: np.ndarray, stage_of_op: np.ndarray, p: int, v: int,
              w: int, task_grads: np.ndarray) -> Blocks:
    """The blocks of ``trace``, one micro-batch of a replica simulated with ``record`` (its
    transfers and memory over time), ``role`` and ``stage_of_op`` (0 .. p v - 1) per op of its
    graph, ``task_grads`` per compute task the weight-gradient bytes it makes; the replica's
    devices are ``p`` ranks of ``w`` in order."""
    S = p * v
    dev = trace.task_device
    comp = np.flatnonzero(dev >= 0)
    op = trace.task_op[comp]
    end = trace.task_end[comp]
    recomputed = trace.recomputed[comp]
    stage = stage_of_op[op]
    fwd = (role[op] == _FORWARD) & ~recomputed
    bwd = (role[op] == _BACKWARD) | recomputed
    f_end, b_end = _latest(stage[fwd], end[fwd], S), _latest(stage[bwd], end[bwd], S)
    # the arrival of each stage's input: the latest transfer from the stage before (forward)
    # or after (backward) into its rank, of what that stage's forward (backward) made
    x = trace.transfers
    f_in, b_in = np.zeros(S), f_end.copy()  # the first stage's forward input is there at 0,
    if x.size:  # the last stage's backward follows its forward
        task = x[:, 0].astype(np.int64)
        dst_dev = x[:, 2].astype(np.int64)
        ok = dev[task] >= 0
        task, dst_dev, arrive = task[ok], dst_dev[ok], x[ok, 5]
        xs = stage_of_op[trace.task_op[task]]
        xrole = role[trace.task_op[task]]
        xrec = trace.recomputed[task]
        to_rank = dst_dev // w
        nxt = (xs + 1) % p == to_rank
        prv = (xs - 1) % p == to_rank
        sel = (xrole == _FORWARD) & ~xrec & nxt & (xs + 1 < S)
        arrived = _latest(xs[sel] + 1, arrive[sel], S)
        f_in = np.where(arrived > 0, arrived, f_in)
        sel = ((xrole == _BACKWARD) | xrec) & prv & (xs >= 1)
        arrived = _latest(xs[sel] - 1, arrive[sel], S)
        b_in = np.where(arrived > 0, arrived, b_in)
    f_in[0] = 0.0
    b_in[S - 1] = f_end[S - 1]
    fwd_s = np.maximum(f_end - f_in, 0.0)
    bwd_s = np.maximum(b_end - b_in, 0.0)
    fwd_send = f_in[1:] - f_end[:-1]
    bwd_send = b_in[:-1] - b_end[1:]
    # per rank, what runs after its last backward: its updates, a group's gradient reduction
    rank_last_b = np.full(p, 0.0)
    np.maximum.at(rank_last_b, np.arange(S) % p, b_end)
    rank_end = np.zeros(p)
    np.maximum.at(rank_end, dev[comp] // w, end)
    cdev, cptr = trace.collective_dev, trace.collective_ptr
    if cdev.size:
        n_c = cptr.size - 1
        ends = trace.task_end[trace.task_device < 0][:n_c]
        owner = cdev[cptr[:-1]] // w
        np.maximum.at(rank_end, owner, ends)
    tail = np.maximum(rank_end - rank_last_b, 0.0)
    held = _held(trace.memory, trace.static_memory, S, p, w, f_in, f_end)
    static = np.asarray(trace.static_memory, np.float64)
    grads = np.zeros((S, w))
    np.add.at(grads, (stage, dev[comp] % w), task_grads)
    once = np.zeros((p, w))  # the activations the one micro-batch held at most: every chunk's
    np.add.at(once, np.arange(S) % p, held)
    transient = np.maximum(_beside_gradients(trace, comp, task_grads, static, p * w)
                           - once.ravel(), 0.0)
    return Blocks(p, v, w, fwd_s, bwd_s, fwd_send, bwd_send, held, tail,
                  np.asarray(trace.peak_memory, np.float64), static, grads, transient)


def _beside_gradients(trace, comp, task_grads, static, n_dev: int) -> np.ndarray:
    """Per device the most it held at once besides its static bytes and the weight
    gradients its tasks had made so far (each held from its task's start to the update)."""
    dev = trace.task_device[comp]
    mem = trace.memory
    if not mem.size:
        return np.maximum(trace.peak_memory - static, 0.0)
    # the gradients made by each memory change's time on its device: every device's
    # gradient-making tasks by start, their bytes summed, looked up at the changes
    mine = np.flatnonzero(task_grads > 0)
    order = mine[np.lexsort((trace.task_start[comp][mine], dev[mine]))]
    made = np.cumsum(task_grads[order])
    key_t, key_d = trace.task_start[comp][order], dev[order]
    span = float(max(trace.makespan, 1.0)) * 4.0  # devices apart on one time axis
    keys = key_d * span + key_t
    d = mem[:, 1].astype(np.int64)
    at = np.searchsorted(keys, d * span + mem[:, 0], side="right")
    first = np.searchsorted(key_d, d, side="left")  # the device's first such task
    before = np.where(first > 0, made[np.maximum(first - 1, 0)], 0.0) if made.size else 0.0
    so_far = (np.where(at > first, made[np.maximum(at - 1, 0)], before) - before
              if made.size else np.zeros(d.size))
    transient = np.zeros(n_dev)
    np.maximum.at(transient, d, mem[:, 2] - static[d] - so_far)
    return transient


def _latest(index: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n)
    if index.size:
        np.maximum.at(out, index, values)
    return out


def _held(memory: np.ndarray, static: np.ndarray, S: int, p: int, w: int, f_in, f_end
          ) -> np.ndarray:
    """Per stage and device of its rank, the bytes its forward left resident: what the
    device holds at its forward's end less what it held before its input arrived."""
    held = np.zeros((S, w))
    if not memory.size:
        return held
    d = memory[:, 1].astype(np.int64)
    order = np.argsort(d, kind="stable")  # each device's changes, in time order
    t, b = memory[order, 0], memory[order, 2]
    bounds = np.searchsorted(d[order], np.arange(p * w + 1))
    for j in range(S):
        r = j % p
        for k in range(w):
            device = r * w + k
            lo, hi = bounds[device], bounds[device + 1]
            times, resident = t[lo:hi], b[lo:hi]
            before = _resident(times, resident, f_in[j], static[device], strictly=True)
            after = _resident(times, resident, f_end[j], static[device], strictly=False)
            held[j, k] = max(after - before, 0.0)
    return held


def _resident(times, resident, at: float, static: float, strictly: bool) -> float:
    i = np.searchsorted(times, at, side="left" if strictly else "right")
    return float(resident[i - 1]) if i else float(static)


@dataclass(frozen=True)
class Composed:
    """The step of ``m`` micro-batches: per rank ``end`` (its last action's end plus its
    tail), ``peak`` per device (rank-major), ``in_flight`` per rank (the most micro-batches'
    activations it held at once, summed over its chunks as micro-batch-chunks) and the
    ``makespan``; per rank ``timeline``, its actions in order as rows (kind F or B, chunk,
    micro-batch, start, end: seconds from the step's start)."""

    end: np.ndarray
    peak: np.ndarray
    in_flight: np.ndarray
    makespan: float
    timeline: tuple = ()


def _rank_peak(blocks: Blocks, acts, r: int, steps: np.ndarray) -> np.ndarray:
    """Per device of rank ``r`` the most it holds over its actions ``acts``: its static
    bytes, the gradients of the chunks whose backward has run (from their first backward on)
    and the activations of the micro-batches in flight, after each forward and as each
    backward starts, plus the backward's working set as each backward runs."""
    p, w = blocks.p, blocks.w
    mine = slice(r * w, (r + 1) * w)
    kind = np.array([k for k, _, _ in acts])
    stage = np.array([c for _, c, _ in acts]) * p + r
    # the gradients after each action: a chunk's from its first backward on
    first_b = np.zeros(len(acts), bool)
    backs = np.flatnonzero(kind == B)
    first_b[backs[np.unique(stage[backs], return_index=True)[1]]] = True
    grads = np.cumsum(np.where(first_b[:, None], blocks.grads[stage], 0.0), axis=0)
    held = np.cumsum(steps, axis=0)
    # a backward as it starts: what the action before it left, and its working set
    before = np.vstack([np.zeros((1, w)), grads[:-1] + held[:-1]])
    hold = np.where((kind == F)[:, None], grads + held, before + blocks.transient[mine])
    return blocks.static[mine] + np.maximum(hold.max(axis=0), 0.0)


def actions(schedule: str, p: int, v: int, m: int, rank: int) -> list[tuple[int, int, int]]:
    """Rank ``rank``'s actions, each (kind F or B, chunk, micro-batch), in order."""
    if schedule == "interleaved" and v > 1:
        return [a for a in rank_actions("interleaved", p, v, m, rank) if a[0] in (F, B)]
    if schedule == "gpipe":
        return [(F, 0, k) for k in range(m)] + [(B, 0, k) for k in range(m)]
    warm = min(p - rank, m)  # 1F1B: pp - r in flight, then one backward, one forward
    out = [(F, 0, k) for k in range(warm)]
    for k in range(m):
        out.append((B, 0, k))
        if warm + k < m:
            out.append((F, 0, warm + k))
    return out


def compose(blocks: Blocks, schedule: str, m: int) -> Composed:
    """The step of ``m`` micro-batches run as ``schedule`` from ``blocks`` (module
    docstring)."""
    p, v, w = blocks.p, blocks.v, blocks.w
    S = p * v
    lists = [actions(schedule, p, v, m, r) for r in range(p)]
    done = {F: np.full((S, m), np.nan), B: np.full((S, m), np.nan)}
    free = np.zeros(p)
    at = [0] * p
    spans = [np.zeros((len(x), 2)) for x in lists]
    left = sum(len(x) for x in lists)
    while left:
        moved = False
        for r in range(p):
            while at[r] < len(lists[r]):
                kind, chunk, k = lists[r][at[r]]
                j = chunk * p + r
                if kind == F:
                    ready = 0.0 if j == 0 else done[F][j - 1, k] + blocks.fwd_send[j - 1]
                    dur = blocks.fwd[j]
                else:
                    ready = (done[F][j, k] if j == S - 1 else
                             done[B][j + 1, k] + blocks.bwd_send[j])
                    dur = blocks.bwd[j]
                if np.isnan(ready):
                    break
                spans[r][at[r], 0] = max(free[r], ready)
                free[r] = spans[r][at[r], 0] + dur
                spans[r][at[r], 1] = free[r]
                done[kind][j, k] = free[r]
                at[r] += 1
                left -= 1
                moved = True
        if not moved:  # cannot happen for these schedules; guard the loop
            raise RuntimeError(f"{schedule} over {p} ranks x {v} chunks, {m} micro-batches: "
                               f"the actions wait on each other")
    end = free + blocks.tail
    peak = blocks.peak.copy()
    in_flight = np.zeros(p, np.int64)
    for r in range(p):
        sign = np.array([1.0 if kind == F else -1.0 for kind, _, _ in lists[r]])
        chunk = np.array([c for _, c, _ in lists[r]])
        steps = sign[:, None] * blocks.held[chunk * p + r]  # (actions, w)
        mine = slice(r * w, (r + 1) * w)
        if m > 1:  # what it holds over its actions, at least the one micro-batch's peak
            peak[mine] = np.maximum(peak[mine], _rank_peak(blocks, lists[r], r, steps))
        in_flight[r] = int(np.cumsum(sign).max())
    timeline = tuple(np.column_stack([np.array(lists[r], float).reshape(-1, 3), spans[r]])
                     for r in range(p))
    return Composed(end, peak, in_flight, float(end.max()), timeline)
