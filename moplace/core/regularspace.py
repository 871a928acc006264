"""Every regular plan of a graph on a number of GPUs at a fixed global batch
(`moplace.core.regular.RegularPlan`), as a framework runs them: what a search at scale walks.

`RegularSpace.all` lists them: TP over 1, 2, 4, 8 (inside a server), CP where the graph's
attention is fused (``metadata["context"]``), PP over the divisors of the layers (and over
the other stage counts that divide the GPUs, with fewer layers on the first and last stages,
as Megatron's ``--decoder-first/last-pipeline-num-layers`` put them: `uneven_ends`), virtual
stages where the schedule has them (with uneven ends, interleaved 1F1B over virtual stages
whose first and last are cut so: 126 layers on 16 x 2 as 3, 4 x 30, 3, as Llama 3 405B was
trained), DP what is left, EP over the divisors of the experts that
divide DP, and the levers (recomputation, ZeRO, precision, schedule) the framework names.
Megatron-LM: schedules 1f1b and interleaved (it has no zero-bubble), ZeRO 0 or 1 (its
distributed optimizer); torchtitan: every schedule, ZeRO 1 (FSDP's gradients and optimizer
state; its ZeRO-3 weight gathers are not modelled at scale yet); each with what the framework
does on its own (`FRAMEWORK_LEVERS`: FP32 gradients, Megatron's tensor-parallel overlap).
"""

from __future__ import annotations

from dataclasses import dataclass

from .regular import RegularPlan

SCHEDULES = {"megatron": ("1f1b", "interleaved"),
             "torchtitan": ("1f1b", "gpipe", "interleaved", "zero-bubble")}
ZEROS = {"megatron": (0, 1), "torchtitan": (1,)}
TP_DEGREES = (1, 2, 4, 8)
#: what each framework does on its own (`RegularSpace.levers`): Megatron-LM holds and reduces
#: BF16 training's gradients in FP32 (arguments.py sets accumulate_allreduce_grads_in_fp32
#: with --bf16; with --fp16 it does not: `FP16_GRADS`) and overlaps tensor-parallel
#: communication with the GEMMs where its README's scaling runs do (--tp-comm-overlap); torchtitan reduces in FP32 (its job config's
#: mixed_precision_reduce takes "float32" only) and runs tensor parallelism unoverlapped
#: (its async TP needs torch.compile)
FRAMEWORK_LEVERS = {"megatron": {"grad_fp32": 1, "tp_overlap": 1},
                    "torchtitan": {"grad_fp32": 1, "tp_overlap": 0}}
#: the frameworks that keep FP16 training's gradients in FP16 (Megatron-LM: FP16's loss scale
#: keeps them in range, so only --bf16 forces FP32)
FP16_GRADS = ("megatron",)


@dataclass(frozen=True)
class RegularSpace:
    """The regular plans of ``graph`` (one micro-batch of ``mbs`` sequences) on ``gpus`` GPUs
    at ``gbs`` sequences per step, as ``framework`` runs them, in ``precisions`` and with the
    recomputation modes ``recompute``."""

    graph: object
    gpus: int
    gbs: int
    framework: str = "megatron"
    precisions: tuple[str, ...] = ("bf16",)
    recompute: tuple[str, ...] = ("none", "selective", "full")
    #: the framework's own ways (`FRAMEWORK_LEVERS`); False: neither, as plans were before
    levers: bool = True

    def recompute_modes(self) -> tuple[str, ...]:
        """The recomputation modes that recompute something on this graph (``selective``
        recomputes each attention's core, which a graph of fused attention kernels has none
        of: `moplace.core.recompute.attention_cores`)."""
        from .recompute import attention_cores, layer_checkpoints

        heads = {"full": layer_checkpoints(self.graph), "selective": attention_cores(self.graph)}
        return tuple(r for r in self.recompute if r == "none" or heads[r].size)

    def all(self) -> list[RegularPlan]:
        g = self.graph
        mbs = g.metadata.get("batch_size")
        layers = (g.metadata.get("layers") or {}).get("count") or 1
        moe = g.metadata.get("moe") if isinstance(g.metadata.get("moe"), dict) else {}
        experts = moe.get("experts") or 1
        cps = (1, 2, 4, 8) if g.metadata.get("context") else (1,)
        out = []
        for tp in TP_DEGREES:
            for cp in cps:
                if tp > 1 and cp > 1:
                    continue
                for pp in range(1, layers + 1):
                    if self.gpus % (tp * cp * pp):
                        continue
                    ends = 0 if layers % pp == 0 else uneven_ends(layers, pp)
                    if ends is None:
                        continue
                    dp = self.gpus // (tp * cp * pp)
                    if self.gbs % (dp * mbs):
                        continue
                    out += self._levers(tp, cp, pp, dp, mbs, layers, experts, ends)
        return [p for p in out if p.misfit(g, self.gpus) is None]

    def _own_levers(self, tp: int, precision: str) -> dict:
        if not self.levers:
            return {}
        own = FRAMEWORK_LEVERS[self.framework]
        fp16 = precision == "fp16" and self.framework in FP16_GRADS
        return {"grad_fp32": 0 if fp16 else own["grad_fp32"],
                "tp_overlap": own["tp_overlap"] if tp > 1 else 0}

    def _levers(self, tp, cp, pp, dp, mbs, layers, experts, ends=0) -> list[RegularPlan]:
        out, modes = [], self.recompute_modes()
        eps = [e for e in range(1, experts + 1) if experts % e == 0 and dp % e == 0] \
            if experts > 1 else [1]
        for schedule in (SCHEDULES[self.framework] if pp > 1 else ()) or ("1f1b",):
            if schedule not in ("interleaved", "zero-bubble"):
                vs = [(1, ends)]
            elif ends:  # uneven first and last virtual stages (Llama 3 405B's 3, 4 x 30, 3)
                if schedule == "zero-bubble":
                    continue
                vs = [(v, k) for v in range(2, layers // pp + 1)
                      for k in [uneven_ends(layers, pp * v)] if k]
            else:
                vs = [(v, 0) for v in range(2, layers // pp + 1) if (layers // pp) % v == 0]
            for v, ends_v in vs:
                for ep in eps:
                    for rec in modes:
                        for zero in ZEROS[self.framework]:
                            if dp == 1 and zero and len(ZEROS[self.framework]) > 1:
                                continue  # nothing to shard
                            for prec in self.precisions:
                                out.append(RegularPlan(tp=tp, pp=pp, dp=dp, mbs=mbs,
                                                       gbs=self.gbs, cp=cp, v=v, ep=ep,
                                                       recompute=rec, zero=zero,
                                                       precision=prec, schedule=schedule,
                                                       first=ends_v, last=ends_v,
                                                       **self._own_levers(tp, prec)))
        return out


def uneven_ends(layers: int, pp: int) -> int | None:
    """The layers of the first and of the last stage when ``pp`` stages cannot share
    ``layers`` equally: the most, at most each middle stage's, that leave the middle stages a
    whole number each (126 layers on 16 stages: 7 first and last, 8 on each of the other 14,
    as Llama 3 405B was trained); None when no such split exists (fewer than 3 stages)."""
    if pp < 3:
        return None
    for k in range(layers // pp, 0, -1):
        rest = layers - 2 * k
        if rest > 0 and rest % (pp - 2) == 0 and k <= rest // (pp - 2):
            return k
    return None
