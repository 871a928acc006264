"""Trinity (``../shared/PAPERS.md`` 4) as a searcher: the grouper and LSTM placer trained with
PPO on a reward from all three objectives, and, beyond the paper, conditioned on the
objectives' weights so that one policy learns the whole front.

- **Reward**: ``R = -log(sum_j w_j v_j / s_j + beta * q)`` (`rewards.weighted_log_reward`): the
  paper's ``-log(alpha f + beta q)`` with the runtime term made a weighted sum of every
  objective, each over its scale (the hypervolume reference point), and ``q`` the violation
  (bytes over device memory and the user's limits) over the cluster's memory. Strategies over
  memory are penalized, never rewarded, and the archive keeps them off the front.
- **Weights as input**: every ask draws ``weights_per_batch`` weight vectors from the uniform
  distribution on the simplex (Dirichlet(1, ..., 1)), each for ``samples / weights_per_batch``
  samples; the policy reads them (`policy.HierarchicalPolicy` conditions) and each sample is
  rewarded under its own weights. Every sample goes to the shared archive, so the front is
  traced by the policy across weights.
- **PPO**: the clipped ratio objective (clip 0.2), ``epochs`` passes over each batch, an
  entropy bonus, advantages ``R - b(w)`` over a baseline learned as a function of the weights
  (`rewards.WeightBaseline`), scaled to unit spread; Adam with gradient-norm clip 1.0 (paper).
- **Features**: the Hierarchical planner's plus Trinity's Node2vec structural embedding
  (`structure`).
"""

from __future__ import annotations

import numpy as np

from .agent import PolicySearcher
from .rewards import WeightBaseline, weighted_log_reward
from .settings import TrinitySettings


class TrinitySearcher(PolicySearcher):
    """Trinity: PPO on a multi-objective reward, the policy conditioned on objective weights.

    One trained policy traces the whole front; starts from the list schedulers' strategies
    (and, warm, a policy imitating DPOS); see searchers/rl/trinity.py.

    Settings: see `searchers.rl.settings.TrinitySettings`.
    """

    name = "trinity"
    Settings = TrinitySettings

    def _structure(self) -> bool:
        return self.config.structure

    @property
    def n_conditions(self) -> int:
        return len(self.problem.objectives)

    def _setup(self) -> None:
        self._baseline = WeightBaseline()
        self._scale = np.asarray(self.problem.reference, np.float64)
        self._capacity = float(np.sum(self.problem.cluster.memory))
        super()._setup()

    def _conditions(self, k: int) -> np.ndarray:
        """``weights_per_batch`` weight vectors from Dirichlet(1, ..., 1), each for an even share
        of the ``k`` samples."""
        m = self.n_conditions
        w = self.rng.dirichlet(np.ones(m), size=min(self.config.weights_per_batch, k))
        return w[np.arange(k) * len(w) // k].astype(np.float32)

    def _learn(self, actions, logp, cond, evaluations, update: bool = True) -> dict:
        n = len(evaluations)
        values = np.array([ev.values for ev in evaluations])
        violation = np.array([ev.violation for ev in evaluations])
        reward = weighted_log_reward(values, violation, cond[:n], self._scale, self._capacity,
                                     self.config.penalty)
        baseline = self._baseline.update(cond[:n], reward)
        advantage = np.zeros(len(actions))
        advantage[:n] = reward - baseline
        spread = advantage[:n].std()
        if spread > 1e-8:
            advantage[:n] = (advantage[:n] - advantage[:n].mean()) / spread
        # the first epoch starts from the current policy (ratio 1) and gives the draw's log
        # probabilities without the logit noise it was drawn with: p_old for the next epochs
        loss = entropy = float("nan")
        old = now = None
        cfg = self.config
        for _ in range(cfg.epochs if update else 0):
            loss, entropy, now = self._model.train_step(
                self._optimizer, self._tensors, actions, advantage, logp_old=old,
                clip_ratio=cfg.clip_ratio, entropy=cfg.entropy, conditions=cond)
            old = now if old is None else old
        logp = logp if old is None else old
        out = {"reward_mean": float(reward.mean()), "reward_best": float(reward.max()),
               "baseline": float(np.mean(baseline)), "loss": float(loss),
               "entropy": float(entropy),  # kl: p_old against the policy before the last epoch
               "kl": 0.0 if now is None else float(np.mean(logp[:n] - now[:n])),
               "feasible_share": float(np.mean([ev.feasible for ev in evaluations])),
               "noise": self._noise_at_draw}
        first = np.sort(np.unique(cond[:n], axis=0, return_index=True)[1])
        for i, w in enumerate(cond[first]):  # the weights of this batch, in drawing order
            for name, value in zip(self.problem.objectives, w):
                out[f"weight{i}_{name}"] = float(value)
        return out
