"""The baseline strategies as one-shot searchers (``single``, ``data-parallel``, ...)."""

from __future__ import annotations

from moplace.core.baselines import baseline
from moplace.core.strategy import Strategy
from moplace.optimize.searcher import OneShot


class BaselineSearcher(OneShot):
    """Proposes the baseline strategy named by the class's ``baseline`` (see
    `moplace.core.baselines`)."""

    baseline = ""

    def __init__(self):
        self.name = self.baseline

    def propose(self) -> Strategy:
        return baseline(self.baseline, self.problem.graph, self.problem.n_devices)

    def settings(self) -> dict:
        return {"baseline": self.baseline}


class SingleDevice(BaselineSearcher):
    """Baseline: every op on the first device, in topological order."""

    baseline = "single"


class DataParallel(BaselineSearcher):
    """Baseline: data parallelism, every batch-splittable group split across all devices."""

    baseline = "data-parallel"


class RoundRobin(BaselineSearcher):
    """Baseline: co-location groups, in topological order, dealt to the devices in turn."""

    baseline = "round-robin"


class LayerSplit(BaselineSearcher):
    """Baseline: "expert" model parallelism, contiguous runs of equal compute, one per device."""

    baseline = "layer-split"
