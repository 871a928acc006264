"""``zoo:MODEL`` graphs: a model of the zoo, profiled with TensorFlow when it is loaded.

`zoo_graph` is the loader of the ``zoo`` graph source (`moplace.io.sources`; the command line
registers it, so every command takes ``zoo:MODEL`` as its graph) and what a sweep's
``graph = "zoo:MODEL"`` trials call. The model is profiled at ``batch`` on this machine's
first device (links not measured), with roofline estimates for the device kinds ``kinds``, and
kept in the folder ``cache`` when one is given (a sweep's ``graphs/``), so that every trial
with the same model, batch and kinds reuses it. TensorFlow is imported only to profile.
"""

from __future__ import annotations

from pathlib import Path

from ..core.graph import OpGraph
from ..errors import MoplaceError

#: the batch size a ``zoo:MODEL`` graph is profiled at unless told (a sweep's ``batch``)
DEFAULT_BATCH = 32


def zoo_graph(model: str, *, batch: int = DEFAULT_BATCH, kinds=(),
              cache: Path | str | None = None) -> OpGraph:
    """The op graph of zoo model ``model`` profiled at ``batch`` (see the module docstring);
    `MoplaceError` naming the zoo's models for an unknown one, or saying how to install
    TensorFlow where it is missing."""
    from ..io import load_graph
    from ..io.native import save_graph

    kinds = tuple(kinds)
    path = None
    if cache is not None:
        path = Path(cache) / f"zoo-{model}-batch{batch}-{'-'.join(kinds)}.json"
        if path.is_file():
            return load_graph(str(path))
    try:
        from .frontend import profile_model
        from .zoo import ZOO
    except ModuleNotFoundError as exc:
        raise MoplaceError(f"graph zoo:{model} needs TensorFlow ({exc.name} is missing): "
                           "pip install 'moplace[tf]'") from None
    if model not in ZOO:
        raise MoplaceError(f"graph zoo:{model}: unknown zoo model {model!r}; known: "
                           f"{', '.join(ZOO.names())}")
    graph = profile_model(model, batch, estimate_kinds=kinds, measure_links=False).graph
    if path is not None:
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_suffix(".tmp.json")
        save_graph(graph, tmp)
        tmp.replace(path)  # another worker may profile the same model: the last one wins, equal
    return graph
