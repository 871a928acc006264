"""Load a training step from a zoo name or from a user's Python model file.

A model file is a Python file that defines ``build(batch_size)`` returning
``(model, loss, optimizer, (x, y))``: a functional or Sequential ``keras.Model`` with static
input shapes, a Keras loss (or any ``loss(y_true, y_pred)`` callable), a Keras optimizer, and one
batch of numpy arrays with ``batch_size`` rows. For a model with several inputs, ``x`` is a tuple
or list of arrays in ``model.inputs`` order. Example::

    import keras, numpy as np

    def build(batch_size):
        inputs = keras.Input(shape=(16,), name="x")
        model = keras.Model(inputs, keras.layers.Dense(10)(inputs))
        rng = np.random.default_rng(0)
        x = rng.standard_normal((batch_size, 16), dtype=np.float32)
        y = rng.integers(0, 10, size=batch_size)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return model, loss, keras.optimizers.Adam(), (x, y)

Every problem with the file is a `FormatError` naming it (and the line, where one is known);
no traceback is shown.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

import keras
import numpy as np

from ..errors import FormatError, MoplaceError
from .source import check_model_file
from .trace import TracedStep, trace_training_step
from .zoo import ZOO, TrainingSetup, _start

_RETURNS = "build(batch_size) must return (model, loss, optimizer, (x, y))"
_NOT_PYTHON = ("not a model file: a model file is a Python file (a name ending in .py) defining "
               "build(batch_size)")


def load_setup(model_or_path: str, batch_size: int) -> TrainingSetup:
    """Build the training step named by ``model_or_path`` with one batch of ``batch_size``.

    A string without a path separator and without a ``.py`` suffix is a zoo name (see
    ``moplace.tf.zoo.ZOO``); anything else is a model file. The setup's name is the zoo name or
    the file's stem. Raises `MoplaceError` (`FormatError` for a bad file).
    """
    _start(batch_size)  # checks batch_size; seeding here too makes files without seeds repeatable
    path = check_model_file(model_or_path)
    if path is None:
        try:
            builder = ZOO[str(model_or_path)]
        except MoplaceError as exc:
            if _is_file(str(model_or_path)):  # "notes.txt": a file, but no model file
                raise FormatError(model_or_path, f"{_NOT_PYTHON}; nor is it a zoo model "
                                  f"({', '.join(ZOO.names())})") from None
            raise MoplaceError(f"{exc}; or give the path of a .py file defining build(batch_size)") from None
        return check_setup(builder(batch_size), batch_size, str(model_or_path))
    module = _import(path)
    build = getattr(module, "build", None)
    if not callable(build):
        raise FormatError(path, "defines no build(batch_size) function")
    try:
        result = build(batch_size)
    except Exception as exc:  # noqa: BLE001 - any failure in user code is the user's to fix
        raise FormatError(path, f"build({batch_size}) raised {_describe(exc)}",
                          line=_user_line(exc, path)) from None
    return check_setup(_as_setup(result, path), batch_size, path)


def check_setup(setup: TrainingSetup, batch_size: int, source: Any) -> TrainingSetup:
    """Check that ``setup`` has static input shapes and a batch of ``batch_size``; return it.

    A list ``x`` (several inputs) comes back as a tuple.
    ``source`` (a zoo name or a path) is named in the `FormatError` raised on a problem.
    """
    def fail(message: str):
        raise FormatError(source, message)

    model = setup.model
    try:
        inputs = list(model.inputs)
    except AttributeError:  # subclassed models, and Sequential models without keras.Input
        fail("the model has no defined inputs: build it with keras.Input (functional API, or a "
             "Sequential model starting with keras.Input); subclassed models are not supported")
    # moplace plans one fixed-size step, so every non-batch dimension must be known
    for t in inputs:
        shape = tuple(t.shape)
        if any(d is None for d in shape[1:]):
            fail(f"dynamic shapes are not supported: input {t.name!r} has shape {shape}")
        if shape[0] is not None and shape[0] != batch_size:
            fail(f"input {t.name!r} has a fixed batch size {shape[0]}, not {batch_size}")
    x, y = setup.data
    xs = list(x) if isinstance(x, (tuple, list)) else [x]
    bad = [type(a).__name__ for a in xs if not isinstance(a, np.ndarray)]
    if isinstance(x, (tuple, list)) and bad:  # e.g. x.tolist(): nested lists, not one list per input
        fail(f"x must be a numpy array, or a tuple of numpy arrays (one per model input); "
             f"got a {type(x).__name__} holding {bad[0]}")
    if len(xs) != len(inputs):
        fail(f"the model has {len(inputs)} input(s) but x holds {len(xs)} array(s)")
    for t, arr in zip(inputs, xs):
        if not isinstance(arr, np.ndarray):
            fail(f"x for input {t.name!r} must be a numpy array, got {type(arr).__name__}")
        if arr.ndim == 0 or arr.shape[1:] != tuple(t.shape)[1:] or arr.shape[0] != batch_size:
            fail(f"x for input {t.name!r} has shape {arr.shape}; expected "
                 f"{(batch_size, *tuple(t.shape)[1:])}")
    if not isinstance(y, np.ndarray):
        fail(f"y must be a numpy array, got {type(y).__name__}")
    if y.ndim == 0 or y.shape[0] != batch_size:
        fail(f"y has shape {y.shape}; expected {batch_size} rows (the batch size)")
    if isinstance(x, list):  # a frozen setup holds no lists
        setup = dataclasses.replace(setup, data=(tuple(x), y))
    return setup


def _as_setup(result: Any, path: Path) -> TrainingSetup:
    """Turn what a file's build() returned into a TrainingSetup, checking the types."""
    if not isinstance(result, (tuple, list)) or len(result) != 4:
        got = f"a {len(result)}-tuple" if isinstance(result, (tuple, list)) else type(result).__name__
        raise FormatError(path, f"{_RETURNS}; got {got}")
    model, loss, optimizer, data = result
    if not isinstance(model, keras.Model):
        raise FormatError(path, f"{_RETURNS}: model must be a keras.Model, got {type(model).__name__}")
    if not callable(loss):
        raise FormatError(path, f"{_RETURNS}: loss must be callable, got {type(loss).__name__}")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise FormatError(path, f"{_RETURNS}: optimizer must be a keras optimizer, "
                                f"got {type(optimizer).__name__}")
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise FormatError(path, f"{_RETURNS}: the data must be a pair (x, y)")
    return TrainingSetup(model, loss, optimizer, tuple(data), path.stem)


def _import(path: Path):
    """Execute the file as a fresh module; import errors become a FormatError with the line."""
    resolved = path.resolve()
    name = f"_moplace_model_{abs(hash(str(resolved)))}"
    if path.suffix != ".py":  # "notes.txt": Python has no loader for it (spec is None)
        raise FormatError(path, _NOT_PYTHON)
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise FormatError(path, _NOT_PYTHON)
    module = importlib.util.module_from_spec(spec)
    # registered while it runs, as a normal import would be (dataclasses and pickle look it up)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken file is a user error
        sys.modules.pop(name, None)
        raise FormatError(path, f"cannot import the file: {_describe(exc)}",
                          line=_user_line(exc, path)) from None
    return module


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte
        return False


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):  # its str() repeats the file name and line we already give
        return f"{type(exc).__name__}: {exc.msg}"
    return f"{type(exc).__name__}: {exc}"


def _user_line(exc: BaseException, path: Path) -> int | None:
    """The innermost line of the user's file in the exception's traceback, if any."""
    target = str(path.resolve())
    if isinstance(exc, SyntaxError) and exc.filename and _same(exc.filename, target):
        return exc.lineno
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if _same(f.filename, target)]
    return lines[-1] if lines else None


def _same(filename: str, target: str) -> bool:
    try:
        return str(Path(filename).resolve()) == target
    except (OSError, ValueError):
        return False


def trace_model(model_or_path: str, batch_size: int) -> TracedStep:
    """Build ``model_or_path`` (zoo name or model file) at ``batch_size`` and trace its step."""
    # Keras numbers layer and optimizer names per process ("sgd_4"); a fresh session makes a
    # rebuilt model's node names match the ones it was profiled with
    keras.backend.clear_session()
    source = {"model": _source_name(model_or_path), "batch_size": int(batch_size)}
    return trace_training_step(load_setup(model_or_path, batch_size), source=source)


def _source_name(model_or_path: str) -> str:
    path = Path(model_or_path)
    return str(path.resolve()) if path.suffix == ".py" or path.exists() else model_or_path
