"""The event loop's heaps, shared by the fast loop (`_simcore`) and the reference
(`reference`): a heap of events ordered by (time, sequence number), and per-device heaps of
ready tasks ordered by (priority, lower task index first). Both orders are total, so what a
pop returns never depends on the order of the pushes. The ready heaps are one d-ary heap
(`_heap_push`, `_heap_pop`): binary for the reference, 4-ary for the fast loop. Also the
memory trace's rows both loops write (`_mem_put`, `_free`).
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, inline="always", error_model="numpy")
def _ev_before(t1, s1, t2, s2):
    return t1 < t2 or (t1 == t2 and s1 < s2)


@njit(cache=True, inline="always", error_model="numpy")
def _ev_put(ev_t, ev_s, ev_i, k, t, s, i):
    ev_t[k] = t
    ev_s[k] = s
    ev_i[k] = i


@njit(cache=True, inline="always", error_model="numpy")
def _ev_push(ev_t, ev_s, ev_i, n, t, s, i):
    """Add event (time t, sequence s, id i) to the heap of size n; returns the new size."""
    k = n
    while k > 0:  # move the hole up instead of swapping
        p = (k - 1) >> 1
        if not _ev_before(t, s, ev_t[p], ev_s[p]):
            break
        _ev_put(ev_t, ev_s, ev_i, k, ev_t[p], ev_s[p], ev_i[p])
        k = p
    _ev_put(ev_t, ev_s, ev_i, k, t, s, i)
    return n + 1


@njit(cache=True, inline="always", error_model="numpy")
def _ev_pop(ev_t, ev_s, ev_i, n):
    """Remove the earliest event; returns (its id, the new size)."""
    top = ev_i[0]
    n -= 1
    t, s, i = ev_t[n], ev_s[n], ev_i[n]
    k = 0
    while True:
        c = 2 * k + 1
        if c >= n:
            break
        if c + 1 < n and _ev_before(ev_t[c + 1], ev_s[c + 1], ev_t[c], ev_s[c]):
            c += 1
        if not _ev_before(ev_t[c], ev_s[c], t, s):
            break
        _ev_put(ev_t, ev_s, ev_i, k, ev_t[c], ev_s[c], ev_i[c])
        k = c
    _ev_put(ev_t, ev_s, ev_i, k, t, s, i)
    return top, n


@njit(cache=True, inline="always", error_model="numpy")
def _rq_before(p1, t1, p2, t2):
    # higher priority first; on a tie the lower task index
    return p1 > p2 or (p1 == p2 and t1 < t2)


@njit(cache=True, inline="always", error_model="numpy")
def _heap_push(rq, key, base, n, p, task, shift):
    """Add ``task`` with priority ``p`` to the ready heap stored at rq/key[base:base+n], each
    node with ``2**shift`` children."""
    k = n
    while k > 0:  # move the hole up instead of swapping
        par = (k - 1) >> shift
        if not _rq_before(p, task, key[base + par], rq[base + par]):
            break
        rq[base + k], key[base + k] = rq[base + par], key[base + par]
        k = par
    rq[base + k], key[base + k] = task, p


@njit(cache=True, inline="always", error_model="numpy")
def _heap_pop(rq, key, base, n, shift):
    """Remove and return the highest-priority task of the ready heap at rq/key[base:base+n],
    each node with ``2**shift`` children."""
    top = rq[base]
    n -= 1
    last, lk = rq[base + n], key[base + n]
    k = 0
    while True:
        c = (k << shift) + 1
        if c >= n:
            break
        best = c
        for j in range(c + 1, min(c + (1 << shift), n)):
            if _rq_before(key[base + j], rq[base + j], key[base + best], rq[base + best]):
                best = j
        if not _rq_before(key[base + best], rq[base + best], lk, last):
            break
        rq[base + k], key[base + k] = rq[base + best], key[base + best]
        k = best
    rq[base + k], key[base + k] = last, lk
    return top


@njit(cache=True, inline="always", error_model="numpy")
def _rq_push(rq, key, base, n, p, task):
    """`_heap_push` on a binary heap (the reference's)."""
    _heap_push(rq, key, base, n, p, task, 1)


@njit(cache=True, inline="always", error_model="numpy")
def _rq_pop(rq, key, base, n):
    """`_heap_pop` on a binary heap (the reference's)."""
    return _heap_pop(rq, key, base, n, 1)


@njit(cache=True, inline="always", error_model="numpy")
def _rq4_push(rq, key, base, n, p, task):
    """`_heap_push` on a 4-ary heap (the fast loop's): half the levels, so half the
    hard-to-predict branches."""
    _heap_push(rq, key, base, n, p, task, 2)


@njit(cache=True, inline="always", error_model="numpy")
def _rq4_pop(rq, key, base, n):
    """`_heap_pop` on a 4-ary heap (the same task comes out as from a binary one: the order
    is total)."""
    return _heap_pop(rq, key, base, n, 2)


@njit(cache=True, inline="always", error_model="numpy")
def _mem_put(memory, k, t, d, v):
    memory[k, 0] = t
    memory[k, 1] = d
    memory[k, 2] = v
    return k + 1


@njit(cache=True, inline="always", error_model="numpy")
def _free(d, nbytes, now, cur, record, memory, n_mem):
    """Device ``d`` lets go of ``nbytes`` at ``now`` (a row in ``memory`` when recording);
    returns the number of rows."""
    cur[d] -= nbytes
    return _mem_put(memory, n_mem, now, d, cur[d]) if record else n_mem
