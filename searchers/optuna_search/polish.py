"""Polish: new front points' standard orders and one-step neighbours, queued as trials.

See "Polish (TPE)" in the package docstring for what is polished and why. `TrialPolish` holds
the queue and its methods; `OptunaSearcher` holds one (``polish``, made in its setup) and calls
`TrialPolish.enqueue` from ``ask`` and `TrialPolish.tell` from ``tell``, as the RL searchers
hold a `searchers.polish.FrontPolish` (which moves genomes, not trial parameters).
"""

from __future__ import annotations

import hashlib
from collections import deque

from moplace.core.strategy import Strategy
from moplace.optimize.archive import ParetoArchive
from searchers.orders import StandardOrders, swap_pairs
from searchers.polish import worth_polishing

from .study import TrialSpace, unit_rank

#: Most polish trials waiting to be asked (the oldest are dropped first).
POLISH_QUEUE = 64
#: Most of a batch that polish trials take.
POLISH_SHARE = 0.25
#: Polish swaps ops of one device at most this many places apart in the device's order.
SWAP_WINDOW = 8
_KEY = "\0key"  # the simulation key of a queued polish trial, kept with its parameters


class TrialPolish:
    """The polish queue of an optuna searcher: trial parameters waiting to be enqueued (the
    newest last), the simulation keys among them, and the Pareto sets that decide what is
    polished.

    ``study`` is the searcher's study, ``trials`` its `TrialSpace`, ``known`` its strategies
    simulated before (`KnownEvaluations`), ``per_point`` the neighbours queued per polished
    trial (the ``polish`` setting; 0: nothing is polished), ``search_priorities`` whether
    priorities are trial parameters (without them nothing is polished: there would be no swaps
    and no orders).
    """

    def __init__(self, problem, rng, study, trials: TrialSpace, known, *, per_point: int,
                 search_priorities: bool):
        self.problem, self.rng, self.study, self.trials, self.known = \
            problem, rng, study, trials, known
        self.per_point, self.search_priorities = int(per_point), bool(search_priorities)
        self._queue: deque[dict] = deque()
        self._queued: set[bytes] = set()
        self._fits = ParetoArchive(len(problem.objectives), max_infeasible=0)
        self._unfit = ParetoArchive(len(problem.objectives), max_infeasible=0)
        self.asked = 0  # polish trials asked
        self._placements: set[bytes] = set()
        self._orders: StandardOrders | None = None

    @classmethod
    def from_searcher_state(cls, state: dict) -> TrialPolish:
        """The queue of a searcher's checkpoint ``state`` written when the searcher held its
        fields itself (``_polish``, ``_polish_keys``, ``_fits``, ``_unfit``, ``polished``,
        ``_polished_placements``, ``_orders``): taken out of ``state``."""
        part = cls.__new__(cls)
        part.problem, part.rng, part.study = state["problem"], state["rng"], state["study"]
        part.trials, part.known = state["_trials"], state["_known"]
        part.per_point = int(state["config"].polish)
        part.search_priorities = bool(state["_search_priorities"])
        part._queue, part._queued = state.pop("_polish"), state.pop("_polish_keys")
        part._fits, part._unfit = state.pop("_fits"), state.pop("_unfit")
        part.asked = state.pop("polished")
        part._placements = state.pop("_polished_placements")
        part._orders = state.pop("_orders", None)
        return part

    def enqueue(self) -> bool:
        """Enqueue the next polish trial in the study (user attribute ``moplace_polish``), so
        that the next ``study.ask()`` returns it, and count it asked; False when none is
        waiting."""
        params = self._next()
        if params is None:
            return False
        self.study.enqueue_trial(params, user_attrs={"moplace_polish": True})
        self.asked += 1
        return True

    def _next(self) -> dict | None:
        """The newest queued polish trial whose strategy has not been simulated meanwhile."""
        while self._queue:
            params = self._queue.pop()
            key = params.pop(_KEY)
            self._queued.discard(key)
            if self.known.get(key) is None:
                return params
        return None

    def tell(self, params: dict, strategy: Strategy, ev) -> None:
        """Queue the neighbours of trial ``params`` (its strategy ``strategy``, evaluated as
        ``ev``) when it is worth polishing: a feasible trial that enters the Pareto set of
        those told, or an infeasible one that enters the Pareto set of the infeasible ones (on
        objectives alone) and that no feasible trial dominates: its order may make it fit."""
        if self.per_point and self.search_priorities \
                and worth_polishing(self._fits, self._unfit, ev):
            self._polish(params, strategy)

    def _polish(self, params: dict, strategy: Strategy) -> None:
        """Queue neighbours of a trial worth polishing (see the package docstring): its
        placement in the standard orders, the first time the placement is polished, and up to
        ``per_point`` of its one-step neighbours (two ops of one device swapped, one group on
        another device, or two devices trading their groups), drawn at random; strategies
        simulated or queued before are skipped."""
        placement, D = strategy.placement, self.trials.genome.n_devices
        devices = self.trials.devices
        steps = [("move", g, d) for g in devices for d in range(D) if d != params[f"d{g}"]]
        steps += [("relabel", d, e) for d in range(D) for e in range(d + 1, D)]
        orders = []
        if self.search_priorities:
            pairs = swap_pairs(placement, strategy.priority, SWAP_WINDOW)
            steps = [("swap", i, j) for i, j in pairs] + steps
            digest = hashlib.blake2b(placement.tobytes(), digest_size=16).digest()
            if digest not in self._placements:
                self._placements.add(digest)
                orders = self.standard_orders()(placement)
        queued = 0
        for k in self.rng.permutation(len(steps)).tolist():
            if queued == self.per_point:
                break
            kind, u, v = steps[k]
            if kind == "swap":
                q = {**params, f"p{u}": params[f"p{v}"], f"p{v}": params[f"p{u}"]}
            elif kind == "move":
                q = {**params, f"d{u}": v}
            else:  # devices u and v trade their groups (same structure, other devices)
                swap = {u: v, v: u}
                q = {**params, **{f"d{g}": swap.get(params[f"d{g}"], params[f"d{g}"])
                                  for g in devices}}
            queued += self._offer(q)
        for prio in orders:  # asked first: the queue is last in, first out
            self._offer({**params, **{f"p{i}": float(v) for i, v in enumerate(unit_rank(prio))}})

    def standard_orders(self) -> StandardOrders:
        """The problem's `StandardOrders`, made on first use."""
        if self._orders is None:
            self._orders = StandardOrders(self.problem)
        return self._orders

    def _offer(self, params: dict) -> bool:
        """Queue trial ``params`` unless its strategy was simulated or queued before; True when
        queued."""
        import optuna

        key = self.trials.strategy(optuna.trial.FixedTrial(params)).simulation_key
        if key in self._queued or self.known.get(key) is not None:
            return False
        if len(self._queue) == POLISH_QUEUE:  # the oldest waiting one is dropped
            self._queued.discard(self._queue.popleft()[_KEY])
        self._queue.append({**params, _KEY: key})
        self._queued.add(key)
        return True
