"""The routing assumption of a mixture-of-experts trace: how many tokens each expert is taken
to receive, since a step traced under fake tensors has no data to route by (`Routing`).

With T tokens in a layer, k experts per token and E experts, the layer makes A = T·k
assignments, a mean of A/E per expert:

- **balanced** (the default): every expert gets the mean (floor or ceiling, A in all);
- **skewed** with ``imbalance`` s (1 < s <= E/k): the hottest expert gets ceil(s·A/E) tokens
  (at most T: a token picks an expert once), the other E - 1 share the rest evenly. The
  default s is `DEFAULT_IMBALANCE`.

The experts of a layer run as one padded grouped GEMM over buffers of C tokens each
(`moplace.torch.moe`), so the busiest expert bounds its time: without a capacity factor C is
the busiest expert's load (nothing dropped; under skew every expert's buffer is padded to the
hottest one's, so the GEMMs' FLOPs overstate the tokens routed by up to s). With a
``capacity_factor`` f (Switch Transformer, GShard; Megatron-LM's
``--moe-expert-capacity-factor`` with ``--moe-pad-expert-input-to-capacity``) C is
ceil(f·A/E) for every expert, and an expert's tokens beyond C are dropped (they pass the
layer by the residual only).
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import MoplaceError

ROUTINGS = ("balanced", "skewed")
#: the hottest expert's share of the mean under ``--routing skewed`` without ``--imbalance``
DEFAULT_IMBALANCE = 2.0
#: the largest capacity factor taken (beyond E/k every buffer holds every token anyway)
MAX_CAPACITY_FACTOR = 1024.0


@dataclasses.dataclass(frozen=True)
class Routing:
    """A routing assumption (module docstring): ``kind`` balanced or skewed, the hottest
    expert's ``imbalance`` over the mean (1 when balanced), a ``capacity_factor`` or None."""

    kind: str = "balanced"
    capacity_factor: float | None = None
    imbalance: float = 1.0

    def loads(self, tokens: int, experts: int, top_k: int) -> list[int]:
        """Tokens routed to each expert of a layer of ``tokens`` tokens (the hottest first),
        before any is dropped; a `MoplaceError` where the imbalance cannot be."""
        total = tokens * top_k
        if self.kind == "balanced":
            q, r = divmod(total, experts)
            return [q + 1] * r + [q] * (experts - r)
        if experts < 2 or self.imbalance > experts / top_k:
            raise MoplaceError(
                f"--imbalance {self.imbalance:g}: with {top_k} of {experts} experts per token the "
                f"hottest expert gets at most every token, {experts / top_k:g} times the mean")
        hot = min(tokens, math.ceil(self.imbalance * total / experts))
        q, r = divmod(total - hot, experts - 1)
        return [hot] + [q + 1] * r + [q] * (experts - 1 - r)

    def capacity(self, tokens: int, experts: int, top_k: int) -> int:
        """C, the tokens each expert's buffer holds (module docstring)."""
        if self.capacity_factor is not None:
            return max(1, math.ceil(self.capacity_factor * tokens * top_k / experts))
        return max(1, max(self.loads(tokens, experts, top_k)))

    def summary(self, tokens: int, experts: int, top_k: int) -> dict:
        """What the graph's ``metadata["moe"]`` says of one layer's routing: the tokens
        routed to each expert (`loads`), the buffers' ``capacity`` and the choices it drops."""
        loads = self.loads(tokens, experts, top_k)
        capacity = self.capacity(tokens, experts, top_k)
        dropped = sum(max(0, n - capacity) for n in loads)
        return {"routing": self.kind, "imbalance": self.imbalance,
                "capacity_factor": self.capacity_factor, "tokens": int(tokens),
                "experts": int(experts), "top_k": int(top_k), "capacity": int(capacity),
                "tokens_per_expert": loads, "dropped": int(dropped)}

    def key(self) -> tuple:
        """What a trace cache key holds of it."""
        return ("routing", self.kind, self.capacity_factor, self.imbalance)


def routing_of(kind: str | None = None, capacity_factor: float | None = None,
               imbalance: float | None = None) -> Routing:
    """The `Routing` of ``--routing``, ``--capacity-factor`` and ``--imbalance`` (each None
    when not given): ``--imbalance`` alone means skewed; each bad value one `MoplaceError`."""
    if kind is not None and kind not in ROUTINGS:
        raise MoplaceError(f"--routing {kind}: one of {', '.join(ROUTINGS)}")
    if capacity_factor is not None and not (
            math.isfinite(capacity_factor) and 0 < capacity_factor <= MAX_CAPACITY_FACTOR):
        raise MoplaceError(f"--capacity-factor {capacity_factor:g}: a number above 0 and at most "
                           f"{MAX_CAPACITY_FACTOR:g} (1.0: buffers of the mean tokens per expert)")
    if imbalance is not None:
        if kind == "balanced":
            raise MoplaceError("--imbalance: balanced routing gives every expert the mean; "
                               "--routing skewed (or no --routing) with --imbalance")
        if not (math.isfinite(imbalance) and imbalance > 1):
            raise MoplaceError(f"--imbalance {imbalance:g}: the hottest expert's tokens over the "
                               f"mean, a number above 1 (1: balanced)")
        kind = "skewed"
    if kind == "skewed":
        return Routing("skewed", capacity_factor, imbalance or DEFAULT_IMBALANCE)
    return Routing("balanced", capacity_factor, 1.0)


def routing_from(stated) -> Routing | None:
    """The `Routing` a graph's ``metadata.source.routing`` records (a `Routing` as a dict),
    None when it records none (balanced); a bad record is one `MoplaceError`."""
    if stated is None:
        return None
    if not isinstance(stated, dict):
        raise MoplaceError(f"the graph's source.routing {str(stated)[:60]} is not a routing")
    skewed = stated.get("kind") == "skewed"
    return routing_of(stated.get("kind"), stated.get("capacity_factor"),
                      stated.get("imbalance") if skewed else None)
