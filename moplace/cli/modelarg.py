"""What a model argument of `profile` and `fidelity` is, decided before any front end loads:
``hf:NAME``, a zoo name, or a model file, PyTorch when it imports torch, else Keras. A file
that is not there, or that Python cannot parse, is refused here in one line whichever front
end would have read it (neither torch nor TensorFlow need be installed to be told so)."""

from __future__ import annotations

import ast
from pathlib import Path

from ..errors import FormatError, MoplaceError, did_you_mean, shown


def model_kind(model: str) -> tuple[str, Path | None]:
    """``("hf", None)``, ``("zoo", None)``, ``("torch", path)`` or ``("keras", path)`` for the
    model argument ``model``; a `MoplaceError` naming the file (and line) for a missing file,
    a folder, a file that is not Python, or a syntax error, and naming the zoo for a name
    that is not in it."""
    from ..tf.source import ZOO_NAMES, model_file

    text = str(model)
    if text.startswith("hf:"):
        return "hf", None
    path = model_file(text)
    if path is None:
        if text in ZOO_NAMES:
            return "zoo", None
        if Path(text).is_file():  # "notes.txt" in the working folder
            raise FormatError(text, f"not a model file (a Python file, its name ending in .py, "
                                    f"defining build(batch_size)); nor a zoo model "
                                    f"({', '.join(ZOO_NAMES)})")
        raise MoplaceError(f"unknown model {shown(text)}{did_you_mean(text, ZOO_NAMES)}: a zoo "
                           f"name ({', '.join(ZOO_NAMES)}), a .py model file (a path), or "
                           f"hf:NAME")
    if not path.exists():
        raise FormatError(path, "no such file")
    if path.is_dir():
        raise FormatError(path, "a folder, not a model file (a .py file defining "
                                "build(batch_size))")
    if path.suffix != ".py":
        raise FormatError(path, "not a model file: a model file is a Python file (a name ending "
                                "in .py) defining build(batch_size)")
    parsed(path)
    from ..torch.modelfile import imports_torch

    return ("torch" if imports_torch(path) else "keras"), path


def parsed(path: Path) -> ast.Module:
    """The syntax tree of the Python file at ``path``; its syntax error as one line
    ``FILE:LINE: SyntaxError: ...``."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise FormatError(path, f"cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"not UTF-8 text (byte {exc.start}): not a Python file") from None
    try:
        return ast.parse(text, str(path))
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}" if exc.lineno else str(path)
        raise MoplaceError(f"{where}: SyntaxError: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes; nesting too deep
        raise MoplaceError(f"{path}: SyntaxError: {str(exc)[:200] or type(exc).__name__}") \
            from None

