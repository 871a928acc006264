"""The simulator's compiled event loop (numba). Pure numeric code over the arrays of a
`TaskGraph` and a `Cluster`; see `moplace.simulator` for the model it implements.

Events are task finishes and transfer arrivals, ordered by (time, sequence number) so that runs
are deterministic. All events at one instant are handled before idle devices pick their next
task, so a device always chooses among everything that is ready at that instant.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always", error_model="numpy")
def _ev_less(time, seq, a, b):
    return time[a] < time[b] or (time[a] == time[b] and seq[a] < seq[b])


@njit(cache=True, inline="always", error_model="numpy")
def _ev_pop(heap, n, time, seq):
    top = heap[0]
    n -= 1
    heap[0] = heap[n]
    k = 0
    while True:
        c = 2 * k + 1
        if c >= n:
            break
        if c + 1 < n and _ev_less(time, seq, heap[c + 1], heap[c]):
            c += 1
        if _ev_less(time, seq, heap[c], heap[k]):
            heap[k], heap[c] = heap[c], heap[k]
            k = c
        else:
            break
    return top, n


@njit(cache=True, inline="always", error_model="numpy")
def _rq_less(prio, a, b):
    return prio[a] > prio[b] or (prio[a] == prio[b] and a < b)


@njit(cache=True, inline="always", error_model="numpy")
def _rq_push(rq, base, n, prio, task):
    rq[base + n] = task
    k = n
    while k > 0:
        p = (k - 1) >> 1
        if _rq_less(prio, rq[base + k], rq[base + p]):
            rq[base + k], rq[base + p] = rq[base + p], rq[base + k]
            k = p
        else:
            break


@njit(cache=True, inline="always", error_model="numpy")
def _rq_pop(rq, base, n, prio):
    top = rq[base]
    n -= 1
    rq[base] = rq[base + n]
    k = 0
    while True:
        c = 2 * k + 1
        if c >= n:
            break
        if c + 1 < n and _rq_less(prio, rq[base + c + 1], rq[base + c]):
            c += 1
        if _rq_less(prio, rq[base + c], rq[base + k]):
            rq[base + k], rq[base + c] = rq[base + c], rq[base + k]
            k = c
        else:
            break
    return top


@njit(cache=True, error_model="numpy")
def simulate_core(n_dev, dev, dur, prio, out_bytes, n_compute,
                  out_ptr, e_src, e_dst, e_bytes, e_srcdev, e_local, in_ptr, in_edge,
                  route_ptr, route_res, n_res, bandwidth, latency,
                  coll_ptr, coll_dev, coll_res_ptr, coll_res, coll_dur, coll_bytes,
                  static_mem):
    """Run the task graph; returns (start, end, sent, recv, peak_mem, n_transfers, n_done)."""
    n = dev.shape[0]
    n_e = e_dst.shape[0]
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    sent = np.zeros(n_dev)
    recv = np.zeros(n_dev)
    cur = static_mem.copy()
    peak = static_mem.copy()
    res_free = np.zeros(n_res)

    pending = np.zeros(n, np.int64)
    refs = np.zeros(n, np.int64)  # holders of a task's output: local consumers + transfers out
    for e in range(n_e):
        pending[e_dst[e]] += 1
    for t in range(n):
        for e in range(out_ptr[t], out_ptr[t + 1]):
            if e_local[e]:
                refs[t] += 1

    # per-device ready heaps share one array, device d owns [rq_base[d], rq_base[d+1])
    rq_base = np.zeros(n_dev + 1, np.int64)
    for t in range(n_compute):
        rq_base[dev[t] + 1] += 1
    for d in range(n_dev):
        rq_base[d + 1] += rq_base[d]
    rq = np.empty(max(n_compute, 1), np.int64)
    rq_n = np.zeros(n_dev, np.int64)
    busy = np.zeros(n_dev, np.bool_)

    cap = n + n_e + 1
    ev_heap = np.empty(cap, np.int64)
    ev_time = np.empty(cap)
    ev_seq = np.empty(cap, np.int64)
    ev_id = np.empty(cap, np.int64)
    ev_n = 0
    seq = 0
    # slots are reused: the heap holds slot indices, free slots are a stack
    free_slots = np.arange(cap - 1, -1, -1).astype(np.int64)
    n_free = cap

    x_dst = np.empty(n_e, np.int64)
    x_bytes = np.empty(n_e)
    x_task = np.empty(n_e, np.int64)
    x_refs = np.zeros(n_e, np.int64)
    edge_x = np.full(n_e, -1, np.int64)
    n_x = 0
    xb = np.zeros(n_dev)
    x_of_dev = np.full(n_dev, -1, np.int64)
    touched = np.empty(n_dev, np.int64)

    ready_stack = np.empty(n, np.int64)  # tasks whose inputs are all in, to be queued
    n_ready = 0
    for t in range(n):
        if pending[t] == 0:
            ready_stack[n_ready] = t
            n_ready += 1

    now = 0.0
    n_done = 0
    while True:
        # queue newly ready tasks: compute tasks to their device, collectives start at once
        while n_ready > 0:
            n_ready -= 1
            t = ready_stack[n_ready]
            if t < n_compute:
                d = dev[t]
                _rq_push(rq, rq_base[d], rq_n[d], prio, t)
                rq_n[d] += 1
            else:
                c = t - n_compute
                s = now
                for k in range(coll_res_ptr[c], coll_res_ptr[c + 1]):
                    s = max(s, res_free[coll_res[k]])
                f = s + coll_dur[c]
                for k in range(coll_res_ptr[c], coll_res_ptr[c + 1]):
                    res_free[coll_res[k]] = f
                for k in range(coll_ptr[c], coll_ptr[c + 1]):
                    sent[coll_dev[k]] += coll_bytes[c]
                    recv[coll_dev[k]] += coll_bytes[c]
                start[t] = s
                end[t] = f
                n_free -= 1
                slot = free_slots[n_free]
                ev_n = _push_slot(ev_heap, ev_n, ev_time, ev_seq, ev_id, slot, f, seq, t)
                seq += 1
        # idle devices start their highest-priority ready task
        for d in range(n_dev):
            if not busy[d] and rq_n[d] > 0:
                t = _rq_pop(rq, rq_base[d], rq_n[d], prio)
                rq_n[d] -= 1
                busy[d] = True
                start[t] = now
                end[t] = now + dur[t]
                cur[d] += out_bytes[t]
                if cur[d] > peak[d]:
                    peak[d] = cur[d]
                n_free -= 1
                slot = free_slots[n_free]
                ev_n = _push_slot(ev_heap, ev_n, ev_time, ev_seq, ev_id, slot, end[t], seq, t)
                seq += 1
        if ev_n == 0:
            break
        now = ev_time[ev_heap[0]]
        while ev_n > 0 and ev_time[ev_heap[0]] == now:
            slot, ev_n = _ev_pop(ev_heap, ev_n, ev_time, ev_seq)
            free_slots[n_free] = slot
            n_free += 1
            i = ev_id[slot]
            if i < n:  # task i finished
                t = i
                n_done += 1
                if t < n_compute:
                    busy[dev[t]] = False
                # release inputs held for this task
                for k in range(in_ptr[t], in_ptr[t + 1]):
                    e = in_edge[k]
                    if e_local[e]:
                        p = e_src[e]
                        refs[p] -= 1
                        if refs[p] == 0 and p < n_compute:
                            cur[dev[p]] -= out_bytes[p]
                    else:
                        x = edge_x[e]
                        x_refs[x] -= 1
                        if x_refs[x] == 0:
                            cur[x_dst[x]] -= x_bytes[x]
                # hand outputs on: local consumers now, remote devices by one transfer each
                n_t = 0
                sd = 0
                for e in range(out_ptr[t], out_ptr[t + 1]):
                    c = e_dst[e]
                    if e_local[e]:
                        pending[c] -= 1
                        if pending[c] == 0:
                            ready_stack[n_ready] = c
                            n_ready += 1
                    else:
                        dd = dev[c]
                        sd = e_srcdev[e]  # one source device per producer (see TaskGraph)
                        if x_of_dev[dd] == -1:
                            touched[n_t] = dd
                            n_t += 1
                            x_of_dev[dd] = -2
                        if e_bytes[e] > xb[dd]:
                            xb[dd] = e_bytes[e]
                for k in range(n_t):
                    dd = touched[k]
                    pair = sd * n_dev + dd
                    s = now
                    for r in range(route_ptr[pair], route_ptr[pair + 1]):
                        s = max(s, res_free[route_res[r]])
                    f = s + latency[sd, dd] + xb[dd] / bandwidth[sd, dd]
                    for r in range(route_ptr[pair], route_ptr[pair + 1]):
                        res_free[route_res[r]] = f
                    sent[sd] += xb[dd]
                    recv[dd] += xb[dd]
                    x_dst[n_x] = dd
                    x_bytes[n_x] = xb[dd]
                    x_task[n_x] = t
                    x_of_dev[dd] = n_x
                    refs[t] += 1
                    n_free -= 1
                    slot = free_slots[n_free]
                    ev_n = _push_slot(ev_heap, ev_n, ev_time, ev_seq, ev_id, slot, f, seq, n + n_x)
                    seq += 1
                    n_x += 1
                for e in range(out_ptr[t], out_ptr[t + 1]):
                    if not e_local[e]:
                        x = x_of_dev[dev[e_dst[e]]]
                        edge_x[e] = x
                        x_refs[x] += 1
                for k in range(n_t):
                    xb[touched[k]] = 0.0
                    x_of_dev[touched[k]] = -1
                if refs[t] == 0 and t < n_compute:
                    cur[dev[t]] -= out_bytes[t]
            else:  # transfer x arrived
                x = i - n
                dd = x_dst[x]
                cur[dd] += x_bytes[x]
                if cur[dd] > peak[dd]:
                    peak[dd] = cur[dd]
                p = x_task[x]
                refs[p] -= 1
                if refs[p] == 0 and p < n_compute:
                    cur[dev[p]] -= out_bytes[p]
                for e in range(out_ptr[p], out_ptr[p + 1]):
                    if edge_x[e] == x:
                        c = e_dst[e]
                        pending[c] -= 1
                        if pending[c] == 0:
                            ready_stack[n_ready] = c
                            n_ready += 1
    return start, end, sent, recv, peak, n_x, n_done


@njit(cache=True, inline="always", error_model="numpy")
def _push_slot(heap, n, time, seq, ids, slot, t, s, i):
    time[slot] = t
    seq[slot] = s
    ids[slot] = i
    heap[n] = slot
    k = n
    while k > 0:
        p = (k - 1) >> 1
        if _ev_less(time, seq, heap[k], heap[p]):
            heap[k], heap[p] = heap[p], heap[k]
            k = p
        else:
            break
    return n + 1
