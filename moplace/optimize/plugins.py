"""Searchers are plugins, found by name through the entry-point group ``moplace.searchers``.

moplace declares its own searchers in its ``pyproject.toml`` exactly as another package
declares one::

    [project.entry-points."moplace.searchers"]
    nsga2 = "searchers.nsga2:Nsga2Searcher"

An entry point names a `Searcher` subclass. Its ``__init__``'s keyword parameters are the
searcher's settings, and its docstring says what it does: the first line is the one-line
summary that ``moplace searchers`` prints, and a ``Settings:`` section gives each setting's
meaning, one ``name: meaning`` entry per setting (continuation lines indented further)::

    class HillClimber(Searcher):
        \"\"\"Moves one group at a time from the best point so far.

        Settings:
            batch_size: strategies proposed per ask.
        \"\"\"

        def __init__(self, batch_size: int = 8): ...

Entry points are read once, on first use; a searcher's module is imported only when the
searcher is made or described, so ``import moplace`` stays light. Two installed packages that
claim the same name are refused, naming both.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from ..errors import MoplaceError

#: The entry-point group searchers are registered in.
GROUP = "moplace.searchers"
#: Shown for a setting without a default.
REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class Setting:
    """One keyword setting of a searcher: its name, type (as annotated), default and meaning."""

    name: str
    type: str
    default: Any
    doc: str


@dataclass(frozen=True)
class SearcherInfo:
    """What ``moplace searchers`` shows of one registered searcher."""

    name: str
    origin: str  # the distribution that registered it, "name version"
    target: str  # "module:attribute"
    summary: str
    settings: tuple[Setting, ...]


class SearcherRegistry:
    """The searchers registered under entry-point group ``group``, by name.

    ``registry[name]`` is the searcher's class (imported on first use); `make` builds one with
    settings checked against the class's signature; `info` describes it.
    """

    def __init__(self, group: str = GROUP):
        self.group = group
        self._points: dict[str, metadata.EntryPoint] | None = None
        self._classes: dict[str, type] = {}

    def reload(self) -> None:
        """Forget what was read, so that the next use reads the entry points again."""
        self._points, self._classes = None, {}

    def _entry_points(self) -> dict[str, metadata.EntryPoint]:
        if self._points is None:
            points: dict[str, metadata.EntryPoint] = {}
            for ep in metadata.entry_points(group=self.group):
                seen = points.get(ep.name)
                if seen is not None and seen.value != ep.value:
                    a, b = sorted((f"{origin(e)} ({e.value})" for e in (seen, ep)))
                    raise MoplaceError(f"searcher {ep.name!r} is registered twice: by {a} and "
                                       f"by {b}; uninstall one")
                points.setdefault(ep.name, ep)
            self._points = points
        return self._points

    def names(self) -> list[str]:
        """Registered names: moplace's own first, then the others, each alphabetically."""
        points = self._entry_points()
        return sorted(points, key=lambda n: (origin(points[n]).split()[0] != "moplace", n))

    def __contains__(self, name: str) -> bool:
        return name in self._entry_points()

    def __iter__(self):
        return iter(self.names())

    def __getitem__(self, name: str) -> type:
        points = self._entry_points()
        if name not in points:
            raise MoplaceError(f"unknown searcher {name!r}; known: {', '.join(self.names())}")
        if name not in self._classes:
            ep = points[name]
            try:
                cls = ep.load()
            except Exception as exc:  # a plugin that fails to import must not hide the others
                raise MoplaceError(f"searcher {name!r} ({ep.value}, from {origin(ep)}) cannot "
                                   f"be loaded: {type(exc).__name__}: {exc}") from exc
            if not callable(cls):
                raise MoplaceError(f"searcher {name!r}: entry point {ep.value} is not a class")
            self._classes[name] = cls
        return self._classes[name]

    def info(self, name: str) -> SearcherInfo:
        """Origin, summary and settings of searcher ``name``."""
        cls, ep = self[name], self._entry_points()[name]
        return SearcherInfo(name=name, origin=origin(ep), target=ep.value,
                            summary=summary(cls), settings=tuple(settings_of(cls)))

    def make(self, name: str, **settings):
        """A new searcher ``name`` with ``settings``; settings it does not have are refused
        with its settings listed."""
        cls = self[name]
        known = [s.name for s in settings_of(cls)]
        unknown = [k for k in settings if k not in known]
        if unknown:
            raise MoplaceError(f"searcher {name!r} has no setting {unknown[0]!r}; its settings: "
                               f"{', '.join(known) or 'none'}")
        declared = {s.name: s for s in settings_of(cls)}
        settings = {k: convert_setting(name, declared[k], v) for k, v in settings.items()}
        try:
            searcher = cls(**settings)
        except (ValueError, TypeError, OverflowError) as exc:  # a searcher's own range check
            raise MoplaceError(f"searcher {name!r}: bad settings {settings}: {exc}") from None
        searcher.name = name
        return searcher


#: The largest magnitude a number setting may have: no count or rate comes near it, and a
#: larger one (1e308, 10**40) overflows the searchers' arithmetic instead of meaning something.
SETTING_LIMIT = 1e12
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def convert_setting(searcher: str, setting: Setting, value):
    """``value`` converted to ``setting``'s declared type (as `moplace searchers` shows it:
    ``int``, ``float``, ``bool``, ``str``, ``X | None``, ``tuple[float, ...]``...): text from
    the command line is read as JSON or, for ``bool``, as yes/no; numbers must be finite and
    within `SETTING_LIMIT`. A value of none of the declared types raises `MoplaceError`
    naming the setting and the types; a type moplace does not know is passed through."""
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
                return out
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


_CONVERTERS = {
    "int": lambda v: _number(v, True), "float": lambda v: _number(v, False), "bool": _bool,
    "str": lambda v: (isinstance(v, str), v), "None": lambda v: (v is None, None),
    "object": lambda v: (True, v), "dict": lambda v: (isinstance(v, dict), v),
}


def origin(ep: metadata.EntryPoint) -> str:
    """The distribution that declared ``ep`` ("moplace 0.1.0"), or its target if unknown."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return f"entry point {ep.value}"
    return f"{dist.metadata['Name']} {dist.version}"


def summary(cls) -> str:
    """The first line of ``cls``'s docstring."""
    doc = inspect.getdoc(cls) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ").strip()


def settings_of(cls) -> list[Setting]:
    """The keyword settings of searcher class ``cls``: its ``__init__`` parameters with their
    annotations, defaults and meanings from the ``Settings:`` section of its docstring."""
    docs = setting_docs(inspect.getdoc(cls) or "")
    out = []
    for p in inspect.signature(cls).parameters.values():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        ann = p.annotation
        type_ = "" if ann is p.empty else ann if isinstance(ann, str) else \
            getattr(ann, "__name__", str(ann))
        out.append(Setting(p.name, type_, p.default, docs.get(p.name, "")))
    return out


_ENTRY = re.compile(r"^(\s+)(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def setting_docs(doc: str) -> dict[str, str]:
    """``name -> meaning`` from the ``Settings:`` section of a docstring."""
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Settings:")
    except StopIteration:
        return {}
    out: dict[str, str] = {}
    name, indent = None, None
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        m = _ENTRY.match(line)
        width = len(line) - len(line.lstrip())
        if m and (indent is None or width == indent):
            indent, name = width, m.group(2)
            out[name] = m.group(3).strip()
        elif name is not None and indent is not None and width > indent:
            out[name] += " " + line.strip()
        else:
            break
    return out


#: The searchers installed in this environment.
SEARCHERS = SearcherRegistry()


def make_searcher(name: str, **settings):
    """A new searcher by registered name with ``settings`` (unknown names, and settings the
    searcher does not have, are refused with the known ones listed)."""
    return SEARCHERS.make(name, **settings)
