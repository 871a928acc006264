"""How long jobs that are not searches report progress: a `Ticker` counts a job's units of
work across its stages and passes ``(stage, done, total)`` to a report function.

Profiling a model (tracing, warm-up, timed and traced steps, link measurements), running a
strategy for real and enumerating an exact front take their callers' ``progress`` argument, a
function ``progress(stage: str, done: int, total: int) -> None`` or None. The command line
turns it into a progress bar (`moplace.cli.progress.Display.job`); the library calls it with
plain numbers and knows nothing of terminals.
"""

from __future__ import annotations

from typing import Callable

Report = Callable[[str, int, int], None]


class Ticker:
    """Counts ``total`` units of work; `stage` names what runs now, `tick` counts units done.

    ``every``: report at most every that many units (and always at a stage change and at the
    end), for loops of millions of cheap units such as an exact enumeration. ``prefix`` is
    put before every stage name (a caller running the same stages twice tells them apart).
    """

    def __init__(self, report: Report | None, total: int, every: int = 1):
        self.report, self.total, self.every = report, max(int(total), 0), max(int(every), 1)
        self.done, self.name, self._next, self.prefix = 0, "", 0, ""
        self._last = None

    def stage(self, name: str) -> None:
        self.name = self.prefix + name
        self._emit()

    def tick(self, n: int = 1) -> None:
        self.done += n
        if self.done >= self._next or self.done >= self.total:
            self._emit()

    def grow(self, n: int) -> None:
        """Add ``n`` units the job found it must also do."""
        self.total += n
        self._emit()

    def _emit(self) -> None:
        self._next = self.done + self.every
        now = (self.name, min(self.done, self.total), self.total)
        if self.report is not None and now != self._last:  # never the same report twice
            self._last = now
            self.report(*now)
