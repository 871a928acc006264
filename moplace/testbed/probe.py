"""The machine's speed, probed between the strategies a fidelity report runs, whichever front
end's testbed runs them.

On CPUs a machine other jobs share runs the same steps about 1.5 times slower from one
ten-second stretch to the next (measured on our 2-core machine: the PyTorch testbed's
one-device step went 28, 41, 39, 37, 31 ms over a minute and a half). The op times the
simulator uses were taken at one speed; every strategy runs at another. So the one-device
plan runs a few steps (the probe) between one strategy and the next, and each strategy's steps
are scaled by the reference speed over the probes just before and just after it (their
geometric mean: a drift during its steps is split between them; `ApplyResult.at_speed` keeps
the factor, ``machine_speed``). The reference is the one-device step the op times were taken
in where the front end has it (the PyTorch testbed times its ops running that plan), else the
first probe, run right after profiling.

Scaled steps are off either way, so of several rounds a strategy keeps its median
(`moplace.testbed.fidelity.run_strategies`' ``round_pick="median"``), not its least: the
least would keep the round whose probes the machine disturbed most.
"""

from __future__ import annotations

from ..errors import MoplaceError
from .result import ApplyResult

__all__ = ["probed", "PROBE_STEPS", "PROBE_WARMUP"]

#: the timed steps of a probe, after its warm-up steps
PROBE_STEPS, PROBE_WARMUP = 4, 1


def probed(apply, probe, steps: int, warmup: int, reference: float | None = None,
           probe_warmup: int = PROBE_WARMUP):
    """``run(strategy) -> ApplyResult`` for `run_strategies`: ``apply(strategy, steps,
    warmup)`` (an `ApplyResult` of so many timed steps after so many warm-up steps; a
    `MoplaceError` it raises is the strategy's refusal) with its steps scaled to the machine's
    speed at ``reference`` (seconds of the one-device step; None: the first probe's) by the
    probes of ``probe`` (the one-device plan) around it (see the module docstring); with
    ``probe`` None, as the clock said (a GPU's steps: no other job shares it)."""
    last: list = [None]  # the probe run after the previous strategy: this one's probe before
    ref: list = [reference]

    def speed() -> float:
        step = apply(probe, PROBE_STEPS, probe_warmup).measured_step_s
        if not step:
            raise MoplaceError("the one-device plan's probe of the machine's speed ran no step")
        if ref[0] is None:
            ref[0] = step
        return step / ref[0]

    def run(strategy) -> ApplyResult:
        try:
            if probe is None:
                return apply(strategy, steps, warmup)
            before = last[0] if last[0] is not None else speed()
            last[0] = None
            result = apply(strategy, steps, warmup)
            last[0] = speed()
        except MoplaceError as exc:
            return ApplyResult(False, str(exc))
        slower = (before * last[0]) ** 0.5
        return result.at_speed(slower) if result.expressible and slower != 1.0 else result

    return run
