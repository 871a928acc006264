"""The settings of the MCMC searcher (see the package docstring for what each one does)."""

from __future__ import annotations

from dataclasses import dataclass

from moplace.errors import MoplaceError
from moplace.optimize.settings import Settings, setting

from .restarts import RESTARTS


@dataclass(frozen=True)
class McmcSettings(Settings):
    chains: int = setting(4, "number of chains, each with its own weight vector (spread over "
                          "the simplex, the first balanced)", low=1)
    steps_per_ask: int = setting(1, "proposals per chain in each batch, all drawn from the "
                                 "chain's state at ask time; 1 keeps every chain an exact "
                                 "Metropolis-Hastings chain, more trade that for larger batches",
                                 low=1)
    temperature: float = setting(0.001, "Metropolis temperature, in units of the normalized "
                                 "cost: a worsening of that much is accepted with probability "
                                 "1/e", low=0, low_open=True)
    restart_after: int = setting(30, "a chain restarts after this many proposals in a row that "
                                 "did not improve on its best cost since it (re)started; after "
                                 "half as many it makes compound moves (see extra_move)", low=1)
    neighbour_prob: float = setting(0.5, "probability that a device move puts the group on the "
                                    "device of a graph-neighbour group (FlexFlow's locality "
                                    "move) rather than on a random other device", low=0, high=1)
    rho: float = setting(0.05, "weight of the sum term of the augmented Chebyshev "
                         "scalarization (rho * sum_k w_k f_k / ref_k), which breaks ties "
                         "towards non-dominated points")
    penalty: float = setting(10.0, "cost added to an infeasible strategy's scalarized cost, "
                             "times 1 + violation / the largest device memory (bytes), so that "
                             "it costs more than a feasible one with the same objectives")
    move_weights: tuple[float, ...] = setting(
        (0.4, 0.3, 0.3, 0.03), "relative odds of the four move kinds (device, split, priority, "
        "device set: the whole strategy onto a run of devices of another length, splits "
        "scaled with it), with a positive sum (three numbers: no device-set moves); kinds "
        "that cannot change anything are not drawn", low=0, length=(3, 4))
    restarts: tuple[str, ...] = setting(
        RESTARTS, "the kinds of restart a stalled chain may take; which one is learned by "
        "Thompson sampling", choices=RESTARTS, length=(1, len(RESTARTS)))
    reweight: bool = setting(True, "on each restart give the chain a new weight vector "
                             "(uniform on the simplex, or the weights of the front or repair "
                             "point it restarts from); false keeps each chain's weights")
    adjacent_prob: float = setting(0.5, "probability that a priority swap takes the op next in "
                                   "its device's order, else any op on the same device",
                                   low=0, high=1)
    extra_move: float = setting(0.6, "probability of one more move per proposal (and again for "
                                "each extra one) once a chain has gone half of restart_after "
                                "proposals without improving; 0 turns compound moves off",
                                low=0, high=1, high_open=True)
    known_steps: int = setting(200, "most proposals per chain and ask answered from memory "
                               "when their genome was evaluated before, instead of simulated; "
                               "0 turns it off", low=0)
    delta: bool = setting(True, "name a proposal's chain strategy as its parent when it differs "
                          "from it only in the device of unsplit groups and in priorities, so "
                          "that the evaluator patches the parent's task graph (same result, "
                          "faster)")
    seed_subsets: bool = setting(True, "include the baselines on device subsets among the "
                                 "seeds (every chain starts from the best seed under its "
                                 "weights; see searchers.seeding)")
    seed_baselines: bool = setting(True, "include the baselines (data, tensor and sharded "
                                   "data parallelism...) among the seeds; false: the list "
                                   "schedulers' plans and the single-device ones only")

    def check(self) -> None:
        if sum(self.move_weights) <= 0:
            raise MoplaceError("move_weights must be three or four non-negative numbers "
                               "(device, split, priority, device set) with a positive sum")
        # the kinds in RESTARTS order, each once
        object.__setattr__(self, "restarts", tuple(r for r in RESTARTS if r in self.restarts))
