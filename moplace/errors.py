"""User-facing errors.

Every error a user can cause (bad file, bad name, bad strategy) is a `MoplaceError`; the CLI
prints its message and exits non-zero without a traceback. Anything else is a bug.

Two helpers keep a message one short line whatever the input: `shown` renders a value the
user gave (never ``repr`` or ``str`` of it whole: an integer over 4,300 digits cannot be
written in decimal, a deeply nested list cannot be repr'd), and `parse_toml` turns every way
tomllib fails on a damaged file into a `FormatError` with its line.
"""

from __future__ import annotations

import math
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


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
        if field is not None:  # a path of keys, some of them the file's own: shown, not repr
            where += f", field {shown(field, 120)}"
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.field = path, line, field


#: the longest error line the command line prints (a value quoted whole in a message, such as
#: a node name of 5,000 characters, is cut there)
MAX_ERROR_LINE = 400


def error_line(exc: BaseException) -> str:
    """``exc``'s message as the command line prints it: at most `MAX_ERROR_LINE` characters,
    the rest cut and counted (the file, line and field come first, so they stay)."""
    text = str(exc)
    if len(text) <= MAX_ERROR_LINE:
        return text
    keep = text[:MAX_ERROR_LINE - 40]
    space = max(keep.rfind(" "), keep.rfind(", "))  # never mid-word: a name is whole or gone
    if space > MAX_ERROR_LINE // 2:
        keep = keep[:space].rstrip(",")
    return f"{keep}... ({len(text) - len(keep)} more characters)"


def names_within(names, width: int) -> str:
    """``names`` joined by commas, each whole, as many as fit in ``width`` characters, the rest
    counted ("a, b and 5 more"): a list in a message is never cut mid-name."""
    names = [str(n) for n in names]
    shown_names: list[str] = []
    for k, name in enumerate(names):
        rest = len(names) - k - 1
        if len(", ".join(shown_names + [name])) + (len(f" and {rest} more") if rest else 0) \
                > width:
            return (", ".join(shown_names) + " and " if shown_names else "") + \
                f"{len(names) - k} more"
        shown_names.append(name)
    return ", ".join(shown_names)


class ClusterError(MoplaceError):
    """A cluster is malformed, or a preset name is unknown."""


class StrategyError(MoplaceError):
    """A strategy does not fit its graph or cluster."""


#: an integer past Python's limit on decimal conversion (4,300 digits): int() of it raises
LONG_INTEGER = re.compile(r"\d(?:_?\d){4300,}")


#: how deep arrays and inline tables may nest in a TOML file moplace reads (its files nest 2
#: deep); deeper is a damaged file, refused before tomllib, which recurses once per level (how
#: deep it gets depends on the recursion limit, which TensorFlow raises from 1,000 to 3,000)
MAX_TOML_DEPTH = 100


def parse_toml(text: str, path) -> dict:
    """``tomllib.loads(text)``, every failure a `FormatError` naming ``path`` and the line:
    malformed TOML, arrays or inline tables nested more than `MAX_TOML_DEPTH` deep, and
    integers past Python's 4,300-digit limit (ValueError from tomllib)."""
    if text.count("[") + text.count("{") >= MAX_TOML_DEPTH:  # (a cheap test first)
        line = deepest_line(text, MAX_TOML_DEPTH + 1)
        if line is not None:
            raise FormatError(path, f"malformed TOML: arrays or inline tables nested more than "
                              f"{MAX_TOML_DEPTH} deep", line=line)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        if line is None:
            found = re.search(r"line (\d+)", str(exc))
            line = int(found.group(1)) if found else None
        raise FormatError(path, f"malformed TOML: {exc}", line=line) from None
    except RecursionError:  # a deep caller's stack, or nesting deepest_line misjudged
        raise FormatError(path, "malformed TOML: arrays or inline tables nested too deeply",
                          line=deepest_line(text, 50)) from None
    except ValueError as exc:  # int() of a decimal integer over 4,300 digits
        found = LONG_INTEGER.search(text)
        if found is None:
            raise FormatError(path, f"malformed TOML: {exc}") from None
        digits = len(found.group().replace("_", ""))
        raise FormatError(path, f"malformed TOML: an integer of {digits} digits",
                          line=text.count("\n", 0, found.start()) + 1) from None


def deepest_line(text: str, depth: int) -> int | None:
    """The line where brackets and braces first nest ``depth`` deep outside strings and
    comments (TOML's, near enough for naming the line of a damaged file), or None."""
    level, line, quote, k = 0, 1, None, 0
    while k < len(text):
        c = text[k]
        if c == "\n":
            line += 1
            if quote in ('"', "'"):  # single-line strings end at the line (if malformed)
                quote = None
        elif quote:
            if text.startswith(quote, k):
                k += len(quote) - 1
                quote = None
            elif c == "\\" and quote[0] == '"':
                k += 1
        elif c == "#":
            end = text.find("\n", k)
            k = len(text) if end < 0 else end
            continue
        elif c in "\"'":
            quote = c * 3 if text.startswith(c * 3, k) else c
            k += len(quote) - 1
        elif c in "[{":
            level += 1
            if level >= depth:
                return line
        elif c in "]}":
            level -= 1
        k += 1
    return None


def close_names(name, choices, n: int = 2) -> list[str]:
    """The (at most ``n``) ``choices`` closest to a mistyped ``name``, case ignored."""
    import difflib

    lowered = {str(c).lower(): str(c) for c in choices}
    return [lowered[c] for c in
            difflib.get_close_matches(str(name).lower(), list(lowered), n=n, cutoff=0.6)]


def did_you_mean(name, choices) -> str:
    """`` (did you mean 'x'?)`` for the choices closest to a mistyped ``name`` (case ignored),
    or ``""`` when none is close."""
    close = close_names(name, choices)
    return " (did you mean " + " or ".join(map(repr, close)) + "?)" if close else ""


def shown(value, width: int = 60) -> str:
    """``value`` for an error message, like ``repr(value)`` but never longer than ``width``
    characters and never failing: a 10,000-digit integer (whose ``str()`` raises past Python's
    4,300-digit limit) is "a 10000-digit integer", wherever it sits in a list or table; a list
    nested 100,000 deep (whose ``repr()`` raises RecursionError) or a megabyte of text stays one
    short line. Every message that shows a value a user gave goes through here."""
    parts: list[str] = []
    budget = [width + 1]  # characters still wanted: one past the width shows it was cut

    def put(text: str) -> None:
        parts.append(text[:budget[0]])
        budget[0] -= len(parts[-1])

    # an explicit stack, not recursion: (value to render) or (text to write) entries
    stack: list = [(False, value)]
    while stack and budget[0] > 0:
        is_text, item = stack.pop()
        if is_text:
            put(item)
        elif isinstance(item, (list, tuple, dict)):
            if isinstance(item, dict):
                opening, closing = "{}"
                entries = [[(False, k), (True, ": "), (False, v)]
                           for k, v in _first(item.items(), budget[0])]
            else:
                opening, closing = "[]" if isinstance(item, list) else "()"
                entries = [[(False, v)] for v in _first(item, budget[0])]
                if isinstance(item, tuple) and len(item) == 1:
                    closing = ",)"
            items: list = [(True, opening)]
            for k, entry in enumerate(entries):
                items += ([(True, ", ")] if k else []) + entry
            items.append((True, closing))
            stack.extend(reversed(items))
        else:
            put(_scalar(item, budget[0]))
    text = "".join(parts)
    return text if len(text) <= width else text[:width - 3] + "..."


def _first(items, n: int):
    """At most ``n`` of ``items`` (``n`` characters left: more never fit)."""
    out = []
    for item in items:
        if len(out) == n:
            break
        out.append(item)
    return out


def _scalar(value, width: int) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        # str() of one over 4,300 digits raises; log10 takes any integer, and can be one over
        digits = math.floor(math.log10(abs(value))) + 1
        if digits < 10**5 and abs(value) < 10 ** (digits - 1):
            digits -= 1
        return f"a {digits}-digit integer"
    if isinstance(value, str):
        return repr(value[:width + 2])  # a megabyte of text: repr only what can be shown
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a value that cannot show itself is still named
        return f"<a {type(value).__name__}>"
