"""The plans a training framework expresses, as a genome of degrees (`DegreeSpace`): what
``moplace search --space torchtitan|megatron`` searches instead of per-op placement.

A point of the space is a `Degrees`: the devices used (a power of two, or every device), the
pipeline degree ``pp`` (equal stages by the model's layers), each stage's width over its
devices, data parallel (every group split on ``batch``) or tensor parallel (Megatron's blocks
split on ``tensor``, the ops between them on ``batch``: sequence parallelism), the
micro-batches and their schedule (with ``vp`` virtual stages per device under the interleaved
and zero-bubble schedules: ``pp * vp`` stages laid round-robin), the recomputation (none,
each layer checkpointed: ``full``, or each attention's core: ``selective``) and the ZeRO stage, as the framework names each
(`moplace.core.runners`). Its genome is one integer gene per degree, in `GENES` order; a gene
picks among the values left by the genes before it (a value past their count wraps round), so
every genome decodes to a plan of the space and each plan has exactly one genome with genes
within their counts (`encode`). `regular_plan` builds the strategy: every point of a space
runs on its framework by `moplace.core.runners.misfit` (tests/test_runnable.py checks each).

**Expert parallelism** (``ep``, the last gene) is offered on a mixture-of-experts graph (its
``metadata["moe"]``, its experts splittable on ``expert``) in data-parallel mode: ``ep`` 1, or
the stage width ``w`` where ``w`` divides the experts (each device of a stage its ``E / w``
experts, its tokens on batch, the two exchanged by all-to-all; torchtitan only with FSDP,
whose ``data_parallel_shard_degree`` its expert mesh is carved from). ``ep`` below ``w``
(experts on ``ep`` devices, replicated over ``w / ep`` groups of them, as Megatron and
torchtitan run a 64-GPU Mixtral at EP 8) needs an expert op split two ways at once, on
expert within a group and as a replica across groups, which a `moplace.core.strategy.Split`
(one dimension over one device list) cannot state: not offered yet.

**Context parallelism** (CP) is two more modes beside ``data`` and ``tensor``, offered on a
graph whose attention is all fused (its ``metadata["context"]``, its ops splittable on
``sequence``, `moplace.core.context`): ``context``, every group of a stage split on
``sequence`` over its ``w`` devices (ring attention: Megatron's ``--context-parallel-size w``,
torchtitan's ``context_parallel_degree``, under FSDP only: torchtitan shards the weights over
the CP ranks whenever it has any), and ``context-a2a``, the attention kernels' groups on
``channel`` by heads instead (Ulysses: Megatron's ``--cp-comm-type a2a``; torchtitan has none),
where those groups may split so and the heads and key/value heads divide by ``w``. Modes, not
a gene: a genome of a graph without CP decodes as before. CP beside data or tensor
parallelism in one stage (Megatron runs TP x CP x DP meshes) needs each group split on two
dimensions at once (its tokens over the CP ranks, its batch or heads over the others), which
one `moplace.core.strategy.Split` per group (one dimension over one device list) cannot
state: not offered.

Later degrees (device sets beyond a power of two) are new genes appended to `GENES` with
their choices in `_choices`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..errors import StrategyError
from .baselines import DDP_BUCKET_BYTES, reduces_gradients, shards_updates, topological_priority
from .context import CP_COMM_WORDS, context_of
from .graph import SPLIT_DIMS, OpGraph
from .planshape import plan_shape
from .recompute import attention_cores, layer_checkpoints
from .options import VIRTUAL_SCHEDULES
from .runners import FRAMEWORKS, RECOMPUTE, SCHEDULES, chunk_stages, misfit
from .strategy import FP8_MODES
from .strategy import SCHEDULES as STRATEGY_SCHEDULES
from .strategy import Split, Strategy

#: the genes, in genome order
GENES = ("devices", "pipeline", "mode", "micro_batches", "schedule", "recompute", "zero",
         "virtual", "fp8", "ep")
#: the micro-batch counts the space offers
MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
#: the ZeRO stages the space offers per framework (ZeRO-2 runs as ZeRO-1 in the simulator)
ZERO = {"torchtitan": (0, 1, 3), "megatron": (0, 1)}
#: the modes of a stage: data parallel, tensor parallel, context parallel (ring, Ulysses)
MODES = ("data", "tensor", "context", "context-a2a")


@dataclass(frozen=True)
class Degrees:
    """One plan of a space: ``devices`` used, ``pp`` stages, ``mode`` (`MODES`: "data",
    "tensor", "context" or "context-a2a", the module docstring) over each stage's ``devices // pp`` devices, ``micro_batches`` under ``schedule``
    (`moplace.core.strategy.SCHEDULES`), ``recompute`` ("none"/"full"/"selective"), ``zero``
    (0, 1, 3), ``vp``, the virtual stages per device (1 but under the interleaved and
    zero-bubble schedules), ``fp8``, which matmuls run in FP8
    (`moplace.core.strategy.FP8_MODES`) and ``ep``, the expert-parallel degree (1, or the
    stage width in data-parallel mode: the module docstring)."""

    devices: int
    pp: int
    mode: str
    micro_batches: int
    schedule: str
    recompute: str
    zero: int
    vp: int = 1
    fp8: str = "none"
    ep: int = 1

    @property
    def width(self) -> int:
        return self.devices // self.pp

    def text(self) -> str:
        what = {"tensor": "tensor", "context": f"context ({CP_COMM_WORDS['p2p']})",
                "context-a2a": f"context ({CP_COMM_WORDS['a2a']})"}.get(self.mode, "data")
        virtual = f" ({self.vp} virtual stages each)" if self.vp > 1 else ""
        precision = {"all": ", FP8", "inner": ", FP8 but first and last layers"}.get(
            self.fp8, "")
        experts = f" (expert parallel x{self.ep})" if self.ep > 1 else ""
        return (f"{self.devices} devices: pp {self.pp}{virtual} x {what} {self.width}{experts}, "
                f"{self.micro_batches} micro-batches {self.schedule}, recompute "
                f"{self.recompute}, ZeRO-{self.zero}{precision}")


class DegreeSpace:
    """The plans ``framework`` (one of `moplace.core.runners.FRAMEWORKS`) runs of ``graph``
    on ``n_devices`` devices (module docstring), with FP8 matmuls where ``fp8`` (devices
    that have FP8, a graph that names its matmuls' shapes and layers)."""

    def __init__(self, graph: OpGraph, n_devices: int, framework: str, fp8: bool = False):
        if framework not in FRAMEWORKS:
            raise ValueError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")
        self.graph, self.n_devices, self.framework = graph, int(n_devices), framework
        layers = graph.metadata.get("layers")
        self.layers = layers if isinstance(layers, dict) and layers.get("count") else None
        batch = graph.metadata.get("batch_size")
        self.batch = batch if isinstance(batch, int) and batch > 0 else None
        cores, checkpoints = attention_cores(graph), layer_checkpoints(graph)
        self.recompute_heads = {"none": np.empty(0, np.int64), "full": checkpoints,
                                "selective": cores}
        self.recompute_modes = tuple(r for r in RECOMPUTE[framework]
                                     if r == "none" or self.recompute_heads[r].size)
        matmuls = any(isinstance(f, dict) and f.get("cls") == "matmul"
                      for f in (graph.metadata.get("cost_features") or {}).values())
        self.fp8_modes = FP8_MODES if fp8 and matmuls and self.layers else ("none",)
        self.experts = _experts(graph)
        self.context = context_of(graph)
        self.shapes = self._shapes()

    # -- the space ----------------------------------------------------------------------------

    def _shapes(self) -> dict[int, dict[int, tuple[str, ...]]]:
        """devices -> pp -> modes: the stage layouts that run on the framework, each checked
        once, without levers, by `misfit`."""
        D = self.n_devices
        counts = sorted({k for k in range(1, D + 1) if k & (k - 1) == 0} | {D})
        out: dict[int, dict[int, tuple[str, ...]]] = {}
        tensor = any(all("tensor" in self.graph.ops[i].splittable for i in m)
                     for m in self.graph.groups)
        for n in counts:
            for pp in (p for p in range(1, n + 1) if n % p == 0):
                if pp > 1 and not (self.layers and self.layers["count"] % pp == 0):
                    continue
                modes = ("data", "tensor") if tensor and n // pp > 1 else ("data",)
                modes += self._context_modes(n // pp)
                ok = tuple(m for m in modes if self._zeros(n, pp, m, 1) and self._runs(
                    Degrees(n, pp, m, 1, "1f1b", "none", self._zeros(n, pp, m, 1)[0])))
                if ok:
                    out.setdefault(n, {})[pp] = ok
        return out

    def _context_modes(self, w: int) -> tuple[str, ...]:
        """The context-parallel modes of a stage ``w`` wide (module docstring)."""
        if self.context is None or w < 2:
            return ()
        return ("context",) + (() if self.context.ulysses_misfit(w) else ("context-a2a",))

    def _zeros(self, n: int, pp: int, mode: str, m: int) -> tuple[int, ...]:
        """The ZeRO stages of ``mode`` on ``n // pp`` devices a stage with ``m`` micro-batches:
        sharding where the weights have replicas (data and context parallel) whose gradients
        are reduced, no ZeRO-3 with micro-batches; torchtitan's CP only under FSDP."""
        replicas = n // pp if mode != "tensor" else 1
        shardable = replicas > 1 and reduces_gradients(self.graph) and shards_updates(self.graph)
        out = tuple(z for z in ZERO[self.framework] if z == 0 or shardable
                    and not (z == 3 and m > 1))
        if self.framework == "torchtitan" and mode.startswith("context"):
            return tuple(z for z in out if z)
        return out

    def _runs(self, d: Degrees) -> bool:
        s = regular_plan(self.graph, d, self.recompute_heads)
        shape = plan_shape(self.graph, s)
        return shape.regular and shape.pp == d.pp and not misfit(self.graph, shape,
                                                                  self.framework)

    def _choices(self, partial: tuple) -> tuple:
        """The values of the next gene after the values ``partial`` of the genes before it."""
        k = len(partial)
        if k == 0:
            return tuple(self.shapes)
        if k == 1:
            return tuple(self.shapes[partial[0]])
        if k == 2:
            return self.shapes[partial[0]][partial[1]]
        n, pp, mode = partial[:3]
        dp = n // pp if mode == "data" else 1
        if k == 3:
            return tuple(m for m in MICRO_BATCHES
                         if self.batch is None or self.batch % (dp * m) == 0) or (1,)
        if k == 4:
            if not (pp > 1 and partial[3] > 1):
                return ("1f1b",)
            return tuple(s for s in SCHEDULES[self.framework] if s not in VIRTUAL_SCHEDULES
                         or self._virtual(pp, partial[3], s))
        if k == 5:
            return self.recompute_modes
        if k == 7:
            return self._virtual(pp, partial[3], partial[4]) or (1,)
        if k == 8:
            return self.fp8_modes
        if k == 9:
            return self._expert_degrees(n // pp, mode, partial[6])
        return self._zeros(n, pp, mode, partial[3])

    def _expert_degrees(self, w: int, mode: str, zero: int) -> tuple[int, ...]:
        """The expert-parallel degrees of a stage ``w`` wide in ``mode`` under ZeRO ``zero``
        (module docstring): 1, and ``w`` where its data-parallel devices divide the experts
        (torchtitan: only under FSDP, ZeRO 1 or 3)."""
        if (not self.experts or mode != "data" or w < 2 or self.experts % w
                or (self.framework == "torchtitan" and zero == 0)):
            return (1,)
        return (1, w)

    def _virtual(self, pp: int, m: int, schedule: str) -> tuple[int, ...]:
        """The virtual stages per device ``schedule`` may run with ``pp`` stages and ``m``
        micro-batches: none but under the interleaved schedules, which the frameworks run
        with 2 or more (each of equal whole layers; interleaved 1F1B: ``m`` a multiple of
        ``pp``, Megatron's rule; both: ``m`` in rounds of equal size, PyTorch's)."""
        if schedule not in VIRTUAL_SCHEDULES or not self.layers:
            return ()
        if (schedule == "interleaved" and m % pp) or m % max(1, m // pp):
            return ()
        per = self.layers["count"] // pp
        return tuple(v for v in range(2, per + 1) if per % v == 0)

    @property
    def size(self) -> int:
        return len(GENES)

    @cached_property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per gene, 0 and the largest index any of its choice lists has."""
        hi = np.zeros(len(GENES))
        for d in self.all():
            x = self.encode_degrees(d)
            hi = np.maximum(hi, x)
        return np.zeros(len(GENES)), hi

    def all(self) -> list[Degrees]:
        """Every plan of the space, in genome order."""
        out = []

        def walk(partial):
            if len(partial) == len(GENES):
                out.append(Degrees(*partial))
                return
            for v in self._choices(partial):
                walk(partial + (v,))

        walk(())
        return out

    def degrees(self, x) -> Degrees:
        """The plan genome ``x`` stands for (each gene rounded, wrapped round its choices)."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (len(GENES),):
            raise StrategyError(f"genome has {x.size} genes, expected {len(GENES)}")
        partial: tuple = ()
        for gene in x.tolist():
            choices = self._choices(partial)
            partial += (choices[int(round(max(gene, 0.0))) % len(choices)],)
        return Degrees(*partial)

    def encode_degrees(self, d: Degrees) -> np.ndarray:
        """The genome of plan ``d``; `StrategyError` when the space has no such plan."""
        values, partial, x = (d.devices, d.pp, d.mode, d.micro_batches, d.schedule,
                              d.recompute, d.zero, d.vp, d.fp8, d.ep), (), []
        for name, v in zip(GENES, values):
            choices = self._choices(partial)
            if v not in choices:
                raise StrategyError(f"{name} {v} is not in the {self.framework} space "
                                    f"(choices {', '.join(map(str, choices))})")
            x.append(choices.index(v))
            partial += (v,)
        return np.array(x, np.float64)

    def decode(self, x) -> Strategy:
        return regular_plan(self.graph, self.degrees(x), self.recompute_heads)

    def encode(self, strategy: Strategy) -> np.ndarray:
        """The genome of ``strategy`` when it is a plan of the space (as `decode` builds it);
        `StrategyError` otherwise."""
        d = self.of_strategy(strategy)
        x = self.encode_degrees(d)
        if self.decode(x).simulation_key != strategy.simulation_key:
            raise StrategyError(f"the strategy has the degrees of {d.text()} but another "
                                f"placement than the {self.framework} space builds")
        return x

    def of_strategy(self, strategy: Strategy) -> Degrees:
        """The degrees of ``strategy``'s shape; `StrategyError` when it is irregular."""
        shape = plan_shape(self.graph, strategy)
        if not shape.regular:
            raise StrategyError("an irregular plan has no degrees")
        mode = ("tensor" if shape.tp > 1 else "data" if shape.cp < 2 else
                "context-a2a" if shape.cp_comm == "a2a" else "context")
        rec = shape.recompute_mode if shape.recompute_mode != "partial" else "partial"
        return Degrees(len(shape.devices), shape.pp, mode, shape.micro_batches,
                       shape.schedule if shape.micro_batches > 1 and shape.pp > 1 else "1f1b",
                       rec, shape.zero_stage, shape.vp, strategy.fp8_mode, shape.ep)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` genomes, each gene uniform over its bounds."""
        lo, hi = self.bounds
        return rng.integers(lo.astype(np.int64), hi.astype(np.int64) + 1,
                            size=(n, len(GENES))).astype(np.float64)


def regular_plan(graph: OpGraph, d: Degrees, recompute_heads: dict | None = None,
                 stage_layers: tuple[int, ...] | None = None) -> Strategy:
    """The strategy of plan ``d`` on devices 0..d.devices-1: ``d.pp * d.vp`` stages cut at
    the layer boundaries (`moplace.core.runners.stage_of_groups`), stage k on devices
    ``(k mod pp) * width ..``; in each stage every group split on ``batch`` over them (data
    parallel; with ``d.ep > 1`` a mixture of experts' experts, weights and updates on
    ``expert``), or (tensor parallel) on ``tensor`` where it may and on ``batch`` elsewhere,
    or (context parallel) on ``sequence``, with ``context-a2a`` the attention kernels' groups
    on ``channel``; a group that may not split runs on the stage's first device. Ops run in topological order;
    gradients go in DDP's buckets where replicas reduce them. ``stage_layers``: the layers of
    each of the ``pp * vp`` stages when they are not equal (Megatron's first and last stage
    layer counts), else None."""
    if recompute_heads is None:
        recompute_heads = {"none": np.empty(0, np.int64), "full": layer_checkpoints(graph),
                           "selective": attention_cores(graph)}
    w = d.width
    stage = chunk_stages(graph, d.pp, d.vp, stage_layers) % d.pp
    device = stage * w
    splits: dict[int, Split] = {}
    info = context_of(graph) if d.mode == "context-a2a" else None
    heads = info.attention_groups if info else ()
    tokens = "sequence" if d.mode.startswith("context") else "batch"
    if w > 1:
        a = graph.arrays
        # per group, the dimensions all its ops may split on: their split masks ANDed
        order = np.argsort(a.group, kind="stable")
        common = np.bitwise_and.reduceat(a.split_mask[order],
                                         np.searchsorted(a.group[order], np.arange(a.n_groups)))

        def able(dim: str) -> np.ndarray:
            return ((common >> SPLIT_DIMS.index(dim)) & 1).astype(bool)

        choice = np.full(a.n_groups, "", dtype=object)  # the first dimension that applies
        head = np.zeros(a.n_groups, bool)
        head[list(heads)] = True
        for dim, where in (("tensor", able("tensor") if d.mode == "tensor" else None),
                           ("expert", able("expert") if d.ep > 1 else None),
                           ("channel", able("channel") & head),
                           (tokens, able(tokens))):
            if where is not None:
                choice[(choice == "") & where] = dim
        made: dict[tuple, Split] = {}  # one Split per (dimension, stage): shared by groups
        for g in np.flatnonzero(choice != "").tolist():
            key = (choice[g], int(device[g]))
            if key not in made:
                made[key] = Split(key[0], tuple(range(key[1], key[1] + w)))
            splits[g] = made[key]
    group = graph.arrays.group
    placement = device[group]
    op_splits = {op: splits[g] for g, members in enumerate(graph.groups) if g in splits
                 for op in members}
    bucket = DDP_BUCKET_BYTES if w > 1 and reduces_gradients(graph) else 0.0
    return Strategy(placement, topological_priority(graph), op_splits, bucket_bytes=bucket,
                    zero_stage=float(d.zero), micro_batches=float(d.micro_batches),
                    schedule=float(STRATEGY_SCHEDULES.index(d.schedule)),
                    recompute=recompute_heads[d.recompute], fp8=float(FP8_MODES.index(d.fp8)))


def _experts(graph: OpGraph) -> int:
    """The experts of each mixture-of-experts layer of ``graph`` (its ``metadata["moe"]``)
    where some of its ops may split on ``expert``; 0 otherwise (a graph traced before its
    experts were marked so, or one of no mixture of experts)."""
    moe = graph.metadata.get("moe")
    experts = moe.get("experts") if isinstance(moe, dict) else None
    if not isinstance(experts, int) or isinstance(experts, bool) or experts < 2:
        return 0
    able = (graph.arrays.split_mask >> SPLIT_DIMS.index("expert")) & 1
    return experts if able.any() else 0
