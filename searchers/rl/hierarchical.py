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

from .agent import DEFAULT_POLISH, PolicySearcher, shared_settings
from .rewards import MovingAverage, sqrt_runtime_reward


@shared_settings
class HierarchicalSearcher(PolicySearcher):
    """Hierarchical planner: grouper + LSTM placer, REINFORCE on -sqrt(runtime).

    Starts from the list schedulers' strategies (and, warm, a policy imitating DPOS); see
    searchers/rl/agent.py and searchers/rl/hierarchical.py.

    Settings:
        samples: placements drawn per policy update (the paper's k = 4).
        groups: groups the grouper makes (default min(256, 20 x devices, co-location groups);
            more than the graph has ops works, the extra groups stay empty).
        genome: "placement" (the paper) or "full": the placer also picks each group's split
            degree and priority level.
        fail_factor: an infeasible strategy scores as this many times the reference runtime.
        baseline_decay: decay of the moving-average reward baseline (paper: 0.9).
    """

    name = "hierarchical"

    def __init__(self, samples: int = 4, groups: int | None = None, genome: str = "placement",
                 levels: int = 4, hidden: int = 64, lstm: int = 64, learning_rate: float = 0.001,
                 noise: float = 0.5, noise_updates: int = 100, warm_start: bool = True,
                 imitation_steps: int = 200, imitation_confidence: float = 0.8,
                 seed_heuristics: bool = True,
                 policy: str | None = None, save_policy: str | None = None,
                 learn: bool = True, polish: float = DEFAULT_POLISH, fail_factor: float = 10.0,
                 baseline_decay: float = 0.9):
        super().__init__(samples=samples, groups=groups, genome=genome, levels=levels,
                         hidden=hidden, lstm=lstm, learning_rate=learning_rate, noise=noise,
                         noise_updates=noise_updates, warm_start=warm_start,
                         imitation_steps=imitation_steps,
                         imitation_confidence=imitation_confidence,
                         seed_heuristics=seed_heuristics,
                         policy=policy, save_policy=save_policy, learn=learn,
                         polish=polish)
        if not (isinstance(fail_factor, (int, float)) and fail_factor >= 1):
            raise MoplaceError(f"fail_factor must be at least 1, got {fail_factor!r}")
        if not (isinstance(baseline_decay, (int, float)) and 0 <= baseline_decay < 1):
            raise MoplaceError(f"baseline_decay must be in [0, 1), got {baseline_decay!r}")
        self.fail_factor, self.baseline_decay = float(fail_factor), float(baseline_decay)

    def settings(self) -> dict:
        return {**super().settings(), "fail_factor": self.fail_factor,
                "baseline_decay": self.baseline_decay}

    def _setup(self) -> None:
        if "runtime" not in self.problem.objectives:
            raise MoplaceError("the hierarchical searcher minimizes runtime: the problem's "
                               f"objectives {list(self.problem.objectives)} lack it")
        self._runtime = self.problem.objectives.index("runtime")
        runtimes = [ev.values[self._runtime] for ev in self.problem.baselines.values()]
        self._reference = max(min(runtimes), 1e-12)
        self._baseline = MovingAverage(self.baseline_decay)
        super()._setup()

    def _learn(self, actions, logp, cond, evaluations, update: bool = True) -> dict:
        runtime = np.array([ev.values[self._runtime] for ev in evaluations])
        feasible = np.array([ev.feasible for ev in evaluations])
        reward = sqrt_runtime_reward(runtime, feasible, self._reference, self.fail_factor)
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
