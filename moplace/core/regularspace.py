"""Every regular plan of a graph on a number of GPUs at a fixed global batch
(`moplace.core.regular.RegularPlan`), as a framework runs them: what a search at scale walks.

`RegularSpace.all` lists them: TP over 1, 2, 4, 8 (inside a server), CP where the graph's
attention is fused (``metadata["context"]``), PP over the divisors of the layers, virtual
stages where the schedule has them, DP what is left, EP over the divisors of the experts that
divide DP, and the levers (recomputation, ZeRO, precision, schedule) the framework names.
Megatron-LM: schedules 1f1b and interleaved (it has no zero-bubble), ZeRO 0 or 1 (its
distributed optimizer); torchtitan: every schedule, ZeRO 1 (FSDP's gradients and optimizer
state; its ZeRO-3 weight gathers are not modelled at scale yet).
"""

from __future__ import annotations

from dataclasses import dataclass

from .regular import RegularPlan

SCHEDULES = {"megatron": ("1f1b", "interleaved"),
             "torchtitan": ("1f1b", "gpipe", "interleaved", "zero-bubble")}
ZEROS = {"megatron": (0, 1), "torchtitan": (1,)}
TP_DEGREES = (1, 2, 4, 8)


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
                for pp in (p for p in range(1, layers + 1) if layers % p == 0):
                    if self.gpus % (tp * cp * pp):
                        continue
                    dp = self.gpus // (tp * cp * pp)
                    if self.gbs % (dp * mbs):
                        continue
                    out += self._levers(tp, cp, pp, dp, mbs, layers, experts)
        return [p for p in out if p.misfit(g, self.gpus) is None]

    def _levers(self, tp, cp, pp, dp, mbs, layers, experts) -> list[RegularPlan]:
        out, modes = [], self.recompute_modes()
        eps = [e for e in range(1, experts + 1) if experts % e == 0 and dp % e == 0] \
            if experts > 1 else [1]
        for schedule in (SCHEDULES[self.framework] if pp > 1 else ("1f1b",)):
            vs = [v for v in range(2, layers // pp + 1) if (layers // pp) % v == 0] \
                if schedule in ("interleaved", "zero-bubble") else [1]
            for v in vs:
                for ep in eps:
                    for rec in modes:
                        for zero in ZEROS[self.framework]:
                            if dp == 1 and zero and len(ZEROS[self.framework]) > 1:
                                continue  # nothing to shard
                            for prec in self.precisions:
                                out.append(RegularPlan(tp=tp, pp=pp, dp=dp, mbs=mbs,
                                                       gbs=self.gbs, cp=cp, v=v, ep=ep,
                                                       recompute=rec, zero=zero,
                                                       precision=prec, schedule=schedule))
        return out
