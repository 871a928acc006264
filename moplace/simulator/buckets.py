"""The gradient all-reduces of a split task graph, in buckets, as tasks (see
`BucketedCollectives`; how one collective runs is `moplace.simulator.collectives`)."""

from __future__ import annotations

import numpy as np

from ..arrays import csr_ptr, segment_ranks
from ..core.graph import ROLES, SPLIT_DIMS
from .collectives import ALL_GATHER, ALL_REDUCE, PIECE_BYTES, REDUCE_SCATTER, ring_plans
from .devsets import device_rows, distinct, same, several, words_for
from .gathers import activation_gathers, sharded_weights, weight_gathers

_UPDATE = ROLES.index("update")
_BATCH, _TENSOR = SPLIT_DIMS.index("batch"), SPLIT_DIMS.index("tensor")


class BucketedCollectives:
    """The gradient all-reduces of batch-split ops, in buckets, as tasks.

    Candidates are batch-split ops with weight gradients on two or more distinct devices; their
    device set (a row of bitmask words, `moplace.simulator.devsets`) is a ring. Gradients on
    one ring are reduced together, in the
    graph's topological order (the backward pass's order), in buckets of at least
    ``bucket_bytes`` (0: one per gradient, in op order); a bucket is closed early after a
    gradient whose update has consumers, so that no bucket waits on work that waits on it.

    Each bucket runs the stages of its ring's plan (`ring_plans`: an all-reduce, or under ZeRO
    a reduce-scatter then, after the updates, an all-gather), one task per phase;
    every phase of a stage follows every phase of the stage before. A bucket reduced across
    servers goes in pieces of at most `PIECE_BYTES`, pipelined: each piece runs every stage,
    each piece's first task follows the previous piece's first, and the bucket's last task
    (the last piece's last) follows every piece's last. Update ops read the reduced gradient
    from the bucket's last task.

    ``replica``: per op, a batch split whose parts each hold it whole (weights; the
    simulator's `moplace.simulator.taskgraph`), which is never gathered again.

    A tensor-split op whose parts yield partial sums (`Op.partial_sums`) on two or more
    devices, read by an op that is not itself a partial sum, is a bucket of its own (after
    the gradients' buckets): its output all-reduced among its parts' devices, or
    reduce-scattered when every such reader is split on batch into as many parts on the same
    devices (sequence parallelism, each reading its slice where it runs); its readers read
    the sum from the bucket's last task (`summed`).

    Per collective task: ``ops`` (the bucket's last gradient's op), ``kind``, ``dur``,
    ``bytes_per_device``, its devices and resources (CSR ``ptr``/``devices``,
    ``res_ptr``/``res``) and its successors (CSR ``succ_ptr``/``succ``). Per bucket: its
    first and last task (``entry``, ``exit``), the ops it serves (CSR ``serve_ptr``/``serve``),
    its ``mask`` and the first device of its last task; per op: ``bucket_of_op`` (-1: none).
    Everything is computed once per distinct ring and spread with numpy.
    """

    def __init__(self, a, costs, ptr, parts, dims, dev, bucket_bytes: float = 0.0,
                 zero_stage: int = 0, n_ops: int | None = None, partial=None, replica=None):
        cl = costs.cluster
        n_ops = parts.size if n_ops is None else n_ops  # ops from n_ops on: clones
        mask_of = device_rows(ptr, dev, words_for(cl.n_devices))
        n_words = mask_of.shape[1]
        whole = (a.grad_bytes > 0) if partial is None else (a.grad_bytes > 0) & ~partial
        cand = np.flatnonzero((dims == _BATCH) & whole & (parts > 1))
        masks = mask_of[cand]
        multi = several(masks)  # more than one distinct device
        grad_ops, grad_masks = cand[multi].astype(np.int64), masks[multi]
        sharded = (_shardable(a, grad_ops, grad_masks, mask_of, dims, parts) if zero_stage >= 1
                   else np.zeros(grad_ops.size, bool))
        # sharded and whole gradients never share a bucket
        ring_rows, ring_key = distinct(grad_masks, sharded)
        position = np.empty(parts.size, np.int64)  # gradients come in topological order
        position[a.topo] = np.arange(parts.size)
        by_time = np.argsort(position[grad_ops], kind="stable")
        bucket = np.arange(grad_ops.size, dtype=np.int64)  # one each, in op order
        if bucket_bytes > 0:
            bucket[by_time] = _buckets(ring_key[by_time], a.grad_bytes[grad_ops[by_time]],
                                       bucket_bytes, _update_has_readers(a, grad_ops[by_time]))
        n_b = int(bucket.max()) + 1 if bucket.size else 0
        self.bucket_of_op = np.full(parts.size, -1, np.int64)
        self.bucket_of_op[grad_ops] = bucket
        self.serve_ptr = csr_ptr(bucket, n_b)
        self.serve = grad_ops[np.argsort(bucket, kind="stable")]
        self.mask = np.zeros((n_b, n_words), np.int64)
        self.mask[bucket] = grad_masks
        key = np.zeros(n_b, np.int64)  # each bucket's ring
        key[bucket] = ring_key
        scattered = ring_rows[key, -1].astype(bool) if n_b else np.zeros(0, bool)
        size = np.bincount(bucket, weights=a.grad_bytes[grad_ops], minlength=n_b)
        last_op = np.zeros(n_b, np.int64)  # each bucket's last gradient, in time
        last_op[bucket[by_time]] = grad_ops[by_time]
        plans, ring_of = ring_plans(cl, self.mask, np.where(scattered, REDUCE_SCATTER, ALL_REDUCE))
        reduce = _tasks(plans, ring_of, size, last_op)
        self.entry, self.exit, self.first = reduce.entry, reduce.exit, reduce.first
        #: per op: an update whose replicas each update their shard of the weights (ZeRO),
        #: and an op whose replicas each keep a shard of its weights (ZeRO-3)
        self.sharded_update = np.zeros(parts.size, bool)
        self.weighted = np.zeros(parts.size, bool)
        feeds = [(grad_ops, reduce.entry[bucket])]  # (op, collective task its parts feed)
        fed_by = fed_op = np.zeros(0, np.int64)  # (collective task, op whose parts it feeds)
        tables, offset = [reduce], reduce.kind.size
        done = np.flatnonzero(scattered)  # buckets reduce-scattered
        if done.size:
            upd, src = _update_edges(a, grad_ops[sharded])
            self.sharded_update[upd] = True
        if done.size and zero_stage < 3:  # gather the updated weights
            gather = _tasks(*ring_plans(cl, self.mask[done], ALL_GATHER), size[done],
                            last_op[done])
            gather_entry = np.full(n_b, -1, np.int64)
            gather_entry[done] = gather.entry + offset
            feeds.append((upd, gather_entry[self.bucket_of_op[src]]))
            tables.append(gather)
            offset += gather.kind.size
        if zero_stage >= 3:  # weights sharded: gathered before each use
            self.weighted = sharded_weights(a, parts, dims, mask_of)
            g_size, g_mask, g_users, g_wait = weight_gathers(a, parts, dims, mask_of,
                                                             self.weighted, n_ops)
            if g_size.size:
                weights = _tasks(*ring_plans(cl, g_mask, ALL_GATHER), g_size,
                                 np.array([use[0] for use in g_users], np.int64))
                count = np.array([len(w) for w in g_wait], np.int64)
                feeds.append((np.array([p for w in g_wait for p in w], np.int64),
                              np.repeat(weights.entry + offset, count)))
                n_use = np.array([len(use) for use in g_users], np.int64)
                fed_by = np.repeat(weights.exit + offset, n_use)
                fed_op = np.array([w for use in g_users for w in use], np.int64)
                tables.append(weights)
        #: per op: its partial sums are completed by a collective of their own
        self.summed = np.zeros(parts.size, bool)
        s_ops, s_kind = _partial_sums(a, parts, dims, mask_of)
        if s_ops.size:
            entry = self._own_buckets(tables, s_ops, mask_of,
                                      ring_plans(cl, mask_of[s_ops], s_kind), a.output_bytes)
            self.summed[s_ops] = True
            feeds.append((s_ops, entry))
        #: per graph edge: read from a gather in the backward (`activation_gathers`)
        g_ops, self.regathered, g_wait = activation_gathers(
            a, parts, dims, mask_of, self.bucket_of_op >= 0,
            np.zeros(parts.size, bool) if replica is None else replica)
        if g_ops.size:
            entry = self._own_buckets(tables, g_ops, mask_of,
                                      ring_plans(cl, mask_of[g_ops], ALL_GATHER), a.output_bytes)
            count = np.array([len(w) for w in g_wait], np.int64)
            feeds.append((np.array([p for w in g_wait for p in w], np.int64),
                          np.repeat(entry, count)))
        self._merge(tables)
        ops, colls = (np.concatenate(x) for x in zip(*feeds))
        keep = colls >= 0
        ops, colls = ops[keep], colls[keep]
        order = np.lexsort((colls, ops))
        #: per op, the collective tasks its parts feed (CSR ``feeds_ptr``/``feeds``), and per
        #: collective task, the ops whose every part it feeds (``fed_ptr``/``fed``)
        self.feeds_ptr = csr_ptr(ops, parts.size)
        self.feeds = colls[order]
        self.fed_ptr = csr_ptr(fed_by, self.kind.size)
        self.fed = fed_op[np.lexsort((fed_op, fed_by))]
        #: per task: its bucket's devices for a bucket's last reduce task (which serves the
        #: updates), else 0
        self.task_mask = np.zeros((self.kind.size, n_words), np.int64)
        self.task_mask[self.exit] = self.mask

    def _own_buckets(self, tables, ops, mask_of, plans, output_bytes) -> np.ndarray:
        """Give each op of ``ops`` a bucket of its own after the others, whose collective
        (``plans``, as `ring_plans` gives them) carries its output and serves its gated
        readers; the tasks go in a table after ``tables``. Returns each one's first task."""
        offset, n_have = sum(t.kind.size for t in tables), self.mask.shape[0]
        table = _tasks(*plans, output_bytes[ops], ops)
        self.bucket_of_op[ops] = n_have + np.arange(ops.size)
        self.serve_ptr = np.concatenate([self.serve_ptr,
                                         self.serve_ptr[-1] + 1 + np.arange(ops.size)])
        self.serve = np.concatenate([self.serve, ops])
        self.mask = np.concatenate([self.mask, mask_of[ops]])
        self.entry = np.concatenate([self.entry, table.entry + offset])
        self.exit = np.concatenate([self.exit, table.exit + offset])
        self.first = np.concatenate([self.first, table.first])
        tables.append(table)
        return table.entry + offset

    def _merge(self, tables) -> None:
        """The tasks of every table, one after the other (CSR indexes shifted)."""
        offsets = np.cumsum([0] + [t.kind.size for t in tables])
        cat = (lambda name: np.concatenate([getattr(t, name) for t in tables]))
        self.ops, self.kind, self.dur = cat("ops"), cat("kind"), cat("dur")
        self.bytes_per_device = cat("bytes_per_device")
        self.devices, self.res = cat("devices"), cat("res")
        self.succ = np.concatenate([t.succ + o for t, o in zip(tables, offsets)])
        for name in ("ptr", "res_ptr", "succ_ptr"):
            parts, base = [np.zeros(1, np.int64)], 0
            for t in tables:
                p = getattr(t, name)
                parts.append(p[1:] + base)
                base += p[-1]
            setattr(self, name, np.concatenate(parts))


def _partial_sums(a, parts, dims, mask_of) -> tuple[np.ndarray, np.ndarray]:
    """The ops whose partial sums a collective completes (see `BucketedCollectives`), in op
    order, and its kind for each: `REDUCE_SCATTER` when every reader that is not a partial
    sum is split on batch into as many parts on the same devices, else `ALL_REDUCE`."""
    adds = (dims == _TENSOR) & a.partial_sums
    multi = several(mask_of)
    e = np.flatnonzero((adds & (parts > 1) & multi)[a.src] & ~adds[a.dst])
    u, v = a.src[e], a.dst[e]
    ops = np.unique(u)
    scatter = (dims[v] == _BATCH) & (parts[v] == parts[u]) & same(mask_of[v], mask_of[u])
    whole = np.zeros(parts.size, bool)
    whole[u[~scatter]] = True
    return ops.astype(np.int64), np.where(whole[ops], ALL_REDUCE, REDUCE_SCATTER)


def _update_edges(a, ops) -> tuple[np.ndarray, np.ndarray]:
    """The update ops that read a gradient of ``ops``, and the op whose gradient each reads
    (the last, when it reads several)."""
    grad = np.zeros(a.role.size, bool)
    grad[ops] = True
    e = np.flatnonzero(grad[a.src] & (a.role[a.dst] == _UPDATE))
    return a.dst[e], a.src[e]


def _shardable(a, grad_ops, grad_masks, mask_of, dims, parts) -> np.ndarray:
    """Per gradient op: can ZeRO shard it? Every update reading it is split on batch over the
    same devices as its own parts (replicas that can each update a shard), and one does."""
    e = np.flatnonzero(np.isin(a.src, grad_ops) & (a.role[a.dst] == _UPDATE))
    u, v = a.src[e], a.dst[e]
    row = np.searchsorted(grad_ops, u)  # grad_ops is ascending
    fits = (dims[v] == _BATCH) & (parts[v] > 1) & same(mask_of[v], grad_masks[row])
    has = np.zeros(grad_ops.size, bool)
    bad = np.zeros(grad_ops.size, bool)
    has[row] = True
    bad[row[~fits]] = True
    return has & ~bad


class _Table:
    """The tasks of some buckets' collectives (see `_tasks`)."""


def _tasks(plans, ring_of, size, last_op) -> _Table:
    """The tasks of buckets of ``size`` bytes, each running its ring's plan (``plans[ring_of[b]]``),
    with their CSR indexes, per bucket its ``entry``, ``exit`` and ``first`` (the first device of
    its last task)."""
    t = _Table()
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
    t.ops = last_op[np.repeat(piece_bucket, np.diff(base))]
    t.kind = np.zeros(n, np.int64)
    t.dur, t.bytes_per_device = np.zeros(n), np.zeros(n)
    first_piece = np.cumsum(pieces) - pieces
    t.entry, t.exit = base[first_piece], base[first_piece + pieces] - 1
    t.first = np.zeros(n_b, np.int64)
    phase_of = np.zeros(n, np.int64)  # index into `phases`
    phases, src, dst = [], [], []  # every plan's phases; the control edges between tasks
    for r, plan in enumerate(plans):
        sel = np.flatnonzero(piece_ring == r)
        flat = [ph for stage in plan for ph in stage]
        for j, ph in enumerate(flat):
            k = base[sel] + j
            t.kind[k] = ph.kind
            t.dur[k] = ph.duration(piece_size[sel])
            t.bytes_per_device[k] = ph.traffic(piece_size[sel])
            phase_of[k] = len(phases) + j
        ids = np.cumsum([0] + [len(st) for st in plan])
        for s in range(len(plan) - 1):  # every phase of a stage to every one of the next
            for j in range(ids[s], ids[s + 1]):
                for k in range(ids[s + 1], ids[s + 2]):
                    src.append(base[sel] + j)
                    dst.append(base[sel] + k)
        phases += flat
        t.first[ring_of == r] = flat[-1].devices[0]
    more = np.flatnonzero(segment_ranks(pieces) < pieces[piece_bucket] - 1)
    src += [base[more], base[more + 1] - 1]
    dst += [base[more + 1], t.exit[piece_bucket[more]]]
    t.ptr, t.devices = _ragged([ph.devices for ph in phases], phase_of)
    t.res_ptr, t.res = _ragged([ph.resources for ph in phases], phase_of)
    src = np.concatenate(src).astype(np.int64) if src else np.zeros(0, np.int64)
    dst = np.concatenate(dst).astype(np.int64) if dst else np.zeros(0, np.int64)
    order = np.lexsort((dst, src))
    t.succ = dst[order]
    t.succ_ptr = csr_ptr(src, n)
    return t


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
