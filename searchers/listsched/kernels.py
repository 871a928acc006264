"""Compiled kernels (numba) of the list schedulers in `searchers.listsched.schedule`.

Pure numeric code over the arrays of a `ListSchedInput`: topological order, upward rank,
critical path, and one scheduling loop shared by HEFT and DPOS (insertion-based EFT with
co-location groups and a static memory budget per device).

Busy intervals of each device are kept sorted in rows of ``iv_start``/``iv_end``; the gap
search starts from the first interval ending after the op's ready time (binary search), so
appending at the end of a device's timeline, the common case, costs O(log k).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def topo_order(n, in_ptr, out_ptr, out_edge, dst):
    """Kahn's order, ops released in index order (FIFO): deterministic; -1 entries on a cycle."""
    indeg = np.empty(n, np.int64)
    for i in range(n):
        indeg[i] = in_ptr[i + 1] - in_ptr[i]
    order = np.full(n, -1, np.int64)
    tail = 0
    for i in range(n):
        if indeg[i] == 0:
            order[tail] = i
            tail += 1
    head = 0
    while head < tail:
        i = order[head]
        head += 1
        for k in range(out_ptr[i], out_ptr[i + 1]):
            j = dst[out_edge[k]]
            indeg[j] -= 1
            if indeg[j] == 0:
                order[tail] = j
                tail += 1
    return order


@njit(cache=True)
def upward_rank_kernel(topo, out_ptr, out_edge, dst, w, c):
    """rank_u(i) = w_i + max over out-edges e=(i, j) of (c_e + rank_u(j)), in reverse topo order."""
    rank = np.zeros(topo.size)
    for k in range(topo.size - 1, -1, -1):
        i = topo[k]
        best = 0.0
        for p in range(out_ptr[i], out_ptr[i + 1]):
            e = out_edge[p]
            v = c[e] + rank[dst[e]]
            if v > best:
                best = v
        rank[i] = w[i] + best
    return rank


@njit(cache=True)
def critical_path_kernel(rank, in_ptr, out_ptr, out_edge, dst):
    """From the entry op of largest rank (a virtual entry's best successor), follow the
    successor of largest rank to an exit. Ties: lowest op index."""
    n = rank.size
    path = np.empty(n, np.int64)
    cur = -1
    for i in range(n):
        if in_ptr[i + 1] == in_ptr[i] and (cur < 0 or rank[i] > rank[cur]):
            cur = i
    length = 0
    while cur >= 0:
        path[length] = cur
        length += 1
        nxt = -1
        for p in range(out_ptr[cur], out_ptr[cur + 1]):
            j = dst[out_edge[p]]
            if nxt < 0 or rank[j] > rank[nxt] or (rank[j] == rank[nxt] and j < nxt):
                nxt = j
        cur = nxt
    return path[:length]


@njit(cache=True, inline="always")
def _find_slot(iv_start, iv_end, cnt, d, ready, dur):
    """Earliest start >= ready of an idle gap of length dur on device d; (start, insert index)."""
    k = np.searchsorted(iv_end[d, :cnt[d]], ready, side="right")  # first interval ending > ready
    s = ready
    while k < cnt[d]:
        if s + dur <= iv_start[d, k]:
            return s, k
        if iv_end[d, k] > s:
            s = iv_end[d, k]
        k += 1
    return s, cnt[d]


@njit(cache=True)
def ready_time(i, d, in_ptr, in_edge, src, edge_bytes, latency, bandwidth, place, finish):
    """Time all inputs of op i are on device d (transfers start at the producer's finish)."""
    r = 0.0
    for p in range(in_ptr[i], in_ptr[i + 1]):
        e = in_edge[p]
        m = src[e]
        t = finish[m]
        pm = place[m]
        if pm != d:
            t += latency[pm, d] + edge_bytes[e] / bandwidth[pm, d]
        if t > r:
            r = t
    return r


@njit(cache=True)
def _cp_device(cp, k0, compute, group, group_dev, group_mem, free, stamp):
    """DPOS's critical-path device: per device, greedily place cp[k0:] while it fits memory and
    take the device with the smallest average op time over what fits (ties: more ops, then
    lower index); -1 when none fits cp[k0]."""
    D = free.size
    best, best_avg, best_count = -1, np.inf, 0
    for d in range(D):
        room = free[d]
        total, count = 0.0, 0
        tag = d * cp.size + k0 + 1  # unique per (device, call start): no reset of stamp needed
        for k in range(k0, cp.size):
            op = cp[k]
            g = group[op]
            if group_dev[g] >= 0:  # already placed: counts only where it is
                if group_dev[g] == d:
                    total += compute[op, d]
                    count += 1
                continue
            if stamp[g] != tag:
                if group_mem[g] > room:
                    break
                room -= group_mem[g]
                stamp[g] = tag
            total += compute[op, d]
            count += 1
        # equal averages (identical devices): the one holding more of the path, fewer transfers
        if count > 0 and (total / count < best_avg
                          or (total / count == best_avg and count > best_count)):
            best, best_avg, best_count = d, total / count, count
    return best


@njit(cache=True, inline="always")
def new_schedule(n, group_mem, capacity):
    """Empty schedule state: placement (-1), start, finish, device per group (-1), free memory."""
    return (np.full(n, -1, np.int64), np.zeros(n), np.zeros(n),
            np.full(group_mem.size, -1, np.int64), capacity.astype(np.float64).copy())


@njit(cache=True)
def schedule_kernel(visit, cp, compute, src, edge_bytes, in_ptr, in_edge, latency, bandwidth,
                    group_mem, capacity, group):
    """List-schedule ops in ``visit`` order (a topological order). Ops on the critical path
    ``cp`` (empty for HEFT) go to the critical-path device, the rest to the device of minimum
    insertion-based EFT. Returns placement, start, finish and feasible."""
    n, D = compute.shape
    place, start, finish, group_dev, free = new_schedule(n, group_mem, capacity)
    iv_start = np.empty((D, max(n, 1)))
    iv_end = np.empty((D, max(n, 1)))
    cnt = np.zeros(D, np.int64)
    on_cp = np.zeros(n, np.bool_)
    for k in range(cp.size):
        on_cp[cp[k]] = True
    stamp = np.zeros(group_mem.size, np.int64)
    cp_dev = -1
    cp_next = 0  # index in cp of the next critical-path op to be visited
    feasible = True
    for v in range(visit.size):
        i = visit[v]
        g = group[i]
        forced = group_dev[g]
        if on_cp[i]:
            while cp[cp_next] != i:
                cp_next += 1
            if forced < 0:  # co-location wins over the critical-path device
                if cp_dev < 0 or group_mem[g] > free[cp_dev]:
                    cp_dev = _cp_device(cp, cp_next, compute, group, group_dev, group_mem,
                                        free, stamp)
                forced = cp_dev  # -1 when nothing fits: falls through to the fallback below
        best_d, best_s, best_f, best_k = -1, 0.0, np.inf, 0
        for d in range(D):
            if forced >= 0 and d != forced:
                continue
            if forced < 0 and group_mem[g] > free[d]:
                continue  # EFT = inf: the group does not fit
            r = ready_time(i, d, in_ptr, in_edge, src, edge_bytes, latency, bandwidth,
                            place, finish)
            s, k = _find_slot(iv_start, iv_end, cnt, d, r, compute[i, d])
            f = s + compute[i, d]
            if f < best_f:
                best_d, best_s, best_f, best_k = d, s, f, k
        if best_d < 0:  # fits no device: the most free memory, and the result is infeasible
            feasible = False
            best_d = 0
            for d in range(1, D):
                if free[d] > free[best_d]:
                    best_d = d
            r = ready_time(i, best_d, in_ptr, in_edge, src, edge_bytes, latency, bandwidth,
                            place, finish)
            best_s, best_k = _find_slot(iv_start, iv_end, cnt, best_d, r, compute[i, best_d])
            best_f = best_s + compute[i, best_d]
        d = best_d
        if group_dev[g] < 0:
            group_dev[g] = d
            free[d] -= group_mem[g]
        place[i], start[i], finish[i] = d, best_s, best_f
        c = cnt[d]
        for k in range(c, best_k, -1):  # shift later intervals right (rare: only on insertion)
            iv_start[d, k] = iv_start[d, k - 1]
            iv_end[d, k] = iv_end[d, k - 1]
        iv_start[d, best_k] = best_s
        iv_end[d, best_k] = best_f
        cnt[d] = c + 1
    return place, start, finish, feasible
