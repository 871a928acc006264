"""Baechi's m-ETF (Jeon et al., "Fast device placement of machine learning graphs", SoCC 2020):
Earliest Time First list scheduling under a static memory budget per device.

ETF repeatedly takes, over all ready ops (every predecessor scheduled) and all devices, the
(op, device) pair of earliest start EST(op, d) = max(free time of d, max over preds m of
FT(m) + transfer(m's device -> d)) and appends the op there (no insertion into idle gaps).
Ties: larger upward rank (mean compute, mean transfer), lower op index, then, among the op's
devices, earlier finish and lower device index. The finish tie only matters on heterogeneous
devices, where ETF would otherwise put an op on a slower device just because its index is lower.

m-ETF admits a device only when the op's co-location group fits its remaining memory (the
static model of `dpos`: ``op_memory`` stays pinned on its device for the whole step); the first
op of a group reserves the whole group's memory and forces the others there. An op that fits
no device goes where most memory is left and the result is marked infeasible.

Timing model and result type are those of `searchers.listsched.schedule` (`ListSchedResult`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import kernels as core
from .schedule import (ListSchedInput, ListSchedResult, group_memory, schedule_result,
                         transfer_weights, upward_rank)


@njit(cache=True)
def metf_kernel(rank, compute, src, edge_bytes, in_ptr, in_edge, out_ptr, out_edge, dst,
                latency, bandwidth, group_mem, capacity, group):
    """m-ETF over a DAG. Returns placement, start, finish and feasible.

    Each ready op keeps its data-ready time per device (``drt``, fixed once its predecessors
    are scheduled), so a step scans ready x devices with arithmetic only: O(R * D) per step.
    """
    n, D = compute.shape
    place, start, finish, group_dev, free = core.new_schedule(n, group_mem, capacity)
    avail = np.zeros(D)  # time each device finishes its last op (ETF appends)
    drt = np.empty((n, D))
    missing = np.empty(n, np.int64)  # unscheduled predecessors
    ready = np.empty(n, np.int64)
    n_ready = 0
    for i in range(n):
        missing[i] = in_ptr[i + 1] - in_ptr[i]
        if missing[i] == 0:
            drt[i, :] = 0.0
            ready[n_ready] = i
            n_ready += 1
    feasible = True
    for _ in range(n):
        roomiest = 0  # the device with the most memory left (lowest index at a tie)
        for d in range(1, D):
            if free[d] > free[roomiest]:
                roomiest = d
        best_k, best_i, best_d = -1, -1, -1
        best_s, best_f = np.inf, np.inf
        for k in range(n_ready):
            i = ready[k]
            g = group[i]
            forced = group_dev[g]
            if forced < 0 and group_mem[g] > free[roomiest]:
                forced = roomiest  # fits nowhere: where the most memory is left, infeasible
            for d in range(D):
                if forced >= 0:
                    if d != forced:
                        continue
                elif group_mem[g] > free[d]:
                    continue
                s = max(avail[d], drt[i, d])
                f = s + compute[i, d]
                better = False
                if best_i < 0 or s < best_s:
                    better = True
                elif s == best_s:
                    if i != best_i:
                        better = rank[i] > rank[best_i] or (rank[i] == rank[best_i] and i < best_i)
                    else:  # d > best_d: later index, so only a strictly earlier finish wins
                        better = f < best_f
                if better:
                    best_k, best_i, best_d, best_s, best_f = k, i, d, s, f
        i, d = best_i, best_d
        g = group[i]
        if group_dev[g] < 0:
            if group_mem[g] > free[d]:
                feasible = False
            group_dev[g] = d
            free[d] -= group_mem[g]
        place[i], start[i], finish[i] = d, best_s, best_f
        avail[d] = best_f
        n_ready -= 1
        ready[best_k] = ready[n_ready]  # the ready set is unordered: ties are broken above
        for p in range(out_ptr[i], out_ptr[i + 1]):
            j = dst[out_edge[p]]
            missing[j] -= 1
            if missing[j] == 0:
                for dd in range(D):
                    drt[j, dd] = core.ready_time(j, dd, in_ptr, in_edge, src, edge_bytes,
                                                  latency, bandwidth, place, finish)
                ready[n_ready] = j
                n_ready += 1
    return place, start, finish, feasible


def metf(inp: ListSchedInput) -> ListSchedResult:
    """m-ETF: earliest-start (op, device) pair first among devices whose memory fits the op's
    co-location group; ranks (mean compute, mean transfer) break ties. See the module doc.

    ETF's starts never decrease, so the result's order (by start, then topological position)
    is its own order up to ties."""
    rank = upward_rank(inp, inp.compute.mean(axis=1), transfer_weights(inp, "mean"))
    place, start, finish, feasible = metf_kernel(
        rank, inp.compute, inp.src, inp.edge_bytes, inp.in_ptr, inp.in_edge, inp.out_ptr,
        inp.out_edge, inp.dst, inp.latency, inp.bandwidth, group_memory(inp), inp.capacity,
        inp.group)
    return schedule_result(inp, place, start, finish, feasible)
