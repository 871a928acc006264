"""Traced graphs kept per model, batch, sequence length and dtype (`TraceCache`).

Tracing Llama 3 8B takes most of a minute; the graph it gives depends only on what was traced
and how. A trace is kept under a key that hashes

- the built step (`setup_identity`: built on the meta device first, in a second): its modules,
  every parameter's and buffer's shape and dtype, the batch's shapes, the loss, the optimizer
  and its settings; so a model file that reads its sizes from elsewhere is told apart;
- the sequence length, the dtype, the device kinds estimated for and the attention traced (the
  implementation and the kind whose kernels SDPA runs as);
- what made it: the versions of torch and transformers, and the source of the front end and
  of the estimates (``moplace/torch``, ``moplace/costs``, ``moplace/core/optimizer.py``, the
  shipped calibrations in ``moplace/data/calibration``), so that a changed converter, device
  table or calibration never serves a stale graph.

The folder is ``$MOPLACE_CACHE`` or ``$XDG_CACHE_HOME/moplace`` (``~/.cache/moplace``), a file
``traces/KEY.json`` each, written whole then renamed (two processes never see half a file). A
file that does not load is traced again and replaced. A step measured for real (``--measure``)
is never kept: its times are this run's.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

#: the sources whose change changes a traced graph (relative to the moplace package)
SOURCES = ("torch", "costs", "core/optimizer.py", "data/calibration")


def cache_root() -> Path:
    """Where moplace keeps what it can make again: ``$MOPLACE_CACHE``, else
    ``$XDG_CACHE_HOME/moplace``, else ``~/.cache/moplace``."""
    if os.environ.get("MOPLACE_CACHE"):
        return Path(os.environ["MOPLACE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "moplace"


def _source_digest() -> str:
    h = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for rel in SOURCES:
        where = package / rel
        files = (sorted(f for f in where.rglob("*") if f.suffix in (".py", ".json"))
                 if where.is_dir() else [where] if where.is_file() else [])
        for f in files:
            h.update(str(f.relative_to(package)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def setup_identity(setup) -> bytes:
    """What a built step is, as bytes: the model's modules (their repr) and every parameter's
    and buffer's name, shape, dtype and whether it trains, the batch's shapes and dtypes, the
    loss, the optimizer and its settings. Built without memory in a second, it catches what
    a file's bytes miss (a model file reading its sizes from the environment)."""
    def tensor(t):
        return (tuple(t.shape), str(t.dtype)) if hasattr(t, "shape") else repr(t)

    model = setup.model
    params = [(n, tensor(p), bool(p.requires_grad)) for n, p in model.named_parameters()]
    buffers = [(n, tensor(b)) for n, b in model.named_buffers()]
    opt = setup.optimizer
    settings = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    return repr((setup.name, repr(model), params, buffers, [tensor(x) for x in setup.x],
                 tensor(setup.y), getattr(setup.loss, "__qualname__", repr(setup.loss)),
                 type(opt).__qualname__, settings, setup.batch_size)).encode()


def trace_key(setup, kinds, seq_len, dtype: str, attention=None) -> str:
    """The key of a trace of the built step ``setup`` (module docstring), 32 hex digits."""
    import torch

    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:  # model files need no transformers
        tf_version = None
    h = hashlib.sha256(setup_identity(setup))
    h.update(repr((sorted(kinds), seq_len, dtype, torch.__version__, tf_version,
                   _source_digest(), *(() if attention is None else (attention,)))).encode())
    return h.hexdigest()[:32]


class TraceCache:
    """The kept traces in ``root`` (`cache_root` by default)."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_root() / "traces"

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def load(self, key: str):
        """The graph kept under ``key``, or None (none kept, or one that does not load)."""
        from ..errors import MoplaceError
        from ..io.native import load_native

        path = self.path(key)
        if not path.is_file():
            return None
        try:
            return load_native(path)
        except (MoplaceError, OSError, ValueError):
            return None

    def store(self, key: str, graph) -> Path | None:
        """Keep ``graph`` under ``key``; None when the folder cannot be written (a read-only
        home: the trace is then just not kept)."""
        from ..io.native import save_graph

        tmp = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".part")
            os.close(fd)
            save_graph(graph, tmp)
            os.replace(tmp, self.path(key))
        except OSError:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return None
        return self.path(key)
