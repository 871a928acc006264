"""Rewards and baselines of the RL searchers. numpy only.

- `sqrt_runtime_reward`: the Hierarchical planner's ``R = -sqrt(runtime)`` with a fixed failing
  reward for a strategy over device memory (``../shared/PAPERS.md`` 2). Runtimes are divided by
  the problem's reference runtime first, so one learning rate suits a 2 ms MLP and a 2 s
  transformer alike; the failing runtime is ``fail_factor`` times that reference (the paper's
  -10 is a 100 s failure against steps of a few seconds: about 10-100 times).
- `weighted_log_reward`: Trinity's ``R = -log(alpha * f + beta * q)`` (4) generalized to a
  weight vector ``w`` over all objectives: ``-log(sum_j w_j v_j / s_j + beta * q)``, each
  objective ``v_j`` divided by its scale ``s_j`` (the hypervolume reference point, so every
  term is about 0-1), ``q`` the strategy's violation (bytes over capacity and the user's limits)
  over the cluster's total memory.
- `MovingAverage`: the baseline of REINFORCE, decay 0.9.
- `WeightBaseline`: Trinity's baseline made a function of the weights: the reward expected
  under weights ``w``, a ridge regression on (1, w, w_i w_j) over the recent samples (a
  moving average cannot tell a runtime-weighted reward from a memory-weighted one).
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: Smallest weighted sum under the log (a strategy perfect on every weighted objective).
FLOOR = 1e-3


def sqrt_runtime_reward(runtime, feasible, reference: float, fail_factor: float = 10.0):
    """``-sqrt(runtime / reference)``, ``-sqrt(fail_factor)`` where not ``feasible``."""
    runtime = np.asarray(runtime, np.float64) / max(float(reference), 1e-300)
    return np.where(np.asarray(feasible, bool), -np.sqrt(runtime), -np.sqrt(fail_factor))


def weighted_log_reward(values, violation, weights, scale, capacity: float, beta: float = 1.0):
    """Trinity's reward under ``weights`` [k, m] for objective ``values`` [k, m] and
    ``violation`` [k] bytes (see the module docstring)."""
    values = np.asarray(values, np.float64) / np.asarray(scale, np.float64)
    q = np.asarray(violation, np.float64) / max(float(capacity), 1.0)
    total = np.sum(np.asarray(weights, np.float64) * values, axis=1) + beta * q
    return -np.log(np.maximum(total, FLOOR))


class MovingAverage:
    """``b <- decay * b + (1 - decay) * mean(rewards)``, starting at the first batch's mean."""

    def __init__(self, decay: float = 0.9):
        self.decay, self.value = float(decay), None

    def update(self, rewards) -> float:
        """The baseline for this batch (before it moves), then move it."""
        mean = float(np.mean(rewards))
        before = mean if self.value is None else self.value
        self.value = mean if self.value is None else \
            self.decay * self.value + (1 - self.decay) * mean
        return before


class WeightBaseline:
    """Expected reward as a function of the objective weights (see the module docstring),
    fitted on the last ``memory`` samples; the mean reward until ``ridge`` has enough data."""

    def __init__(self, memory: int = 512, ridge: float = 1e-2):
        self.memory, self.ridge = int(memory), float(ridge)
        self.w: deque = deque(maxlen=self.memory)
        self.r: deque = deque(maxlen=self.memory)

    @staticmethod
    def _design(weights) -> np.ndarray:
        w = np.atleast_2d(np.asarray(weights, np.float64))
        i, j = np.triu_indices(w.shape[1])
        return np.concatenate([np.ones((w.shape[0], 1)), w, w[:, i] * w[:, j]], axis=1)

    def predict(self, weights) -> np.ndarray:
        weights = np.atleast_2d(np.asarray(weights, np.float64))
        if not self.r:
            return np.zeros(weights.shape[0])
        X, y = self._design(np.array(self.w)), np.array(self.r)
        if len(y) < X.shape[1]:
            return np.full(weights.shape[0], y.mean())
        A = X.T @ X + self.ridge * np.eye(X.shape[1])
        coef = np.linalg.solve(A, X.T @ (y - y.mean()))
        return self._design(weights) @ coef + y.mean()

    def update(self, weights, rewards) -> np.ndarray:
        """The baseline of each sample (fitted before it is added), then add the samples."""
        before = self.predict(weights)
        self.w.extend(np.atleast_2d(np.asarray(weights, np.float64)))
        self.r.extend(np.asarray(rewards, np.float64).ravel())
        return before
