"""The baseline strategies as one-shot searchers (``single``, ``data-parallel``, ...)."""

from __future__ import annotations

from moplace.baselines import baseline
from moplace.searcher import OneShot
from moplace.strategy import Strategy


class BaselineSearcher(OneShot):
    """Proposes the baseline strategy ``name`` (see `moplace.baselines`)."""

    def __init__(self, name: str):
        self.name = self.baseline = name

    def propose(self) -> Strategy:
        return baseline(self.baseline, self.problem.graph, self.problem.n_devices)

    def settings(self) -> dict:
        return {"baseline": self.baseline}
