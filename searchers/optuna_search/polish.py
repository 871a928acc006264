"""Polish: new front points' standard orders and one-step neighbours, queued as trials.

See "Polish (TPE)" in the package docstring for what is polished and why. `PolishMixin` holds
the queue and its methods; `OptunaSearcher` mixes it in, calls `_setup_polish` from its setup,
`_enqueue_polish` from ``ask`` and `_worth_polishing` / `_queue_polish` from ``tell``.
"""

from __future__ import annotations

import hashlib
from collections import deque

from moplace.core.strategy import Strategy
from moplace.optimize.archive import ParetoArchive
from searchers.orders import StandardOrders, swap_pairs
from searchers.polish import worth_polishing

from .study import unit_rank

#: Most polish trials waiting to be asked (the oldest are dropped first).
POLISH_QUEUE = 64
#: Most of a batch that polish trials take.
POLISH_SHARE = 0.25
#: Polish swaps ops of one device at most this many places apart in the device's order.
SWAP_WINDOW = 8
_KEY = "\0key"  # the simulation key of a queued polish trial, kept with its parameters


class PolishMixin:
    """The polish queue of an optuna searcher.

    Uses the searcher's ``problem``, ``rng``, ``study``, ``config.polish`` (neighbours per
    polished trial), ``_trials`` (`TrialSpace`), ``_search_priorities``, ``_fixed_priority``,
    ``_known`` (strategies simulated before) and ``_strategy``.
    """

    def _setup_polish(self) -> None:
        """An empty queue: trial parameters waiting to be enqueued (the newest first), the
        simulation keys among them, and the Pareto sets that decide what is polished."""
        p = self.problem
        self._polish: deque[dict] = deque()
        self._polish_keys: set[bytes] = set()
        self._fits = ParetoArchive(len(p.objectives), max_infeasible=0)
        self._unfit = ParetoArchive(len(p.objectives), max_infeasible=0)
        self.polished = 0  # polish trials asked
        self._polished_placements: set[bytes] = set()

    def _enqueue_polish(self) -> bool:
        """Enqueue the next polish trial in the study (user attribute ``moplace_polish``), so
        that the next ``study.ask()`` returns it; False when none is waiting."""
        params = self._next_polish()
        if params is None:
            return False
        self.study.enqueue_trial(params, user_attrs={"moplace_polish": True})
        return True

    def _next_polish(self) -> dict | None:
        """The newest queued polish trial whose strategy has not been simulated meanwhile."""
        while self._polish:
            params = self._polish.pop()
            key = params.pop(_KEY)
            self._polish_keys.discard(key)
            if self._known.get(key) is None:
                return params
        return None

    def _worth_polishing(self, ev) -> bool:
        """A feasible trial that enters the Pareto set of those told, or an infeasible one that
        enters the Pareto set of the infeasible ones (on objectives alone) and that no
        feasible trial dominates: its order may make it fit."""
        return worth_polishing(self._fits, self._unfit, ev)

    def _queue_polish(self, params: dict, strategy: Strategy) -> None:
        """Queue neighbours of a trial worth polishing (see the package docstring): its
        placement in the standard orders, the first time the placement is polished, and up to
        ``config.polish`` of its one-step neighbours (two ops of one device swapped, one group
        on another device, or two devices trading their groups), drawn at random; strategies
        simulated or queued before are skipped. Without priority parameters there would be no
        swaps and no orders, but ``tell`` polishes only when priorities are searched."""
        placement, D = strategy.placement, self._trials.genome.n_devices
        devices = self._trials.devices
        steps = [("move", g, d) for g in devices for d in range(D) if d != params[f"d{g}"]]
        steps += [("relabel", d, e) for d in range(D) for e in range(d + 1, D)]
        orders = []
        if self._search_priorities:
            pairs = swap_pairs(placement, strategy.priority, SWAP_WINDOW)
            steps = [("swap", i, j) for i, j in pairs] + steps
            digest = hashlib.blake2b(placement.tobytes(), digest_size=16).digest()
            if digest not in self._polished_placements:
                self._polished_placements.add(digest)
                orders = self._standard_orders()(placement)
        queued = 0
        for k in self.rng.permutation(len(steps)).tolist():
            if queued == self.config.polish:
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
            queued += self._queue(q)
        for prio in orders:  # asked first: the queue is last in, first out
            self._queue({**params, **{f"p{i}": float(v) for i, v in enumerate(unit_rank(prio))}})

    def _standard_orders(self) -> StandardOrders:
        """The problem's `StandardOrders`, made on first use (also after a checkpoint written
        before they existed)."""
        if getattr(self, "_orders", None) is None:
            self._orders = StandardOrders(self.problem)
        return self._orders

    def _queue(self, params: dict) -> bool:
        """Queue trial ``params`` unless its strategy was simulated or queued before; True when
        queued."""
        import optuna

        key = self._strategy(optuna.trial.FixedTrial(params)).simulation_key
        if key in self._polish_keys or self._known.get(key) is not None:
            return False
        if len(self._polish) == POLISH_QUEUE:  # the oldest waiting one is dropped
            self._polish_keys.discard(self._polish.popleft()[_KEY])
        self._polish.append({**params, _KEY: key})
        self._polish_keys.add(key)
        return True
