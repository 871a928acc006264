"""Plans kept per graph: the graphs a strategy's recomputation or micro-batches run on
(`moplace.simulator.recompute`, `moplace.simulator.microbatch`) are made once per graph and
key and kept, the most recent last, since a search meets the same ones again."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Callable, Hashable


class PlanCache:
    """Up to ``limit`` plans per graph, by key; the oldest go first. Safe from several threads
    (`Problem.evaluate_batch`); a plan is made outside the lock."""

    def __init__(self, limit: int):
        self.limit = limit
        self._kept: "weakref.WeakKeyDictionary[object, OrderedDict]" = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, graph, key: Hashable, make: Callable[[], object]):
        """The plan of ``graph`` under ``key``, kept or made by ``make()``."""
        with self._lock:
            kept = self._kept.get(graph)
            plan = None if kept is None else kept.get(key)
            if plan is not None:
                kept.move_to_end(key)
                return plan
        plan = make()
        with self._lock:
            kept = self._kept.setdefault(graph, OrderedDict())
            kept[key] = plan
            while len(kept) > self.limit:
                kept.popitem(last=False)
        return plan
