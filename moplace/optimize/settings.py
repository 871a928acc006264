"""Searcher settings, declared once: a frozen dataclass per searcher, one validator for all.

A searcher declares its settings as a frozen dataclass derived from `Settings`, each field made
with `setting`: its type (the annotation), default, one-line meaning and bounds::

    @dataclass(frozen=True)
    class HillSettings(Settings):
        batch_size: int = setting(8, "strategies proposed per ask", low=1)
        rate: float = setting(0.5, "share of moves that are swaps", low=0, high=1)

    class HillClimber(Searcher):
        Settings = HillSettings

Making one (``HillSettings(batch_size="16")``, or through `Searcher`'s constructor) converts
each value to its declared type (text from the command line as JSON, or yes/no for a bool) and
checks it against its bounds and choices, raising `MoplaceError` that names the setting; a
`Settings.check` override holds rules that tie fields together. ``moplace searchers``, ``--set``,
sweep files, checkpoints (through `Settings.as_dict`) and MLflow params all read these fields.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
from dataclasses import dataclass
from typing import Any

from ..errors import MoplaceError, did_you_mean

#: shown for a setting without a default
REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class Setting:
    """One keyword setting of a searcher as ``moplace searchers`` shows it: its name, type (as
    annotated), default, meaning, and the declared field it comes from (None for a plugin that
    declares its settings by its constructor's signature)."""

    name: str
    type: str
    default: Any
    doc: str
    field: Any = None

    @property
    def allowed(self) -> str:
        """What values the setting allows beyond its type, in words ("" if nothing is said)."""
        return describe(self.field) if self.field is not None else ""


def setting(default: Any, doc: str, *, low: float | None = None, high: float | None = None,
            low_open: bool = False, high_open: bool = False, choices: tuple | None = None,
            length: tuple[int, int] | None = None):
    """A field of a `Settings` dataclass: ``default``, its meaning ``doc`` (one line, as
    ``moplace searchers`` shows it), and what values are allowed: numbers (or each item of a
    tuple) in ``[low, high]`` (``low_open``/``high_open``: that end excluded), one of
    ``choices`` (for a tuple: every item), a tuple of ``length = (fewest, most)`` items. None
    is always allowed where the type allows it."""
    meta = {"doc": doc, "low": low, "high": high, "low_open": low_open, "high_open": high_open,
            "choices": choices, "length": length}
    return dataclasses.field(default=default, metadata=meta)


def default_of(settings_cls, name: str, default: Any):
    """Field ``name`` of ``settings_cls`` again, with another ``default`` (its meaning and
    bounds kept): for a searcher whose settings derive from another's and differ in a default
    only."""
    base = next(f for f in dataclasses.fields(settings_cls) if f.name == name)
    return dataclasses.field(default=default, metadata=base.metadata)


@dataclass(frozen=True)
class Settings:
    """Base of every searcher's settings (see the module docstring)."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = _checked(type(self), f, getattr(self, f.name))
            object.__setattr__(self, f.name, value)
        self.check()

    def check(self) -> None:
        """Rules that tie several settings together; raise `MoplaceError` naming them."""

    def as_dict(self) -> dict:
        """The settings as plain JSON values (tuples as lists; an object as its type name)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def replace(self, **changes) -> "Settings":
        """These settings with ``changes`` (checked like new ones)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class NoSettings(Settings):
    """The settings of a searcher that has none."""


def declared(settings_cls) -> list[Setting]:
    """The `Setting` of each field of ``settings_cls``."""
    return [Setting(f.name, str(f.type), f.default if f.default is not dataclasses.MISSING
                    else REQUIRED, _sentence(f.metadata.get("doc", "")), f)
            for f in dataclasses.fields(settings_cls)]


def _sentence(doc: str) -> str:
    doc = doc.strip()
    return doc + "." if doc and not doc.endswith((".", "!", "?")) else doc


def converted(searcher: str, settings: list[Setting], values: dict) -> dict:
    """``values`` each converted to its setting's type and checked; a name that is none of
    ``settings`` is refused with them listed (errors name ``searcher``)."""
    known = {s.name: s for s in settings}
    unknown = [k for k in values if k not in known]
    if unknown:
        raise MoplaceError(f"searcher {searcher!r} has no setting {unknown[0]!r}"
                           f"{did_you_mean(unknown[0], known)}; its settings: "
                           f"{', '.join(known) or 'none'}")
    return {k: convert_setting(searcher, known[k], v) for k, v in values.items()}


def make_settings(settings_cls, searcher: str, values: dict):
    """``settings_cls(**values)``, the values `converted` first so that an error names
    ``searcher``."""
    return settings_cls(**converted(searcher, declared(settings_cls), values))


def _plain(value):
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return value
    return type(value).__name__


_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def describe(f: dataclasses.Field) -> str:
    """What values ``f`` allows, in words ("at least 1", "in [0, 1)", "one of a, b", "three or
    four numbers, each at least 0")."""
    m = f.metadata
    parts = []
    low, high = m.get("low"), m.get("high")
    if low is not None and high is not None:
        parts.append(f"in {'(' if m['low_open'] else '['}{_num(low)}, {_num(high)}"
                     f"{')' if m['high_open'] else ']'}")
    elif low is not None:
        parts.append(f"{'more than' if m['low_open'] else 'at least'} {_num(low)}")
    elif high is not None:
        parts.append(f"{'less than' if m['high_open'] else 'at most'} {_num(high)}")
    if m.get("choices"):
        parts.append("one of " + ", ".join(map(str, m["choices"])))
    if not m.get("length"):
        return ", ".join(parts)
    fewest, most = m["length"]
    count = _word(fewest) if fewest == most else \
        f"{_word(fewest)} or {_word(most)}" if most == fewest + 1 else \
        f"{_word(fewest)} to {_word(most)}"
    what = "numbers" if "float" in str(f.type) or "int" in str(f.type) else "items"
    return f"{count} {what}" + (f", each {' and '.join(parts)}" if parts else "")


def _word(n: int) -> str:
    return _WORDS[n] if 0 <= n < len(_WORDS) else str(n)


def _num(x) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _checked(cls, f: dataclasses.Field, value):
    return convert_setting(cls.__name__, Setting(f.name, str(f.type), f.default, "", f), value)


def _check_bounds(f: dataclasses.Field, value):
    """``value`` if it is within what field ``f`` allows, else `MoplaceError` naming ``f``."""
    if value is None or not f.metadata:
        return value
    m = f.metadata
    items = value if isinstance(value, tuple) else (value,)
    if m.get("length"):
        fewest, most = m["length"]
        if not fewest <= len(items) <= most:
            raise _bad(f, value)
    for item in items:
        if m.get("choices") and item not in m["choices"]:
            raise _bad(f, value)
        if isinstance(item, (int, float)) and not isinstance(item, bool) \
                and not _in_bounds(item, m):
            raise _bad(f, value)
    return value


def _in_bounds(x, m) -> bool:
    if not math.isfinite(x):
        return False
    low, high = m.get("low"), m.get("high")
    if low is not None and (x < low or (m["low_open"] and x == low)):
        return False
    if high is not None and (x > high or (m["high_open"] and x == high)):
        return False
    return True


def _bad(f: dataclasses.Field, value) -> MoplaceError:
    shown = list(value) if isinstance(value, tuple) else value
    return MoplaceError(f"{f.name} must be {describe(f)}, got {shown!r}")


#: The largest magnitude a number setting may have: no count or rate comes near it, and a
#: larger one (1e308, 10**40) overflows the searchers' arithmetic instead of meaning something.
SETTING_LIMIT = 1e12
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def convert_setting(searcher: str, setting: Setting, value):
    """``value`` converted to ``setting``'s declared type (as `moplace searchers` shows it:
    ``int``, ``float``, ``bool``, ``str``, ``X | None``, ``tuple[float, ...]``...): text from
    the command line is read as JSON or, for ``bool``, as yes/no; numbers must be finite and
    within `SETTING_LIMIT`. A value of none of the declared types raises `MoplaceError`
    naming the setting and the types; a type moplace does not know is passed through. A
    declared setting's bounds and choices are checked too."""
    kinds = [k.strip() for k in setting.type.split("|")] if setting.type else []
    if not kinds or any(k not in _CONVERTERS and not k.startswith("tuple[") for k in kinds):
        return value  # a type moplace cannot check: the searcher checks it
    candidates = [value]
    if isinstance(value, str) and _json_or_text(value) is not value:
        candidates.append(_json_or_text(value))
    elif "str" in kinds and isinstance(value, (int, float)) and not isinstance(value, bool):
        candidates.append(repr(value))  # --set policy=123 was read as a number
    for kind in kinds:
        for v in candidates:
            ok, out = _convert(kind, v)
            if ok:
                return out if setting.field is None else _check_bounds(setting.field, out)
    shown = value if not isinstance(value, str) or len(value) < 60 else value[:57] + "..."
    numbers = " (numbers finite, at most 1e12 in size)" if {"int", "float"} & set(kinds) else ""
    raise MoplaceError(f"setting {setting.name} of searcher {searcher!r} must be "
                       f"{setting.type}{numbers}, got {shown!r}")


def _convert(kind: str, v):
    if kind.startswith("tuple["):
        inner = [k.strip() for k in kind[len("tuple["):-1].split(",")]
        if isinstance(v, str):  # --set restarts=best,random
            v = [_json_or_text(x.strip()) for x in v.split(",")]
        if not isinstance(v, (list, tuple)):
            return False, None
        if len(inner) == 2 and inner[1] == "...":
            inner = [inner[0]] * len(v)
        if len(inner) != len(v):
            return False, None
        out = [_convert(k, x) for k, x in zip(inner, v)]
        return all(ok for ok, _ in out), tuple(x for _, x in out)
    return _CONVERTERS[kind](v) if kind in _CONVERTERS else (False, None)


def _json_or_text(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _number(v, integral: bool):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False, None
    try:
        if not math.isfinite(v) or abs(v) > SETTING_LIMIT:
            return False, None
    except OverflowError:  # an int too large for a float
        return False, None
    if integral:
        return (True, int(v)) if float(v).is_integer() else (False, None)
    return True, float(v)


def _bool(v):
    if isinstance(v, bool):
        return True, v
    if isinstance(v, str) and v.strip().lower() in _TRUE + _FALSE:
        return True, v.strip().lower() in _TRUE
    if isinstance(v, int) and v in (0, 1):
        return True, bool(v)
    return False, None


def _text(v):
    if isinstance(v, os.PathLike):  # a file setting given as a Path
        return True, os.fspath(v)
    return isinstance(v, str), v


_CONVERTERS = {
    "int": lambda v: _number(v, True), "float": lambda v: _number(v, False), "bool": _bool,
    "str": _text, "None": lambda v: (v is None, None),
    "object": lambda v: (True, v), "dict": lambda v: (isinstance(v, dict), v),
}
