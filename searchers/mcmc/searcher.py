"""`McmcSearcher`: setup, ask / tell, and the chains' walk through known proposals.

The searcher owns its parts and passes them what they need: the chains' state and steps
(`chains.Chains`) and costs (`chains.Scalarization`), the proposals (`moves.Moves`), the
restarts (`restarts.Restarts`), the memory of evaluated genomes (`known.KnownGenomes`) and the
chains' first weight vectors (`weights`); see the package docstring for the method.
"""

from __future__ import annotations

import numpy as np

from moplace.core.strategy import Strategy
from moplace.errors import StrategyError
from moplace.optimize.searcher import Proposal, Searcher
from searchers.seeding import SeedPhase

from .chains import Chains, Scalarization
from .known import KnownGenomes
from .moves import Moves
from .restarts import Restarts
from .settings import McmcSettings
from .weights import spread_weights


class McmcSearcher(Searcher):
    """FlexFlow-style MCMC chains, one Chebyshev scalarization each, restarts that learn.

    Each chain minimizes the augmented Chebyshev scalarization of the objectives normalized by
    the hypervolume reference point under its own weight vector, plus a penalty when the
    strategy does not fit; see the package docstring (`searchers.mcmc`) for the method.

    Settings: see `searchers.mcmc.settings.McmcSettings`.
    """

    name = "mcmc"
    seeded = True
    Settings = McmcSettings

    # -- setup -----------------------------------------------------------------------------

    def _setup(self) -> None:
        p = self.problem
        self.space = p.genome
        capacity = float(np.max(p.cluster.memory)) if p.n_devices else 1.0
        cfg = self.config
        self.scalarization = Scalarization(spread_weights(cfg.chains, len(p.objectives)),
                                           p.reference, cfg.rho, cfg.penalty, capacity)
        self.seeding = SeedPhase(p, subsets=cfg.seed_subsets, baselines=cfg.seed_baselines)
        self.moves = Moves(self.space, p.graph, cfg.move_weights, cfg.neighbour_prob,
                           cfg.adjacent_prob)
        self.chain_state = Chains(cfg.chains)
        self.restarter = Restarts(self.space, cfg.chains, len(p.objectives), cfg.restarts,
                                  cfg.reweight)
        self.known = KnownGenomes(on=cfg.known_steps > 0)
        # the proposals of the last ask: (chain or -1, genome, a restart's start?)
        self.asked: list[tuple[int, np.ndarray | None, bool]] = []

    @property
    def weights(self) -> np.ndarray:
        """The chains' weight vectors [chains, objectives]."""
        return self.scalarization.weights.copy()

    # -- ask / tell ------------------------------------------------------------------------

    def ask(self) -> list:
        st = self.chain_state
        if not st.started:  # nothing told yet: every seed first, as it is
            batch = self.seeding.ask()
            if not batch:  # no seed was told (none, or none evaluated): random starts
                X = self.space.sample(self.config.chains, self.rng)
                self.asked = [(-1, x, False) for x in X]
                return [self.space.decode(x) for x in X]
            # a seed the genome cannot encode is evaluated for the archive only (genome None)
            self.asked = [(-1, _genome(self.space, s), False) for s in batch]
            return batch
        if not self.moves.possible:  # no move can change the strategy: done
            return []
        self.asked = []
        for c in range(self.config.chains):
            self._walk_known(c)
            jump, st.restart_start[c] = st.restart_start[c], None
            if jump is not None:
                self.asked.append((c, jump, True))
            start = st.genome[c] if jump is None else jump
            extra = self._extra(c)
            todo = self.config.steps_per_ask - (jump is not None)
            if st.drawn[c] is not None and todo > 0:
                self.asked.append((c, st.drawn[c], False))
                todo -= 1
            st.drawn[c] = None
            self.asked += [(c, self.moves.propose(start, self.rng, st.repairing[c], extra), False)
                           for _ in range(todo)]
        return [self._proposal(c, x) for c, x, _ in self.asked]

    def notes(self) -> list[str]:
        note = self.seeding.note(self.space) if hasattr(self, "seeding") else None
        return [note] if note else []

    def _proposal(self, c: int, y: np.ndarray):
        """The strategy of genome ``y``, a proposal of chain ``c`` (-1: none). When it differs
        from the chain's current strategy only in the device of unsplit groups and in
        priorities, it is derived from that strategy and names it as its parent (the
        evaluator may then patch the parent's task graph, `moplace.simulator.incremental`);
        else it is decoded."""
        parent = self.chain_state.strategy[c] if c >= 0 and self.config.delta else None
        if parent is not None:
            x, G = self.chain_state.genome[c], self.space.n_groups
            moved = x[:G] != y[:G]
            tail = slice(self.space.bucket_gene, None)  # strategy-wide genes: the parent's
            if np.array_equal(x[G:2 * G], y[G:2 * G]) and not np.any(x[G:2 * G][moved]) \
                    and np.array_equal(x[tail], y[tail]):
                s = parent.derive(placement=y[:G].astype(np.int64)[self.moves.group],
                                  priority=y[self.space.priorities])
                return Proposal(s, parent)
        return self.space.decode(y)

    def tell(self, strategies, evaluations) -> None:
        st, costs_of = self.chain_state, self.scalarization.costs
        if self.seeding.active:
            self.seeding.tell(strategies, evaluations)  # the seed batch, in asked order
        told = self.asked[:len(evaluations)]
        self.asked = []
        if not st.started:  # the seed batch: the chains see the seeds they can encode
            kept = [k for k, (_, x, _) in enumerate(told) if x is not None]
            told = [told[k] for k in kept]
            strategies = [strategies[k] for k in kept]
            evaluations = [evaluations[k] for k in kept]
        for (_, x, _), ev in zip(told, evaluations):
            self.known.add(x, ev)
        costs = [costs_of(ev) for ev in evaluations]  # [chains] per evaluation
        for (c, x, _), ev in zip(told, evaluations):  # restart points, runs' wins
            self.restarter.record(c, x, ev)
        # the strategy objects a chain's next proposals may name as their parent
        cfg = self.config
        parents = strategies if cfg.delta else [None] * len(strategies)
        for (_, x, _), cost, ev in zip(told, costs, evaluations):  # best so far per chain
            st.note_best(x, ev, cost)
        if not st.started:
            if told:  # every chain starts from the heuristic best under its weights
                st.start()
            return
        stalled = []  # restarted after the loop: the batch's costs use the weights of now
        for (c, x, jump), cost, ev, parent in zip(told, costs, evaluations, parents):
            if jump:
                st.take(c, x, ev, cost[c], parent)
                continue
            if st.step(c, x, ev, cost[c], parent, cfg.temperature, cfg.restart_after,
                       self.rng) and c not in stalled:
                stalled.append(c)
        for c in stalled:
            self.restart(c)

    # -- chains ----------------------------------------------------------------------------

    def restart(self, c: int) -> None:
        """Restart chain ``c`` (see `Restarts.restart`)."""
        self.restarter.restart(c, self.chain_state, self.scalarization, self.rng)

    def _extra(self, c: int) -> float:
        """Chain ``c``'s probability of one more move per proposal: ``extra_move`` once it
        has gone half of ``restart_after`` proposals without improving, else 0."""
        cfg = self.config
        return cfg.extra_move if 2 * self.chain_state.stalled[c] >= cfg.restart_after else 0.0

    def _walk_known(self, c: int) -> None:
        """Step chain ``c`` through proposals whose genome was evaluated before, answering
        each from memory (the simulator is deterministic, so the chain is the same
        Metropolis-Hastings chain it would be if they were simulated again), until it draws
        one never evaluated (kept in ``drawn[c]``) or has taken ``known_steps`` such steps.
        A restart's strategy that is known is taken from memory as well."""
        st, known, costs_of = self.chain_state, self.known, self.scalarization.costs
        for _ in range(self.config.known_steps):
            jump = st.restart_start[c]
            if jump is not None:
                ev = known.get(jump)
                if ev is None:
                    return
                st.restart_start[c] = None
                st.take(c, jump, ev, costs_of(ev)[c])
                known.taken += 1
                continue
            y = self.moves.propose(st.genome[c], self.rng, st.repairing[c], self._extra(c))
            ev = known.get(y)
            if ev is None:
                st.drawn[c] = y
                return
            known.taken += 1
            if st.step(c, y, ev, costs_of(ev)[c], None, self.config.temperature,
                       self.config.restart_after, self.rng):
                self.restart(c)


def _genome(space, strategy: Strategy) -> np.ndarray | None:
    """The genome of ``strategy``, None when it has none."""
    try:
        return space.encode(strategy)
    except StrategyError:
        return None
