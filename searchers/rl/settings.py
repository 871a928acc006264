"""The settings of the RL searchers: `PolicySettings`, which both have (`agent`), and each one's
own (`HierarchicalSettings`, `TrinitySettings`), which also set the shared defaults where the
two differ. Each searcher's settings are listed in the order ``moplace searchers`` shows them.
"""

from __future__ import annotations

from dataclasses import dataclass

from moplace.errors import MoplaceError
from moplace.optimize.settings import Settings, default_of, setting

#: What the policy decides per group (setting ``genome``).
GENOMES = ("placement", "full")


@dataclass(frozen=True)
class PolicySettings(Settings):
    """The settings both RL searchers have (defaults: the Hierarchical planner's)."""

    samples: int = setting(4, "strategies drawn per policy update", low=1)
    groups: int | None = setting(None, "groups the grouper makes (default min(256, 20 x "
                                 "devices, co-location groups); more than the graph has ops "
                                 "works, the extra groups stay empty)", low=1)
    genome: str = setting("placement", '"placement", or "full": the placer also picks each '
                          "group's split degree and priority level", choices=GENOMES)
    levels: int = setting(4, 'priority levels with genome "full"', low=1)
    hidden: int = setting(64, "width of the grouper's hidden layer (paper: 64)", low=1)
    lstm: int = setting(64, "width of the placer's LSTMs", low=1)
    learning_rate: float = setting(0.001, "Adam's learning rate (gradient-norm clip 1.0)",
                                   low=0, high=10, low_open=True, high_open=True)
    noise: float = setting(0.5, "standard deviation of the logit noise at the start; it decays "
                           "linearly to 0", low=0, high=100, high_open=True)
    noise_updates: int = setting(100, "updates over which the noise decays (0: no noise)", low=0)
    warm_start: bool = setting(True, "imitate DPOS's placement before searching")
    imitation_steps: int = setting(200, "most supervised steps of the warm start", low=0)
    imitation_confidence: float = setting(
        0.8, "the warm start stops once the policy gives DPOS's decisions this probability "
        "(geometric mean per decision)", low=0, high=1, low_open=True, high_open=True)
    seed_heuristics: bool = setting(True, "evaluate the seeds first (each candidate of the list "
                                    "schedulers, the baselines on the whole cluster and on "
                                    "device subsets; `searchers.seeding`)")
    policy: str | None = setting(None, "a policy file to start from (zero-shot or fine-tuning), "
                                 "as written by save_policy; its sizes replace groups, hidden "
                                 "and lstm")
    save_policy: str | None = setting(None, "write the trained policy to this file when the "
                                      "search ends")
    learn: bool = setting(True, "update the policy (false: only sample it, e.g. to measure a "
                          "loaded policy zero-shot)")
    polish: float = setting(0.5, "most share of the evaluations spent polishing the front "
                            "between policy batches (standard orders and one-step neighbours "
                            "of new front points; 0: none)", low=0, high=1, high_open=True)

    def check(self) -> None:
        for name in ("policy", "save_policy"):  # an empty file name: none
            if getattr(self, name) == "":
                object.__setattr__(self, name, None)


@dataclass(frozen=True)
class HierarchicalSettings(PolicySettings):
    """The Hierarchical planner's settings (`hierarchical`)."""

    samples: int = setting(4, "placements drawn per policy update (the paper's k = 4)", low=1)
    genome: str = setting("placement", '"placement" (the paper) or "full": the placer also '
                          "picks each group's split degree and priority level", choices=GENOMES)
    fail_factor: float = setting(10.0, "an infeasible strategy scores as this many times the "
                                 "reference runtime", low=1)
    baseline_decay: float = setting(0.9, "decay of the moving-average reward baseline (paper: "
                                    "0.9)", low=0, high=1, high_open=True)


@dataclass(frozen=True)
class _PpoSettings(Settings):
    """Trinity's batch and PPO settings: a base of `TrinitySettings` only so that they come
    first in its listing (a dataclass lists its fields in the order its bases first declare
    them, and a redeclared field keeps its place)."""

    samples: int = setting(16, "strategies drawn per policy update (PPO batch)", low=1)
    weights_per_batch: int = setting(4, "objective weight vectors drawn per batch, at most "
                                     "samples (samples share them evenly)", low=1)
    epochs: int = setting(3, "PPO passes over each batch", low=1)
    clip_ratio: float = setting(0.2, "PPO's clip of the probability ratio", low=0, high=1)
    entropy: float = setting(0.01, "weight of the entropy bonus", low=0, high=10)
    penalty: float = setting(1.0, "beta, the weight of the violation (bytes over memory and "
                             "limits, over the cluster's memory) in the reward", low=0, high=1e6)


@dataclass(frozen=True)
class TrinitySettings(PolicySettings, _PpoSettings):
    """Trinity's settings (`trinity`)."""

    samples: int = setting(16, "strategies drawn per policy update (PPO batch)", low=1)
    genome: str = setting("full", '"full" (placement, split degree and priority per group) or '
                          '"placement"', choices=GENOMES)
    noise_updates: int = default_of(PolicySettings, "noise_updates", 25)
    imitation_confidence: float = default_of(PolicySettings, "imitation_confidence", 0.9)
    structure: bool = setting(True, "add Trinity's Node2vec embedding to the op features (its "
                              "axes are arbitrary per graph: turn it off for a policy meant to "
                              "transfer to other graphs)")

    def check(self) -> None:
        super().check()
        if self.weights_per_batch > self.samples:
            raise MoplaceError(f"weights_per_batch must be an integer in 1..samples "
                               f"({self.samples}), got {self.weights_per_batch!r}")
