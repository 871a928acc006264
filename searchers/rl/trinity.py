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

from moplace.errors import MoplaceError

from .agent import DEFAULT_POLISH, PolicySearcher, positive, shared_settings
from .rewards import WeightBaseline, weighted_log_reward


@shared_settings
class TrinitySearcher(PolicySearcher):
    """Trinity: PPO on a multi-objective reward, the policy conditioned on objective weights.

    One trained policy traces the whole front; starts from the list schedulers' strategies
    (and, warm, a policy imitating DPOS); see searchers/rl/trinity.py.

    Settings:
        samples: strategies drawn per policy update (PPO batch).
        weights_per_batch: objective weight vectors drawn per batch (samples share them
            evenly).
        epochs: PPO passes over each batch.
        clip_ratio: PPO's clip of the probability ratio.
        entropy: weight of the entropy bonus.
        penalty: beta, the weight of the violation (bytes over memory and limits, over the
            cluster's memory) in the reward.
        structure: add Trinity's Node2vec embedding to the op features (its axes are arbitrary
            per graph: turn it off for a policy meant to transfer to other graphs).
        groups: groups the grouper makes (default min(256, 20 x devices, co-location groups);
            more than the graph has ops works, the extra groups stay empty).
        genome: "full" (placement, split degree and priority per group) or "placement".
    """

    name = "trinity"

    def __init__(self, samples: int = 16, weights_per_batch: int = 4, epochs: int = 3,
                 clip_ratio: float = 0.2, entropy: float = 0.01, penalty: float = 1.0,
                 groups: int | None = None, genome: str = "full", levels: int = 4,
                 hidden: int = 64, lstm: int = 64, learning_rate: float = 0.001,
                 noise: float = 0.5, noise_updates: int = 25, warm_start: bool = True,
                 imitation_steps: int = 200, imitation_confidence: float = 0.9,
                 seed_heuristics: bool = True, policy: str | None = None,
                 save_policy: str | None = None, learn: bool = True,
                 polish: float = DEFAULT_POLISH, structure: bool = True):
        super().__init__(samples=samples, groups=groups, genome=genome, levels=levels,
                         hidden=hidden, lstm=lstm, learning_rate=learning_rate, noise=noise,
                         noise_updates=noise_updates, warm_start=warm_start,
                         imitation_steps=imitation_steps,
                         imitation_confidence=imitation_confidence,
                         seed_heuristics=seed_heuristics, policy=policy, save_policy=save_policy,
                         learn=learn, polish=polish)
        if positive("weights_per_batch", weights_per_batch) > self.samples:
            raise MoplaceError(f"weights_per_batch must be an integer in 1..samples "
                               f"({self.samples}), got {weights_per_batch!r}")
        positive("epochs", epochs)
        for name, value, lo, hi in (("clip_ratio", clip_ratio, 0, 1), ("entropy", entropy, 0, 10),
                                    ("penalty", penalty, 0, 1e6)):
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and lo <= value <= hi):
                raise MoplaceError(f"{name} must be a number in [{lo}, {hi}], got {value!r}")
        self.weights_per_batch, self.epochs = int(weights_per_batch), int(epochs)
        self.clip_ratio, self.entropy = float(clip_ratio), float(entropy)
        self.penalty = float(penalty)
        self.structure = bool(structure)

    def _structure(self) -> bool:
        return self.structure

    def settings(self) -> dict:
        return {**super().settings(), "weights_per_batch": self.weights_per_batch,
                "epochs": self.epochs, "clip_ratio": self.clip_ratio, "entropy": self.entropy,
                "penalty": self.penalty, "structure": self.structure}

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
        w = self.rng.dirichlet(np.ones(m), size=min(self.weights_per_batch, k))
        return w[np.arange(k) * len(w) // k].astype(np.float32)

    def _learn(self, actions, logp, cond, evaluations, update: bool = True) -> dict:
        n = len(evaluations)
        values = np.array([ev.values for ev in evaluations])
        violation = np.array([ev.violation for ev in evaluations])
        reward = weighted_log_reward(values, violation, cond[:n], self._scale, self._capacity,
                                     self.penalty)
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
        for _ in range(self.epochs if update else 0):
            loss, entropy, now = self._model.train_step(
                self._optimizer, self._tensors, actions, advantage, logp_old=old,
                clip_ratio=self.clip_ratio, entropy=self.entropy, conditions=cond)
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
