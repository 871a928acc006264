"""The Hierarchical planner (Mirhoseini et al. 2018, ``../shared/PAPERS.md`` 2) as a searcher:
a grouper and an LSTM placer trained with REINFORCE against the simulator.

Faithful to the paper: reward ``-sqrt(runtime)`` (runtime over the problem's reference
runtime, see `rewards.sqrt_runtime_reward`), a fixed failing reward for strategies over device
memory, a moving-average baseline with decay 0.9, Adam with gradient-norm clip 1.0, ``k = 4``
placer samples per update, logit noise early on, groups = min(256, 20 x devices). One
deviation: Adam's learning rate is 0.001, not the paper's 0.1; at 0.1, and still at 0.01, the
policy collapsed onto a single device within 50 updates on Inception-v3 on 4 V100s (the clip
C = 5 cannot stop a grouper that sends every op to one group). It optimizes
runtime alone; the other objectives of every sample still reach the archive, so its front is
what the runtime search passed by.
"""

from __future__ import annotations

import numpy as np

from moplace.errors import MoplaceError

from .agent import PolicySearcher
from .rewards import MovingAverage, sqrt_runtime_reward
from .settings import HierarchicalSettings


class HierarchicalSearcher(PolicySearcher):
    """Hierarchical planner: grouper + LSTM placer, REINFORCE on -sqrt(runtime).

    Starts from the list schedulers' strategies (and, warm, a policy imitating DPOS); see
    searchers/rl/agent.py and searchers/rl/hierarchical.py.

    Settings: see `searchers.rl.settings.HierarchicalSettings`.
    """

    name = "hierarchical"
    Settings = HierarchicalSettings

    def _setup(self) -> None:
        if "runtime" not in self.problem.objectives:
            raise MoplaceError("the hierarchical searcher minimizes runtime: the problem's "
                               f"objectives {list(self.problem.objectives)} lack it")
        self._runtime = self.problem.objectives.index("runtime")
        runtimes = [ev.values[self._runtime] for ev in self.problem.baselines.values()]
        self._reference = max(min(runtimes), 1e-12)
        self._baseline = MovingAverage(self.config.baseline_decay)
        super()._setup()

    def _learn(self, actions, logp, cond, evaluations, update: bool = True) -> dict:
        runtime = np.array([ev.values[self._runtime] for ev in evaluations])
        feasible = np.array([ev.feasible for ev in evaluations])
        reward = sqrt_runtime_reward(runtime, feasible, self._reference,
                                     self.config.fail_factor)
        baseline = self._baseline.update(reward)
        advantage = np.zeros(len(actions))
        advantage[:reward.size] = reward - baseline
        value = entropy = float("nan")
        if update:
            value, entropy, _ = self._model.train_step(self._optimizer, self._tensors, actions,
                                                       advantage)
        return {"reward_mean": float(reward.mean()), "reward_best": float(reward.max()),
                "baseline": float(baseline), "loss": float(value), "entropy": float(entropy),
                "feasible_share": float(feasible.mean()), "noise": self._noise_at_draw}
