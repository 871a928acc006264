"""The simulator's event loop as it was before it was made faster (commit c094a7e), kept as the
yardstick the fast loop in `moplace.simulator._simcore` is checked against: the same strategy
must give the same trace, to the last bit (tests/test_simcore_reference.py), and
experiments/bench_simulator.py times both in one run.

It is the plainest statement of the model (see `moplace.simulator.engine`): one global heap of
events ordered by (time, sequence number), one ready heap per device, every work array
allocated per call. Nothing in the product calls it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._heaps import _ev_pop, _ev_push, _free, _mem_put, _rq_pop, _rq_push
from .engine import Trace, trace_from_outputs
from .taskgraph import TaskGraph

@njit(cache=True, error_model="numpy")
def reference_core(n_dev, dev, dur, prio, out_bytes, n_compute,
                  out_ptr, e_src, e_dst, e_bytes, e_srcdev, e_local, in_ptr, in_edge,
                  route_ptr, route_res, n_res, bandwidth, latency,
                  coll_ptr, coll_dev, coll_res_ptr, coll_res, coll_dur, coll_bytes, ip_src,
                  scratch, gate, opens, static_mem, record=False):
    """Run the task graph; returns (start, end, sent, recv, peak_mem, n_transfers, n_done,
    transfers, memory). With ``record``, ``transfers`` is a (n_transfers, 6) array, one row per
    transfer in issue order: producing task, source device, destination device, bytes, start
    and arrival time; and ``memory`` a (k, 3) array, one row per change of a device's resident
    bytes in event order: time, device, bytes resident after the change (parameters included).
    Without it both are empty."""
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
    reused = np.zeros(n)  # bytes of a task's output buffer another task took over (in place)
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
    rq_key = np.empty(max(n_compute, 1))
    rq_n = np.zeros(n_dev, np.int64)
    busy = np.zeros(n_dev, np.bool_)

    cap = n + n_e + 1
    ev_t = np.empty(cap)
    ev_s = np.empty(cap, np.int64)
    ev_i = np.empty(cap, np.int64)
    ev_n = 0
    seq = 0

    x_dst = np.empty(n_e, np.int64)
    x_bytes = np.empty(n_e)
    x_task = np.empty(n_e, np.int64)
    x_refs = np.zeros(n_e, np.int64)
    n_rec = n_e if record else 0
    x_src = np.empty(n_rec, np.int64)
    x_start = np.empty(n_rec)
    x_end = np.empty(n_rec)
    memory = np.empty((2 * (n + n_rec) if record else 0, 3))
    n_mem = 0
    edge_x = np.full(n_e, -1, np.int64)
    n_x = 0
    xb = np.zeros(n_dev)
    x_of_dev = np.full(n_dev, -1, np.int64)
    touched = np.empty(n_dev, np.int64)

    park_head = np.full(n_compute + 1, -1, np.int64)  # per gate: its parked tasks, or -2 open
    park_next = np.empty(max(n_compute, 1), np.int64)
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
            if t < n_compute and gate.shape[0] > 0 and gate[t] >= 0 and park_head[gate[t]] != -2:
                park_next[t] = park_head[gate[t]]  # gated behind a backward not yet begun
                park_head[gate[t]] = t
            elif t < n_compute:
                d = dev[t]
                _rq_push(rq, rq_key, rq_base[d], rq_n[d], prio[t], t)
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
                ev_n = _ev_push(ev_t, ev_s, ev_i, ev_n, f, seq, t)
                seq += 1
        # idle devices start their highest-priority ready task
        for d in range(n_dev):
            if not busy[d] and rq_n[d] > 0:
                t = _rq_pop(rq, rq_key, rq_base[d], rq_n[d])
                rq_n[d] -= 1
                busy[d] = True
                start[t] = now
                end[t] = now + dur[t]
                p = ip_src[t]
                if p >= 0 and dev[p] == d:
                    reused[p] = min(out_bytes[t], out_bytes[p])
                    cur[d] += out_bytes[t] - reused[p]
                else:
                    cur[d] += out_bytes[t]
                if record:
                    n_mem = _mem_put(memory, n_mem, now, d, cur[d])
                if cur[d] > peak[d]:
                    peak[d] = cur[d]
                if scratch.shape[0] > 0 and cur[d] + scratch[t] > peak[d]:
                    peak[d] = cur[d] + scratch[t]
                ev_n = _ev_push(ev_t, ev_s, ev_i, ev_n, end[t], seq, t)
                seq += 1
        if ev_n == 0:
            break
        now = ev_t[0]
        while ev_n > 0 and ev_t[0] == now:
            i, ev_n = _ev_pop(ev_t, ev_s, ev_i, ev_n)
            if i < n:  # task i finished
                t = i
                n_done += 1
                if t < n_compute:
                    busy[dev[t]] = False
                    if opens.shape[0] > 0 and opens[t] >= 0 and park_head[opens[t]] != -2:
                        k = park_head[opens[t]]  # the backward begins: its gated tasks queue
                        park_head[opens[t]] = -2
                        while k >= 0:
                            ready_stack[n_ready] = k
                            n_ready += 1
                            k = park_next[k]
                # release inputs held for this task
                for k in range(in_ptr[t], in_ptr[t + 1]):
                    e = in_edge[k]
                    if e_local[e]:
                        p = e_src[e]
                        refs[p] -= 1
                        if refs[p] == 0 and p < n_compute:
                            n_mem = _free(dev[p], out_bytes[p] - reused[p], now, cur, record,
                                          memory, n_mem)
                    else:
                        x = edge_x[e]
                        x_refs[x] -= 1
                        if x_refs[x] == 0:
                            n_mem = _free(x_dst[x], x_bytes[x], now, cur, record, memory, n_mem)
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
                    if record:
                        x_src[n_x] = sd
                        x_start[n_x] = s
                        x_end[n_x] = f
                    x_of_dev[dd] = n_x
                    refs[t] += 1
                    ev_n = _ev_push(ev_t, ev_s, ev_i, ev_n, f, seq, n + n_x)
                    seq += 1
                    n_x += 1
                for k in range(n_t):
                    xb[touched[k]] = 0.0
                    x_of_dev[touched[k]] = -1
                if refs[t] == 0 and t < n_compute:
                    cur[dev[t]] -= out_bytes[t] - reused[t]
                    if record:
                        n_mem = _mem_put(memory, n_mem, now, dev[t], cur[dev[t]])
            else:  # transfer x arrived
                x = i - n
                dd = x_dst[x]
                cur[dd] += x_bytes[x]
                if record:
                    n_mem = _mem_put(memory, n_mem, now, dd, cur[dd])
                if cur[dd] > peak[dd]:
                    peak[dd] = cur[dd]
                p = x_task[x]
                refs[p] -= 1
                if refs[p] == 0 and p < n_compute:
                    n_mem = _free(dev[p], out_bytes[p] - reused[p], now, cur, record, memory,
                                  n_mem)
                for e in range(out_ptr[p], out_ptr[p + 1]):
                    c = e_dst[e]
                    if not e_local[e] and dev[c] == dd:
                        edge_x[e] = x
                        x_refs[x] += 1
                        pending[c] -= 1
                        if pending[c] == 0:
                            ready_stack[n_ready] = c
                            n_ready += 1
    transfers = np.empty((n_x if record else 0, 6))
    for x in range(transfers.shape[0]):
        transfers[x, 0] = x_task[x]
        transfers[x, 1] = x_src[x]
        transfers[x, 2] = x_dst[x]
        transfers[x, 3] = x_bytes[x]
        transfers[x, 4] = x_start[x]
        transfers[x, 5] = x_end[x]
    return start, end, sent, recv, peak, n_x, n_done, transfers, memory[:n_mem]


def reference_trace(tg: TaskGraph, cluster, n_ops: int, record: bool = False) -> Trace:
    """`moplace.simulator.engine.run_task_graph`, on the reference loop."""
    static = tg.static_memory(cluster.n_devices)
    out = reference_core(
        cluster.n_devices, tg.dev, tg.dur, tg.prio, tg.out_bytes, tg.n_compute,
        tg.out_ptr, tg.e_src, tg.e_dst, tg.e_bytes, tg.e_srcdev, tg.e_local, tg.in_ptr, tg.in_edge,
        cluster.route_ptr, cluster.route_res, cluster.n_resources,
        cluster.bandwidth, cluster.latency,
        tg.coll_ptr, tg.coll_dev, tg.coll_res_ptr, tg.coll_res, tg.coll_dur, tg.coll_bytes,
        tg.ip_src, tg.scratch, tg.gate, tg.opens, static, record)
    return trace_from_outputs(tg, cluster, n_ops, static, *out)
