"""MCMC search as in FlexFlow (Jia et al., SysML 2019), with one chain per trade-off.

FlexFlow walks the strategy space with Metropolis-Hastings: from the current strategy it
proposes a random neighbour, simulates it, and accepts it with probability
``min(1, exp(-(cost(new) - cost(current)) / temperature))``; it starts from expert strategies
and restarts from the best one found when the search stalls. This searcher does the same on
moplace's genome, for several objectives:

- **Chains and weights** (`chains`, `weights`). Each chain has its own weight vector (spread
  over the simplex, the first balanced) and minimizes the augmented Chebyshev scalarization
  ``max_k w_k f_k / ref_k + rho * sum_k w_k f_k / ref_k`` of the objectives normalized by the
  hypervolume reference point: Chebyshev reaches non-convex parts of a front, the sum term
  breaks ties towards non-dominated points. An infeasible strategy costs ``penalty * (1 +
  violation / capacity)`` more, so a chain that starts infeasible walks towards feasibility.
  Every evaluated proposal goes to the driver's archive, accepted or not.
- **Start.** The first batch holds every seed (`searchers.seeding`), as it is; each chain
  starts from the seed cheapest under its weights.
- **Moves** (`moves`). One group to another device (often a graph neighbour's: FlexFlow's
  locality move), one group's split option, a swap of two ops' priorities (often adjacent
  in their device's order), or rarely the whole strategy onto a run of devices of another
  length. Kinds that cannot change anything are not drawn. A chain that has gone half of
  ``restart_after`` proposals without improving makes compound moves (``extra_move``):
  they cross strategies that single moves reach only through worse ones.
- **Acceptance**: Metropolis-Hastings at ``temperature`` (in units of the normalized cost);
  moves that change nothing the objectives see are accepted.
- **Restart** (`restarts`). After ``restart_after`` proposals without improving on its best
  since it (re)started, a chain restarts, with new weights (``reweight``), from one of:
  ``best`` (FlexFlow's), ``relabel`` (the best with its devices renamed: mirror images on
  mixed hardware), ``random``, ``repair`` (an undominated infeasible point, with order moves
  only until it fits: peak memory depends on the order) or ``frontier`` (a front point, with
  the weights under which it is Chebyshev-optimal, which random weights rarely hit). Which
  kind is learned by Thompson sampling on how often a kind's run enters the front.
- **Known proposals** (`known`). The simulator is deterministic: a proposal whose genome was
  evaluated before is answered from memory (up to ``known_steps`` per chain and ask), so the
  budget goes to new strategies while the chains stay the chains they would be.
- **Batches.** ``steps_per_ask`` proposals per chain per ask; 1 keeps every chain exact.
- **Delta simulation** (``delta``). A proposal that differs from its chain's strategy only in
  the device of unsplit groups and in priorities is derived from that strategy and names it
  as its parent (`moplace.optimize.searcher.Proposal`); the evaluator then patches the
  parent's task graph instead of building one (`moplace.simulator.incremental`), with the
  same result.

All randomness comes from the driver's rng: same seed, same result. The measurements behind
these choices (temperatures, restart kinds, compound moves, delta speed-ups, fronts against
exact ones) are in ``docs/history/mcmc.md``.

**Layout.** `searcher` holds `McmcSearcher` (settings, ask / tell, the walk through known
proposals), which owns its parts: `chains.Chains` (each chain's state and its
Metropolis-Hastings step) and `chains.Scalarization` (costs under the chains' weights),
`moves.Moves`, `restarts.Restarts` and `known.KnownGenomes`; `weights` gives the first weight
vectors (`spread_weights`).
"""

from .chains import Chains, Scalarization
from .known import KNOWN_LIMIT, KnownGenomes
from .moves import Moves
from .restarts import FRONTIER_FLOOR, RESTARTS, Restarts
from .searcher import McmcSearcher
from .weights import spread_weights

__all__ = ["FRONTIER_FLOOR", "KNOWN_LIMIT", "RESTARTS", "Chains", "KnownGenomes",
           "McmcSearcher", "Moves", "Restarts", "Scalarization", "spread_weights"]
