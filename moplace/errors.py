"""User-facing errors.

Every error a user can cause (bad file, bad name, bad strategy) is a `MoplaceError`; the CLI
prints its message and exits non-zero without a traceback. Anything else is a bug.
"""

from __future__ import annotations


class MoplaceError(Exception):
    """Base of all errors caused by user input."""


class GraphError(MoplaceError):
    """An op graph is malformed: cycle, duplicate name, bad cost, unknown op."""


class FormatError(MoplaceError):
    """A file cannot be parsed; the message names the file and the line or field."""

    def __init__(self, path, message: str, *, line: int | None = None, field: str | None = None):
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.field = path, line, field


class ClusterError(MoplaceError):
    """A cluster is malformed, or a preset name is unknown."""


class StrategyError(MoplaceError):
    """A strategy does not fit its graph or cluster."""
