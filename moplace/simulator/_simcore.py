"""The simulator's compiled event loop (numba). Pure numeric code over the arrays of a
`TaskGraph` and a `Cluster`; see `moplace.simulator.engine` for the model it implements.

Events are task finishes and transfer arrivals, ordered by (time, sequence number) so that runs
are deterministic. All events at one instant are handled before idle devices pick their next
task, so a device always chooses among everything that is ready at that instant.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._heaps import _ev_pop, _ev_push, _free, _mem_put, _rq4_pop as _rq_pop, _rq4_push as _rq_push

#: a gate's parked list once its backward has begun (`simulate_core`'s ``gate``)
_OPEN = -2


@njit(cache=True, inline="always", error_model="numpy")
def _take(buf, o, k):
    """The view ``buf[o:o + k]`` and the offset after it."""
    return buf[o:o + k], o + k


@njit(cache=True, inline="always", error_model="numpy")
def _ready(c, d, n_compute, prio, rq, rq_key, rq_base, rq_n, busy, ready_stack, n_ready, wmask,
           gate, park_head, park_next):
    """Task ``c`` (on device ``d`` when a compute task) has all its inputs: a compute task goes
    to its device's ready heap (flagging the device if idle), or, gated behind a backward that
    has not begun, onto its gate's parked list; a collective onto the stack of those to start.
    Returns the new stack size and flags."""
    if c < n_compute and gate.shape[0] > 0 and gate[c] >= 0 and park_head[gate[c]] != _OPEN:
        park_next[c] = park_head[gate[c]]
        park_head[gate[c]] = c
    elif c < n_compute:
        _rq_push(rq, rq_key, rq_base[d], rq_n[d], prio[c], c)
        rq_n[d] += 1
        wmask |= (busy[d] == 0) << min(d, 62)
    else:
        ready_stack[n_ready] = c
        n_ready += 1
    return n_ready, wmask


def work_sizes(n: int, n_compute: int, n_e: int, n_dev: int, n_res: int,
               record: bool) -> tuple[int, int]:
    """Lengths of the int64 and float64 work buffers `simulate_core` needs for a task graph of
    ``n`` tasks (``n_compute`` of them compute tasks) and ``n_e`` edges."""
    cap = n + n_e + 1
    rec = n_e if record else 0
    return (3 * n + 3 * n_compute + 1 + 2 * cap + 8 * n_e + 5 * n_dev + 1 + rec,
            2 * n_dev + n_res + n_compute + cap + n_e + 2 * rec + n)


@njit(cache=True, error_model="numpy", nogil=True)  # threads run it side by side
def simulate_core(n_dev, dev, dur, prio, out_bytes, n_compute,
                  out_ptr, e_src, e_dst, e_bytes, e_srcdev, e_local, in_ptr, in_edge,
                  route_ptr, route_res, n_res, bandwidth, latency,
                  coll_ptr, coll_dev, coll_res_ptr, coll_res, coll_dur, coll_bytes, ip_src,
                  scratch, gate, opens, static_mem, record, iw, fw, start, end):
    """Run the task graph: fills ``start`` and ``end`` (one entry per task) and returns (sent,
    recv, peak_mem, n_transfers, n_done, transfers, memory).

    ``iw`` and ``fw`` are work buffers of at least `work_sizes` int64 and float64 entries,
    reused across calls: nothing of the size of the graph is allocated here. With ``record``,
    ``transfers`` is a (n_transfers, 6) array, one row per transfer in issue order: producing
    task, source device, destination device, bytes, start and arrival time; and ``memory`` a
    (k, 3) array, one row per change of a device's resident bytes in event order: time,
    device, bytes resident after the change (parameters included). Without it both are empty.
    """
    n = dev.shape[0]
    n_e = e_dst.shape[0]
    cap = n + n_e + 1
    n_rec = n_e if record else 0
    # the work buffers, carved into views (nothing is copied), in `work_sizes`' order
    pending, o = _take(iw, 0, n)
    refs, o = _take(iw, o, n)  # holders of a task's output: local consumers + transfers out
    ready_stack, o = _take(iw, o, n)  # collectives whose inputs are all in, to be started
    rq, o = _take(iw, o, n_compute)
    ev_s, o = _take(iw, o, cap)
    ev_i, o = _take(iw, o, cap)
    x_dst, o = _take(iw, o, n_e)
    x_task, o = _take(iw, o, n_e)
    x_refs, o = _take(iw, o, n_e)
    edge_x, o = _take(iw, o, n_e)  # the transfer that brings edge e's data
    # the edges each transfer serves, as linked lists: first x_head[x], then e_next[e]
    x_head, o = _take(iw, o, n_e)
    e_next, o = _take(iw, o, n_e)
    # each edge in one number, read in order: its consumer when local, -1 - it when not
    out_code, o = _take(iw, o, n_e)
    # each in-edge of a task (in in_edge's order): its producer when local, -1 - the edge not
    in_code, o = _take(iw, o, n_e)
    rq_base, o = _take(iw, o, n_dev + 1)
    rq_n, o = _take(iw, o, n_dev)
    busy, o = _take(iw, o, n_dev)
    x_of_dev, o = _take(iw, o, n_dev)
    touched, o = _take(iw, o, n_dev)
    x_src, o = _take(iw, o, n_rec)
    park_head, o = _take(iw, o, n_compute + 1)  # per gate: its parked tasks, or _OPEN
    park_next, o = _take(iw, o, n_compute)
    cur, f = _take(fw, 0, n_dev)
    xb, f = _take(fw, f, n_dev)
    res_free, f = _take(fw, f, n_res)
    rq_key, f = _take(fw, f, n_compute)
    ev_t, f = _take(fw, f, cap)
    x_bytes, f = _take(fw, f, n_e)
    x_start, f = _take(fw, f, n_rec)
    x_end, f = _take(fw, f, n_rec)
    reused, f = _take(fw, f, n)  # bytes of a task's output buffer another task took over
    if o > iw.shape[0] or f > fw.shape[0]:
        raise ValueError("simulate_core: work buffers smaller than work_sizes says")

    sent = np.zeros(n_dev)
    recv = np.zeros(n_dev)
    peak = static_mem.copy()
    for d in range(n_dev):
        cur[d] = static_mem[d]
        xb[d] = 0.0
        x_of_dev[d] = -1
        busy[d] = 0
        rq_n[d] = 0
        rq_base[d] = 0
    rq_base[n_dev] = 0
    for r in range(n_res):
        res_free[r] = 0.0
    for k in range(n_compute + 1):
        park_head[k] = -1
    for t in range(n):
        pending[t] = in_ptr[t + 1] - in_ptr[t]
        refs[t] = 0
        reused[t] = 0.0
    for e in range(n_e):  # edges are sorted by source: a sequential pass
        if e_local[e]:
            refs[e_src[e]] += 1
            out_code[e] = e_dst[e]
        else:
            out_code[e] = -1 - e_dst[e]
    for k in range(n_e):
        e = in_edge[k]
        in_code[k] = e_src[e] if e_local[e] else -1 - e

    # per-device ready heaps share one array, device d owns [rq_base[d], rq_base[d+1])
    for t in range(n_compute):
        rq_base[dev[t] + 1] += 1
    for d in range(n_dev):
        rq_base[d + 1] += rq_base[d]
    ev_n = 0
    seq = 0
    memory = np.empty((2 * (n + n_rec) if record else 0, 3))
    n_mem = 0
    n_x = 0

    # ready compute tasks go straight to their device's heap (its order does not depend on
    # the order of insertion); ready collectives wait on a stack and start, in the order the
    # stack gives, before idle devices pick their tasks
    n_ready = 0
    for t in range(n):
        if pending[t] == 0:  # (every device is flagged below)
            n_ready, _ = _ready(t, dev[t], n_compute, prio, rq, rq_key, rq_base, rq_n, busy,
                                ready_stack, n_ready, 0, gate, park_head, park_next)

    now = 0.0
    n_done = 0
    # devices that may start a task: those that fell idle or, idle, got a ready task (bit d
    # of wmask; beyond 62 devices any flag means a scan of all)
    wmask = (1 << n_dev) - 1 if n_dev <= 62 else 1
    while True:
        while n_ready > 0:  # collectives start at once, holding their ring's links
            n_ready -= 1
            t = ready_stack[n_ready]
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
        # idle devices start their highest-priority ready task, in device order; only those
        # flagged can (a scan of every device cost 10% of the loop on 4 devices, more on 8)
        m = wmask if n_dev <= 62 else (-1 if wmask else 0)
        wmask = 0
        d = 0
        while m != 0 and d < n_dev:
            if (m & 1) and busy[d] == 0 and rq_n[d] > 0:
                t = _rq_pop(rq, rq_key, rq_base[d], rq_n[d])
                rq_n[d] -= 1
                busy[d] = 1
                start[t] = now
                fin = now + dur[t]
                end[t] = fin
                p = ip_src[t]  # in place: the output goes into an input's buffer
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
                    peak[d] = cur[d] + scratch[t]  # held only while the task runs
                ev_n = _ev_push(ev_t, ev_s, ev_i, ev_n, fin, seq, t)
                seq += 1
            m >>= 1
            d += 1
        if ev_n == 0:
            break
        now = ev_t[0]
        while ev_n > 0 and ev_t[0] == now:
            i, ev_n = _ev_pop(ev_t, ev_s, ev_i, ev_n)
            if i < n:  # task i finished
                t = i
                n_done += 1
                if t < n_compute:
                    busy[dev[t]] = 0
                    wmask |= 1 << min(dev[t], 62)
                    if opens.shape[0] > 0 and opens[t] >= 0 and park_head[opens[t]] != _OPEN:
                        k = park_head[opens[t]]  # the backward begins: its gated tasks queue
                        park_head[opens[t]] = _OPEN
                        while k >= 0:
                            d = dev[k]
                            _rq_push(rq, rq_key, rq_base[d], rq_n[d], prio[k], k)
                            rq_n[d] += 1
                            wmask |= (busy[d] == 0) << min(d, 62)
                            k = park_next[k]
                # release inputs held for this task
                for k in range(in_ptr[t], in_ptr[t + 1]):
                    code = in_code[k]
                    if code >= 0:
                        p = code
                        refs[p] -= 1
                        if refs[p] == 0 and p < n_compute:
                            n_mem = _free(dev[p], out_bytes[p] - reused[p], now, cur, record,
                                          memory, n_mem)
                    else:
                        x = edge_x[-1 - code]
                        x_refs[x] -= 1
                        if x_refs[x] == 0:
                            n_mem = _free(x_dst[x], x_bytes[x], now, cur, record, memory, n_mem)
                # hand outputs on: local consumers now, remote devices by one transfer each
                n_t = 0
                sd = 0
                for e in range(out_ptr[t], out_ptr[t + 1]):
                    c = out_code[e]
                    if c >= 0:
                        pending[c] -= 1
                        if pending[c] == 0:
                            n_ready, wmask = _ready(c, dev[c], n_compute, prio, rq, rq_key,
                                                    rq_base, rq_n, busy, ready_stack, n_ready,
                                                    wmask, gate, park_head, park_next)
                    else:
                        dd = dev[-1 - c]
                        sd = e_srcdev[e]  # one source device per producer (see TaskGraph)
                        if x_of_dev[dd] == -1:  # the first edge to dd: a new transfer
                            touched[n_t] = dd
                            x_of_dev[dd] = n_x + n_t
                            x_head[n_x + n_t] = -1
                            x_refs[n_x + n_t] = 0
                            n_t += 1
                        x = x_of_dev[dd]
                        e_next[e] = x_head[x]
                        x_head[x] = e
                        edge_x[e] = x
                        x_refs[x] += 1
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
                    refs[t] += 1
                    ev_n = _ev_push(ev_t, ev_s, ev_i, ev_n, f, seq, n + n_x)
                    seq += 1
                    n_x += 1
                    xb[dd] = 0.0
                    x_of_dev[dd] = -1
                if refs[t] == 0 and t < n_compute:
                    n_mem = _free(dev[t], out_bytes[t] - reused[t], now, cur, record, memory,
                                  n_mem)
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
                e = x_head[x]
                while e >= 0:  # its consumers (in any order: each one's count goes down)
                    c = -1 - out_code[e]
                    e = e_next[e]
                    pending[c] -= 1
                    if pending[c] == 0:
                        n_ready, wmask = _ready(c, dd, n_compute, prio, rq, rq_key, rq_base, rq_n,
                                                busy, ready_stack, n_ready, wmask, gate,
                                                park_head, park_next)
    transfers = np.empty((n_x if record else 0, 6))
    for x in range(transfers.shape[0]):
        transfers[x, 0] = x_task[x]
        transfers[x, 1] = x_src[x]
        transfers[x, 2] = x_dst[x]
        transfers[x, 3] = x_bytes[x]
        transfers[x, 4] = x_start[x]
        transfers[x, 5] = x_end[x]
    return sent, recv, peak, n_x, n_done, transfers, memory[:n_mem]
