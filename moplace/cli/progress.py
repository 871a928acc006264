"""Progress of long commands on stderr: a live bar (rich) on a terminal, a plain line every few
seconds otherwise (a log file, CI), nothing with ``--quiet``.

A search's line shows evaluations against the budget (or seconds against a time budget),
elapsed and remaining time, the hypervolume and the best of each objective in units a person
reads at a glance. `moplace compare` shows one line per searcher on one display. Other long
jobs (profiling, running a strategy for real, an exact front) show their stage and units done
(`Display.job`, fed by `moplace.progress.Ticker`).
"""

from __future__ import annotations

import sys
import time

from ..optimize.driver import Callback
from ..review.units import fmt, fmt_duration, kind_of, short

PLAIN_EVERY = 5.0
BAR_WIDTH = 24


def describe(result) -> str:
    """Hypervolume and the best of each objective of a running search, as text."""
    parts = [f"HV {result.hypervolume:.4f}"]
    if result.best_history and result.front:
        for name, v in zip(result.problem.objectives, result.best_history[-1][1]):
            parts.append(f"{short(name)} {fmt(v, kind_of(name))}")
    else:
        parts.append("nothing fits yet")
    return "  ".join(parts)


class Display:
    """One progress display for a command (several searches share it in a comparison)."""

    def __init__(self, mode: str = "auto", stream=None, width: int | None = None):
        self.stream, self.width = stream or sys.stderr, width
        if mode == "auto":
            mode = "live" if getattr(self.stream, "isatty", lambda: False)() else "plain"
        self.mode = mode  # "live", "plain" or "quiet"
        self.progress = None

    def __enter__(self):
        if self.mode == "live":
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn
            from rich.table import Column

            console = Console(file=self.stream, width=self.width)
            bar = BAR_WIDTH if console.width >= 100 else BAR_WIDTH // 2
            self.progress = Progress(
                TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)),
                BarColumn(bar_width=bar), _tail_column(console, bar, lambda: self.progress.tasks),
                console=console,
                transient=False, refresh_per_second=4)
            self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)
            self.progress = None

    def search(self, label: str) -> "SearchProgress":
        """The callback that shows one search on this display."""
        return SearchProgress(self, label)

    def job(self, label: str) -> "JobProgress":
        """The ``progress(stage, done, total)`` function that shows one job on this display."""
        return JobProgress(self, label)


def _tail_column(console, bar: int, tasks):
    """A rich column reading ``48/120  elapsed 0:00:06, left 0:00:15  <status>`` (``left ?``
    before an estimate). Counts and times are never cut: the status gives way, cut short with
    "…" to what the console's width leaves after the names of ``tasks()`` and the bar (``bar``
    columns)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class TailColumn(ProgressColumn):
        def render(self, task):
            elapsed = task.finished_time if task.finished else task.elapsed
            left = "0:00:00" if task.finished else _clock(task.time_remaining)
            total = int(task.total or 0)
            head = (f"{int(task.completed):>{len(str(total))}}/{total}  "
                    f"elapsed {_clock(elapsed)}, left {left}")
            names = max((len(t.description) for t in tasks()), default=0)
            room = console.width - names - bar - len(head) - 5  # 3 gaps, 2 before the status
            status = str(task.fields.get("status", ""))
            if len(status) > room:
                status = status[:room - 1] + "…" if room > 1 else ""
            return Text(head + ("  " + status if status else ""), no_wrap=True)

    return TailColumn()


def _clock(seconds) -> str:
    if seconds is None:
        return "?"
    s = int(max(seconds, 0))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class JobProgress:
    """Shows a job's ``(stage, done, total)`` reports (see `moplace.progress`): a bar on a
    terminal, else a line at each new stage and every few seconds within one."""

    def __init__(self, display: Display, label: str):
        self.display, self.label = display, label
        self.task, self.stage, self.last_plain = None, None, 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        p = self.display.progress
        if p is not None:
            if self.task is None:
                self.task = p.add_task(self.label, total=total, status=stage)
            p.update(self.task, completed=done, total=total, status=stage)
        elif self.display.mode == "plain":
            now = time.perf_counter()
            if stage != self.stage or now - self.last_plain >= PLAIN_EVERY or done == total:
                self.last_plain = now
                print(f"  {self.label}: {stage} ({done}/{total})", file=self.display.stream,
                      flush=True)
        self.stage = stage


def first_seconds() -> str:
    """What a search does before its first batch is counted: compiling the simulator (numba's
    on-disk cache holds no event loop yet: the first run after an install), then the
    searcher's setup and first batch (seed strategies such as the list schedulers')."""
    from ..simulator.engine import compiled_on_disk

    setup = "seed strategies and the first batch"
    if compiled_on_disk():
        return f"setting up: {setup}"
    return f"compiling the simulator (first run after installing, about a minute), then {setup}"


class SearchProgress(Callback):
    """A driver callback showing one search (see `Display`)."""

    def __init__(self, display: Display, label: str):
        self.display, self.label = display, label
        self.task = None
        self.last_plain = 0.0
        self.budget = self.total = None

    def on_start(self, problem, searcher, budget, seed) -> None:
        self.budget = budget
        self.total = budget.evaluations if budget.evaluations is not None else budget.seconds
        p, status = self.display.progress, first_seconds()
        if p is not None:
            self.task = p.add_task(self.label, total=self.total, status=status)
        elif self.display.mode == "plain":
            print(f"  {self.label}: {status}", file=self.display.stream, flush=True)

    def on_batch(self, result) -> None:
        text = describe(result)
        p = self.display.progress
        if p is not None:
            done = (result.n_evaluations if self.budget.evaluations is not None
                    else min(result.seconds, self.budget.seconds))
            p.update(self.task, completed=done, status=f"{result.n_evaluations} evals  {text}")
        elif self.display.mode == "plain" and time.perf_counter() - self.last_plain >= PLAIN_EVERY:
            self.last_plain = time.perf_counter()
            print(f"  {self.label}: {self._of_budget(result)}, {fmt_duration(result.seconds)}; "
                  f"{text}", file=self.display.stream, flush=True)

    def on_end(self, result) -> None:
        p = self.display.progress
        if p is not None and self.task is not None:
            done = {"completed": self.total} if result.status == "finished" else {}
            p.update(self.task, **done, status=f"{result.status}: {result.n_evaluations} evals  {describe(result)}")
        elif self.display.mode == "plain":
            print(f"  {self.label}: {result.status}, {self._of_budget(result)} in "
                  f"{fmt_duration(result.seconds)}; {describe(result)}",
                  file=self.display.stream, flush=True)

    def _of_budget(self, result) -> str:
        if self.budget is not None and self.budget.evaluations is not None:
            return f"{result.n_evaluations}/{self.budget.evaluations} evaluations"
        return f"{result.n_evaluations} evaluations"
