"""MCMC search as in FlexFlow (Jia et al., SysML 2019), with one chain per trade-off.

FlexFlow walks the strategy space with Metropolis-Hastings: from the current strategy it
proposes a random neighbour (one op's configuration changed), simulates it, and accepts it
with probability ``min(1, exp(-beta * (cost(new) - cost(current))))``; it starts from
data parallelism / expert strategies and restarts from the best strategy found when the
search stalls. This searcher does the same on moplace's genome, for three objectives:

- **Chains and weights.** Each of ``chains`` chains has its own weight vector ``w`` on the
  objectives (spread over the simplex, the first one balanced) and minimizes the augmented
  Chebyshev scalarization ``max_k w_k f_k / ref_k + rho * sum_k w_k f_k / ref_k`` of the
  objectives normalized by ``problem.reference`` (the hypervolume reference point, so every
  term is about 0..1). Chebyshev reaches non-convex parts of a front, the small sum term
  breaks ties towards non-dominated points. Together the chains trace a front into the
  driver's archive (every evaluated proposal goes there, accepted or not).
- **Infeasible strategies** (violation > 0 bytes) cost ``penalty * (1 + violation /
  capacity)``, added to the scalarized value, with capacity the largest device memory: any
  infeasible strategy costs more than a feasible one with the same objectives, and less
  violation is better, so a chain that starts infeasible walks towards feasibility.
- **Start.** The first batch holds the heuristics: DPOS, HEFT and the baselines (single,
  data-parallel, round-robin, layer-split). Each chain starts from the one that is cheapest
  under its own weights.
- **Moves.** A proposal makes one move: move ONE co-location group to another device (with
  probability ``neighbour_prob`` to the device of a graph-neighbour group on another device,
  FlexFlow's locality move, else to a uniformly random other device); change ONE group's
  split option; or swap the priorities of two ops on the same device, where the order
  matters (with probability ``adjacent_prob`` the op next to it in that device's order, else
  any; two ops anywhere when the op is alone on its device). Move kinds that cannot change
  anything (one device, no split options, fewer than two ops) are not drawn; when none is
  possible the search is done. Once a chain has gone half of ``restart_after`` proposals
  without improving, each proposal makes one more move with probability ``extra_move``, and
  again for each extra one (a variable neighbourhood: compound moves cross strategies that
  single moves only reach through worse or infeasible ones, for example a trade of two ops
  between devices whose memory is tight). Making them on every proposal cost hypervolume on
  VGG-16 (0.613 instead of 0.666 at 2000 evaluations, seed 0), where single moves still
  improve.
- **Acceptance** ``exp(-delta / temperature)`` with delta the change in the chain's cost
  (``temperature`` is in units of the normalized cost: the default 0.001 accepts a worsening
  of 0.1% of the reference with probability 1/e; on VGG-16 / 4xV100 it beat 0.0003, 0.0005,
  0.003, 0.01 and 0.03 at 300 and 2000 evaluations, measured with FlexFlow's plain
  restarts). Moves that change nothing the objectives see (delta = 0, e.g. swapping the
  priorities of two ops that a dependency already orders) are accepted, as
  Metropolis-Hastings does.
- **Restart.** A chain has *stalled* after ``restart_after`` proposals in a row that did not
  improve on the best cost it reached since it (re)started (accepted neutral moves count: a
  chain wandering a plateau stalls too). It then restarts: with ``reweight`` (the default) it
  first draws a new weight vector uniformly from the simplex, so that over the search the
  chains trace many trade-offs rather than ``chains`` of them, and then goes on from one of
  ``restarts``:
  ``best``, the best strategy seen under its (new) weights over all chains' evaluations
  (FlexFlow's restart; taken from the searcher's own Pareto set of everything evaluated);
  ``relabel``, that strategy with its devices renamed by a random permutation (same
  structure, other devices: on mixed device kinds or links it reaches the mirror image of a
  strategy, which one-group moves reach only through worse strategies);
  ``random``, a uniformly random genome (escapes any basin, but on a large graph it starts far
  from anything good);
  ``repair``, an infeasible strategy seen whose objectives no feasible one dominates (one of
  those repaired from least often), with the weights under which it is Chebyshev-optimal
  (as for ``frontier``): the chain then swaps op priorities only (the placement and splits
  stay) until it fits, since peak memory depends on the order (on tiny problems the one
  all-on-one-device placement that fits does so in one order only; no single move reaches
  it from a feasible strategy). Picking it by the chain's Dirichlet weights instead, when it
  beat the best feasible strategy under them, left such a point unrepaired in 19 of 20 runs
  of one tiny instance: only weights that nearly ignore runtime and memory favour it;
  ``frontier``, a point of the searcher's Pareto set, one of those restarted from least
  often, with the weights ``w_k ~ ref_k / f_k`` under which that point is Chebyshev-optimal
  (Dirichlet weights rarely fall in the narrow region of weights of a point that differs from
  its neighbours in one objective only; this polishes each point of the front in turn).
  Which kind a restart takes is learned as the search goes, by Thompson
  sampling: a restart's run *wins* when it finds a point that enters the searcher's Pareto
  set, and each kind is drawn with the probability that it has the highest win rate under a
  Beta(wins + 1, losses + 1) posterior. On VGG-16 / 4xV100 (2000 evaluations, seed 0, before
  ``repair`` and ``frontier`` existed) best and relabel restarts won about half their runs
  (20 of 37, 17 of 34) and random ones were dropped after two tries that won nothing; on
  tiny problems every kind wins rarely and alike, and all keep being tried. A restart's
  strategy (but ``best``'s and ``frontier``'s, already evaluated) is evaluated as the chain's
  next proposal and taken whatever it costs.
- **Known proposals.** The simulator is deterministic, so a proposal whose genome was
  evaluated before (on tiny problems 11-46% of them, seed 0) is answered from memory: before
  each ask, every chain steps through such proposals (Metropolis-Hastings test, stall count
  and restarts as usual) until it draws one never evaluated, which it asks for, or until
  ``known_steps`` steps (then it asks for the next proposal whatever it is). The chains are
  the same chains as if those proposals were simulated again, but the evaluation budget goes
  to new strategies only. ``known_steps=0`` turns it off. Up to `KNOWN_LIMIT` genomes are
  remembered (a 16-byte digest and the objective values each).
- **Batches.** Each ``ask`` returns ``steps_per_ask`` proposals per chain (chain-major), all
  drawn from the chain's state at ask time; ``tell`` runs the acceptance test on them in
  order. With ``steps_per_ask=1`` (the default) every chain is an exact Metropolis-Hastings
  chain; with more, later proposals were drawn from the state before an earlier one was
  accepted, an approximation that trades chain exactness for larger batches.

**Against exact fronts** (`moplace.tiny`, 20 instances, 2000 evaluations, seed 0): all 20
reach 99% of the exact hypervolume, the lowest 99.5%, median 100%. Over 3 instance sets x 3
seeds (180 runs) 5 runs stay below 99%, the lowest 95.1%, mean 99.91% (the missing points
there have a placement the search found, in a slower op order). How it got there, seed 0 /
180 runs: FlexFlow's plain restarts from the best strategy with 4 fixed weight vectors, 9 of
20 at 99%, lowest 9.4%; with reweighting and best / relabel / random restarts, 18 of 20 /
9 runs below 99%, lowest 45.4%; with repair (picked by the chain's weights), frontier and
compound moves, 19 of 20 / 8 runs, lowest 68.2%; with known proposals answered from memory,
19 of 20 / 4 runs, lowest 97.0%; with repair restarts taken in turn and the single-device
seeds of `heuristic_strategies`, as now. On VGG-16 / 4xV100 at 2000 evaluations, seeds 0-3:
0.658, 0.647, 0.668, 0.652 (mean 0.656; before repair, frontier and compound moves: 0.666,
0.658, 0.661, 0.595): the run-to-run spread is larger than any of these changes.

- **Delta simulation** (``delta=True``). A proposal that differs from its chain's current
  strategy only in the device of unsplit groups and in priorities is derived from that
  strategy (splits shared) and simulated on its task graph patched in place
  (`moplace.delta`): exactly the full simulation, array for array, without decoding,
  validating splits or building the task graph again. Proposals that change a split or move
  a split group, and strategies without any split (whose task graph is cheaper to build than
  to patch), are simulated in full. On the PipeDream graphs on 4 and 8 V100s
  (`experiments/bench_delta.py`, 22 cases) a patched evaluation is 2.2-6.8x faster than a full
  one; over a whole search (2000 evaluations) 23-46% of the proposals are patched and the
  search is 1.15-1.41x faster (median 1.22), with the same front in every case.

All randomness comes from the driver's rng: same seed, same result.
"""

from __future__ import annotations

import hashlib

import numpy as np

from moplace.archive import ParetoArchive
from moplace.delta import DeltaRequest
from moplace.errors import MoplaceError, StrategyError
from moplace.known import KnownEvaluations
from moplace.searcher import Searcher
from moplace.strategy import Strategy

from ._listsched import heuristic_strategies


#: How a stalled chain can restart: from its best strategy, from it relabelled, from a random
#: one, from the best strategy that does not fit (to repair its op order), or from a point of
#: the front.
RESTARTS = ("best", "relabel", "random", "repair", "frontier")
#: Most genomes whose evaluation a search remembers (the oldest are forgotten first).
KNOWN_LIMIT = 200_000
#: Smallest normalized objective value a frontier restart's weights are computed from.
FRONTIER_FLOOR = 0.01


class McmcSearcher(Searcher):
    """FlexFlow-style MCMC with one chain per weight vector (see module docstring)."""

    name = "mcmc"

    def __init__(self, chains: int = 4, steps_per_ask: int = 1, temperature: float = 0.001,
                 restart_after: int = 30, neighbour_prob: float = 0.5, rho: float = 0.05,
                 penalty: float = 10.0, move_weights: tuple[float, float, float] = (0.4, 0.3, 0.3),
                 restarts: tuple[str, ...] = RESTARTS, reweight: bool = True,
                 adjacent_prob: float = 0.5, extra_move: float = 0.6, known_steps: int = 200,
                 delta: bool = True):
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
        if len(move_weights) != 3 or min(move_weights) < 0 or sum(move_weights) <= 0:
            raise MoplaceError("move_weights must be three non-negative numbers "
                               "(device, split, priority) with a positive sum")
        self.chains, self.steps_per_ask = int(chains), int(steps_per_ask)
        self.temperature, self.restart_after = float(temperature), int(restart_after)
        self.neighbour_prob, self.rho, self.penalty = float(neighbour_prob), float(rho), float(penalty)
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

    # -- setup -----------------------------------------------------------------------------

    def _setup(self) -> None:
        p = self.problem
        space = p.genome
        self._space = space
        self._weights = spread_weights(self.chains, len(p.objectives))
        self._scale = np.asarray(p.reference, dtype=np.float64)
        self._capacity = float(np.max(p.cluster.memory)) if p.n_devices else 1.0
        self._seeds = _heuristic_genomes(p)
        self._neighbours = _group_neighbours(p.graph)
        self._group = p.graph.arrays.group
        G, N, D = space.n_groups, space.n_ops, space.n_devices
        self._splittable = np.array([g for g in range(G) if len(space.options[g]) > 1], np.int64)
        kinds = np.array(self.move_weights) * np.array(
            [G > 0 and D > 1, self._splittable.size > 0, N > 1], dtype=np.float64)
        self._move_p = kinds / kinds.sum() if kinds.sum() > 0 else None
        # chain state: genome, its strategy's cost, its best cost since it (re)started, the
        # proposals since that improved, and the strategy it restarts from (None: none pending)
        self._x: list[np.ndarray | None] = [None] * self.chains
        self._x_ev: list = [None] * self.chains  # its evaluation
        self._base: list = [None] * self.chains  # its strategy's task graph (delta simulation)
        self._cost = np.full(self.chains, np.inf)
        self._run_best = np.full(self.chains, np.inf)
        self._stalled = np.zeros(self.chains, np.int64)
        self._jump: list[np.ndarray | None] = [None] * self.chains
        # restart kinds (RESTARTS order): runs started with each, and runs that found a point
        # of the front; per chain the kind of its current run (-1: the first) and its success
        self.restart_tries = np.zeros(len(RESTARTS), np.int64)
        self.restart_wins = np.zeros(len(RESTARTS), np.int64)
        self._run_kind = np.full(self.chains, -1, np.int64)
        self._run_won = np.zeros(self.chains, bool)
        usable = [r for r in self.restart_kinds
                  if (r != "relabel" or D > 1) and (r != "repair" or N > 1)]
        self._kinds = np.array([RESTARTS.index(r) for r in usable or ["best"]], np.int64)
        self._best_x: list[np.ndarray | None] = [None] * self.chains
        self._best_ev: list = [None] * self.chains
        self._best_cost = np.full(self.chains, np.inf)
        self._pending: list[tuple[int, np.ndarray, bool]] = []  # (chain or -1, genome, jump?)
        self._seen = ParetoArchive(len(p.objectives), max_infeasible=10)
        # the infeasible points seen, Pareto-filtered on their objectives alone: where a
        # repair restart starts; per chain, whether it is repairing (order moves only)
        self._unfit = ParetoArchive(len(p.objectives), max_infeasible=0)
        self._repairing = np.zeros(self.chains, bool)
        self._visits: dict[int, int] = {}  # restarts from each front point (by archive index)
        self._repairs: dict[int, int] = {}  # repairs of each infeasible point (by _unfit index)
        self.accepted = np.zeros(self.chains, np.int64)
        self.proposed = np.zeros(self.chains, np.int64)
        self.restarts = np.zeros(self.chains, np.int64)
        # the objective values and violation of every genome evaluated (by a digest of its
        # bytes), and per chain a proposal drawn while stepping through known ones
        self._known = KnownEvaluations(KNOWN_LIMIT)
        self._next: list[np.ndarray | None] = [None] * self.chains
        self.known_taken = 0  # proposals answered from _known instead of simulated
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

    # -- ask / tell ------------------------------------------------------------------------

    def ask(self) -> list[Strategy]:
        if self._x[0] is None:  # nothing told yet: the heuristics first
            self._pending = [(-1, x, False) for x in self._seeds]
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

    def _strategy(self, c: int, y: np.ndarray) -> Strategy:
        """The strategy of genome ``y``, a proposal of chain ``c`` (-1: none); when it differs
        from the chain's current strategy only in the device of unsplit groups and in
        priorities, it is derived from that strategy and simulated by patching its task graph
        (`moplace.delta`), else decoded and simulated in full."""
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
        told = self._pending[:len(evaluations)]
        self._pending = []
        for (_, x, _), ev in zip(told, evaluations):
            self._remember(x, ev)
        costs = [self._costs(ev) for ev in evaluations]  # [chains] per evaluation
        for (c, x, _), ev in zip(told, evaluations):  # credit a run that finds a front point
            if ev.violation > 0:
                self._unfit.add(ev.values, 0.0, (x, ev))
            if self._seen.add(ev.values, ev.violation, (x, ev)) and c >= 0 \
                    and not self._run_won[c] and self._run_kind[c] >= 0:
                self._run_won[c] = True
                self.restart_wins[self._run_kind[c]] += 1
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

    def _walk_known(self, c: int) -> None:
        """Step chain ``c`` through proposals whose genome was evaluated before, answering
        each from memory (the simulator is deterministic, so the chain is the same
        Metropolis-Hastings chain it would be if they were simulated again), until it draws
        one never evaluated (kept in ``_next[c]``) or has taken ``known_steps`` such steps.
        A restart's strategy that is known is taken from memory as well."""
        for _ in range(self.known_steps):
            jump = self._jump[c]
            if jump is not None:
                ev = self._known.get(_digest(jump))
                if ev is None:
                    return
                self._jump[c] = None
                self._take(c, jump, ev, self._costs(ev)[c])
                self.known_taken += 1
                continue
            y = self._propose(self._x[c], self._repairing[c], self._extra(c))
            ev = self._known.get(_digest(y))
            if ev is None:
                self._next[c] = y
                return
            self.known_taken += 1
            if self._step(c, y, ev, self._costs(ev)[c]):
                self._restart(c)

    def _remember(self, x: np.ndarray, ev) -> None:
        if self.known_steps:
            self._known.add(_digest(x), ev)

    def _extra(self, c: int) -> float:
        """Chain ``c``'s probability of one more move per proposal: ``extra_move`` once it
        has gone half of ``restart_after`` proposals without improving, else 0."""
        return self.extra_move if 2 * self._stalled[c] >= self.restart_after else 0.0

    def _restart(self, c: int) -> None:
        """Chain ``c`` has stalled: a new weight vector (with ``reweight``), and a new start of
        the kind chosen by Thompson sampling over the kinds' past success (see the module
        docstring): its best strategy, that strategy relabelled, a random one, the best
        infeasible one to repair, or a point of the front under the weights it is best for."""
        self.restarts[c] += 1
        self._stalled[c] = 0
        space, rng = self._space, self.rng
        wins, tries = self.restart_wins[self._kinds], self.restart_tries[self._kinds]
        kind = int(self._kinds[int(np.argmax(rng.beta(wins + 1, tries - wins + 1)))])
        self.restart_tries[kind] += 1
        self._run_kind[c], self._run_won[c] = kind, False
        self._repairing[c] = False
        start = unfit = None
        if RESTARTS[kind] == "frontier":
            start = _least_visited(self._seen.front, self._visits, self.rng)

        elif RESTARTS[kind] == "repair":  # infeasible points no feasible one dominates
            fits = np.array([e.values for e in self._seen.front]).reshape(-1, self._scale.size)
            unfit = _least_visited([e for e in self._unfit.front
                                    if not np.any(np.all(fits <= e.values, axis=1))],
                                   self._repairs, self.rng)
        aim = start if start is not None else unfit
        if self.reweight:
            if aim is not None:  # weights under which the point is Chebyshev-optimal
                # (an objective at 0 makes any weight right: the floor keeps the others')
                w = 1.0 / np.maximum(aim.values / self._scale, FRONTIER_FLOOR)
                self._weights[c] = w / w.sum()
            else:
                self._weights[c] = rng.dirichlet(np.ones(self._weights.shape[1]))
            entries = self._seen.front or self._seen.infeasible(10)
            costs = [self._costs(e.payload[1])[c] for e in entries]
            k = int(np.argmin(costs))
            self._best_x[c], self._best_ev[c] = entries[k].payload
            self._best_cost[c] = costs[k]
            self._cost[c] = self._run_best[c] = self._costs(self._x_ev[c])[c]  # new weights
        if start is not None:
            self._x[c], self._x_ev[c] = start.payload
            self._base[c] = None
            self._cost[c] = self._run_best[c] = self._costs(self._x_ev[c])[c]
            return
        best = self._best_x[c]
        if unfit is not None:
            self._jump[c], self._repairing[c] = unfit.payload[0], True
        elif RESTARTS[kind] == "random":
            self._jump[c] = space.sample(1, rng)[0]
        elif RESTARTS[kind] == "relabel":
            y = best.copy()
            G = space.n_groups
            y[:G] = _other_permutation(space.n_devices, rng)[best[:G].astype(np.int64)]
            self._jump[c] = y
        else:  # best (and repair when nothing infeasible beats it)
            self._x[c], self._cost[c], self._run_best[c] = best, self._best_cost[c], self._best_cost[c]
            self._base[c] = None
            self._x_ev[c] = self._best_ev[c]

    def settings(self) -> dict:
        return {"chains": self.chains, "steps_per_ask": self.steps_per_ask,
                "temperature": self.temperature, "restart_after": self.restart_after,
                "neighbour_prob": self.neighbour_prob, "rho": self.rho, "penalty": self.penalty,
                "move_weights": list(self.move_weights), "restarts": list(self.restart_kinds),
                "reweight": self.reweight, "adjacent_prob": self.adjacent_prob,
                "extra_move": self.extra_move, "known_steps": self.known_steps,
                "delta": self.delta}

    # -- internals -------------------------------------------------------------------------

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

    def _propose(self, x: np.ndarray, order_only: bool = False, extra: float = 0.0) -> np.ndarray:
        """A neighbour of ``x``: one move, and with probability ``extra`` each one more (see
        the module docstring)."""
        y = self._move(x, order_only)
        while extra > 0 and self.rng.random() < extra:
            y = self._move(y, order_only)
        return y

    def _move(self, x: np.ndarray, order_only: bool = False) -> np.ndarray:
        """``x`` changed by one move; with ``order_only`` a priority swap (a repairing chain
        keeps its placement and splits)."""
        space, rng = self._space, self.rng
        G, N, D = space.n_groups, space.n_ops, space.n_devices
        y = x.copy()
        kind = 2 if order_only else rng.choice(3, p=self._move_p)
        if kind == 0:  # one group to another device
            g = int(rng.integers(G))
            here = int(y[g])
            near = [int(y[h]) for h in self._neighbours[g] if int(y[h]) != here]
            if near and rng.random() < self.neighbour_prob:
                y[g] = near[int(rng.integers(len(near)))]
            else:
                y[g] = (here + 1 + int(rng.integers(D - 1))) % D
        elif kind == 1:  # one group's split option
            g = int(self._splittable[int(rng.integers(self._splittable.size))])
            n_opt = len(space.options[g])
            y[G + g] = (int(y[G + g]) + 1 + int(rng.integers(n_opt - 1))) % n_opt
        else:  # swap two ops' priorities, preferably two on the same device
            group = self.problem.graph.arrays.group
            i = int(rng.integers(N))
            same = np.flatnonzero(y[:G][group] == y[group[i]])
            same = same[same != i]
            if same.size and rng.random() < self.adjacent_prob:  # next in the device's order
                gap = y[2 * G + same] - y[2 * G + i]
                side = gap > 0 if rng.random() < 0.5 else gap < 0
                if not side.any():
                    side = ~side
                cand = same[side]
                j = int(cand[int(np.argmin(np.abs(gap[side])))])
            elif same.size:
                j = int(same[int(rng.integers(same.size))])
            else:
                j = (i + 1 + int(rng.integers(N - 1))) % N
            y[2 * G + i], y[2 * G + j] = y[2 * G + j], y[2 * G + i]
        return y


def _digest(x: np.ndarray) -> bytes:
    return hashlib.blake2b(x.tobytes(), digest_size=16).digest()


def _least_visited(entries, visits: dict, rng):
    """One of ``entries`` (archive entries) restarted from least often, random among them, its
    count in ``visits`` (by entry index) raised; None when there are none."""
    if not entries:
        return None
    counts = np.array([visits.get(e.index, 0) for e in entries])
    least = np.flatnonzero(counts == counts.min())
    entry = entries[int(least[int(rng.integers(least.size))])]
    visits[entry.index] = visits.get(entry.index, 0) + 1
    return entry


def _other_permutation(n: int, rng) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` other than the identity (n >= 2)."""
    while True:
        p = rng.permutation(n)
        if np.any(p != np.arange(n)):
            return p


def spread_weights(k: int, m: int) -> np.ndarray:
    """``k`` weight vectors on the ``m``-simplex, spread out: the balanced vector first, then
    greedily the lattice point farthest from those chosen (a Das-Dennis lattice fine enough
    to hold ``k`` points). Deterministic; every weight is at least a small positive floor so
    that no objective is ignored entirely."""
    if m == 1:
        return np.ones((k, 1))
    h = 1
    while _n_lattice(h, m) < k + m:
        h += 1
    lattice = np.array(_lattice(h, m), dtype=np.float64) / h
    chosen = [np.full(m, 1.0 / m)]
    for _ in range(k - 1):
        dist = np.min([np.linalg.norm(lattice - c, axis=1) for c in chosen], axis=0)
        chosen.append(lattice[int(np.argmax(dist))])  # ties: first in lattice order
    w = np.maximum(np.array(chosen), 0.02)
    return w / w.sum(axis=1, keepdims=True)


def _n_lattice(h: int, m: int) -> int:
    from math import comb
    return comb(h + m - 1, m - 1)


def _lattice(h: int, m: int):
    if m == 1:
        return [(h,)]
    return [(i,) + rest for i in range(h, -1, -1) for rest in _lattice(h - i, m - 1)]


def _group_neighbours(graph) -> list[np.ndarray]:
    """Per co-location group, the groups it exchanges tensors with."""
    a = graph.arrays
    gs, gd = a.group[a.src], a.group[a.dst]
    keep = gs != gd
    pairs = np.unique(np.concatenate([np.stack([gs[keep], gd[keep]], 1),
                                      np.stack([gd[keep], gs[keep]], 1)]), axis=0) \
        if keep.any() else np.empty((0, 2), np.int64)
    out = [[] for _ in range(a.n_groups)]
    for g, h in pairs.tolist():
        out[g].append(h)
    return [np.array(v, np.int64) for v in out]


def _heuristic_genomes(problem) -> list[np.ndarray]:
    """Genomes of DPOS, HEFT and the baselines (duplicates and unencodable ones left out)."""
    space = problem.genome
    out, seen = [], set()
    for s in heuristic_strategies(problem):
        try:
            x = space.encode(s)
        except StrategyError:
            continue
        if x.tobytes() not in seen:
            seen.add(x.tobytes())
            out.append(x)
    return out
