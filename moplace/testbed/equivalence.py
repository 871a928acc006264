"""Whether a plan run for real computes the one-device step: its losses and updated weights
against the reference's, within float tolerances (`compare`), for either front end.

The tolerances are those of one or two training steps in the weights' precision. Adam-style
optimizers move each weight by about the learning rate at first, whatever the gradient's size,
so a weight whose gradient is zero up to rounding (the key bias of an attention, whose
softmax ignores it) moves by an amount rounding decides: the weights' tolerance is a tenth of
AdamW's default learning rate (1e-3), not a relative one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Verdict", "compare", "TOLERANCES"]

#: dtype -> (the losses' relative tolerance, the weights' absolute tolerance)
TOLERANCES = {"float32": (1e-5, 1e-4), "bfloat16": (2e-2, 2e-3), "float16": (5e-3, 1e-3)}


@dataclass(frozen=True)
class Verdict:
    """The largest relative difference of a loss, the largest absolute difference of a weight
    (and its name), the tolerances held against them, and whether both are within them."""

    loss_rel: float
    weight_abs: float
    worst_weight: str
    loss_tol: float
    weight_tol: float
    missing: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        return (not self.missing and self.loss_rel <= self.loss_tol
                and self.weight_abs <= self.weight_tol)


def compare(ref_losses, losses, ref_weights: dict, weights: dict,
            dtype: str = "float32") -> Verdict:
    """``losses``/``weights`` (name -> array) of a plan against the reference's; a weight
    the plan did not return is ``missing`` (never equal)."""
    loss_tol, weight_tol = TOLERANCES.get(dtype, TOLERANCES["float32"])
    a, b = np.asarray(ref_losses, float), np.asarray(losses, float)
    if a.shape != b.shape or not np.all(np.isfinite(b)):
        loss_rel = float("inf")
    else:
        loss_rel = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-12))) if a.size else 0.0
    worst, worst_name = 0.0, ""
    for name, ref in ref_weights.items():
        if name not in weights:
            continue
        d = float(np.max(np.abs(np.asarray(ref, float) - np.asarray(weights[name], float))))
        if not d <= worst:
            worst, worst_name = d, name
    missing = tuple(sorted(set(ref_weights) - set(weights)))
    return Verdict(loss_rel, worst, worst_name, loss_tol, weight_tol, missing)
