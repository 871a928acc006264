"""Moves of a whole genome onto a run of devices (a mixin of `moplace.core.genome.GenomeSpace`).

A plan on fewer devices than the cluster has, or a regular plan on a run of them, is far from
most genomes in gene-by-gene moves; these moves make it in one step:

- `resize`: the genome stretched or shrunk onto another run of consecutive devices, splits
  scaled with it (data parallelism on 8 GPUs becomes data parallelism on one server's 4);
- `regular`: the plan practitioners write for a run of devices, whatever the genome was:
  every group split on one dimension (batch: data parallelism; tensor: Megatron's tensor
  parallelism, with the groups between its blocks split on batch, i.e. sequence parallelism);
- `random_regular`: a regular plan with its memory levers drawn (the ZeRO stage, and
  recomputation in one of the patterns practitioners use: `recompute_patterns`) and, half the
  time, its ops run in topological order (as a framework runs the program), so FSDP with each
  layer checkpointed, or tensor parallelism with selective recomputation, is one move away
  from any genome;
- `random_resize`: `resize` or `random_regular` on a random run, as the searchers'
  device-set move.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from .baselines import DDP_BUCKET_BYTES, topological_priority
from .recompute import attention_cores, layer_checkpoints

#: the dimensions of regular plans (`WindowMoves.regular`), where the graph offers them
REGULAR_DIMS = ("batch", "tensor")


class WindowMoves:
    """Whole-genome moves onto runs of devices; mixed into `GenomeSpace`, whose tables
    (``options``, ``_parts``, ``_n_options``, the gene indices) they read."""

    #: Device-set moves are made on clusters of at least this many devices (on 2 or 3, a
    #: window is one device or nearly all, which the other moves reach; on the tiny
    #: instances of `moplace.optimize.tiny` they only cost NSGA-II hypervolume)
    RESIZE_MIN_DEVICES = 4

    def device_window(self, x) -> tuple[int, int]:
        """The smallest cyclic run of devices (first device, length) holding every op and
        every part of genome ``x``."""
        x = np.asarray(x, dtype=np.float64)
        G, D = self.n_groups, self.n_devices
        if G == 0:
            return 0, 1
        device = np.clip(np.rint(x[:G]), 0, D - 1).astype(np.int64)
        option = np.clip(np.rint(x[G:2 * G]), 0, self._n_options - 1).astype(np.int64)
        parts = self._parts[np.arange(G), option]
        used = np.zeros(D, bool)
        for first, n in set(zip(device.tolist(), parts.tolist())):
            used[(first + np.arange(n)) % D] = True
        best = (D + 1, 0)
        for start in np.flatnonzero(used).tolist():  # a window starts on a used device
            length = int(((np.flatnonzero(used) - start) % D).max()) + 1
            best = min(best, (length, start))
        return best[1], best[0]

    def resize(self, x, start: int, length: int) -> np.ndarray:
        """Genome ``x`` moved onto the ``length`` consecutive devices from ``start`` (cyclic):
        its device window (`device_window`) is stretched or shrunk onto the new one, a group's
        position in it scaled, and a split's parts scaled alike (parts 8 on 8 devices become 4
        on 4, and back), kept inside the window, on the same dimension (the nearest smaller
        part count the group allows; no split when none). Priorities stay. This is the move
        that takes data parallelism on every device to one server's devices, or back."""
        y = np.array(x, dtype=np.float64)
        G, D = self.n_groups, self.n_devices
        if not 1 <= length <= D:
            raise ValueError(f"length must be in 1..{D}, got {length}")
        if G == 0:
            return y
        old_start, old_length = self.device_window(y)
        device = np.clip(np.rint(y[:G]), 0, D - 1).astype(np.int64)
        option = np.clip(np.rint(y[G:2 * G]), 0, self._n_options - 1).astype(np.int64)
        rel = ((device - old_start) % D) * length // old_length
        y[:G] = (start + rel) % D
        for g in np.flatnonzero(option > 0).tolist():
            dim, parts = self.options[g][option[g]]
            want = min(max(1, round(parts * length / old_length)), length - int(rel[g]))
            y[G + g] = self._nearest_option(g, dim, want)
        return y

    def replicate(self, x, start: int, length: int) -> np.ndarray:
        """Genome ``x`` as data parallelism on the ``length`` consecutive devices from
        ``start``: `regular` on batch."""
        return self.regular(x, start, length, "batch")

    def regular(self, x, start: int, length: int, dim: str = "batch") -> np.ndarray:
        """Genome ``x`` as the regular plan on ``dim`` over the ``length`` consecutive devices
        from ``start``: every group that can split on ``dim`` into ``length`` parts (else the
        most it allows) is split so from ``start``, every other group that can split on batch
        so on batch, and every group left runs on ``start``; gradients go in DDP's buckets
        (`DDP_BUCKET_BYTES`), nothing sharded, recomputed or micro-batched, as the
        data-parallel and tensor-parallel baselines. Priorities stay."""
        y = np.array(x, dtype=np.float64)
        G, D = self.n_groups, self.n_devices
        if not 1 <= length <= D:
            raise ValueError(f"length must be in 1..{D}, got {length}")
        y[:G] = start % D
        for g in range(G):
            k = self._nearest_option(g, dim, length)
            y[G + g] = k if k or dim == "batch" else self._nearest_option(g, "batch", length)
        if DDP_BUCKET_BYTES in self.bucket_choices:
            y[self.bucket_gene] = self.bucket_choices.index(DDP_BUCKET_BYTES)
        y[self.zero_gene] = 0
        y[self.micro_batch_gene] = y[self.schedule_gene] = 0
        y[self.recompute_genes] = 0
        return y

    @cached_property
    def topological_priorities(self) -> np.ndarray:
        """Priority genes that run the ops in the graph's topological order, as the baselines
        do (`topological_priority`, mapped into [0, 1]: the first op 1, the last 0)."""
        return 1.0 + topological_priority(self.graph) / max(self.n_ops - 1, 1)

    @cached_property
    def regular_dims(self) -> tuple[str, ...]:
        """The dimensions of `REGULAR_DIMS` some group can split on: those `random_resize`
        makes regular plans on."""
        offered = {o[0] for opts in self.options for o in opts[1:]}
        return tuple(d for d in REGULAR_DIMS if d in offered) or ("batch",)

    @cached_property
    def recompute_patterns(self) -> tuple[np.ndarray, ...]:
        """The recompute genes (0/1 over ``recompute_heads``) of per-layer checkpointing and
        of selective recomputation (the attention cores), for the graphs that name layers or
        attention cores (`moplace.core.recompute`)."""
        heads, graph = self.recompute_heads, self.graph
        chosen = ([layer_checkpoints(graph)] if graph.metadata.get("layers") else []) + \
            [attention_cores(graph)]
        return tuple(np.isin(heads, c).astype(np.float64) for c in chosen if c.size)

    def random_levers(self, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Genome ``y`` (in place, and returned) with the memory levers of a regular plan
        drawn: the ZeRO stage uniformly, and the recompute genes set to one of
        `recompute_patterns` or all off, uniformly."""
        if len(self.zero_choices) > 1:
            y[self.zero_gene] = rng.integers(len(self.zero_choices))
        patterns = self.recompute_patterns
        if patterns:
            k = int(rng.integers(len(patterns) + 1))
            y[self.recompute_genes] = patterns[k] if k < len(patterns) else 0.0
        return y

    def random_resize(self, x, rng: np.random.Generator) -> np.ndarray:
        """A device-set move: `resize` onto a random window of another length or, one time
        in three, a regular plan on a random window (`random_regular`: a time in four with its
        memory levers drawn), whatever ``x`` was. The window's length is three times in four
        a power of two or every device (the sizes plans use), else any. It starts half the
        time aligned with the current one (from its first device in steps of the new length:
        one server's devices when servers are numbered in runs), else on any device."""
        D = self.n_devices
        start, length = self.device_window(x)
        if D < 2:
            return np.array(x, dtype=np.float64)
        dp = rng.random() < 1 / 3
        sizes = [k for k in range(1, D + 1) if dp or k != length]
        round_sizes = [k for k in sizes if k & (k - 1) == 0 or k == D]  # 1, 2, 4, ..., D
        if round_sizes and rng.random() < 0.75:
            sizes = round_sizes
        k = sizes[int(rng.integers(len(sizes)))]
        if rng.random() < 0.5:
            new_start = (start + k * int(rng.integers(-(-D // k)))) % D
        else:
            new_start = int(rng.integers(D))
        return self.random_regular(x, rng, new_start, k, plain=0.75) if dp else \
            self.resize(x, new_start, k)

    def random_regular(self, x, rng: np.random.Generator, start: int = 0,
                       length: int | None = None, plain: float = 0.75) -> np.ndarray:
        """A `regular` plan on the ``length`` devices from ``start`` (default: every device)
        on a dimension of `regular_dims` drawn uniformly, its memory levers left off with
        chance ``plain``, else drawn (`random_levers`), and, half the time, its ops run in
        topological order, as the baselines run them."""
        dims = self.regular_dims
        dim = dims[int(rng.integers(len(dims)))] if len(dims) > 1 else dims[0]
        y = self.regular(x, start, length or self.n_devices, dim)
        if rng.random() >= plain:
            self.random_levers(y, rng)
        if rng.random() < 0.5:
            y[self.priorities] = self.topological_priorities
        return y

    def _nearest_option(self, g: int, dim: str, parts: int) -> int:
        """The option of group ``g`` splitting ``dim`` into the most parts up to ``parts``
        (0, no split, when there is none or ``parts`` is 1)."""
        best, best_parts = 0, 1
        for k, opt in enumerate(self.options[g][1:], start=1):
            if opt[0] == dim and best_parts < opt[1] <= parts:
                best, best_parts = k, opt[1]
        return best

