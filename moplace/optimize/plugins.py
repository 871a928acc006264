"""Searchers are plugins, found by name through the entry-point group ``moplace.searchers``.

moplace declares its own searchers in its ``pyproject.toml`` exactly as another package
declares one::

    [project.entry-points."moplace.searchers"]
    nsga2 = "searchers.nsga2:Nsga2Searcher"

An entry point names a `Searcher` subclass. Its docstring's first line is the one-line summary
that ``moplace searchers`` prints; its settings are the fields of its ``Settings`` dataclass
(`moplace.optimize.settings`: type, default, meaning and bounds of each)::

    @dataclass(frozen=True)
    class HillSettings(Settings):
        batch_size: int = setting(8, "strategies proposed per ask", low=1)

    class HillClimber(Searcher):
        \"\"\"Moves one group at a time from the best point so far.\"\"\"

        Settings = HillSettings

A plugin without a ``Settings`` dataclass still works: its ``__init__``'s keyword parameters
are its settings, each one's meaning an entry ``name: meaning`` of a ``Settings:`` section of
its docstring.

Entry points are read once, on first use; a searcher's module is imported only when the
searcher is made or described, so ``import moplace`` stays light. Two installed packages that
claim the same name are refused, naming both.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from importlib import metadata

from ..errors import MoplaceError, did_you_mean
from .settings import (  # noqa: F401 - Setting, REQUIRED and convert_setting are used by callers
    REQUIRED,
    Setting,
    convert_setting,
    converted,
    declared,
    make_settings,
)

#: The entry-point group searchers are registered in.
GROUP = "moplace.searchers"
@dataclass(frozen=True)
class SearcherInfo:
    """What ``moplace searchers`` shows of one registered searcher."""

    name: str
    origin: str  # the distribution that registered it, "name version"
    target: str  # "module:attribute"
    summary: str
    settings: tuple[Setting, ...]


class PluginRegistry:
    """The plugins registered under entry-point group ``group``, by name; ``kind`` names them
    in messages. ``registry[name]`` is the object the entry point names, imported on first
    use; two installed packages that claim one name are refused, naming both."""

    kind = "plugin"

    def __init__(self, group: str, kind: str | None = None):
        self.group = group
        self.kind = kind or self.kind
        self._points: dict[str, metadata.EntryPoint] | None = None
        self._loaded: dict[str, object] = {}

    def reload(self) -> None:
        """Forget what was read, so that the next use reads the entry points again."""
        self._points, self._loaded = None, {}

    def _entry_points(self) -> dict[str, metadata.EntryPoint]:
        if self._points is None:
            points: dict[str, metadata.EntryPoint] = {}
            for ep in metadata.entry_points(group=self.group):
                seen = points.get(ep.name)
                if seen is not None and seen.value != ep.value:
                    a, b = sorted((f"{origin(e)} ({e.value})" for e in (seen, ep)))
                    raise MoplaceError(f"{self.kind} {ep.name!r} is registered twice: by {a} "
                                       f"and by {b}; uninstall one")
                points.setdefault(ep.name, ep)
            self._points = points
        return self._points

    def names(self) -> list[str]:
        """Registered names: moplace's own first, then the others, each alphabetically."""
        points = self._entry_points()
        return sorted(points, key=lambda n: (not self.is_moplaces(n), n))

    def is_moplaces(self, name: str) -> bool:
        """True when moplace itself registered ``name``."""
        return origin(self._entry_points()[name]).split()[0] == "moplace"

    def __contains__(self, name: str) -> bool:
        return name in self._entry_points()

    def __iter__(self):
        return iter(self.names())

    def __getitem__(self, name: str):
        points = self._entry_points()
        if name not in points:
            raise MoplaceError(f"unknown {self.kind} {name!r}{did_you_mean(name, self.names())}; "
                               f"known: {', '.join(self.names())}")
        if name not in self._loaded:
            ep = points[name]
            try:
                obj = ep.load()
            except Exception as exc:  # a plugin that fails to import must not hide the others
                raise MoplaceError(f"{self.kind} {name!r} ({ep.value}, from {origin(ep)}) "
                                   f"cannot be loaded: {type(exc).__name__}: {exc}") from exc
            if not callable(obj):
                raise MoplaceError(f"{self.kind} {name!r}: entry point {ep.value} is not "
                                   f"callable")
            self._loaded[name] = obj
        return self._loaded[name]


class SearcherRegistry(PluginRegistry):
    """The searchers registered under entry-point group ``group``, by name.

    ``registry[name]`` is the searcher's class (imported on first use); `make` builds one with
    its settings checked; `info` describes it.
    """

    kind = "searcher"

    def __init__(self, group: str = GROUP):
        super().__init__(group)

    def info(self, name: str) -> SearcherInfo:
        """Origin, summary and settings of searcher ``name``."""
        cls, ep = self[name], self._entry_points()[name]
        return SearcherInfo(name=name, origin=origin(ep), target=ep.value,
                            summary=summary(cls), settings=tuple(settings_of(cls)))

    def make(self, name: str, **settings):
        """A new searcher ``name`` with ``settings``, each converted to its declared type and
        checked; settings it does not have are refused with its settings listed."""
        cls = self[name]
        if has_declared_settings(cls):
            searcher = cls(make_settings(cls.Settings, name, settings))
        else:  # a plugin that declares its settings by its constructor's signature
            settings = converted(name, settings_of(cls), settings)
            try:
                searcher = cls(**settings)
            except (ValueError, TypeError, OverflowError) as exc:  # its own range check
                raise MoplaceError(f"searcher {name!r}: bad settings {settings}: {exc}") from None
        searcher.name = name
        return searcher


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


def has_declared_settings(cls) -> bool:
    """True when searcher class ``cls`` declares its settings as a `Settings` dataclass."""
    from .searcher import Searcher
    from .settings import NoSettings, Settings

    declared_cls = getattr(cls, "Settings", None)
    if not (isinstance(declared_cls, type) and issubclass(declared_cls, Settings)):
        return False
    # a searcher with a constructor of its own and no Settings declares by its signature
    return declared_cls is not NoSettings or getattr(cls, "__init__", None) is Searcher.__init__


def settings_of(cls) -> list[Setting]:
    """The settings of searcher class ``cls``: the fields of its ``Settings`` dataclass, or,
    for a plugin without one, its ``__init__``'s keyword parameters with their annotations,
    defaults and meanings from the ``Settings:`` section of its docstring."""
    if has_declared_settings(cls):
        return declared(cls.Settings)
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
