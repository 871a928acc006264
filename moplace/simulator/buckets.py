"""The gradient all-reduces of a split task graph, in buckets, as tasks (see
`BucketedCollectives`; how one collective runs is `moplace.simulator.collectives`)."""

from __future__ import annotations

import numpy as np

from ..arrays import segment_ranks
from ..core.graph import ROLES, SPLIT_DIMS
from .collectives import PIECE_BYTES, all_reduce_plan

_UPDATE = ROLES.index("update")
_BATCH = SPLIT_DIMS.index("batch")


class BucketedCollectives:
    """The gradient all-reduces of batch-split ops, in buckets, as tasks.

    Candidates are batch-split ops with weight gradients on two or more distinct devices; their
    device set is a bitmask (a ring). Gradients on one ring are reduced together, in the
    graph's topological order (the backward pass's order), in buckets of at least
    ``bucket_bytes`` (0: one per gradient, in op order); a bucket is closed early after a
    gradient whose update has consumers, so that no bucket waits on work that waits on it.

    Each bucket runs the stages of its ring's plan (`all_reduce_plan`), one task per phase;
    every phase of a stage follows every phase of the stage before. A bucket reduced across
    servers goes in pieces of at most `PIECE_BYTES`, pipelined: each piece runs every stage,
    each piece's first task follows the previous piece's first, and the bucket's last task
    (the last piece's last) follows every piece's last. Update ops read the reduced gradient
    from the bucket's last task.

    Per collective task: ``ops`` (the bucket's last gradient's op), ``kind``, ``dur``,
    ``bytes_per_device``, its devices and resources (CSR ``ptr``/``devices``,
    ``res_ptr``/``res``) and its successors (CSR ``succ_ptr``/``succ``). Per bucket: its
    first and last task (``entry``, ``exit``), the ops it serves (CSR ``serve_ptr``/``serve``),
    its ``mask`` and the first device of its last task; per op: ``bucket_of_op`` (-1: none).
    Everything is computed once per distinct ring and spread with numpy.
    """

    def __init__(self, a, costs, ptr, parts, dims, dev, bucket_bytes: float = 0.0):
        cl = costs.cluster
        cand = np.flatnonzero((dims == _BATCH) & (a.grad_bytes > 0) & (parts > 1))
        masks = np.zeros(cand.size, np.int64)
        if cand.size:  # OR the device bits of each candidate's own parts (contiguous tasks)
            own = np.repeat(ptr[cand], parts[cand]) + segment_ranks(parts[cand])
            starts = np.cumsum(parts[cand]) - parts[cand]
            masks = np.bitwise_or.reduceat(np.left_shift(np.int64(1), dev[own]), starts)
        multi = (masks & (masks - 1)) != 0  # more than one distinct device
        grad_ops, grad_masks = cand[multi].astype(np.int64), masks[multi]
        position = np.empty(parts.size, np.int64)  # gradients come in topological order
        position[a.topo] = np.arange(parts.size)
        by_time = np.argsort(position[grad_ops], kind="stable")
        bucket = np.arange(grad_ops.size, dtype=np.int64)  # one each, in op order
        if bucket_bytes > 0:
            bucket[by_time] = _buckets(grad_masks[by_time], a.grad_bytes[grad_ops[by_time]],
                                       bucket_bytes, _update_has_readers(a, grad_ops[by_time]))
        n_b = int(bucket.max()) + 1 if bucket.size else 0
        self.bucket_of_op = np.full(parts.size, -1, np.int64)
        self.bucket_of_op[grad_ops] = bucket
        self.serve_ptr = np.zeros(n_b + 1, np.int64)
        np.cumsum(np.bincount(bucket, minlength=n_b), out=self.serve_ptr[1:])
        self.serve = grad_ops[np.argsort(bucket, kind="stable")]
        self.mask = np.zeros(n_b, np.int64)
        self.mask[bucket] = grad_masks
        size = np.bincount(bucket, weights=a.grad_bytes[grad_ops], minlength=n_b)
        last_op = np.zeros(n_b, np.int64)  # each bucket's last gradient, in time
        last_op[bucket[by_time]] = grad_ops[by_time]
        rings, ring_of = np.unique(self.mask, return_inverse=True)
        ring_of = ring_of.ravel()
        plans = [all_reduce_plan(cl, [d for d in range(cl.n_devices) if m >> d & 1])
                 for m in rings.tolist()]
        self._tasks(plans, ring_of, size, last_op)

    def _tasks(self, plans, ring_of, size, last_op) -> None:
        n_b = size.size
        # a bucket crosses servers in pieces, pipelined; within one server it is one piece
        staged = np.array([len(pl) > 1 for pl in plans], bool)[ring_of]
        pieces = np.where(staged, np.maximum(np.ceil(size / PIECE_BYTES), 1), 1).astype(np.int64)
        piece_bucket = np.repeat(np.arange(n_b), pieces)
        piece_ring = ring_of[piece_bucket]
        piece_size = size[piece_bucket] / pieces[piece_bucket]
        n_phases = np.array([sum(len(st) for st in pl) for pl in plans], np.int64)
        base = np.zeros(piece_bucket.size + 1, np.int64)  # tasks: each piece's phases, in order
        np.cumsum(n_phases[piece_ring], out=base[1:])
        n = int(base[-1])
        self.ops = last_op[np.repeat(piece_bucket, np.diff(base))]
        self.kind = np.zeros(n, np.int64)
        self.dur, self.bytes_per_device = np.zeros(n), np.zeros(n)
        first_piece = np.cumsum(pieces) - pieces
        self.entry, self.exit = base[first_piece], base[first_piece + pieces] - 1
        self.first = np.zeros(n_b, np.int64)
        phase_of = np.zeros(n, np.int64)  # index into `phases`
        phases, src, dst = [], [], []  # every plan's phases; the control edges between tasks
        for r, plan in enumerate(plans):
            sel = np.flatnonzero(piece_ring == r)
            flat = [ph for stage in plan for ph in stage]
            for j, ph in enumerate(flat):
                t = base[sel] + j
                self.kind[t] = ph.kind
                self.dur[t] = ph.duration(piece_size[sel])
                self.bytes_per_device[t] = ph.traffic(piece_size[sel])
                phase_of[t] = len(phases) + j
            ids = np.cumsum([0] + [len(st) for st in plan])
            for s in range(len(plan) - 1):  # every phase of a stage to every one of the next
                for j in range(ids[s], ids[s + 1]):
                    for k in range(ids[s + 1], ids[s + 2]):
                        src.append(base[sel] + j)
                        dst.append(base[sel] + k)
            phases += flat
            self.first[ring_of == r] = flat[-1].devices[0]
        more = np.flatnonzero(segment_ranks(pieces) < pieces[piece_bucket] - 1)
        src += [base[more], base[more + 1] - 1]
        dst += [base[more + 1], self.exit[piece_bucket[more]]]
        self.ptr, self.devices = _ragged([ph.devices for ph in phases], phase_of)
        self.res_ptr, self.res = _ragged([ph.resources for ph in phases], phase_of)
        src = np.concatenate(src).astype(np.int64) if src else np.zeros(0, np.int64)
        dst = np.concatenate(dst).astype(np.int64) if dst else np.zeros(0, np.int64)
        order = np.lexsort((dst, src))
        self.succ = dst[order]
        self.succ_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=self.succ_ptr[1:])


def _buckets(masks, grad, bucket_bytes: float, closes) -> np.ndarray:
    """The bucket of each gradient (in the order they are made): per ring, consecutive
    gradients until the bucket holds ``bucket_bytes`` or one ``closes`` it; buckets numbered
    in order of their first gradient."""
    bucket = np.empty(masks.size, np.int64)
    open_of: dict[int, list] = {}  # ring -> [bucket id, bytes]
    n = 0
    for k, (m, b, c) in enumerate(zip(masks.tolist(), grad.tolist(), closes.tolist())):
        cur = open_of.get(m)
        if cur is None:
            cur = open_of[m] = [n, 0.0]
            n += 1
        bucket[k] = cur[0]
        cur[1] += b
        if cur[1] >= bucket_bytes or c:
            del open_of[m]
    return bucket


def _update_has_readers(a, ops) -> np.ndarray:
    """Per op of ``ops``: does an update op reading its gradient have consumers of its own?"""
    upd = (a.role[a.dst] == _UPDATE) & (np.diff(a.out_ptr)[a.dst] > 0)
    flagged = np.zeros(a.role.size, bool)
    flagged[a.src[upd]] = True
    return flagged[ops]


def _ragged(rows: list[np.ndarray], pick: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of ``rows[pick[0]], rows[pick[1]], ...`` without a Python loop over ``pick``."""
    sizes = np.array([r.size for r in rows], np.int64)[pick] if rows else np.zeros(0, np.int64)
    ptr = np.zeros(pick.size + 1, np.int64)
    np.cumsum(sizes, out=ptr[1:])
    if not rows:
        return ptr, np.zeros(0, np.int64)
    width = max(max(r.size for r in rows), 1)
    table = np.zeros((len(rows), width), np.int64)
    used = np.zeros((len(rows), width), bool)
    for k, r in enumerate(rows):
        table[k, :r.size], used[k, :r.size] = r, True
    return ptr, table[pick][used[pick]]
