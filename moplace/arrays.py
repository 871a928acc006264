"""Small numpy helpers shared by the genome (core) and the simulator.

`EdgeArrays`: a graph's edges as arrays with their CSR indexes, the base of the compiled graph
and of the list schedulers' input."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class EdgeArrays:
    """A graph's edges as arrays, sorted by (src, dst): ``src``, ``dst`` (ops), ``edge_bytes``,
    and the CSR indexes into them of each op's out-edges (``out_ptr``/``out_edge``) and
    in-edges (``in_ptr``/``in_edge``). The base of `moplace.core.graph.CompiledGraph` and of
    the list schedulers' input (`searchers.listsched.schedule.ListSchedInput`)."""

    src: np.ndarray
    dst: np.ndarray
    edge_bytes: np.ndarray
    out_ptr: np.ndarray
    out_edge: np.ndarray
    in_ptr: np.ndarray
    in_edge: np.ndarray


def csr_ptr(keys: np.ndarray, n: int) -> np.ndarray:
    """The CSR row pointer of rows 0..n-1 holding ``keys`` (each key's count, cumulated)."""
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr


def segment_ranks(counts: np.ndarray) -> np.ndarray:
    """``0..counts[0]-1, 0..counts[1]-1, ...`` concatenated: each item's rank in its segment."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


def frozen(a: np.ndarray) -> np.ndarray:
    """``a``, made read-only (and returned): the simulator keeps the arrays a task graph shares
    read-only, so that the event loop's argument types (and so its compiled specialisation)
    do not depend on how a task graph was made."""
    a.flags.writeable = False
    return a
