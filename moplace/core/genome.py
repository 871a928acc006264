"""A flat numeric encoding of strategies for the searchers (vectors in, strategies out).

Layout for G co-location groups and N ops on D devices::

    [ device of group g      (G genes, integers 0..D-1)
      split option of group g (G genes, integers 0..len(options[g])-1)
      priority of op i        (N genes, real)
      gradient bucket size    (1 gene, integer 0..len(bucket_choices)-1)
      ZeRO stage              (1 gene, integer 0..len(zero_choices)-1)
      micro-batches           (1 gene, integer 0..len(micro_batch_choices)-1)
      pipeline schedule       (1 gene, 0 or 1: `SCHEDULES`)
      recompute group r?      (R genes, 0 or 1: one per group of recompute_heads) ]

Split option 0 is "no split"; the others are (dimension, parts) pairs allowed for every op of
the group, with part k on device ``(device + k) mod D``. The strategy-wide genes come last:
the bucket gene picks one of `BUCKET_CHOICES` (only 0 when no gradient can be all-reduced:
one device, or no batch-splittable op with a weight gradient), the ZeRO gene one of
`ZERO_CHOICES` (only 0 there too, and where no update can be sharded: `shards_updates`), the
micro-batch gene one of `MICRO_BATCH_CHOICES` and the schedule gene 1F1B or GPipe (only 1 and
1F1B for a graph without forward or backward ops, which micro-batches leave alone); a
recompute gene says whether the r-th group that can be recomputed (`recomputable_heads`) is.
`decode` is exact: integer genes are rounded and clipped, priorities taken as they are, and
``encode(decode(x)) == x`` for any integer-valued x within bounds, but for ZeRO-3 with
micro-batches, which runs as ZeRO-1 (`one_decoding`). ``space.priorities`` is
the slice of the priorities, ``space.recompute_genes`` that of the recompute genes.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from ..arrays import segment_ranks
from ..errors import StrategyError
from .graph import ROLES, SPLIT_DIMS, OpGraph
from .recompute import recomputable_heads
from .baselines import reduces_gradients, shards_updates
from .strategy import SCHEDULES, Split, SplitTable, Strategy
from .windows import WindowMoves

#: the gradient bucket sizes the genome chooses among: each gradient alone, and 1, 5, 25
#: (DDP's default) and 100 MiB
BUCKET_CHOICES = (0.0, float(2**20), float(5 * 2**20), float(25 * 2**20), float(100 * 2**20))
#: the ZeRO stages the genome chooses among (stage 2 runs as stage 1 in the simulator:
#: `moplace.core.strategy`)
ZERO_CHOICES = (0.0, 1.0, 3.0)
#: the micro-batch counts the genome chooses among (a ZeRO-3 genome with more than one runs
#: as ZeRO-1: `decode`)
MICRO_BATCH_CHOICES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


class GenomeSpace(WindowMoves):
    """Encoding of strategies for ``graph`` on ``n_devices`` devices."""

    def __init__(self, graph: OpGraph, n_devices: int, *, max_parts: int | None = None):
        self.graph, self.n_devices = graph, int(n_devices)
        self.n_groups, self.n_ops = graph.arrays.n_groups, len(graph.ops)
        top = min(max_parts or self.n_devices, self.n_devices)
        self.options: tuple[tuple[tuple[str, int] | None, ...], ...] = tuple(
            (None,) + tuple((d, n) for d in _common_dims(graph, m) for n in range(2, top + 1))
            for m in graph.groups)
        # the options as tables [group, option]: parts (1: no split) and dimension code
        width = max((len(o) for o in self.options), default=1)
        self._n_options = np.array([len(o) for o in self.options], np.int64)
        self._parts = np.ones((self.n_groups, width), np.int64)
        self._dims = np.full((self.n_groups, width), -1, np.int64)
        for g, opts in enumerate(self.options):
            for k, (dim, parts) in enumerate(opts[1:], start=1):
                self._parts[g, k], self._dims[g, k] = parts, SPLIT_DIMS.index(dim)
        #: the bucket sizes the bucket gene picks among, and the ZeRO stages the ZeRO gene does
        reduces = self.n_devices > 1 and reduces_gradients(graph)
        self.bucket_choices: tuple[float, ...] = BUCKET_CHOICES if reduces else (0.0,)
        self.zero_choices: tuple[float, ...] = (
            ZERO_CHOICES if reduces and shards_updates(graph) else (0.0,))
        #: the priorities' genes
        self.priorities = slice(2 * self.n_groups, 2 * self.n_groups + self.n_ops)
        #: the bucket gene's index
        self.bucket_gene = 2 * self.n_groups + self.n_ops
        self.zero_gene = self.bucket_gene + 1
        #: the micro-batch counts the micro-batch gene picks among, and the genes of the
        #: micro-batches and of the schedule
        role = graph.arrays.role
        batched = bool(np.any(role[:, None] == [ROLES.index("forward"), ROLES.index("backward")]))
        self.micro_batch_choices: tuple[float, ...] = MICRO_BATCH_CHOICES if batched else (1.0,)
        # 1F1B and GPipe: the schedules of fixed per-rank actions (interleaved, zero-bubble)
        # need stages laid round-robin, which a per-op placement rarely is; regular plans
        # (`moplace.core.degrees`, the pipeline partitioner) search them
        self.schedule_choices = SCHEDULES[:2] if batched else SCHEDULES[:1]
        self.micro_batch_gene = self.zero_gene + 1
        self.schedule_gene = self.zero_gene + 2
        #: the groups a recompute gene stands for (by first op), and those genes
        self.recompute_heads = recomputable_heads(graph)
        self.recompute_genes = slice(self.schedule_gene + 1,
                                     self.schedule_gene + 1 + self.recompute_heads.size)
        #: genes after the priorities (strategy-wide: the bucket size, the ZeRO stage, the
        #: micro-batches and the schedule; the recompute genes)
        self.n_tail = 4 + self.recompute_heads.size
        #: the strategy-wide genes with a choice (the bucket, the ZeRO stage, the
        #: micro-batches, the schedule, the recompute genes, in that order), and how many
        #: values each takes (`other_lever_value`)
        wide = [(g, len(c)) for g, c in ((self.bucket_gene, self.bucket_choices),
                                         (self.zero_gene, self.zero_choices),
                                         (self.micro_batch_gene, self.micro_batch_choices),
                                         (self.schedule_gene, self.schedule_choices))
                if len(c) > 1]
        self.lever_genes = np.array([g for g, _ in wide] + list(range(
            self.recompute_genes.start, self.recompute_genes.stop)), np.int64)
        self.lever_values = np.array([n for _, n in wide] + [2] * self.recompute_heads.size,
                                     np.int64)

    @property
    def size(self) -> int:
        return 2 * self.n_groups + self.n_ops + self.n_tail

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds per gene (priorities in [0, 1])."""
        lo = np.zeros(self.size)
        hi = np.concatenate([np.full(self.n_groups, self.n_devices - 1.0),
                             [len(o) - 1.0 for o in self.options], np.ones(self.n_ops),
                             [len(self.bucket_choices) - 1.0, len(self.zero_choices) - 1.0,
                              len(self.micro_batch_choices) - 1.0,
                              len(self.schedule_choices) - 1.0],
                             np.ones(self.recompute_heads.size)])
        return lo, hi

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` genomes [n, size] drawn uniformly (see `sample_genomes`), but for the
        recompute genes (`sparse_recompute`) and the micro-batch gene (`sparse_micro_batches`)."""
        lo, hi = self.bounds
        X = sparse_recompute(sample_genomes(lo, hi, self.integer_mask, n, rng),
                             self.recompute_genes, rng)
        return sparse_micro_batches(X, self.micro_batch_gene, len(self.micro_batch_choices), rng)

    @property
    def integer_mask(self) -> np.ndarray:
        """True for the integer genes (devices, split options, and every strategy-wide and
        recompute gene)."""
        k = np.arange(self.size)
        return (k < 2 * self.n_groups) | (k >= self.bucket_gene)

    def decode(self, x) -> Strategy:
        """The strategy genome ``x`` stands for."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self.size,):
            raise StrategyError(f"genome has {x.size} genes, expected {self.size}")
        G, D = self.n_groups, self.n_devices
        device = np.clip(np.rint(x[:G]), 0, D - 1).astype(np.int64)
        option = np.clip(np.rint(x[G:2 * G]), 0, self._n_options - 1).astype(np.int64)
        group = self.graph.arrays.group
        bucket = int(np.clip(np.rint(x[self.bucket_gene]), 0, len(self.bucket_choices) - 1))
        zero = self.zero_choices[int(np.clip(np.rint(x[self.zero_gene]), 0,
                                             len(self.zero_choices) - 1))]
        m = self.micro_batch_choices[int(np.clip(np.rint(x[self.micro_batch_gene]), 0,
                                                 len(self.micro_batch_choices) - 1))]
        schedule = float(np.clip(np.rint(x[self.schedule_gene]), 0,
                                 len(self.schedule_choices) - 1))
        recompute = self.recompute_heads[np.rint(x[self.recompute_genes]) >= 1]
        strategy = Strategy(device[group], x[self.priorities],
                            bucket_bytes=self.bucket_choices[bucket],
                            zero_stage=1.0 if zero == 3 and m > 1 else zero,
                            micro_batches=m, schedule=schedule, recompute=recompute)
        if not option.any():
            return strategy
        # every op of a split group gets its group's split; the split table is made here
        # from the option tables instead of from the Split objects (same table, much faster)
        ops = np.flatnonzero(option[group] > 0)
        g_of = group[ops]
        parts, dims = self._parts[g_of, option[g_of]], self._dims[g_of, option[g_of]]
        first = device[g_of]
        devices = (np.repeat(first, parts) + segment_ranks(parts)) % D
        key = (dims * (D + 1) + parts) * D + first  # equal for equal splits
        _, where, inverse = np.unique(key, return_index=True, return_inverse=True)
        signature = np.argsort(np.argsort(where))[inverse.ravel()]  # ids by first appearance
        distinct = []  # one Split per distinct split, in the order of the signature's ids
        for g in g_of[np.sort(where)].tolist():
            dim, n = self.options[g][option[g]]
            distinct.append(Split(dim, tuple(((device[g] + np.arange(n)) % D).tolist())))
        strategy.splits = MappingProxyType(dict(zip(ops.tolist(),
                                                    map(distinct.__getitem__, signature.tolist()))))
        strategy.__dict__["split_table"] = SplitTable(ops=ops, parts=parts, dims=dims,
                                                      devices=devices, signature=signature)
        return strategy

    def encode(self, strategy: Strategy) -> np.ndarray:
        """The genome of ``strategy``; `StrategyError` if it has no genome (e.g. parts not on
        consecutive devices)."""
        strategy.validate(self.graph, self.n_devices)
        G = self.n_groups
        x = np.empty(self.size)
        for g, members in enumerate(self.graph.groups):
            head = members[0]
            x[g] = strategy.placement[head]
            x[G + g] = self._option_index(g, strategy.splits.get(head), int(strategy.placement[head]))
        x[self.priorities] = strategy.priority
        if strategy.bucket_bytes not in self.bucket_choices:
            raise StrategyError(f"bucket size {strategy.bucket_bytes:.0f} bytes has no genome: "
                                "the genome's sizes are "
                                + ", ".join(f"{b:.0f}" for b in self.bucket_choices))
        x[self.bucket_gene] = self.bucket_choices.index(strategy.bucket_bytes)
        if strategy.zero_stage not in self.zero_choices:
            raise StrategyError(f"ZeRO stage {strategy.zero_stage:g} has no genome: the "
                                "genome's stages are "
                                + ", ".join(f"{z:g}" for z in self.zero_choices))
        x[self.zero_gene] = self.zero_choices.index(strategy.zero_stage)
        if strategy.micro_batches not in self.micro_batch_choices:
            raise StrategyError(f"{strategy.micro_batches:g} micro-batches have no genome: the "
                                "genome's counts are "
                                + ", ".join(f"{m:g}" for m in self.micro_batch_choices))
        x[self.micro_batch_gene] = self.micro_batch_choices.index(strategy.micro_batches)
        if strategy.schedule >= len(self.schedule_choices):
            why = ("the per-op genome holds 1F1B and GPipe only" if len(self.schedule_choices) > 1
                   else "the graph has no forward or backward op to micro-batch")
            raise StrategyError(f"schedule {strategy.schedule_name} has no genome: {why}")
        x[self.schedule_gene] = strategy.schedule
        x[self.recompute_genes] = np.isin(self.recompute_heads, strategy.recompute)
        return x

    def one_decoding(self, X: np.ndarray) -> np.ndarray:
        """Rows of ``X`` (integer genes already rounded) with the ZeRO gene of a genome that
        asks for ZeRO-3 with micro-batches set to ZeRO-1, which `decode` makes of it (so that
        ``encode(decode(x)) == x`` holds for the rows); in place, and returned."""
        if 3.0 in self.zero_choices:
            z = self.zero_choices.index(3.0)
            both = (X[:, self.zero_gene] == z) & (X[:, self.micro_batch_gene] > 0)
            X[both, self.zero_gene] = self.zero_choices.index(1.0)
        return X

    def other_lever_value(self, y: np.ndarray, k: int, rng: np.random.Generator) -> None:
        """Set lever gene ``lever_genes[k]`` of genome ``y`` to another of its values, drawn
        uniformly (a recompute gene flips)."""
        gene, n = int(self.lever_genes[k]), int(self.lever_values[k])
        y[gene] = (int(round(y[gene])) + 1 + int(rng.integers(n - 1))) % n

    def _option_index(self, g: int, split: Split | None, device: int) -> int:
        if split is None:
            return 0
        want = tuple((device + k) % self.n_devices for k in range(split.parts))
        key = (split.dim, split.parts)
        if split.devices != want or key not in self.options[g]:
            name = self.graph.ops[self.graph.groups[g][0]].name
            raise StrategyError(f"split of op {name!r} ({split.dim}, devices {split.devices}) "
                                "has no genome: parts must sit on consecutive devices")
        return self.options[g].index(key)


def sample_genomes(lo: np.ndarray, hi: np.ndarray, integer: np.ndarray, n: int,
                   rng: np.random.Generator) -> np.ndarray:
    """``n`` genomes [n, len(lo)] uniform within the bounds; the genes where ``integer`` is
    True (devices, split options, the bucket, ZeRO and recompute genes) uniform over their
    integer values."""
    X = rng.uniform(lo, hi, size=(n, lo.size))
    k = np.flatnonzero(integer)
    X[:, k] = rng.integers(lo[k].astype(np.int64), hi[k].astype(np.int64) + 1, size=(n, k.size))
    return X


def sparse_recompute(X: np.ndarray, genes: slice, rng: np.random.Generator) -> np.ndarray:
    """``X`` (genomes, rows) with its recompute ``genes`` redrawn: half the genomes recompute
    nothing; in the others each group is recomputed with a chance drawn per genome, uniform in
    [0, 1). (Uniform genes would recompute half the groups of every genome: slower plans than
    any a fast front keeps, which a search then spends its budget undoing.)"""
    k = genes.stop - genes.start
    if k <= 0 or X.shape[0] == 0:
        return X
    chance = np.where(rng.random(X.shape[0]) < 0.5, 0.0, rng.random(X.shape[0]))
    X[:, genes] = rng.random((X.shape[0], k)) < chance[:, None]
    return X


def sparse_micro_batches(X: np.ndarray, gene: int, n_choices: int,
                         rng: np.random.Generator) -> np.ndarray:
    """``X`` (genomes, rows) with its micro-batch ``gene`` (of ``n_choices`` values, counts
    doubling from 1) redrawn: half the genomes run the whole batch at once, the others a count
    drawn with a chance inverse to it. (A uniform gene would micro-batch nearly every genome,
    each costing its count in simulation time: 6.7 times a step's on average over 1 to 32,
    3.1 times so drawn; searches reach larger counts by mutation when they pay.)"""
    if X.shape[0] == 0 or n_choices < 2:
        return X
    weight = 0.5 ** np.arange(1, n_choices)
    draw = rng.choice(np.arange(1, n_choices), size=X.shape[0], p=weight / weight.sum())
    X[:, gene] = np.where(rng.random(X.shape[0]) < 0.5, 0, draw)
    return X


def group_neighbours(graph: OpGraph) -> list[np.ndarray]:
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


#: dimensions the per-op genome does not cut on: ``sequence`` (context parallelism) is offered
#: by the degree spaces and ``evaluate --context-parallel`` as whole plans; per op, mixed with
#: batch splits of the same tokens, it makes plans neither framework nor testbed runs
PER_OP_EXCLUDED = ("sequence",)


def _common_dims(graph: OpGraph, members) -> list[str]:
    return [d for d in SPLIT_DIMS if d not in PER_OP_EXCLUDED
            and all(d in graph.ops[i].splittable for i in members)]
