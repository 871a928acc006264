"""The list schedulers' seeds: every candidate schedule of DPOS, HEFT and m-ETF.

Registered as seed sources (entry-point group ``moplace.seeds``) so that every seeded search
starts from them through `moplace.optimize.seeds.seed_strategies`, without importing this
plugin; each candidate (`candidates.schedule_candidates`: three memory budgets, groups kept
or regrouped) is labelled "scheduler: candidate".
"""

from __future__ import annotations

from moplace.optimize.seeds import Seed

from .candidates import schedule_candidates
from .metf import metf
from .schedule import dpos, heft


def _seeds(name: str, schedule, problem) -> list[Seed]:
    return [Seed(f"{name}: {c.label}", c.strategy) for c in schedule_candidates(problem, schedule)]


def dpos_seeds(problem) -> list[Seed]:
    """DPOS's candidate schedules."""
    return _seeds("dpos", dpos, problem)


def heft_seeds(problem) -> list[Seed]:
    """HEFT's candidate schedules."""
    return _seeds("heft", heft, problem)


def metf_seeds(problem) -> list[Seed]:
    """m-ETF's candidate schedules."""
    return _seeds("m-etf", metf, problem)
