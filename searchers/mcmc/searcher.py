"""`McmcSearcher`: its settings, setup, ask / tell and the chains' Metropolis-Hastings steps.

Proposals come from `moves` (`MovesMixin`), restarts from `restarts` (`RestartMixin`), the
answers to known proposals from `known` (`KnownMixin`), the chains' first weight vectors from
`weights`; see the package docstring for the method.
"""

from __future__ import annotations

import numpy as np

from moplace.core.strategy import Strategy
from moplace.errors import MoplaceError, StrategyError
from moplace.optimize.searcher import Searcher
from moplace.simulator.delta import DeltaRequest
from searchers.seeding import SeedPhase

from .known import KnownMixin
from .moves import MovesMixin
from .restarts import RESTARTS, RestartMixin
from .weights import spread_weights


class McmcSearcher(KnownMixin, MovesMixin, RestartMixin, Searcher):
    """FlexFlow-style MCMC chains, one Chebyshev scalarization each, restarts that learn.

    Each chain minimizes the augmented Chebyshev scalarization of the objectives normalized by
    the hypervolume reference point under its own weight vector, plus a penalty when the
    strategy does not fit; see the package docstring (`searchers.mcmc`) for the method.

    Settings:
        chains: number of chains, each with its own weight vector (spread over the simplex,
            the first balanced); at least 1.
        steps_per_ask: proposals per chain in each batch, all drawn from the chain's state at
            ask time; 1 keeps every chain an exact Metropolis-Hastings chain, more trade that
            for larger batches.
        temperature: Metropolis temperature, in units of the normalized cost: a worsening of
            that much is accepted with probability 1/e; positive.
        restart_after: a chain restarts after this many proposals in a row that did not
            improve on its best cost since it (re)started; after half as many it makes compound
            moves (see extra_move); at least 1.
        neighbour_prob: probability that a device move puts the group on the device of a
            graph-neighbour group (FlexFlow's locality move) rather than on a random other
            device; in [0, 1].
        rho: weight of the sum term of the augmented Chebyshev scalarization (rho * sum_k w_k
            f_k / ref_k), which breaks ties towards non-dominated points.
        penalty: cost added to an infeasible strategy's scalarized cost, times 1 + violation /
            the largest device memory (bytes), so that it costs more than a feasible one with
            the same objectives.
        move_weights: relative odds of the four move kinds (device, split, priority, device
            set: the whole strategy onto a run of devices of another length, splits scaled
            with it): three or four non-negative numbers with a positive sum (three: no
            device-set moves); kinds that cannot change anything are not drawn.
        restarts: the kinds of restart a stalled chain may take, one or more of best, relabel,
            random, repair and frontier; which one is learned by Thompson sampling.
        reweight: on each restart give the chain a new weight vector (uniform on the simplex,
            or the weights of the front or repair point it restarts from); false keeps each
            chain's weights.
        adjacent_prob: probability that a priority swap takes the op next in its device's
            order, else any op on the same device; in [0, 1].
        extra_move: probability of one more move per proposal (and again for each extra one)
            once a chain has gone half of restart_after proposals without improving; in
            [0, 1), 0 turns compound moves off.
        known_steps: most proposals per chain and ask answered from memory when their genome
            was evaluated before, instead of simulated; 0 turns it off.
        delta: simulate a proposal that differs from its chain's strategy only in the device of
            unsplit groups and in priorities by patching that strategy's task graph (same
            result, faster).
        seed_subsets: include the baselines on device subsets among the seeds (every chain
            starts from the best seed under its weights; see `searchers.seeding`).
    """

    name = "mcmc"
    seeded = True

    def __init__(self, chains: int = 4, steps_per_ask: int = 1, temperature: float = 0.001,
                 restart_after: int = 30, neighbour_prob: float = 0.5, rho: float = 0.05,
                 penalty: float = 10.0,
                 move_weights: tuple[float, ...] = (0.4, 0.3, 0.3, 0.03),
                 restarts: tuple[str, ...] = RESTARTS, reweight: bool = True,
                 adjacent_prob: float = 0.5, extra_move: float = 0.6, known_steps: int = 200,
                 delta: bool = True, seed_subsets: bool = True):
        if int(chains) < 1:
            raise MoplaceError(f"chains must be at least 1, got {chains}")
        if int(steps_per_ask) < 1:
            raise MoplaceError(f"steps_per_ask must be at least 1, got {steps_per_ask}")
        if not (np.isfinite(temperature) and temperature > 0):
            raise MoplaceError(f"temperature must be a positive number, got {temperature}")
        restarts = (restarts,) if isinstance(restarts, str) else tuple(restarts)
        if not restarts or any(r not in RESTARTS for r in restarts):
            raise MoplaceError(f"restarts must name one or more of {', '.join(RESTARTS)}, "
                               f"got {list(restarts)}")
        if int(restart_after) < 1:
            raise MoplaceError(f"restart_after must be at least 1, got {restart_after}")
        if not 0 <= neighbour_prob <= 1:
            raise MoplaceError(f"neighbour_prob must be in [0, 1], got {neighbour_prob}")
        if len(move_weights) not in (3, 4) or min(move_weights) < 0 or sum(move_weights) <= 0:
            raise MoplaceError("move_weights must be three or four non-negative numbers "
                               "(device, split, priority, device set) with a positive sum")
        self.chains, self.steps_per_ask = int(chains), int(steps_per_ask)
        self.temperature, self.restart_after = float(temperature), int(restart_after)
        self.neighbour_prob = float(neighbour_prob)
        self.rho, self.penalty = float(rho), float(penalty)
        self.move_weights = tuple(float(w) for w in move_weights)
        self.restart_kinds = tuple(r for r in RESTARTS if r in restarts)
        self.reweight = bool(reweight)
        if not 0 <= adjacent_prob <= 1:
            raise MoplaceError(f"adjacent_prob must be in [0, 1], got {adjacent_prob}")
        self.adjacent_prob = float(adjacent_prob)
        if not 0 <= extra_move < 1:
            raise MoplaceError(f"extra_move must be in [0, 1), got {extra_move}")
        self.extra_move = float(extra_move)
        if int(known_steps) < 0:
            raise MoplaceError(f"known_steps must be at least 0, got {known_steps}")
        self.known_steps = int(known_steps)
        self.delta = bool(delta)
        self.seed_subsets = bool(seed_subsets)

    # -- setup -----------------------------------------------------------------------------

    def _setup(self) -> None:
        p = self.problem
        self._space = p.genome
        self._weights = spread_weights(self.chains, len(p.objectives))
        self._scale = np.asarray(p.reference, dtype=np.float64)
        self._capacity = float(np.max(p.cluster.memory)) if p.n_devices else 1.0
        self.seeding = SeedPhase(p, subsets=self.seed_subsets)
        self._setup_moves()
        # chain state: genome, its strategy's cost, its best cost since it (re)started, the
        # proposals since that improved, and the strategy it restarts from (None: none pending)
        self._x: list[np.ndarray | None] = [None] * self.chains
        self._x_ev: list = [None] * self.chains  # its evaluation
        self._base: list = [None] * self.chains  # its strategy's task graph (delta simulation)
        self._cost = np.full(self.chains, np.inf)
        self._run_best = np.full(self.chains, np.inf)
        self._stalled = np.zeros(self.chains, np.int64)
        self._jump: list[np.ndarray | None] = [None] * self.chains
        self._setup_restarts()
        self._best_x: list[np.ndarray | None] = [None] * self.chains
        self._best_ev: list = [None] * self.chains
        self._best_cost = np.full(self.chains, np.inf)
        self._pending: list[tuple[int, np.ndarray, bool]] = []  # (chain or -1, genome, jump?)
        self.accepted = np.zeros(self.chains, np.int64)
        self.proposed = np.zeros(self.chains, np.int64)
        self.restarts = np.zeros(self.chains, np.int64)
        self._setup_known()
        self.patched = 0  # proposals simulated on a patched task graph (delta simulation)

    def __getstate__(self) -> dict:
        """The state a checkpoint keeps: the chains' task graphs are left out (the next
        proposal of each chain is then simulated in full, with the same result)."""
        state = dict(vars(self))
        if "_base" in state:
            state["_base"] = [None] * len(state["_base"])
        return state

    @property
    def weights(self) -> np.ndarray:
        """The chains' weight vectors [chains, objectives]."""
        return self._weights.copy()

    def settings(self) -> dict:
        return {"chains": self.chains, "steps_per_ask": self.steps_per_ask,
                "temperature": self.temperature, "restart_after": self.restart_after,
                "neighbour_prob": self.neighbour_prob, "rho": self.rho, "penalty": self.penalty,
                "move_weights": list(self.move_weights), "restarts": list(self.restart_kinds),
                "reweight": self.reweight, "adjacent_prob": self.adjacent_prob,
                "extra_move": self.extra_move, "known_steps": self.known_steps,
                "delta": self.delta, "seed_subsets": self.seed_subsets}

    # -- ask / tell ------------------------------------------------------------------------

    def ask(self) -> list[Strategy]:
        if self._x[0] is None:  # nothing told yet: every seed first, as it is
            batch = self.seeding.ask()
            if not batch:  # no seed was told (none, or none evaluated): random starts
                X = self._space.sample(self.chains, self.rng)
                self._pending = [(-1, x, False) for x in X]
                return [self._space.decode(x) for x in X]
            # a seed the genome cannot encode is evaluated for the archive only (genome None)
            self._pending = [(-1, _genome(self._space, s), False) for s in batch]
            return batch
        elif self._move_p is None:  # no move can change the strategy: done
            return []
        else:
            self._pending = []
            for c in range(self.chains):
                self._walk_known(c)
                jump, self._jump[c] = self._jump[c], None
                if jump is not None:
                    self._pending.append((c, jump, True))
                start = self._x[c] if jump is None else jump
                extra = self._extra(c)
                todo = self.steps_per_ask - (jump is not None)
                if self._next[c] is not None and todo > 0:
                    self._pending.append((c, self._next[c], False))
                    todo -= 1
                self._next[c] = None
                self._pending += [(c, self._propose(start, self._repairing[c], extra), False)
                                  for _ in range(todo)]
        return [self._strategy(c, x) for c, x, _ in self._pending]

    def notes(self) -> list[str]:
        note = self.seeding.note(self._space) if hasattr(self, "seeding") else None
        return [note] if note else []

    def _strategy(self, c: int, y: np.ndarray) -> Strategy:
        """The strategy of genome ``y``, a proposal of chain ``c`` (-1: none); when it differs
        from the chain's current strategy only in the device of unsplit groups and in
        priorities, it is derived from that strategy and simulated by patching its task graph
        (`moplace.simulator.delta`), else decoded and simulated in full."""
        base = self._base[c] if c >= 0 and self.delta else None
        s = None
        if base is not None:
            x, G = self._x[c], self._space.n_groups
            moved = x[:G] != y[:G]
            if np.array_equal(x[G:2 * G], y[G:2 * G]) and not np.any(x[G:2 * G][moved]):
                s = base.strategy.derive(placement=y[:G].astype(np.int64)[self._group],
                                         priority=y[2 * G:])
            else:
                base = None
        if s is None:
            s = self._space.decode(y)
        if self.delta:
            s.delta = DeltaRequest(base)
        return s

    def tell(self, strategies, evaluations) -> None:
        if self.seeding.active:
            self.seeding.tell(strategies, evaluations)  # the seed batch, in asked order
        told = self._pending[:len(evaluations)]
        self._pending = []
        if self._x[0] is None:  # the seed batch: the chains see the seeds they can encode
            kept = [k for k, (_, x, _) in enumerate(told) if x is not None]
            told = [told[k] for k in kept]
            strategies = [strategies[k] for k in kept]
            evaluations = [evaluations[k] for k in kept]
        for (_, x, _), ev in zip(told, evaluations):
            self._remember(x, ev)
        costs = [self._costs(ev) for ev in evaluations]  # [chains] per evaluation
        for (c, x, _), ev in zip(told, evaluations):  # restart points, runs' wins
            self._record(c, x, ev)
        bases = [s.delta.result if s.delta is not None else None for s in strategies]
        self.patched += sum(s.delta is not None and s.delta.patched for s in strategies)
        for (chain, x, _), cost, ev in zip(told, costs, evaluations):  # best so far per chain
            better = cost < self._best_cost
            for c in np.flatnonzero(better):
                self._best_x[c], self._best_cost[c], self._best_ev[c] = x, cost[c], ev
        if self._x[0] is None:
            if told:  # every chain starts from the heuristic best under its weights
                self._x, self._x_ev = list(self._best_x), list(self._best_ev)
                self._cost = self._best_cost.copy()
                self._run_best = self._best_cost.copy()
            return
        stalled = []  # restarted after the loop: the batch's costs use the weights of now
        for (c, x, jump), cost, ev, base in zip(told, costs, evaluations, bases):
            if jump:
                self._take(c, x, ev, cost[c], base)
                continue
            if self._step(c, x, ev, cost[c], base) and c not in stalled:
                stalled.append(c)
        for c in stalled:
            self._restart(c)

    # -- chains ----------------------------------------------------------------------------

    def _take(self, c: int, x: np.ndarray, ev, cost: float, base=None) -> None:
        """Chain ``c`` goes on from a restart's strategy ``x``, whatever it costs (``base``:
        its `SimulationBase`, None when unknown)."""
        self._x[c], self._x_ev[c], self._base[c] = x, ev, base
        self._cost[c] = self._run_best[c] = cost
        self._stalled[c] = 0

    def _step(self, c: int, x: np.ndarray, ev, cost: float, base=None) -> bool:
        """Chain ``c``'s Metropolis-Hastings test of proposal ``x`` (evaluated ``ev``, costing
        ``cost`` under its weights; ``base`` its `SimulationBase` or None); True when the
        chain has now stalled."""
        self.proposed[c] += 1
        delta = cost - self._cost[c]
        if delta <= 0 or self.rng.random() < np.exp(-delta / self.temperature):
            self._x[c], self._cost[c], self._x_ev[c] = x, cost, ev
            self._base[c] = base
            self.accepted[c] += 1
            if ev.violation == 0:  # repaired: every kind of move again
                self._repairing[c] = False
        if cost < self._run_best[c]:
            self._run_best[c], self._stalled[c] = cost, 0
            return False
        self._stalled[c] += 1
        return self._stalled[c] >= self.restart_after

    def _scalar(self, values) -> np.ndarray:
        """Objective values scalarized under every chain's weights [chains] (no penalty)."""
        wf = self._weights * (np.asarray(values, dtype=np.float64) / self._scale)
        return wf.max(axis=1) + self.rho * wf.sum(axis=1)

    def _costs(self, ev) -> np.ndarray:
        """The evaluation's cost under every chain's weights [chains]."""
        cost = self._scalar(ev.values)
        if ev.violation > 0:
            cost = cost + self.penalty * (1.0 + ev.violation / self._capacity)
        return cost


def _genome(space, strategy: Strategy) -> np.ndarray | None:
    """The genome of ``strategy``, None when it has none."""
    try:
        return space.encode(strategy)
    except StrategyError:
        return None
