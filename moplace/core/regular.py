"""A regular plan given by its degrees, as people who run Megatron-LM or torchtitan write it:
``tp=8,cp=1,pp=16,v=1,dp=128,ep=1,mbs=1,gbs=2048`` (what ``moplace evaluate --plan`` takes).

A `RegularPlan` is TP x CP x PP (v virtual stages per device) x DP ranks, with EP carved out
of DP (the experts of a layer spread over ``ep`` of the data-parallel ranks, as Megatron-Core
lays out its expert groups), ``mbs`` sequences per micro-batch and ``gbs`` per step, so each
replica runs ``gbs / (dp * mbs)`` micro-batches; and the levers: ``recompute`` (none, full,
selective), ``zero`` (0: gradients all-reduced; 1 or 2: Megatron's distributed optimizer,
gradients reduce-scattered and the weights all-gathered, the optimizer state sharded over the
data-parallel ranks), ``precision`` (bf16; fp16, as fast and as large on the tensor cores
but with a loss scale, so Megatron-LM keeps its gradients in FP16; fp8: every matmul,
fp8-inner: all but the first and last layers'), ``schedule`` (1f1b, gpipe, interleaved,
zero-bubble; interleaved when ``v > 1`` unless said), ``cp_comm`` (p2p: ring attention, a2a: Ulysses) and ``overlap`` (1:
the data-parallel collectives overlap the backward and the next forward, as Megatron's
``--overlap-grad-reduce --overlap-param-gather`` and FSDP run them; 0: they do not) and
``tp_overlap`` (1: the tensor-parallel collectives overlap the GEMMs they feed or follow, as
Megatron's ``--tp-comm-overlap`` runs them; 0, the default: they do not) and ``grad_fp32``
(1: the weight gradients held and reduced in FP32, as Megatron-LM does for BF16 training; 0,
the default: in the weights' 16 bits; Megatron-LM's ``--fp16`` runs keep them so).

`parse_plan` reads the text and says what is wrong with it in one line naming the field;
`RegularPlan.misfit` says why a plan cannot run a graph on a number of GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ..errors import StrategyError, shown
from .options import FP8_MODES, SCHEDULES, VIRTUAL_SCHEDULES

RECOMPUTE = ("none", "full", "selective")
PRECISIONS = {"bf16": "none", "fp16": "none", "fp8": "all", "fp8-inner": "inner"}
CP_COMMS = ("p2p", "a2a")
_INTS = ("tp", "cp", "pp", "v", "dp", "ep", "mbs", "gbs", "zero", "overlap", "tp_overlap",
         "grad_fp32", "first", "last")
_WORDS = {"recompute": RECOMPUTE, "precision": tuple(PRECISIONS), "schedule": SCHEDULES,
          "cp_comm": CP_COMMS}
_REQUIRED = ("tp", "pp", "dp", "mbs", "gbs")


@dataclass(frozen=True)
class RegularPlan:
    """One regular plan (module docstring)."""

    tp: int
    pp: int
    dp: int
    mbs: int
    gbs: int
    cp: int = 1
    v: int = 1
    ep: int = 1
    recompute: str = "none"
    zero: int = 1
    precision: str = "bf16"
    schedule: str = ""
    cp_comm: str = "p2p"
    overlap: int = 1
    tp_overlap: int = 0
    grad_fp32: int = 0
    first: int = 0
    last: int = 0

    def __post_init__(self):
        if not self.schedule:
            object.__setattr__(self, "schedule", "interleaved" if self.v > 1 else "1f1b")

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def replica_gpus(self) -> int:
        """The GPUs of one pipeline replica: TP x CP x PP."""
        return self.tp * self.cp * self.pp

    def stage_layers(self, layers: int) -> tuple[int, ...] | None:
        """The layers of each of the ``pp x v`` stages (stage j on rank ``j mod pp``) when
        ``first`` or ``last`` sets the first or last stage's (Megatron's
        ``--decoder-first/last-pipeline-num-layers``; with virtual stages, the first and last
        virtual stage's, as ``--pipeline-model-parallel-layout`` puts them and Llama 3 405B
        was cut), the others sharing the rest equally; None when every stage has
        ``layers / (pp v)``."""
        if not (self.first or self.last):
            return None
        ends = bool(self.first) + bool(self.last)
        stages = self.pp * self.v
        middle = (layers - self.first - self.last) // (stages - ends)
        return ((self.first,) if self.first else ()) + (middle,) * (stages - ends) + \
            ((self.last,) if self.last else ())

    @property
    def micro_batches(self) -> int:
        """Micro-batches each replica runs per step."""
        return self.gbs // (self.dp * self.mbs)

    @property
    def fp8(self) -> str:
        """The precision as a `moplace.core.strategy` FP8 mode."""
        return PRECISIONS[self.precision]

    def text(self) -> str:
        """The plan in the words of the people who run it: ``TP8 PP16 (v2) DP128 EP8, mbs 1,
        gbs 2,048, interleaved, ZeRO-1``."""
        return self.degrees_text() + ", " + ", ".join(self._levers_text())

    def degrees_text(self) -> str:
        """The plan's degrees alone: ``TP8 PP16 (v2) DP128 EP8``."""
        parts = [f"TP{self.tp}"] + ([f"CP{self.cp}" + ("" if self.cp_comm == "p2p" else
                                                       " (a2a)")] if self.cp > 1 else [])
        uneven = (f" ({self.first or '='} first, {self.last or '='} last layers)"
                  if self.first or self.last else "")
        parts += [f"PP{self.pp}" + (f" (v{self.v})" if self.v > 1 else "") + uneven,
                  f"DP{self.dp}"]
        parts += [f"EP{self.ep}"] if self.ep > 1 else []
        return " ".join(parts)

    def _levers_text(self) -> list[str]:
        lever = [f"mbs {self.mbs}", f"gbs {self.gbs:,}"]
        lever += [self.schedule] if self.pp > 1 else []
        lever += [f"recompute {self.recompute}"] if self.recompute != "none" else []
        lever += ["TP comm overlap"] if self.tp_overlap and self.tp > 1 else []
        lever += ["FP32 gradients"] if self.grad_fp32 else []
        lever += [f"ZeRO-{self.zero}"] if self.zero else []
        lever += [self.precision.upper()] if self.precision != "bf16" else []
        return lever

    def spec(self) -> str:
        """The plan as `parse_plan` reads it back: the degrees it needs and every other field
        that is not its default (``tp=8,pp=16,dp=128,mbs=1,gbs=2048,recompute=full``)."""
        implied = "interleaved" if self.v > 1 else "1f1b"
        keep = [f.name for f in fields(self) if f.name in _REQUIRED
                or (getattr(self, f.name) != (implied if f.name == "schedule" else f.default))]
        return ",".join(f"{k}={getattr(self, k)}" for k in keep)

    def misfit(self, graph, gpus: int) -> str | None:
        """Why this plan cannot run ``graph`` (traced at ``mbs`` sequences) on ``gpus`` GPUs;
        None when it can."""
        if self.gpus != gpus:
            return (f"tp x cp x pp x dp = {self.tp} x {self.cp} x {self.pp} x {self.dp} = "
                    f"{self.gpus:,} GPUs, but the cluster has {gpus:,}")
        if self.gbs % (self.dp * self.mbs):
            return (f"gbs {self.gbs} is not a whole number of micro-batches of mbs {self.mbs} "
                    f"on each of dp {self.dp} replicas")
        batch = graph.metadata.get("batch_size")
        if batch != self.mbs:
            what = f"{batch} sequence{'s' if batch != 1 else ''}" if isinstance(batch, int) \
                else "an unknown batch"
            return (f"the graph {graph.name!r} is one step of {what}; a "
                    f"regular plan's graph is one micro-batch: trace it at --batch {self.mbs} "
                    f"(mbs)")
        layers = graph.metadata.get("layers")
        count = layers.get("count") if isinstance(layers, dict) else None
        if self.first or self.last:
            ends = bool(self.first) + bool(self.last)
            stages = self.pp * self.v
            rest = (count or 0) - self.first - self.last
            if stages <= ends or not count or rest <= 0 or rest % (stages - ends):
                return (f"first {self.first} and last {self.last} layers leave "
                        f"{rest if count else 'no'} layers for the other "
                        f"{stages - ends} stages, not a whole number each")
        elif self.pp * self.v > 1 and not (count and count % (self.pp * self.v) == 0):
            return (f"pp x v = {self.pp * self.v} stages need whole layers; the graph has "
                    f"{shown(count) if count else 'no layer boundaries'}")
        if self.v > 1 and self.schedule not in VIRTUAL_SCHEDULES:
            return f"v {self.v} needs schedule interleaved or zero-bubble, not {self.schedule}"
        if self.schedule == "interleaved" and self.pp > 1 and self.micro_batches % self.pp:
            return (f"interleaved 1F1B runs micro-batches in multiples of pp {self.pp} "
                    f"(Megatron's rule); this plan has {self.micro_batches}")
        if self.tp > 1 and self.cp > 1:
            return ("tensor and context parallelism in one stage is not offered yet (each op "
                    "would split on two dimensions at once)")
        if self.ep > 1:
            moe = graph.metadata.get("moe")
            experts = moe.get("experts") if isinstance(moe, dict) else None
            if not isinstance(experts, int):
                return f"ep {self.ep}: the graph has no mixture of experts"
            if experts % self.ep or self.dp % self.ep:
                return (f"ep {self.ep} must divide the {experts} experts and dp {self.dp} "
                        f"(expert-parallel groups are carved out of the data-parallel ranks)")
        if self.fp8 != "none" and not graph.metadata.get("layers"):
            return f"precision {self.precision} needs a graph that names its layers"
        return None


def parse_plan(text: str) -> RegularPlan:
    """The plan ``text`` (``key=value`` pairs, comma separated) states; `StrategyError`,
    one line naming the key, for anything else."""
    if not isinstance(text, str) or not text.strip():
        raise StrategyError("--plan: give the degrees, e.g. \"tp=8,pp=16,dp=128,mbs=1,gbs=2048\"")
    values: dict = {}
    known = set(_INTS) | set(_WORDS)
    for item in text.split(","):
        key, sep, value = (s.strip() for s in item.partition("="))
        key = key.lower().replace("-", "_")
        if not sep or not key or not value:
            raise StrategyError(f"--plan: {shown(item.strip())} is not key=value")
        key = {"vp": "v", "virtual": "v", "cp_comm_type": "cp_comm"}.get(key, key)
        if key not in known:
            raise StrategyError(f"--plan: unknown key {shown(key)}; keys: "
                                f"{', '.join(_INTS + tuple(_WORDS))}")
        if key in values:
            raise StrategyError(f"--plan: {key} given twice")
        if key in _INTS:
            try:
                number = int(value)
            except ValueError:
                raise StrategyError(f"--plan: {key} must be a whole number, got "
                                    f"{shown(value)}") from None
            flags = ("overlap", "tp_overlap", "grad_fp32")
            low = 0 if key in ("zero", "first", "last") + flags else 1
            high = {"zero": 2, **dict.fromkeys(flags, 1)}.get(key, 1 << 24)
            if not low <= number <= high:
                raise StrategyError(f"--plan: {key} must be from {low} to {high:,}, got "
                                    f"{number}")
            values[key] = number
        else:
            word = value.lower()
            if word not in _WORDS[key]:
                raise StrategyError(f"--plan: {key} must be one of {', '.join(_WORDS[key])}, "
                                    f"got {shown(value)}")
            values[key] = word
    missing = [k for k in _REQUIRED if k not in values]
    if missing:
        raise StrategyError(f"--plan: {', '.join(missing)} missing (needed: "
                            f"{', '.join(_REQUIRED)}; cp, v, ep default to 1)")
    plan = RegularPlan(**values)
    if plan.v > 1 and "schedule" not in values:
        plan = replace(plan, schedule="interleaved")
    return plan


assert set(FP8_MODES) == set(PRECISIONS.values())
