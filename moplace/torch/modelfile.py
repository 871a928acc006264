"""A PyTorch model file, built without memory.

A model file defines ``build(batch_size)`` returning ``(model, loss, optimizer, (x, y))``: a
``torch.nn.Module``, a loss ``loss(output, y)`` (a ``torch.nn`` loss or any callable), a
``torch.optim`` optimizer over the model's parameters, and one batch (``x`` a tensor, or a
tuple of tensors passed to ``model(*x)``; ``y`` a tensor). Example::

    import torch

    def build(batch_size):
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 10))
        x, y = torch.randn(batch_size, 16), torch.randint(0, 10, (batch_size,))
        return model, torch.nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()), (x, y)

``build`` runs on PyTorch's meta device: every tensor it makes has its shape and dtype but no
storage, so a model of any size builds in seconds (``model.to(torch.bfloat16)`` works there);
its parameters, buffers and batch are then made fake tensors (`FakeTensorMode`) on the CPU,
which the tracer runs on without computing or allocating. Every problem with the file is a
`FormatError` naming it (and the line, where one is known).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

from ..errors import FormatError

RETURNS = "build(batch_size) must return (model, loss, optimizer, (x, y))"
#: the optimizer classes whose state moplace knows (`moplace.core.optimizer`): name per class
OPTIMIZERS = {"SGD": "sgd", "Adam": "adam", "AdamW": "adam", "RMSprop": "momentum",
              "Adagrad": "momentum"}


@dataclasses.dataclass
class TorchSetup:
    """A built training step: the fake model, loss, optimizer and batch, and the fake mode
    they live in (tracing runs in it too)."""

    name: str
    model: Any
    loss: Any
    optimizer: Any
    x: tuple
    y: Any
    batch_size: int
    mode: Any
    source: str
    #: ``sdpa`` or ``eager`` for a Hugging Face model; a model file's is its own (None)
    attention: str | None = None
    #: the routing assumption of its mixture-of-experts layers (`moplace.torch.routing`;
    #: None: balanced)
    routing: Any = None

    @property
    def optimizer_name(self) -> str:
        """``sgd``, ``momentum`` or ``adam``: the state the optimizer keeps per parameter."""
        kind = type(self.optimizer).__name__
        if kind == "SGD":
            return "momentum" if self.optimizer.defaults.get("momentum") else "sgd"
        if kind not in OPTIMIZERS:
            raise FormatError(self.source, f"optimizer {kind} is not one moplace models (known: "
                                           f"{', '.join(OPTIMIZERS)})")
        return OPTIMIZERS[kind]


def imports_torch(path) -> bool:
    """Whether the Python file at ``path`` imports torch (then `moplace profile` builds it as a
    PyTorch model; else as a Keras one)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return False
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n == "torch" or n.startswith("torch.") for n in names):
            return True
    return False


def load_setup(path, batch_size: int, routing=None) -> TorchSetup:
    """Run the model file at ``path`` and its ``build(batch_size)`` under fake tensors (its
    mixture-of-experts layers, if any, to be traced under ``routing``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    path = Path(path)
    model, loss, optimizer, x, y = build_model(path, batch_size, meta=True)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    _make_fake(model, mode)
    x, y = tuple(_fake(t, mode) for t in x), _fake(y, mode)
    return TorchSetup(path.stem, model, loss, optimizer, x, y, int(batch_size), mode, str(path),
                      routing=routing)


def build_model(path, batch_size: int, *, meta: bool):
    """``(model, loss, optimizer, x, y)`` of the model file at ``path``, checked: built on the
    meta device (no storage), or for real (to run it: `moplace.torch.measure`)."""
    import contextlib

    from ._torch import torch

    path = Path(path)
    module = _load_module(path)
    build = getattr(module, "build", None)
    if not callable(build):
        raise FormatError(path, "defines no build(batch_size) function")
    try:
        with torch.device("meta") if meta else contextlib.nullcontext():
            built = build(batch_size)
    except Exception as exc:  # noqa: BLE001 - the user's code: name the file and line
        raise FormatError(path, f"build({batch_size}) failed: {_where(exc, path)}") from None
    if not (isinstance(built, (tuple, list)) and len(built) == 4):
        raise FormatError(path, f"{RETURNS}, got {type(built).__name__}")
    model, loss, optimizer, batch = built
    if not isinstance(model, torch.nn.Module):
        raise FormatError(path, f"{RETURNS}: model must be a torch.nn.Module, got "
                                f"{type(model).__name__}")
    if not callable(loss):
        raise FormatError(path, f"{RETURNS}: loss must be callable")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise FormatError(path, f"{RETURNS}: optimizer must be a torch.optim optimizer, got "
                                f"{type(optimizer).__name__}")
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise FormatError(path, f"{RETURNS}: the batch must be (x, y)")
    x, y = batch
    x = tuple(x) if isinstance(x, (tuple, list)) else (x,)
    if not all(isinstance(t, torch.Tensor) for t in (*x, y)):
        raise FormatError(path, f"{RETURNS}: x and y must be tensors")
    return model, loss, optimizer, x, y


def _fake(t, mode):
    """A fake CPU tensor of ``t``'s shape and dtype (no storage)."""
    from ._torch import torch

    with mode:
        return torch.empty(t.shape, dtype=t.dtype, device="cpu")


def _make_fake(model, mode) -> None:
    """Replace ``model``'s parameters and buffers by fake CPU tensors, in place (a parameter
    shared by several modules stays one parameter)."""
    from ._torch import torch

    made = {}
    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is not None:
                if id(p) not in made:
                    made[id(p)] = torch.nn.Parameter(_fake(p, mode),
                                                     requires_grad=p.requires_grad)
                module._parameters[key] = made[id(p)]
        for key, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[key] = made.setdefault(id(b), _fake(b, mode))


def _load_module(path: Path):
    if path.suffix != ".py" or not path.is_file():
        raise FormatError(path, "not a model file: a Python file (ending in .py) defining "
                                "build(batch_size)")
    name = f"moplace_torch_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise FormatError(path, f"line {exc.lineno}: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - the user's code
        raise FormatError(path, f"running it failed: {_where(exc, path)}") from None
    return module


def _where(exc: Exception, path: Path) -> str:
    """``exc`` with the line of ``path`` it came from, when the traceback passes there."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if Path(f.filename).resolve() == path.resolve()]
    at = f"line {lines[-1]}: " if lines else ""
    first = (str(exc).strip().splitlines() or [""])[0]  # torch's messages add its C++ trace
    return f"{at}{type(exc).__name__}: {first}"
