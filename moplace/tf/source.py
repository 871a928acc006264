"""What a model argument names, decided without TensorFlow (so the CLI refuses a bad one
before the seconds TensorFlow takes to import).

A string without a path separator and without a ``.py`` suffix is a zoo name (see
``moplace.tf.zoo.ZOO``); anything else is a model file.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import FormatError, MoplaceError

#: the names of `moplace.tf.zoo.ZOO`, in its order, known without importing TensorFlow
#: (`moplace zoo`, and a mistyped name refused before TensorFlow loads); a test holds them equal
ZOO_NAMES = ("resnet50", "inception_v3", "vgg19", "mobilenet_v2", "nasnet_mobile", "mlp", "cnn",
             "transformer", "gnmt")


def model_file(model_or_path: str) -> Path | None:
    """The model file ``model_or_path`` names, or None for a zoo name."""
    text = str(model_or_path)
    if os.sep in text or (os.altsep and os.altsep in text) or text.endswith(".py"):
        return Path(text)
    return None


def check_model_file(model_or_path: str) -> Path | None:
    """`model_file`, refused (`FormatError` naming it) when it names a file that is not there."""
    path = model_file(model_or_path)
    if path is not None and not path.is_file():
        raise FormatError(path, "no such model file (or it is a directory)")
    if path is not None and path.suffix != ".py":  # before TensorFlow loads (as modelfile does)
        raise FormatError(path, "not a model file: a model file is a Python file (a name ending "
                                "in .py) defining build(batch_size)")
    return path


def profiled_source(graph) -> tuple[str, int]:
    """The model (zoo name or file) and batch size an op graph written by `moplace profile`
    was profiled from; `MoplaceError` for any other graph, or when that file is gone."""
    source = graph.metadata.get("source") or {}
    if "model" not in source or "batch_size" not in source:
        raise MoplaceError(f"graph {graph.name!r} does not say which model it was profiled from "
                           "(metadata 'source'); only graphs written by `moplace profile` can "
                           "be applied")
    check_model_file(source["model"])
    return source["model"], int(source["batch_size"])
