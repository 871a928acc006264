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
- **Start.** The first batch holds every seed (`searchers.seeding`: each candidate of DPOS,
  HEFT and m-ETF, the baselines on the whole cluster and on device subsets), as they are, so
  the archive holds them all. Each chain starts from the seed the genome encodes that is
  cheapest under its own weights.
- **Moves.** A proposal makes one move: move ONE co-location group to another device (with
  probability ``neighbour_prob`` to the device of a graph-neighbour group on another device,
  FlexFlow's locality move, else to a uniformly random other device); change ONE group's
  split option; or swap the priorities of two ops on the same device, where the order
  matters (with probability ``adjacent_prob`` the op next to it in that device's order, else
  any; two ops anywhere when the op is alone on its device); or, rarely, move the whole
  strategy onto a run of consecutive devices of another length, splits scaled with it
  (`GenomeSpace.random_resize`: data parallelism on 8 GPUs becomes data parallelism on one
  server's 4, so plans on fewer devices are reachable). Move kinds that cannot change
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
- **Delta simulation** (``delta=True``). A proposal that differs from its chain's current
  strategy only in the device of unsplit groups and in priorities is derived from that
  strategy (splits shared) and simulated on its task graph patched in place
  (`moplace.simulator.delta`): exactly the full simulation, array for array, without decoding,
  validating splits or building the task graph again. Proposals that change a split or move
  a split group, and strategies without any split (whose task graph is cheaper to build than
  to patch), are simulated in full. On the PipeDream graphs on 4 and 8 V100s
  (`experiments/bench_delta.py`, 22 cases) a patched evaluation is 2.2-6.8x faster than a full
  one; over a whole search (2000 evaluations) 23-46% of the proposals are patched and the
  search is 1.15-1.41x faster (median 1.22), with the same front in every case.

**Against exact fronts** (`moplace.optimize.tiny`, 20 instances, 2000 evaluations, seed 0):
all 20 reach 99% of the exact hypervolume, the lowest 99.5%, median 100%. Over 3 instance sets x 3
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

All randomness comes from the driver's rng: same seed, same result.

**Layout.** `searcher` holds `McmcSearcher` (settings, setup, ask / tell and the chains'
Metropolis-Hastings steps); `moves` the proposals (`MovesMixin`); `restarts` the restart
kinds, the Pareto sets they start from and the Thompson sampling among them (`RestartMixin`);
`known` the memory of evaluated genomes and the walk through known proposals (`KnownMixin`);
`weights` the chains' first weight vectors (`spread_weights`).
"""

from .known import KNOWN_LIMIT, KnownMixin
from .moves import MovesMixin
from .restarts import FRONTIER_FLOOR, RESTARTS, RestartMixin
from .searcher import McmcSearcher
from .weights import spread_weights

__all__ = ["FRONTIER_FLOOR", "KNOWN_LIMIT", "RESTARTS", "KnownMixin", "McmcSearcher",
           "MovesMixin", "RestartMixin", "spread_weights"]
