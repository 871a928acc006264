"""Graph sources: graph names written ``PREFIX:NAME`` that a front end turns into an op graph.

`load_graph` reads graph files and the bundled graphs itself (``pipedream:...`` and
``dnn:...`` are bundled files, and those two prefixes stay theirs); any other ``PREFIX:NAME``
that names no file, and whose prefix is registered in `GRAPH_SOURCES`, goes to that source's
loader as ``load(NAME, **options)``. The front ends fill the registry, so this package never
imports them: the command line registers ``zoo:MODEL`` (a Keras model of `moplace zoo`,
profiled with TensorFlow when it is loaded), and a loader imports its heavy libraries only
when it is called.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ..core.graph import OpGraph
from ..registry import Registry
from .bundled import DNN_PREFIX, PIPEDREAM_PREFIX

#: the prefixes of the bundled graphs (`moplace.io.bundled`), which no source may take
BUNDLED_PREFIXES = (PIPEDREAM_PREFIX[:-1], DNN_PREFIX[:-1])
#: a source's prefix: a lowercase word of two characters or more (one letter before a colon
#: is a Windows drive)
_PREFIX = re.compile(r"[a-z][a-z0-9_-]+")
_SPEC = re.compile(r"([a-z][a-z0-9_-]+):(?!//)(.*)", re.DOTALL)


@dataclass(frozen=True)
class GraphSource:
    """``load(name, **options)``: the `OpGraph` of ``PREFIX:name``; ``about``: what the names
    are, for error messages (one short phrase)."""

    load: Callable[..., OpGraph]
    about: str = ""


#: prefix -> `GraphSource`, filled by the front ends (see the module docstring)
GRAPH_SOURCES: Registry[GraphSource] = Registry("graph source")


def add_source(prefix: str, load: Callable[..., OpGraph], about: str = "") -> GraphSource:
    """Register ``load`` as the loader of the names ``prefix:NAME``; a prefix is registered
    once, and the bundled graphs' prefixes are refused."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ValueError(f"a graph source's prefix is a lowercase word of two characters or "
                         f"more, got {prefix!r}")
    if prefix in BUNDLED_PREFIXES:
        raise ValueError(f"{prefix}: names the bundled graphs; pick another prefix")
    return GRAPH_SOURCES.add(prefix, GraphSource(load, about))


def split_spec(spec) -> tuple[str, str] | None:
    """``(prefix, name)`` of a graph name written ``PREFIX:NAME`` (not a URL's ``scheme://``),
    else None. Whether the prefix is registered is not asked."""
    if not isinstance(spec, str):
        return None
    found = _SPEC.fullmatch(spec)
    return (found.group(1), found.group(2)) if found else None


def known_sources_text() -> str:
    """The registered sources as one phrase, for error messages."""
    if not GRAPH_SOURCES.names():
        return "no graph sources are registered"
    return "graph sources: " + ", ".join(
        f"{p}:NAME ({GRAPH_SOURCES[p].about})" if GRAPH_SOURCES[p].about else f"{p}:NAME"
        for p in GRAPH_SOURCES.names())
