"""The lexicographic topological order of a DAG (numba): among the ops whose inputs are all
placed, always the lowest index next. It is networkx's ``lexicographical_topological_sort``
on integer nodes, at compiled speed (a 100,000-op layered graph: 2.2 s there, 5 ms here)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def lexicographic_topo_order(n, src, dst):
    """Ops 0..n-1 in lexicographic topological order over edges ``src[k] -> dst[k]``; fewer
    than n entries when the graph has a cycle (the ops on or after it are left out)."""
    n_e = src.shape[0]
    deg = np.zeros(n, np.int64)
    ptr = np.zeros(n + 1, np.int64)
    for k in range(n_e):
        deg[dst[k]] += 1
        ptr[src[k] + 1] += 1
    for i in range(n):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    succ = np.empty(n_e, np.int64)
    for k in range(n_e):
        succ[fill[src[k]]] = dst[k]
        fill[src[k]] += 1
    heap = np.empty(n, np.int64)
    size = 0
    for i in range(n):
        if deg[i] == 0:
            heap[size] = i  # ascending: already a heap
            size += 1
    order = np.empty(n, np.int64)
    k = 0
    while size > 0:
        top = heap[0]
        size -= 1
        last = heap[size]
        p = 0
        while True:  # sift the last entry down from the root
            c = 2 * p + 1
            if c >= size:
                break
            if c + 1 < size and heap[c + 1] < heap[c]:
                c += 1
            if heap[c] >= last:
                break
            heap[p] = heap[c]
            p = c
        heap[p] = last
        order[k] = top
        k += 1
        for e in range(ptr[top], ptr[top + 1]):
            j = succ[e]
            deg[j] -= 1
            if deg[j] == 0:
                q = size  # sift up
                size += 1
                while q > 0:
                    par = (q - 1) >> 1
                    if heap[par] <= j:
                        break
                    heap[q] = heap[par]
                    q = par
                heap[q] = j
    return order[:k]


@njit(cache=True)
def depths(topo, out_ptr, out_edge, dst):
    """Per op, the most edges on a path from an op without inputs to it (``topo``: a
    topological order; ``out_ptr``/``out_edge``: the CSR of each op's out-edges)."""
    depth = np.zeros(topo.shape[0], np.int64)
    for u in topo:
        for q in range(out_ptr[u], out_ptr[u + 1]):
            v = dst[out_edge[q]]
            if depth[u] + 1 > depth[v]:
                depth[v] = depth[u] + 1
    return depth
