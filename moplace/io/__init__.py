"""Reading and writing op graphs.

`load_graph` takes a file path, a bundled name (see `list_bundled`) or a name of a registered
graph source (``zoo:MODEL``, see `moplace.io.sources`), and picks the importer from the file's
content: PipeDream ``graph.txt``, moplace's own JSON, or dnn-partitioning JSON.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..core.graph import OpGraph
from ..core.optimizer import applied as optimizer_applied
from ..errors import FormatError
from .bundled import bundled_path, is_bundled_spec, known_names_text, list_bundled
from .dnnpart import load_dnn_partitioning
from .native import FORMAT as NATIVE_FORMAT
from .native import load_native, read_json, save_graph
from .pipedream import load_pipedream
from .sources import GRAPH_SOURCES, known_sources_text, split_spec

__all__ = ["load_graph", "detect_format", "list_bundled", "bundled_path", "save_graph",
           "load_native", "load_pipedream", "load_dnn_partitioning"]

# "nodeX -- description -- key=value, ..." : enough to tell a PipeDream profile from other text
_PIPEDREAM_LINE = re.compile(r"^\S+ -- .* -- \w+=")
_LOADERS = {"pipedream": load_pipedream, "native": load_native,
            "dnn-partitioning": load_dnn_partitioning}


def _first_line(path: Path) -> str:
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    return line
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(path, f"cannot read the file: {exc}") from None
    return ""


def _json_format(path: Path) -> str:
    data = read_json(path)
    if isinstance(data, dict) and data.get("format") == NATIVE_FORMAT:
        return "native"
    edges = data.get("edges") if isinstance(data, dict) else None
    if isinstance(edges, list) and "nodes" in data and all(
            isinstance(e, dict) and "sourceId" in e for e in edges[:1]):
        return "dnn-partitioning"
    raise FormatError(path, f"JSON is neither a {NATIVE_FORMAT!r} file (\"format\": "
                      f"\"{NATIVE_FORMAT}\") nor a dnn-partitioning input (nodes, edges with sourceId)")


def detect_format(path) -> str:
    """``"pipedream"``, ``"native"`` or ``"dnn-partitioning"``, judged from the file's content."""
    path = Path(path)
    try:
        is_file = path.is_file()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise FormatError(path, f"cannot be a file name: {exc}") from None
    if not is_file:
        raise FormatError(path, "no such file (or it is a directory); "
                          + known_names_text(path.name))
    first = _first_line(path)
    if first.lstrip().startswith(("{", "[")) or path.suffix == ".json":
        return _json_format(path)
    if _PIPEDREAM_LINE.match(first):
        return "pipedream"
    raise FormatError(path, "unrecognised graph file: expected a PipeDream graph.txt, a "
                      f"{NATIVE_FORMAT} JSON file or a dnn-partitioning JSON input")


def load_graph(path_or_spec, *, optimizer: str | None = "auto", **kwargs) -> OpGraph:
    """Load a graph from a file, a bundled name such as ``pipedream:resnet50``, or a name
    ``PREFIX:NAME`` of a registered graph source (`moplace.io.sources`) such as ``zoo:mlp``.

    ``optimizer``: the optimizer whose state the update ops keep (`moplace.core.optimizer`):
    ``"auto"`` (default) the one the source names (the dnn-partitioning operator graphs: Adam,
    whose state the files leave out), a name (``"sgd"``, ``"momentum"``, ``"adam"``), or None
    for the bytes as the file gives them.

    Bundled names come first, then files (a file named ``zoo:mlp`` is read as a file), then
    sources. ``kwargs`` go to the importer: ``device_kind``/``name`` (PipeDream,
    dnn-partitioning), ``optimizer_state_factor`` (PipeDream); or to the source's loader. A
    missing file or unknown name raises `FormatError` listing the sources and bundled names.
    """
    return optimizer_applied(_load(path_or_spec, **kwargs), optimizer)


def _load(path_or_spec, **kwargs) -> OpGraph:
    if is_bundled_spec(path_or_spec):
        path = bundled_path(path_or_spec)
    else:
        path = Path(path_or_spec)
        source = _source(path_or_spec, path)
        if source is not None:
            load, name = source
            return load(name, **kwargs)
    return _LOADERS[detect_format(path)](path, **kwargs)


def _source(spec, path: Path):
    """``(loader, name)`` when ``spec`` is ``PREFIX:NAME`` of a registered source and names no
    file or folder; None when it is no such name (or names something on disk); `FormatError`
    for a ``PREFIX:NAME`` that names nothing on disk and no source."""
    split = split_spec(spec)
    if split is None:
        return None
    try:
        if path.exists():
            return None
    except (OSError, ValueError):  # a name too long, a NUL byte: detect_format says so
        return None
    prefix, name = split
    if prefix not in GRAPH_SOURCES:
        raise FormatError(spec, f"no such file (or it is a directory), and {prefix}: is no "
                          f"graph source ({known_sources_text()}); {known_names_text()}")
    return GRAPH_SOURCES[prefix].load, name
