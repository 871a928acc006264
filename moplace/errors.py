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
        if len(where) > 200:  # a damaged or mistyped name: keep the message one readable line
            where = where[:120] + "..." + where[-60:]
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


def shown(value, width: int = 60) -> str:
    """``repr(value)`` for an error message, cut to ``width`` characters (a 10,000-digit number
    or a megabyte of text stays one readable line)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return f"a {int(abs(value).bit_length() * 0.30103) + 1}-digit number"  # str() of one
        # over 4300 digits raises
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."
