"""Archive of the non-dominated feasible points a search has seen, plus its least-violating
infeasible ones.

All objectives are minimized; ``a`` dominates ``b`` when ``a <= b`` in every objective and
``a < b`` in at least one. A point is feasible when its constraint violation is 0. Values within
`RTOL` of each other (relative) count as equal when a new point is judged (`no_worse`): a plan
5e-17 s faster than another, the same in all else, is the same plan's float noise and does not
push the first one out; a point leaves the front only when beaten outright. The search's front
(`moplace.optimize.driver`) and a comparison's combined front judge so; an archive made with
``rtol=0`` (the exact fronts of `moplace.optimize.exact`, the yardstick) compares exactly.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import compress
from typing import Any

import numpy as np

from .hypervolume import normalized_hypervolume


#: the relative difference under which two objective values are the same value (float noise
#: of sums taken in another order), for the front and for naming a point after a baseline
RTOL = 1e-9


def no_worse(a, b, rtol: float = RTOL) -> np.ndarray:
    """``a <= b`` with values within ``rtol`` (relative) counted equal, elementwise
    (broadcasting); ``all(axis=-1)`` of it: ``a`` weakly dominates ``b``."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a <= b + rtol * np.maximum(np.abs(a), np.abs(b)) if rtol else a <= b


def same_values(a, b) -> bool:
    """Whether two points' objective values are equal within `RTOL` in every objective."""
    return bool((no_worse(a, b) & no_worse(b, a)).all())


@dataclass(frozen=True, eq=False)  # eq=False: identity semantics, ndarray fields are not hashable
class Entry:
    """One archived point: objective ``values`` (read-only), constraint ``violation`` (0 =
    feasible), the caller's ``payload`` (e.g. a strategy) and ``index``, the point's position
    in the stream of all points added to the archive (0-based)."""

    values: np.ndarray
    violation: float
    payload: Any
    index: int


class ParetoArchive:
    """Non-dominated feasible points, and up to ``max_infeasible`` least-violating infeasible
    points kept apart (so a search in which nothing fits can still return something).
    ``rtol``: values within it (relative) are equal (`no_worse`); 0 compares exactly."""

    def __init__(self, n_objectives: int, *, max_infeasible: int = 100, rtol: float = 0.0):
        if int(n_objectives) < 1:
            raise ValueError(f"n_objectives must be >= 1, got {n_objectives}")
        if int(max_infeasible) < 0:
            raise ValueError(f"max_infeasible must be >= 0, got {max_infeasible}")
        self.n_objectives = int(n_objectives)
        self.max_infeasible = int(max_infeasible)
        self.rtol = float(rtol)
        self.n_added = 0
        # front values live in a growing buffer: rows [:_k] are the front, in insertion order,
        # aligned with _entries; compared against each new point in one vectorized step
        self._buf = np.empty((16, self.n_objectives))
        self._k = 0
        self._entries: list[Entry] = []
        self._order: np.ndarray | None = None  # cached sort of the front, None when stale
        # infeasible points sorted by key (violation, first objective, index), keys unique
        self._inf_keys: list[tuple[float, float, int]] = []
        self._inf_entries: list[Entry] = []

    def __len__(self) -> int:
        """Number of points on the feasible front."""
        return self._k

    def add(self, values, violation: float = 0.0, payload: Any = None) -> bool:
        """Offer a point; True when it entered the feasible front.

        A feasible point enters unless some front point weakly dominates it (an equal point,
        within ``rtol``, included: the first one stays); the front points it dominates outright
        leave. An infeasible point (``violation > 0``) never enters the front and is kept among
        the infeasible ones.
        """
        v = np.array(values, dtype=np.float64)  # a private copy: entries must not alias input
        if v.shape != (self.n_objectives,):
            raise ValueError(f"expected {self.n_objectives} objective values, got shape {v.shape}")
        if np.isnan(v).any():  # NaN compares False both ways: it would never leave the front
            raise ValueError(f"objective values contain NaN: {v}")
        violation = float(violation)
        if not violation >= 0.0:
            raise ValueError(f"violation must be >= 0, got {violation}")
        index = self.n_added
        self.n_added += 1
        if violation > 0.0:
            self._add_infeasible(v, violation, payload, index)
            return False
        front = self._buf[:self._k]
        if no_worse(front, v, self.rtol).all(axis=1).any():
            return False
        # nothing weakly dominates v, so no front row equals it: v <= row means v dominates row
        beaten = (v <= front).all(axis=1)
        if beaten.any():
            keep = ~beaten
            n = int(keep.sum())
            self._buf[:n] = front[keep]
            self._entries = list(compress(self._entries, keep))
            self._k = n
        if self._k == len(self._buf):
            self._buf = np.concatenate([self._buf, np.empty_like(self._buf)])
        self._buf[self._k] = v
        self._k += 1
        v.flags.writeable = False
        self._entries.append(Entry(v, 0.0, payload, index))
        self._order = None
        return True

    @property
    def front(self) -> list[Entry]:
        """The feasible front, sorted by the first objective, then the second, and so on."""
        return [self._entries[i] for i in self._sorted()]

    def front_values(self) -> np.ndarray:
        """Objective values of the front [k, m], in the order of `front` (a copy)."""
        return self._buf[:self._k][self._sorted()]

    def infeasible(self, k: int = 10) -> list[Entry]:
        """The ``k`` least-violating infeasible points kept, ties broken by the first objective
        (then by arrival)."""
        return self._inf_entries[:max(int(k), 0)]

    def weakly_dominates(self, values) -> bool:
        """True when some front point is <= ``values`` in every objective (within ``rtol``)."""
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (self.n_objectives,):
            raise ValueError(f"expected {self.n_objectives} objective values, got shape {v.shape}")
        return bool(no_worse(self._buf[:self._k], v, self.rtol).all(axis=1).any())

    def hypervolume(self, reference) -> float:
        """Normalized hypervolume of the front at ``reference`` (see
        `moplace.optimize.hypervolume.normalized_hypervolume`): a fraction in [0, 1]."""
        return normalized_hypervolume(self._buf[:self._k], reference)

    def __repr__(self) -> str:
        return (f"ParetoArchive(n_objectives={self.n_objectives}, front={self._k}, "
                f"infeasible={len(self._inf_entries)}, n_added={self.n_added})")

    def _sorted(self) -> np.ndarray:
        if self._order is None:
            # lexsort sorts by its last key first, so feed the columns in reverse
            self._order = np.lexsort(self._buf[:self._k].T[::-1])
        return self._order

    def _add_infeasible(self, v: np.ndarray, violation: float, payload: Any, index: int) -> None:
        key = (violation, float(v[0]), index)
        keys = self._inf_keys
        if len(keys) >= self.max_infeasible and (not keys or key > keys[-1]):
            return  # full, and it would be the one evicted
        # a repeat of a kept point (same violation and values) would only crowd out others;
        # equals sit together, right after the first key >= (violation, v[0])
        i = bisect.bisect_left(keys, (violation, key[1]))
        while i < len(keys) and keys[i][:2] == key[:2]:
            if np.array_equal(self._inf_entries[i].values, v):
                return
            i += 1
        pos = bisect.bisect_left(keys, key)
        v.flags.writeable = False
        keys.insert(pos, key)
        self._inf_entries.insert(pos, Entry(v, violation, payload, index))
        if len(keys) > self.max_infeasible:
            keys.pop()
            self._inf_entries.pop()
