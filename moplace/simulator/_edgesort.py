"""A task graph's edges sorted by (source, destination) in one compiled pass (numba), with
their CSR indexes and which of them move nothing, instead of two counting sorts and seven
numpy gathers (134,623 random edges: 12-15 ms either way; this one releases the GIL, so the
threads of `Problem.evaluate_batch` sort side by side)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)  # threads of Problem.evaluate_batch build side by side
def sort_edges(src, dst, nbytes, srcdev, moved, dev, n_compute, n_tasks):
    """Edges sorted by (src, dst), stably, as (e_src, e_dst, e_bytes, e_srcdev, e_moved,
    e_local, out_ptr, in_ptr, in_edge). ``dev``: the device of each compute task; an edge is
    local when it goes into a collective, stays on one device, or carries no bytes."""
    m = src.shape[0]
    in_ptr = np.zeros(n_tasks + 1, np.int64)
    out_ptr = np.zeros(n_tasks + 1, np.int64)
    for k in range(m):
        in_ptr[dst[k] + 1] += 1
        out_ptr[src[k] + 1] += 1
    for t in range(n_tasks):
        in_ptr[t + 1] += in_ptr[t]
        out_ptr[t + 1] += out_ptr[t]
    # least significant key first: by destination, then stably by source
    fill = in_ptr[:-1].copy()
    by_dst = np.empty(m, np.int64)
    for k in range(m):
        by_dst[fill[dst[k]]] = k
        fill[dst[k]] += 1
    fill = out_ptr[:-1].copy()
    order = np.empty(m, np.int64)
    for j in range(m):
        k = by_dst[j]
        order[fill[src[k]]] = k
        fill[src[k]] += 1
    e_src = np.empty(m, np.int64)
    e_dst = np.empty(m, np.int64)
    e_bytes = np.empty(m)
    e_srcdev = np.empty(m, np.int64)
    e_moved = np.empty(m)
    e_local = np.empty(m, np.bool_)
    for i in range(m):
        k = order[i]
        d = dst[k]
        e_src[i] = src[k]
        e_dst[i] = d
        e_bytes[i] = nbytes[k]
        e_srcdev[i] = srcdev[k]
        e_moved[i] = moved[k]
        e_local[i] = d >= n_compute or srcdev[k] == dev[d] or nbytes[k] <= 0
    fill = in_ptr[:-1].copy()
    in_edge = np.empty(m, np.int64)
    for i in range(m):
        in_edge[fill[e_dst[i]]] = i
        fill[e_dst[i]] += 1
    return e_src, e_dst, e_bytes, e_srcdev, e_moved, e_local, out_ptr, in_ptr, in_edge
