"""Graphs shipped inside the package (``moplace/data``), addressed by short names.

Names:
  ``pipedream:<model>``             PipeDream profiles, e.g. ``pipedream:resnet50``.
  ``dnn:<folder>/<stem>``           dnn-partitioning throughput inputs, e.g.
                                    ``dnn:LayerGraphs/resnet50_training``.
  ``dnn:<stem>``                    accepted as a short alias when the stem is unique across the
                                    two folders (``dnn:bert_l-3_training``); ``resnet50_*`` exists
                                    in both LayerGraphs and OperatorGraphs, so it needs the folder.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..errors import FormatError, close_names

PIPEDREAM_PREFIX = "pipedream:"
DNN_PREFIX = "dnn:"
DNN_FOLDERS = ("LayerGraphs", "OperatorGraphs")


def data_root() -> Path:
    """Directory of the bundled data (``moplace/data``)."""
    return Path(str(resources.files("moplace.data")))


@lru_cache(maxsize=1)
def _catalogue() -> dict[str, Path]:
    """Canonical bundled name -> file, in a stable order."""
    root = data_root()
    names: dict[str, Path] = {}
    for graph in sorted((root / "pipedream").glob("*/graph.txt")):
        names[PIPEDREAM_PREFIX + graph.parent.name] = graph
    for folder in DNN_FOLDERS:
        for path in sorted((root / "dnn-partitioning" / "throughput-inputs" / folder).glob("*.json")):
            names[f"{DNN_PREFIX}{folder}/{path.stem}"] = path
    return names


def list_bundled() -> list[str]:
    """All canonical bundled graph names, e.g. ``["pipedream:alexnet", ..., "dnn:LayerGraphs/..."]``."""
    return list(_catalogue())


def is_bundled_spec(spec) -> bool:
    """Whether ``spec`` is written as a bundled name (starts with ``pipedream:`` or ``dnn:``)."""
    return isinstance(spec, str) and spec.startswith((PIPEDREAM_PREFIX, DNN_PREFIX))


def known_names_text(name=None) -> str:
    """The bundled names as one line, for error messages; only the closest, when ``name``
    (what was given) is close to one (``vgg16`` or ``pipedream:vgg61``: ``pipedream:vgg16``)."""
    names = list_bundled()
    if name is not None:
        by_stem = {n.split(":", 1)[1].rsplit("/", 1)[-1]: n for n in names}
        stem = str(name).split(":", 1)[-1].rsplit("/", 1)[-1]  # the prefixes match anyway
        close = [by_stem[c] for c in close_names(stem, by_stem)]
        if close:
            return (f"did you mean {' or '.join(map(repr, close))}? (`moplace graphs` lists "
                    f"the {len(names)} bundled graphs)")
    return "bundled graphs: " + ", ".join(names)


def _dnn_alias(stem: str) -> list[str]:
    """Canonical names whose file stem is ``stem`` (the short ``dnn:<stem>`` form)."""
    return [n for n in _catalogue() if n.startswith(DNN_PREFIX) and n.rsplit("/", 1)[-1] == stem]


def bundled_path(name: str) -> Path:
    """The file behind a bundled name; `FormatError` listing the known names if there is none."""
    catalogue = _catalogue()
    if name in catalogue:
        return catalogue[name]
    if name.startswith(DNN_PREFIX) and "/" not in name:
        matches = _dnn_alias(name[len(DNN_PREFIX):])
        if len(matches) == 1:
            return catalogue[matches[0]]
        if matches:
            raise FormatError(name, "ambiguous bundled name, say which folder: "
                              + " or ".join(matches))
    raise FormatError(name, "unknown bundled graph; " + known_names_text(name))


def bundled_source(path: Path) -> str:
    """``path`` relative to the bundled data directory when it lies inside it, else as given."""
    try:
        return Path(path).resolve().relative_to(data_root().resolve()).as_posix()
    except ValueError:
        return str(path)
