"""What the two RL searchers share: a policy (`policy.HierarchicalPolicy`) trained on the
simulator behind the driver's ask/tell loop.

- **Start**: the first ask hands the driver every seed (`searchers.seeding`: each candidate of
  the list schedulers, the baselines on the whole cluster and on device subsets), as NSGA-II
  starts from them, so the archive holds them and no front is worse than theirs. With
  ``warm_start`` the policy first imitates DPOS (supervised: the log probability of the
  decisions that give DPOS's placement, maximized for ``imitation_steps`` steps;
  `actions.ActionSpace.targets`).
- **Each ask** draws ``samples`` decisions from the policy (logit noise decaying to zero over
  ``noise_updates`` updates) and turns them into strategies (`actions.ActionSpace`).
- **Each tell** scores the evaluated samples and updates the policy (the subclass's `_learn`:
  REINFORCE or PPO); what the update measured is `progress`, which the MLflow callback logs
  per update.
- **Polish**: with ``polish`` > 0, the front the search has found (seeds and draws alike) is
  climbed locally between policy batches (`searchers.polish.FrontPolish`: standard orders and
  one-step genome neighbours of each new front point), taking at most that share of the
  evaluations; polish batches are evaluated and archived but teach the policy nothing. A policy
  draws whole placements and rarely the small change that improves a front point: without
  polish, hierarchical's front fell below random search's hypervolume on pipedream:gnmt (4
  V100s, 2,000 evaluations: 0.143 against 0.231).
- **Files**: ``policy=FILE`` starts from a saved policy (`store`), ``save_policy=FILE`` writes
  the policy when the search ends. A checkpoint holds the weights and the optimizer's state
  (`__getstate__`), and the TensorFlow objects are rebuilt on resume.
- **Settings**: `settings.PolicySettings` (both searchers'), `settings.HierarchicalSettings` and
  `settings.TrinitySettings`, read as ``self.config``.

TensorFlow is imported when a search starts, not when the searcher is listed or made.
Sampling uses TensorFlow's stateless random ops seeded from the driver's generator, so the
same seed gives the same search on one machine; TensorFlow's CPU kernels may round
differently on another machine or thread count, so bit-equality across machines is not
promised.
"""

from __future__ import annotations

import numpy as np

from moplace.errors import MoplaceError
from moplace.optimize.searcher import Searcher
from searchers.polish import FrontPolish

from . import store
from .actions import ActionSpace
from .settings import PolicySettings

#: Structural embedding width (Trinity's Node2vec), when the searcher uses one.
STRUCTURE_DIM = 16
#: Most strategies of one polish batch.
POLISH_BATCH = 16


def _tf():
    try:
        from . import policy
    except ImportError as exc:
        raise MoplaceError(f"the RL searchers need TensorFlow and gensim ({exc.name} is missing): "
                           "pip install 'moplace[tf]'") from None
    return policy


class PolicySearcher(Searcher):
    """Base of the RL searchers (see the module docstring); subclasses define `_learn`.

    Settings: see `searchers.rl.settings.PolicySettings`.
    """

    Settings = PolicySettings
    #: conditions the policy takes per sample (Trinity: the objective weights)
    n_conditions = 0
    seeded = True
    _polishing = False  # the last batch asked was a polish batch

    # -- setup ----------------------------------------------------------------------------------
    def _setup(self) -> None:
        p, cfg = self.problem, self.config
        if cfg.save_policy is not None:
            store.check_writable(cfg.save_policy)
        self.n_ops, self.updates, self._last, self._progress = len(p.graph.ops), 0, None, {}
        self._weights = self._opt_state = None
        self._model, self.loaded_from = None, {}
        from searchers.listsched import ListSchedInput, dpos
        from searchers.seeding import SeedPhase

        from moplace.core.strategy import Strategy

        # every seed first (`searchers.seeding`); an empty graph: the baselines, then done
        self.seeding = SeedPhase(p, enabled=cfg.seed_heuristics or not self.n_ops)
        self._pending = self.seeding.ask()
        self._dpos = None
        self._front_polish = FrontPolish(p, self.rng, share=cfg.polish) \
            if cfg.polish > 0 and self.n_ops else None
        if self.n_ops:
            result = dpos(ListSchedInput.from_problem(p.graph, p.cluster, p.costs))
            self._dpos = Strategy(result.placement, result.priority())
        if not self.n_ops:
            return
        self._init_seed = int(self.rng.integers(2**31))
        self._build()
        if cfg.warm_start and cfg.policy is None:
            self._progress.update(self._imitate(self._dpos))

    def _sizes(self) -> dict:
        """The sizes the problem and settings fix (a loaded policy must have them)."""
        D = self.problem.n_devices
        full = self.config.genome == "full"
        return {"n_devices": D, "n_splits": D if full and D > 1 else 1,
                "n_levels": self.config.levels if full else 1,
                "n_conditions": self.n_conditions,
                "structure_dim": STRUCTURE_DIM if self._structure() else 0}

    def _structure(self) -> bool:
        """Whether the ops' features include the Node2vec structural embedding (Trinity's)."""
        return False

    def _build(self) -> None:
        """The TensorFlow side: features as tensors, the policy (weights from the policy file, or
        restored from a checkpoint) and the optimizer."""
        P = _tf()
        import keras

        from .features import problem_features
        from .structure import structural_embedding

        p, sizes, cfg = self.problem, self._sizes(), self.config
        graph = p.graph
        structure = structural_embedding(graph, dim=STRUCTURE_DIM, seed=self._init_seed) \
            if self._structure() else None
        self._tensors = P.ProblemTensors(problem_features(p), structure, units=graph.arrays.group)
        units = self._tensors.n_units
        default = min(256, 20 * sizes["n_devices"], units)  # more groups than units: idle ones
        config = {"n_groups": cfg.groups or default,
                  "hidden": cfg.hidden, "lstm": cfg.lstm, "type_dim": 20}
        weights, meta = self._weights, {}
        if weights is None and cfg.policy is not None:
            have, weights, meta = store.load(cfg.policy)
            store.check_fits(cfg.policy, have, {**sizes, "vocabulary": len(P.VOCABULARY)})
            config = {k: int(have[k]) for k in config}
        self._model = P.HierarchicalPolicy(
            config["n_groups"], sizes["n_devices"], n_splits=sizes["n_splits"],
            n_levels=sizes["n_levels"], n_conditions=sizes["n_conditions"],
            type_dim=config["type_dim"], hidden=config["hidden"], lstm=config["lstm"],
            seed=self._init_seed)
        k = cfg.samples  # the shape every later call has: traced once
        self._model.sample(self._tensors, k, seed=0)  # builds the weights; draws nothing from rng
        if weights is not None:
            if [w.shape for w in self._model.weights] != [np.shape(w) for w in weights]:
                raise MoplaceError(f"policy file {cfg.policy} does not fit this search: its "
                                   "weights have other shapes")
            for var, value in zip(self._model.weights, weights):
                var.assign(value)
        self.space = ActionSpace(p, self._model.n_groups, splits=sizes["n_splits"],
                                 levels=sizes["n_levels"])
        self._optimizer = keras.optimizers.Adam(cfg.learning_rate, global_clipnorm=1.0)
        self._optimizer.build(self._model.trainable_variables)
        if self._opt_state is not None:
            for var, value in zip(self._optimizer.variables, self._opt_state):
                var.assign(value)
        self._weights = self._opt_state = None
        if meta:  # what the policy file says it was trained on (kept through a checkpoint)
            self.loaded_from = meta

    def _imitate(self, target) -> dict:
        """Supervised pre-training on ``target``'s decisions (`ActionSpace.targets`): Adam at
        learning rate 0.01 on the mean log probability per decision of the groups, devices and
        priority levels (not the split degrees: DPOS splits nothing, and a policy taught never
        to split would not find what splitting gives), conditions drawn as in
        search, until the geometric mean probability of a target decision reaches
        ``imitation_confidence`` (a policy sure of DPOS would only ever sample DPOS) or
        ``imitation_steps`` have run; the optimizer's state is reset afterwards."""
        P, cfg = _tf(), self.config
        groups, devices, splits, levels = self.space.targets(target)
        k = cfg.samples  # the search's batch shape: one compiled step for both
        actions = P.Actions(*(np.repeat(a[None], k, 0) for a in (groups, devices, splits,
                                                                   levels)))
        # groups, devices and levels (when the policy has that head); splits are left free
        decisions = groups.size + devices.size * (1 + (self._model.n_levels > 1))
        weight = np.full(k, 1.0 / decisions)
        opt = self._optimizer
        opt.learning_rate.assign(0.01)
        confidence, steps = 0.0, 0
        while steps < cfg.imitation_steps and confidence < cfg.imitation_confidence:
            _, _, logp = self._model.train_step(opt, self._tensors, actions, weight,
                                                conditions=self._conditions(k),
                                                heads=(1.0, 0.0, 1.0))
            confidence, steps = float(np.exp(np.mean(logp) / decisions)), steps + 1
        for var in opt.variables:  # the search starts with a fresh optimizer
            var.assign(np.zeros(var.shape, var.dtype))
        opt.learning_rate.assign(cfg.learning_rate)
        return {"imitation_steps": float(steps), "imitation_confidence": confidence}

    # -- ask / tell -----------------------------------------------------------------------------
    def _conditions(self, k: int):
        """The conditions of ``k`` samples (none here; Trinity: objective weights)."""
        return None

    def _noise(self) -> float:
        cfg = self.config
        if cfg.noise_updates == 0:
            return 0.0
        return cfg.noise * max(0.0, 1.0 - self.updates / cfg.noise_updates)

    def ask(self):
        if self._pending:
            batch, self._pending, self._last = self._pending, [], None
            return batch
        if not self.n_ops:
            return []
        polish = self._front_polish
        if polish is not None and polish.due():
            batch = polish.take(max(self.config.samples, POLISH_BATCH))
            if batch:
                self._last, self._polishing = None, True
                return batch
        self._polishing = False
        if self._model is None:
            self._build()
        cond = self._conditions(self.config.samples)
        self._noise_at_draw = self._noise()
        actions, logp = self._model.sample(self._tensors, self.config.samples,
                                           seed=int(self.rng.integers(2**31)),
                                           noise=self._noise_at_draw, conditions=cond)
        self._last = (actions, logp, cond)
        return self.space.strategies(actions)

    def tell(self, strategies, evaluations) -> None:
        if self.seeding.active:
            self.seeding.tell(strategies, evaluations)
        if self._front_polish is not None:
            self._front_polish.tell(strategies, evaluations)
        if self._last is None or not evaluations:
            return
        if self._model is None:
            self._build()
        actions, logp, cond = self._last
        self._last = None
        self._progress = self._learn(actions, logp, cond, evaluations, update=self.config.learn)
        self.updates += 1

    def _learn(self, actions, logp, cond, evaluations, update: bool = True) -> dict:
        """Score ``evaluations`` of the first rows of ``actions`` (all of them unless the budget
        cut the batch: the others must weigh nothing, the batch keeps its shape so the compiled
        step is reused) and, if ``update``, update the policy; what it measured."""
        raise NotImplementedError

    def notes(self) -> list[str]:
        notes = [self.seeding.note() if hasattr(self, "seeding") else None,
                 self._front_polish.note() if getattr(self, "_front_polish", None) else None]
        return [n for n in notes if n]

    def progress(self) -> dict:
        """What the last policy update measured (after a polish batch only the counts: the
        curves get one point per update)."""
        polish = getattr(self, "_front_polish", None)
        counts = {"updates": float(self.updates)}
        if polish is not None:
            counts["polish_evaluations"] = float(polish.asked)
        return counts if self._polishing else {**counts, **self._progress}

    # -- files ----------------------------------------------------------------------------------
    def close(self) -> None:
        if self.config.save_policy is not None and getattr(self, "_model", None) is not None:
            p = self.problem
            store.save(self.config.save_policy, {**self._model.config(), **self._sizes()},
                       [w.numpy() for w in self._model.weights],
                       {"graph": p.graph.name, "cluster": p.cluster.name, "searcher": self.name,
                        "updates": self.updates})

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for key in ("_model", "_optimizer", "_tensors"):
            state.pop(key, None)
        model = self.__dict__.get("_model")
        if model is not None:
            state["_weights"] = [w.numpy() for w in model.weights]
            state["_opt_state"] = [v.numpy() for v in self._optimizer.variables]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._model = None  # rebuilt from _weights and _opt_state on the next ask or tell
