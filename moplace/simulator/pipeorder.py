"""The pipeline schedules that run each device's work in a fixed order of actions, as
``torch.distributed.pipelining`` and Megatron-LM run them: **interleaved** 1F1B (each device
holds ``v`` virtual stages, Megatron's order) and **zero-bubble** (the backward cut into an
input-gradient part B and a weight-gradient part W, W filling the bubble: PyTorch's
``ScheduleInterleavedZeroBubble``, the ZB-H1 schedule of Qi et al. 2024 with one stage per
device, ``ZB1P`` with several).

**Layout.** The forward flows through ``S`` stages: an op's stage is the number of device
changes on the longest forward path into it (`pipeline_layout`; a split op counts as its
first part's device, so a data- or tensor-parallel stage is one stage). The ``p`` devices
that run forward ops are the pipeline's ranks; these schedules need ``S = p * v`` stages laid
round-robin, stage ``j`` on the device of rank ``j mod p`` (its virtual stage, or *chunk*,
``j // p``), as Megatron and torchtitan lay them; any other layout is a `StrategyError`
naming it. A backward op's stage mirrors the forward's: the device changes on the longest
backward path into it, counted from the loss.

**Actions.** Rank r runs the actions `rank_actions` lists, each the forward (F), backward (B)
or weight gradient (W) of one chunk and micro-batch, in that order; the list is the one
PyTorch 2.13's ``ScheduleInterleaved1F1B`` / ``ScheduleInterleavedZeroBubble`` compute
(``_calculate_single_rank_operations``; tests/test_pipeline_schedules.py holds them equal),
which for interleaved 1F1B is Megatron's (warmup ``(v - 1) p + 2 (p - 1 - r)`` forwards,
then one forward, one backward). A backward op's chunk is that of the forward values it
reads on its device (its layer's activations), never past a backward input's on its device.
Under zero-bubble a backward op is B when it makes what the stage sends back (a backward op
of another stage reads it) or what a B op of its stage reads, and W otherwise (a weight's
gradient and what only leads to it; on the first stage, which sends nothing back, the whole
backward); every recomputed clone is B, and so is a W that a recomputed run waits for
(`moplace.simulator.recompute`: the clones start when the backward reaches them; held back,
it would hold them for ever), with every op of its stage that leads to it. A graph whose
backward ops compute both gradients in one op gains nothing from zero-bubble: they are B.

**Order.** A compute task's priority is its action's position (its slot) on its rank, then
its op's priority; and a device runs its slots strictly in order: each task of a slot that
no task of the same slot on its device feeds waits for the last task (in the plan's
topological order) of the device's previous slot, as a rank of the runtime blocks until the
action before it is done. What a task sends to another device leaves when the task ends,
not when its action does (a runtime sends a stage's output after computing the stage whole:
the simulator is early by the ops after it in its action, a weight gradient's at a stage's
input; waiting for the action's end would deadlock where a plan's backward goes back and
forth between two devices within one action). The waits are edges without bytes
(`moplace.simulator.schedule`'s `with_waits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import njit

from ..core.graph import ROLES, OpGraph
from ..core.virtual import round_robin, stage_depths
from ..errors import StrategyError
from .microbatch import FORWARD, ONCE
from .schedule import last_of

#: the kinds of action: forward, backward (input gradient; the whole backward but under
#: zero-bubble) and weight gradient
F, B, W = 0, 1, 2
_FWD = ROLES.index("forward")


def micro_batch_refusal(schedule: str, p: int, v: int, m: int) -> str | None:
    """Why ``schedule`` cannot run ``m`` micro-batches over ``p`` ranks of ``v`` virtual
    stages each (None: it can): interleaved 1F1B needs ``m`` a multiple of ``p`` (Megatron
    requires it); both need ``m`` a multiple of its rounds, ``max(1, m // p)`` (PyTorch)."""
    if schedule == "interleaved" and v > 1 and m % p:
        return (f"interleaved 1F1B over {p} pipeline ranks needs the micro-batches a multiple "
                f"of {p} (Megatron-LM's rule), got {m}")
    rounds = max(1, m // p)
    if m % rounds:
        return (f"{schedule} over {p} pipeline ranks runs micro-batches in {rounds} rounds "
                f"of equal size: {m} does not divide by {rounds}")
    return None


@lru_cache(maxsize=256)
def rank_actions(schedule: str, p: int, v: int, m: int, rank: int
                 ) -> tuple[tuple[int, int, int], ...]:
    """Rank ``rank``'s actions in order, each ``(kind, chunk, micro-batch)`` (kind `F`, `B`
    or `W`), under ``schedule`` (`moplace.core.options.VIRTUAL_SCHEDULES`) with ``p`` ranks, ``v`` chunks each and ``m``
    micro-batches (see the module docstring)."""
    zb = schedule == "zero-bubble"
    per_round = m // max(1, m // p)
    total = m * v
    warmup = min((v - 1) * per_round + (1 if zb else 2) * (p - 1 - rank), total)
    late_w = rank if zb else None  # zero-bubble: rank r holds r weight gradients back

    def fwd_chunk(step):
        return (step // per_round) % v

    def bwd_chunk(step):
        return v - 1 - ((step - warmup) // per_round) % v

    count = {F: [0] * v, B: [0] * v, W: [0] * v}
    out: list[tuple[int, int, int]] = []
    backs: list[int] = []
    w_done = 0

    def act(kind, chunk):
        out.append((kind, chunk, count[kind][chunk]))
        count[kind][chunk] += 1

    for step in range(total + warmup):
        if step < warmup:
            act(F, fwd_chunk(step))
            continue
        if step < total:
            act(F, fwd_chunk(step))
        act(B, bwd_chunk(step))
        backs.append(step)
        if zb and step - warmup >= late_w:
            act(W, bwd_chunk(backs[w_done]))
            w_done += 1
    while zb and w_done < len(backs):
        act(W, bwd_chunk(backs[w_done]))
        w_done += 1
    return tuple(out)


@dataclass(frozen=True)
class Layout:
    """A pipelined strategy's stages (see the module docstring): ``p`` ranks of ``v``
    chunks; per device its rank (-1: it runs no forward op as a stage's first device); per
    op of the graph its chunk, whether zero-bubble runs it as a W (``weight``) and whether it
    is a source (``source``: a weight or an input, there from the step's start: in no
    action, as a weight tied to a later layer, GPT-2's, would otherwise wait for that
    layer's action)."""

    p: int
    v: int
    rank: np.ndarray
    chunk: np.ndarray
    weight: np.ndarray
    source: np.ndarray


def pipeline_layout(graph: OpGraph, placement: np.ndarray, n_dev: int, schedule: str,
                    input_gradient: np.ndarray | None = None) -> Layout:
    """The `Layout` of a strategy placing ``graph``'s ops on ``placement`` (each split op on
    its first part's device); `StrategyError` when its stages are not laid round-robin.
    ``input_gradient``: per op, B whatever it makes (a recomputed run waits for it), and so
    is what leads to it."""
    a = graph.arrays
    dev = np.asarray(placement, np.int64)
    fst, bst = stage_depths(graph, dev)
    fwd = a.role == _FWD
    if not fwd.any():
        raise StrategyError(f"the {schedule} schedule needs forward ops; graph {graph.name!r} "
                            "has none")
    S = int(fst[fwd].max()) + 1
    first = np.full(S, np.iinfo(np.int64).max)  # each stage's least device
    np.minimum.at(first, fst[fwd], dev[fwd])
    p = round_robin(first.tolist())
    if not p:
        p = np.unique(first).size
        of_rank = first[np.sort(np.unique(first, return_index=True)[1])]
        bad = np.flatnonzero(of_rank[np.arange(S) % p] != first)
        j = int(bad[0]) if bad.size else S - 1
        raise StrategyError(
            f"the {schedule} schedule needs the pipeline's {S} stages laid round-robin over "
            f"its {p} devices (stage j on the device of stage j mod {p}, as Megatron-LM and "
            f"torchtitan lay virtual stages); stage {j} runs on device {int(first[j])}")
    of_rank, v = first[:p], S // p
    fchunk = np.clip(fst, 0, S - 1) // p
    rank = np.full(max(n_dev, int(dev.max()) + 1), -1, np.int64)
    rank[of_rank] = np.arange(p)
    chunk = _backward_chunks(a.topo, a.in_ptr, a.in_edge, a.src, a.role, dev, fchunk,
                             np.clip(S - 1 - bst, 0, S - 1) // p, rank, p)
    forced = (np.zeros(len(graph.ops), bool) if input_gradient is None
              else np.asarray(input_gradient, bool))
    weight = (_weight_gradients(a.topo, a.out_ptr, a.out_edge, a.dst, a.role, dev, chunk,
                                forced)
              if schedule == "zero-bubble" else np.zeros(len(graph.ops), bool))
    return Layout(p, v, rank, chunk.astype(np.int64), weight, np.diff(a.in_ptr) == 0)


def ordered_priorities(layout: Layout, schedule: str, m: int, orig: np.ndarray,
                       dev: np.ndarray, phase: np.ndarray, mb: np.ndarray,
                       primary: np.ndarray, priority: np.ndarray, n_tasks: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Per compute task (of graph op ``orig``, on device ``dev``, its op's first device
    ``primary``) its slot on its rank (-1: run once) and its priority (`n_tasks` long: 0 for
    the collectives after the compute tasks); see the module docstring."""
    p, v = layout.p, layout.v
    refusal = micro_batch_refusal(schedule, p, v, m)
    if refusal:
        raise StrategyError(refusal)
    table = np.full((p, 3, v, m), -1, np.int64)
    for r in range(p):
        acts = np.array(rank_actions(schedule, p, v, m, r), np.int64).reshape(-1, 3)
        table[r, acts[:, 0], acts[:, 1], acts[:, 2]] = np.arange(acts.shape[0])
    kind = np.where(phase == FORWARD, F, np.where(layout.weight[orig], W, B))
    rank = layout.rank[primary]
    staged = (phase != ONCE) & (rank >= 0) & ~layout.source[orig]
    slot = np.full(phase.size, -1, np.int64)
    slot[staged] = table[rank[staged], kind[staged], layout.chunk[orig][staged], mb[staged]]
    op_rank = np.unique(priority, return_inverse=True)[1].astype(np.float64)
    n_rank = op_rank.max() + 1 if op_rank.size else 1.0
    prio = np.zeros(n_tasks)
    top = float(table.max() + 2)
    prio[:phase.size] = (top - slot) * n_rank + op_rank[orig]
    return slot, prio


def slot_waits(slot: np.ndarray, dev: np.ndarray, position: np.ndarray, e_src: np.ndarray,
               e_dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The waits (source, destination compute tasks) that run each device's slots in order:
    each task of a slot that no task of the same slot and device feeds (along the edges
    ``e_src -> e_dst`` between compute tasks) waits for the last task, by ``position`` (the
    plan's topological order), of the device's previous slot."""
    nc = slot.size
    staged = np.flatnonzero(slot >= 0)
    if staged.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    base = slot.max() + 1
    key = dev[staged] * base + slot[staged]
    keys, inverse = np.unique(key, return_inverse=True)
    sink = last_of(inverse, position[staged], staged, keys.size)
    inner = (e_src < nc) & (e_dst < nc)
    s, d = e_src[inner], e_dst[inner]
    same = (slot[s] >= 0) & (slot[s] == slot[d]) & (dev[s] == dev[d])
    fed = np.zeros(nc, bool)
    fed[d[same]] = True
    entry = ~fed[staged]
    k = inverse[entry]
    prev_same_dev = (k > 0) & (keys[np.maximum(k - 1, 0)] // base == keys[k] // base)
    dst = staged[entry][prev_same_dev]
    src = sink[k[prev_same_dev] - 1]
    return src.astype(np.int64), dst.astype(np.int64)


@njit(cache=True)
def _backward_chunks(topo, in_ptr, in_edge, src, role, dev, fchunk, mirrored, rank, p):
    """Per op its chunk: a forward (or other) op's ``fchunk``; a backward op's, that of its
    backward inputs on its device (the backward stays in one chunk on a device: it leaves a
    chunk only for another device); where it has none, the chunk of the last stage on its
    device before the stage that sent it its gradient (stage ``chunk * p + rank``, ``rank``
    per device); where nothing sent it one, the deepest chunk of the forward values it reads
    on its device, else ``mirrored`` (its backward stage mirrored)."""
    n = topo.shape[0]
    chunk = fchunk.copy()
    for i in range(n):
        op = topo[i]
        if role[op] != 1:
            continue
        own = -1
        same = 1 << 62
        sent = -1
        for q in range(in_ptr[op], in_ptr[op + 1]):
            u = src[in_edge[q]]
            if role[u] == 1:
                if dev[u] == dev[op]:
                    same = min(same, chunk[u])
                else:
                    ru, ro = max(rank[dev[u]], 0), max(rank[dev[op]], 0)
                    back = (ru - ro) % p
                    j = chunk[u] * p + ru - (back if back > 0 else p)
                    sent = max(sent, j // p if j >= 0 else 0)
            elif role[u] != 2 and dev[u] == dev[op]:
                own = max(own, fchunk[u])
        if same < (1 << 62):
            chunk[op] = same
        elif sent >= 0:
            chunk[op] = sent
        else:
            chunk[op] = own if own >= 0 else mirrored[op]
    return chunk


@njit(cache=True)
def _weight_gradients(topo, out_ptr, out_edge, dst, role, dev, chunk, forced):
    """Per op: is it a weight-gradient (W) op, a backward op that no input-gradient (B) op
    of its stage (device and chunk) reads? A backward op is B when a backward op of another
    stage reads it (it makes the gradient the stage sends back) or a B op of its own does,
    or it is ``forced``."""
    n = topo.shape[0]
    b = forced.copy()
    for i in range(n - 1, -1, -1):
        op = topo[i]
        if role[op] != 1 or b[op]:
            continue
        for q in range(out_ptr[op], out_ptr[op + 1]):
            r = dst[out_edge[q]]
            if role[r] == 1 and (dev[r] != dev[op] or chunk[r] != chunk[op] or b[r]):
                b[op] = True
                break
    return (role == 1) & ~b
