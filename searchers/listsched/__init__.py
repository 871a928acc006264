"""List scheduling: HEFT, FastT's DPOS and OS-DPOS, and Baechi's m-ETF.

- `schedule`: the pure functions over arrays (`ListSchedInput` in, `ListSchedResult` out):
  `heft`, `dpos`, ranks, critical paths, and `heuristic_strategies`, the seeds other
  searchers start from.
- `kernels`: their compiled (numba) loops; `metf`: m-ETF, with its own kernel.
- `candidates`: each scheduler's candidate schedules (three memory budgets, groups kept or
  regrouped), judged by the simulator;
- `searcher`: the one-shot searchers ``heft``, ``dpos`` and ``m-etf`` (the best candidate);
  `osdpos`: ``os-dpos``, which also splits ops.
"""

from .metf import metf
from .osdpos import OsDposSearcher
from .schedule import (ListSchedInput, ListSchedResult, critical_path, dpos, heft,
                       heuristic_strategies, transfer_weights, upward_rank)
from .searcher import DposSearcher, HeftSearcher, MetfSearcher

__all__ = [
    "DposSearcher", "HeftSearcher", "ListSchedInput", "ListSchedResult", "MetfSearcher",
    "OsDposSearcher", "critical_path", "dpos", "heft", "heuristic_strategies", "metf",
    "transfer_weights", "upward_rank",
]
