"""Variation operators over moplace genomes that respect the graph's structure.

The genome (`moplace.core.genome.GenomeSpace`) is ``[device per group (G), split option per group
(G), priority per op (N)]``. The operators here are plain numpy functions over rows of that
genome, plus thin pymoo wrappers (`GroupCrossover`, `StructuredMutation`, `GenomeRepair`) for
`searchers.nsga2`:

With ``coarsen=B`` (`GenomeStructure.of`) the groups are tied into B contiguous blocks of the
topological group order: crossover cuts only between blocks and a neighbour move moves a whole
block, which keeps a generation's moves meaningful when there are thousands of groups.

- `segment_crossover`: two-point crossover along the *topological order of the co-location
  groups*: the child takes a contiguous run of groups (their devices, split options, and the
  priorities of their ops) from the other parent, so contiguous regions of the graph move
  together instead of being shredded gene by gene.
- `mutate`: per child, a few events of each kind: move a group to the device of a group it
  is connected to in the graph; move a contiguous run of groups onto one device (a block
  move, what shifts a pipeline boundary); change a group's split option (often copying a
  neighbour's, so splits spread along the graph); swap the priorities of two ops that are
  graph neighbours or siblings (share a producer, so they compete on a device); jitter a few
  priorities; and, rarely, reset a few genes uniformly.
- a device-set move (`GenomeSpace.random_resize`), rarely: the whole strategy onto a run of
  consecutive devices of another length, splits scaled with it (data parallelism on 8 GPUs
  becomes data parallelism on one server's 4), so plans on fewer devices are reachable; or
  a regular plan there (data or tensor parallelism) with its ZeRO stage and recomputation
  pattern drawn (`moplace.core.windows`); and, rarely, such a regular plan on the devices the
  genome uses, as the child's only change (so it is evaluated as drawn);
- `repair`: integer genes rounded and clipped to their bounds, priorities clipped to [0, 1],
  so every child decodes to a valid strategy (`GenomeSpace.decode` is exact on such rows).

`GenomeStructure` precomputes what they need (group order, group and op adjacency) once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moplace.core.baselines import group_order
from moplace.core.genome import (GenomeSpace, sample_genomes, sparse_micro_batches,
                                 sparse_recompute)


def _csr_undirected(a: np.ndarray, b: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (ptr, idx) of the undirected simple graph with edges a-b over n nodes (no loops)."""
    keep = a != b
    u = np.concatenate([a[keep], b[keep]])
    v = np.concatenate([b[keep], a[keep]])
    if u.size:
        pairs = np.unique(np.stack([u, v], axis=1), axis=0)
        u, v = pairs[:, 0], pairs[:, 1]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=ptr[1:])
    return ptr, v.astype(np.int64)


def _csr_directed(keys: np.ndarray, vals: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr, vals[order].astype(np.int64)


@dataclass(eq=False)
class GenomeStructure:
    """What the operators need to know about a genome space, computed once."""

    G: int                     # co-location groups
    N: int                     # ops
    D: int                     # devices
    lo: np.ndarray             # gene bounds
    hi: np.ndarray
    n_options: np.ndarray      # [G] split options per group (>= 1, option 0 = no split)
    options: tuple             # GenomeSpace.options
    order: np.ndarray          # [G] groups in topological order
    op_pos: np.ndarray         # [N] topological position of each op's group
    gptr: np.ndarray           # group adjacency (undirected CSR)
    gadj: np.ndarray
    optr: np.ndarray           # op adjacency (undirected CSR)
    oadj: np.ndarray
    pred_ptr: np.ndarray       # op predecessors / successors (CSR)
    preds: np.ndarray
    succ_ptr: np.ndarray
    succs: np.ndarray
    starts: np.ndarray         # [B+1] block boundaries in topological group order
    space: GenomeSpace | None = None  # for device-set moves (`GenomeSpace.random_resize`)
    #: the recompute genes of the granularities practitioners use, where the graph names them
    #: (`moplace.core.recompute`: each layer checkpointed, the attention cores alone)
    recompute_patterns: tuple = ()

    @classmethod
    def of(cls, space: GenomeSpace, coarsen: int | None = None) -> "GenomeStructure":
        """The structure of ``space``; ``coarsen=B`` ties the groups into B contiguous blocks
        (in topological order) for crossover cuts and device moves."""
        graph = space.graph
        arr = graph.arrays
        G, N = space.n_groups, space.n_ops
        lo, hi = space.bounds
        order = group_order(graph).astype(np.int64) if G else np.zeros(0, np.int64)
        pos = np.empty(G, np.int64)
        pos[order] = np.arange(G)
        src, dst = np.asarray(arr.src, np.int64), np.asarray(arr.dst, np.int64)
        gptr, gadj = _csr_undirected(arr.group[src], arr.group[dst], G)
        optr, oadj = _csr_undirected(src, dst, N)
        pred_ptr, preds = _csr_directed(dst, src, N)
        succ_ptr, succs = _csr_directed(src, dst, N)
        B = G if coarsen is None else max(1, min(int(coarsen), G))
        starts = np.unique(np.arange(B + 1) * G // max(B, 1)) if G else np.zeros(1, np.int64)
        return cls(G=G, N=N, D=space.n_devices, lo=lo, hi=hi,
                   n_options=np.array([len(o) for o in space.options], np.int64),
                   options=space.options, order=order,
                   op_pos=pos[np.asarray(arr.group, np.int64)] if N else np.zeros(0, np.int64),
                   gptr=gptr, gadj=gadj, optr=optr, oadj=oadj,
                   pred_ptr=pred_ptr, preds=preds, succ_ptr=succ_ptr, succs=succs,
                   starts=starts.astype(np.int64), space=space,
                   recompute_patterns=space.recompute_patterns)

    @property
    def size(self) -> int:
        return self.lo.size


# ---------------------------------------------------------------------------------------------
# repair


def repair(s: GenomeStructure, X: np.ndarray) -> np.ndarray:
    """Rows of ``X`` made valid (in place when ``X`` is a float array): integer genes rounded
    and clipped to their bounds, priorities clipped to [0, 1], ZeRO-3 with micro-batches
    made the ZeRO-1 it runs as (`GenomeSpace.one_decoding`)."""
    X = np.asarray(X, dtype=np.float64).reshape(-1, s.size)
    k, p = 2 * s.G, slice(2 * s.G, 2 * s.G + s.N)
    X[:, :k] = np.clip(np.rint(X[:, :k]), s.lo[:k], s.hi[:k])
    X[:, p] = np.clip(np.nan_to_num(X[:, p], nan=0.5), 0.0, 1.0)
    X[:, p.stop:] = np.clip(np.rint(np.nan_to_num(X[:, p.stop:])), s.lo[p.stop:], s.hi[p.stop:])
    if s.space is not None:
        s.space.one_decoding(X)
    return X


def normalized_priority(priority: np.ndarray) -> np.ndarray:
    """Priorities mapped into [0, 1] by dense rank: same order and same ties, so the decoded
    strategy schedules exactly as the original."""
    p = np.asarray(priority, np.float64)
    if p.size == 0:
        return p.copy()
    values, inverse = np.unique(p, return_inverse=True)
    if values.size == 1:
        return np.full(p.size, 0.5)
    return inverse.astype(np.float64) / (values.size - 1)


def random_genomes(s: GenomeStructure, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` genomes uniform over the space (integer genes uniform over their values), the
    recompute genes sparse (`sparse_recompute`) and half of them on one micro-batch
    (`sparse_micro_batches`)."""
    ints = np.ones(s.size, bool)
    ints[2 * s.G:2 * s.G + s.N] = False
    X = sample_genomes(s.lo, s.hi, ints, n, rng)
    P = 2 * s.G + s.N
    return sparse_micro_batches(sparse_recompute(X, slice(P + 4, s.size), rng), P + 2,
                                int(s.hi[P + 2]) + 1, rng)


# ---------------------------------------------------------------------------------------------
# crossover


def segment_crossover(s: GenomeStructure, a: np.ndarray, b: np.ndarray,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two children of parents ``a`` and ``b`` (1-D genomes): two-point crossover on the
    topological group order; a run of groups keeps its devices, splits and op priorities."""
    c, d = a.copy(), b.copy()
    if s.G == 0:
        return c, d
    i, j = s.starts[np.sort(rng.choice(s.starts.size, size=2, replace=False))]
    groups = s.order[i:j]
    for off in (0, s.G):
        c[off + groups], d[off + groups] = b[off + groups], a[off + groups]
    ops = np.flatnonzero((s.op_pos >= i) & (s.op_pos < j))
    c[2 * s.G + ops], d[2 * s.G + ops] = b[2 * s.G + ops], a[2 * s.G + ops]
    tail = slice(2 * s.G + s.N, None)  # strategy-wide genes: each child takes one parent's
    if rng.random() < 0.5:
        c[tail], d[tail] = b[tail], a[tail]
    return c, d


# ---------------------------------------------------------------------------------------------
# mutation


@dataclass(frozen=True)
class MutationRates:
    """Expected number of events of each kind per child (Poisson), or probabilities."""

    moves: float = 1.5          # group -> device of a graph-neighbour group
    block: float = 0.15         # probability of a block move (contiguous run -> one device)
    splits: float = 0.6         # split-option changes
    copy_split: float = 0.5     # probability a split change copies a neighbour's option
    swaps: float = 2.0          # priority swaps of neighbour / sibling ops
    jitter: float = 0.2         # probability of Gaussian priority jitter on ~10% of ops
    jitter_sigma: float = 0.05
    reset: float = 0.1          # probability of resetting a few random genes uniformly
    devices: float = 0.05       # probability of a device-set move (shrink or grow the run of
    #                             devices the whole strategy uses, splits scaled with it)
    bucket: float = 0.1         # probability of another gradient bucket size
    zero: float = 0.05          # probability of another ZeRO stage
    regular: float = 0.08       # probability of a regular plan on the devices the genome uses
    #                             (data or tensor parallelism, its ZeRO stage and
    #                             recomputation drawn: `GenomeSpace.random_regular`), as the
    #                             child's only change
    micro_batches: float = 0.1  # probability of the next micro-batch count up or down
    schedule: float = 0.05      # probability of the other pipeline schedule
    recompute: float = 0.5      # recompute-gene changes: one group flipped, or a run of
    #                             groups (in the order of their first ops) set alike
    recompute_pattern: float = 0.05  # probability of every recompute gene set to a pattern
    #                             practitioners use (each layer checkpointed, attention cores
    #                             only) or all off, on graphs that name layers or cores


def mutate(s: GenomeStructure, x: np.ndarray, rng: np.random.Generator,
           rates: MutationRates = MutationRates()) -> np.ndarray:
    """A mutated copy of genome ``x`` (not yet repaired: call `repair`)."""
    y = np.array(x, dtype=np.float64)
    G, N, P = s.G, s.N, 2 * s.G
    if G == 0:
        return y
    if s.D >= GenomeSpace.RESIZE_MIN_DEVICES and s.space is not None:  # whole-plan moves
        if rng.random() < rates.devices:
            y = s.space.random_resize(y, rng)
        if rng.random() < rates.regular:  # the child's only change: it lands as drawn
            return s.space.random_regular(y, rng, *s.space.device_window(y), plain=0.0)
    dev = y[:G]  # views into y
    opt = y[G:P]
    prio = y[P:P + N]
    if s.D > 1:
        n_blocks = s.starts.size - 1
        for _ in range(rng.poisson(rates.moves)):
            k = int(rng.integers(n_blocks))
            block = s.order[s.starts[k]:s.starts[k + 1]]
            g = int(block[rng.integers(block.size)])
            lo, hi = s.gptr[g], s.gptr[g + 1]
            if hi > lo:
                h = int(s.gadj[rng.integers(lo, hi)])
                dev[block] = dev[h]
            else:
                dev[block] = rng.integers(s.D)
        if rng.random() < rates.block:
            i = int(rng.integers(G))
            length = 1 + int(rng.geometric(min(1.0, s.D / G)))
            run = s.order[i:i + length]
            if rng.random() < 0.5 and i > 0:
                dev[run] = dev[s.order[i - 1]]  # extend the preceding block
            else:
                dev[run] = rng.integers(s.D)
    splittable = np.flatnonzero(s.n_options > 1)
    if splittable.size:
        for _ in range(rng.poisson(rates.splits)):
            g = int(splittable[rng.integers(splittable.size)])
            lo, hi = s.gptr[g], s.gptr[g + 1]
            if hi > lo and rng.random() < rates.copy_split:
                h = int(s.gadj[rng.integers(lo, hi)])
                choice = s.options[h][int(opt[h])]
                if choice in s.options[g]:
                    opt[g] = s.options[g].index(choice)
                    continue
            opt[g] = rng.integers(s.n_options[g])
    if N > 1:
        for _ in range(rng.poisson(rates.swaps)):
            u = int(rng.integers(N))
            v = _partner(s, u, rng)
            if v >= 0:
                prio[u], prio[v] = prio[v], prio[u]
        if rng.random() < rates.jitter:
            mask = rng.random(N) < 0.1
            prio[mask] += rng.normal(0.0, rates.jitter_sigma, size=int(mask.sum()))
    if y.size > P + N and s.hi[P + N] > 0 and rng.random() < rates.bucket:
        y[P + N] = rng.integers(int(s.hi[P + N]) + 1)
    if y.size > P + N + 1 and s.hi[P + N + 1] > 0 and rng.random() < rates.zero:
        y[P + N + 1] = rng.integers(int(s.hi[P + N + 1]) + 1)
    if y.size > P + N + 2 and s.hi[P + N + 2] > 0 and rng.random() < rates.micro_batches:
        y[P + N + 2] = np.clip(np.rint(y[P + N + 2]) + rng.choice((-1, 1)), 0, s.hi[P + N + 2])
    if y.size > P + N + 3 and s.hi[P + N + 3] > 0 and rng.random() < rates.schedule:
        y[P + N + 3] = 1.0 - np.rint(y[P + N + 3])
    rec = y[P + N + 4:]  # the recompute genes (a view; `GenomeSpace`'s layout)
    if rec.size and s.recompute_patterns and rng.random() < rates.recompute_pattern:
        k = int(rng.integers(len(s.recompute_patterns) + 1))
        rec[:] = s.recompute_patterns[k] if k < len(s.recompute_patterns) else 0.0
    if rec.size:
        for _ in range(rng.poisson(rates.recompute)):
            i = int(rng.integers(rec.size))
            if rng.random() < 0.5:
                rec[i] = 1.0 - np.rint(rec[i])
            else:
                rec[i:i + 1 + int(rng.geometric(0.2))] = float(rng.integers(2))
    if rng.random() < rates.reset:
        genes = rng.integers(y.size, size=1 + rng.integers(3))
        for k in genes:
            if k < P or k >= P + N:
                y[k] = rng.integers(int(s.lo[k]), int(s.hi[k]) + 1)
            else:
                y[k] = rng.random()
    return y


def _partner(s: GenomeStructure, u: int, rng: np.random.Generator) -> int:
    """A graph neighbour of op ``u`` or (half the time) a sibling: another consumer of one of
    its producers, which competes with it for its device. -1 when it has neither."""
    if rng.random() < 0.5:
        lo, hi = s.pred_ptr[u], s.pred_ptr[u + 1]
        if hi > lo:
            p = int(s.preds[rng.integers(lo, hi)])
            slo, shi = s.succ_ptr[p], s.succ_ptr[p + 1]
            if shi - slo > 1:
                v = int(s.succs[rng.integers(slo, shi)])
                if v != u:
                    return v
    lo, hi = s.optr[u], s.optr[u + 1]
    return int(s.oadj[rng.integers(lo, hi)]) if hi > lo else -1


# ---------------------------------------------------------------------------------------------
# pymoo wrappers (pymoo is imported here only; this module is imported by searchers.nsga2)

from pymoo.core.crossover import Crossover  # noqa: E402
from pymoo.core.mutation import Mutation  # noqa: E402
from pymoo.core.repair import Repair  # noqa: E402
from pymoo.core.duplicate import DuplicateElimination  # noqa: E402


class GroupCrossover(Crossover):
    """pymoo crossover (2 parents -> 2 children) running `segment_crossover`."""

    def __init__(self, structure: GenomeStructure, prob: float = 0.9):
        super().__init__(2, 2, prob=prob)
        self.s = structure

    def _do(self, problem, X, *args, random_state=None, **kwargs):
        _, n_matings, _ = X.shape
        Y = np.empty_like(X, dtype=np.float64)
        for k in range(n_matings):
            Y[0, k], Y[1, k] = segment_crossover(self.s, X[0, k], X[1, k], random_state)
        return Y


class StructuredMutation(Mutation):
    """pymoo mutation running `mutate` on every child, then `repair`."""

    def __init__(self, structure: GenomeStructure, rates: MutationRates = MutationRates()):
        super().__init__(prob=1.0)
        self.s, self.rates = structure, rates

    def _do(self, problem, X, *args, random_state=None, **kwargs):
        Y = np.array([mutate(self.s, x, random_state, self.rates) for x in X], dtype=np.float64)
        return repair(self.s, Y.reshape(len(X), self.s.size))


class GenomeRepair(Repair):
    """pymoo repair running `repair` (round and clip integer genes, clip priorities)."""

    def __init__(self, structure: GenomeStructure):
        super().__init__()
        self.s = structure

    def _do(self, problem, X, **kwargs):
        return repair(self.s, np.array(X, dtype=np.float64))


class ExactDuplicates(DuplicateElimination):
    """pymoo's duplicate test (a genome equal to another, or to one of the population) by
    hashing each genome's genes once, instead of pymoo's default matrix of Euclidean distances
    between every offspring and every member (a duplicate: distance <= 1e-16). The same genomes
    are duplicates unless two differ by less than 1e-16 in all, which the rounded device and
    split genes and the clipped priorities do not produce. On 10,000 ops (about 30,000 genes)
    the distance matrix took 62 ms a generation."""

    def _do(self, pop, other, is_duplicate):
        seen = set() if other is None else {genome_key(x) for x in other.get("X")}
        for i, x in enumerate(pop.get("X")):
            key = genome_key(x)
            if key in seen:
                is_duplicate[i] = True
            else:
                seen.add(key)
        return is_duplicate


def genome_key(x) -> bytes:
    """A genome's genes as bytes: equal for equal genomes (a dict or set key)."""
    return (np.asarray(x, np.float64) + 0.0).tobytes()  # + 0.0: -0.0 and 0.0 are equal genes
