"""A regular plan's data-parallel collectives: each pipeline rank's gradient reduction and
weight gather over its ``dp`` replicas (the experts' over ``dp / ep``), timed by
`moplace.simulator.nccl`, and what of them the step waits for (what
`moplace.simulator.atscale` models across replicas).

With ZeRO, a reduce-scatter of the gradients and an all-gather of the weights; without, an
all-reduce. Without ``overlap`` both run after the last backward, whole. With ``overlap``
(Megatron-LM's ``--overlap-grad-reduce --overlap-param-gather``) they run as Megatron-Core
r0.8.0 runs them (NVIDIA/Megatron-LM at f2e5db4; files under ``megatron/``, lines named),
over each rank's actions as the composed step times them
(`moplace.simulator.pipecompose.Composed.timeline`):

- **Buckets** of ``max(40 M, 1 M x dp)`` parameters (``core/distributed/
  distributed_data_parallel.py`` 51-54), on pipeline rank 0's first chunk only: every other
  rank's chunks, and rank 0's later chunks, are one bucket each (same file 66-74;
  ``training/training.py`` 455-458).
- **Gradients** (``--delay-grad-reduce``, the default), one collective at a time (one NCCL
  stream) in order of launch. Without virtual stages rank 0 reduces its buckets as its last
  micro-batch's backward makes them (``core/pipeline_parallel/schedules.py`` 1416-1417,
  1440-1442), any other rank its gradients after its last backward (1455-1458); with virtual
  stages a chunk's gradients go after the backward ``rank`` backwards after the chunk's last
  (750-758), and what is left after the rank's last backward (1073-1079).
- **Weights** (``--overlap-param-gather`` without ``--delay-param-gather``): the first
  bucket's gather starts with the step (``core/optimizer/distrib_optimizer.py`` 1336-1337)
  and each next one when the forward reaches the bucket before it and waits for it
  (1454-1470): a forward reaching a bucket not gathered yet waits for it, and the rank's
  step with it.

A rank's step ends its forwards' waits for the gathers (``stall``; the whole pipeline waits as
long as the rank that waits most, a wait at its first forwards holding the ranks behind it)
plus its gradients' collectives past its last action (``exposed``) after its composed end.
A step simulated whole has no timeline: each rank is given one of its micro-batch's forward
from the step's start and its backward at its end.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.graph import ROLES
from .nccl import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, collective_time, moved_bytes
from .pipeorder import B, F
from .replica import stride_of

_BACKWARD, _FORWARD, _UPDATE = (ROLES.index(r) for r in ("backward", "forward", "update"))


def bucket_params(dp: int) -> int:
    """Megatron-Core's default bucket: ``max(40 M, 1 M x dp)`` parameters."""
    return max(40_000_000, 1_000_000 * dp)


def data_parallel(rg, plan, pod, strategy, costs, rank_of_device, chunk_of_op, m: int,
                  timeline=None) -> dict:
    """Per pipeline rank: its data-parallel collectives' seconds (``reduce``, ``gather``), its
    ``stall`` and ``exposed`` seconds (module docstring), the bytes each of its devices
    ``moved`` in them; and the ``algorithms`` NCCL picks. ``timeline``: per rank its actions
    (`moplace.simulator.pipecompose.Composed.timeline`), or None for a step simulated whole
    (``m`` micro-batches in ``rg``'s ops)."""
    a = rg.graph.arrays
    pp, v = plan.pp, plan.v
    n_ops = len(rg.graph.ops)
    parts = np.ones(n_ops)
    shard = np.ones(n_ops)  # the ops cut on tensor or experts hold 1 / parts of the weights
    for op, split in strategy.splits.items():
        parts[op] = len(split.devices)
        if split.dim in ("tensor", "expert"):
            shard[op] = parts[op]
    weights = (a.param_bytes > 0) & (a.output_bytes == 0) & (a.role != _UPDATE)
    grad_elem = 4 if plan.grad_fp32 or plan.precision == "fp32" else 2
    # per op its rank and chunk as one key; per key (rank-major) the bytes its devices hold
    key = rank_of_device[strategy.placement] * v + chunk_of_op

    def per_key(x, on):
        return np.bincount(key[on], weights=x[on], minlength=pp * v)

    grads_all = per_key(a.grad_bytes / shard, slice(None))
    groups = [(name, per_key(a.grad_bytes / shard, mask),
               per_key(a.param_bytes / shard, mask & weights), n, stride)
              for name, mask, n, stride in (
                  ("dense", ~rg.expert, plan.dp, stride_of(plan, "dp")),
                  ("expert", rg.expert, plan.dp // plan.ep, stride_of(plan, "expert-dp")))]
    out = {k: np.zeros(pp) for k in ("reduce", "gather", "stall", "exposed", "moved")}
    algorithms: dict = {}
    # per rank and chunk: its buckets' reduce and gather seconds
    reduce = [[[] for _ in range(v)] for _ in range(pp)]
    gather = [[[] for _ in range(v)] for _ in range(pp)]
    for r in range(pp):
        for c in range(v):
            k = r * v + c
            n_b = 1
            if plan.overlap and k == 0 and grads_all[0] > 0:
                n_b = max(1, math.ceil(grads_all[0] / grad_elem / bucket_params(plan.dp)))
            t_r = t_g = 0.0
            for name, grads_of, held_of, n, stride in groups:
                grads, held = float(grads_of[k]), float(held_of[k])
                if n <= 1 or grads <= 0:
                    continue
                if plan.zero:
                    tr, alg = collective_time(pod, REDUCE_SCATTER, grads / n_b, n, stride)
                    tg, _ = collective_time(pod, ALL_GATHER, held / n_b, n, stride)
                    moved = moved_bytes(REDUCE_SCATTER, grads, n) + moved_bytes(ALL_GATHER,
                                                                                held, n)
                else:
                    tr, alg = collective_time(pod, ALL_REDUCE, grads / n_b, n, stride)
                    tg, moved = 0.0, moved_bytes(ALL_REDUCE, grads, n)
                algorithms[f"{name} gradients"] = alg
                t_r += tr
                t_g += tg
                out["moved"][r] += moved
            reduce[r][c], gather[r][c] = [t_r] * n_b, [t_g] * n_b
            out["reduce"][r] += t_r * n_b
            out["gather"][r] += t_g * n_b
    if timeline is None:
        timeline = _whole_spans(rg, plan, costs.compute[:, 0] / m / parts,
                                rank_of_device[strategy.placement], chunk_of_op, m)
    for r in range(pp):
        if not plan.overlap:
            out["exposed"][r] = out["reduce"][r] + out["gather"][r]
            continue
        rows = np.asarray(timeline[r])
        out["stall"][r] = gather_wait(rows, gather[r])
        out["exposed"][r] = reduce_past_end(rows, reduce[r], r, v)
    out["algorithms"] = algorithms
    return out


def gather_wait(rows: np.ndarray, gathers: list) -> float:
    """Seconds a rank's forwards wait for its weights' gathers: ``gathers[c]`` the seconds of
    chunk ``c``'s buckets in the order its forward uses them, each used a bucket's share into
    the chunk's first forward (``rows``: the rank's actions, kind, chunk, micro-batch, start,
    end), gathered one after another, each started as the forward waits for the one before
    (module docstring)."""
    uses = []
    for c, ts in enumerate(gathers):
        first = rows[(rows[:, 0] == F) & (rows[:, 1] == c)]
        if not len(first) or not sum(ts):
            continue
        s, e = float(first[0, 3]), float(first[0, 4])
        uses += [(s + i / len(ts) * (e - s), t) for i, t in enumerate(ts)]
    start = wait = 0.0
    for use, t in sorted(uses, key=lambda u: u[0]):
        ready = max(use + wait, start + t)
        wait, start = ready - use, ready
    return wait


def reduce_past_end(rows: np.ndarray, reduces: list, rank: int, v: int) -> float:
    """Seconds rank ``rank``'s gradient collectives (``reduces[c]``: chunk ``c``'s buckets',
    in the order its backward makes them) run past its last action (module docstring)."""
    backs = rows[rows[:, 0] == B]
    if not len(backs):
        return float(sum(map(sum, reduces)))
    last_end = float(rows[:, 4].max())
    launches = []
    if v == 1:
        s, e = float(backs[-1, 3]), float(backs[-1, 4])
        ts = reduces[0]
        if rank == 0:  # as the last backward makes each bucket
            launches = [(s + (i + 1) / len(ts) * (e - s), t) for i, t in enumerate(ts)]
        else:
            launches = [(e, sum(ts))]
    else:
        for c, ts in enumerate(reduces):
            mine = np.flatnonzero(backs[:, 1] == c)
            if not len(mine):
                continue
            at = int(mine[-1]) + rank
            when = float(backs[at, 4]) if at < len(backs) else last_end
            launches.append((when, sum(ts)))
    end = 0.0
    for when, t in sorted(launches, key=lambda x: x[0]):
        end = max(end, when) + t
    return max(0.0, end - last_end)


def _whole_spans(rg, plan, secs: np.ndarray, rank, chunk_of_op, m: int) -> list:
    """Per rank a stand-in timeline for a step simulated whole: per chunk one forward of a
    micro-batch's forward seconds, from the step's start one after another, then one backward
    of a micro-batch's backward seconds, one after another, chunk 0's last (what `gather_wait`
    reads of the forwards and `reduce_past_end` of the backwards, against their last end);
    ``secs``: per op its seconds on one of its devices for one micro-batch."""
    a = rg.graph.arrays
    out = []
    for r in range(plan.pp):
        f = [float(secs[(rank == r) & (chunk_of_op == c) & (a.role == _FORWARD)].sum())
             for c in range(plan.v)]
        b = [float(secs[(rank == r) & (chunk_of_op == c) & (a.role == _BACKWARD)].sum())
             for c in range(plan.v)]
        rows, t = [], 0.0
        for c in range(plan.v):
            rows.append((F, c, 0, t, t + f[c]))
            t += f[c]
        for c in reversed(range(plan.v)):
            rows.append((B, c, m - 1, t, t + b[c]))
            t += b[c]
        out.append(np.array(rows, float))
    return out
