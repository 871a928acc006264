"""A placement's pipeline stages along the data flow (`stage_depths`): each op's stage is the
number of device changes on the longest forward path into it, so that stages laid round-robin
(Megatron's virtual stages: stage j on the device of stage j mod p) are told apart from one
device's contiguous stage. The simulator's interleaved schedules
(`moplace.simulator.pipeorder`) and the plan's shape (`moplace.core.planshape`) read it."""

from __future__ import annotations

import numpy as np
from numba import njit

from .graph import OpGraph


def stage_depths(graph: OpGraph, device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per op of ``graph`` placed on ``device`` (a split op: its first part's): its forward
    stage (device changes on the longest path of forward and other ops into it, a source's
    edge counting none: a weight tied to a later layer's head, GPT-2's, is read across
    devices without moving the data flow to another stage; backward and update ops 0) and its
    backward stage (the same along backward edges, counted from the
    backward's first ops at 0; other ops 0). A source (an op that reads none: a weight, an
    input) takes the least forward stage of its readers on its own device: a layer's weights
    belong to the layer's stage."""
    a = graph.arrays
    device = np.asarray(device, np.int64)
    fst, bst = _stages(a.topo, a.in_ptr, a.in_edge, a.src, a.role, device)
    source = np.diff(a.in_ptr) == 0
    flow = (a.role[a.dst] == 0) | (a.role[a.dst] == 3)  # forward and other readers
    e = np.flatnonzero(source[a.src] & (device[a.src] == device[a.dst]) & flow)
    if e.size:
        least = np.full(fst.size, np.iinfo(np.int64).max)
        np.minimum.at(least, a.src[e], fst[a.dst[e]])
        fst = np.where(least < np.iinfo(np.int64).max, least, fst)
    return fst, bst


@njit(cache=True)
def _stages(topo, in_ptr, in_edge, src, role, dev):
    """Per op: its forward stage (device changes on the longest forward path into it; ops of
    role other count as forward) and its backward stage (the same along backward edges, from
    the backward's first ops at 0)."""
    n = topo.shape[0]
    fst = np.zeros(n, np.int64)
    bst = np.zeros(n, np.int64)
    for i in range(n):
        op = topo[i]
        best = 0
        for q in range(in_ptr[op], in_ptr[op + 1]):
            u = src[in_edge[q]]
            if in_ptr[u + 1] == in_ptr[u]:
                continue  # a source (a weight, an input) is no stage of the data flow
            step = fst[u] + (1 if dev[u] != dev[op] else 0)
            if role[op] == 1:  # backward: along backward edges only
                if role[u] == 1:
                    step = bst[u] + (1 if dev[u] != dev[op] else 0)
                else:
                    continue
            elif role[u] == 1 or role[u] == 2:
                continue
            if step > best:
                best = step
        if role[op] == 1:
            bst[op] = best
        else:
            fst[op] = best
    return fst, bst


def round_robin(keys) -> int:
    """How many devices ``keys`` (each stage's device, or device set, in data-flow order) are
    laid round-robin over: p when stage j is on the device of stage ``j mod p``, the first p
    distinct; 0 when they are not."""
    keys = list(keys)
    p = len(dict.fromkeys(keys))
    if p == 0 or len(keys) % p or len(set(keys[:p])) != p:
        return 0
    return p if all(k == keys[j % p] for j, k in enumerate(keys)) else 0
