"""The step traced a second time, at twice the batch (which tells every op's batch dimension:
`moplace.torch.convert`), in a process of its own beside the first trace (`beside`).

A trace is AOTAutograd's Python work, one core's, about linear in the graph's nodes: 38 s a
trace for Qwen3-30B-A3B's 48 layers on this machine. The two traces are independent, so a
forked child traces the twin while the parent traces the step, and sends back only what the
converter reads of it, each node's output shapes (`node_shapes`). Where the system cannot
fork, has one core, or this process has started CUDA (``--measure`` on a GPU), the twin is
traced after the step, in this process, as before. The
child ends with ``os._exit`` (none of the parent's exit handlers run twice), is killed if the
parent stops first, and its failure is the parent's `MoplaceError`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal

from ..errors import MoplaceError


def node_shapes(traced) -> dict:
    """Each node's name -> the shapes of the tensors in its output, of a traced step
    (`moplace.torch.trace.TracedTorchStep`)."""
    from . import estimate as est

    return {n.name: [tuple(int(d) for d in t.shape) for t in est.tensors(n.meta.get("val"))]
            for n in traced.graph.nodes}


@contextlib.contextmanager
def beside(make):
    """Run ``make()`` (returning something picklable) in a forked process while the body
    runs; yields a function returning its result (waiting for it), or raising its error."""
    from ._torch import torch

    if not hasattr(os, "fork") or (os.cpu_count() or 1) < 2 or torch.cuda.is_initialized():
        yield make  # (a process that has started CUDA must not fork)
        return
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (coverage does not follow it)
        os.close(read)
        try:
            out = ("ok", make())
        except MoplaceError as exc:
            out = ("error", str(exc))
        except BaseException as exc:  # noqa: BLE001 - said by the parent, in one line
            out = ("error", f"{type(exc).__name__}: {exc}")
        try:
            with os.fdopen(write, "wb") as f:
                pickle.dump(out, f)
        finally:
            os._exit(0)
    os.close(write)
    done = []

    def result():
        with os.fdopen(read, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        done.append(True)
        if not data:
            raise MoplaceError("tracing at twice the batch: its process ended without a result")
        kind, value = pickle.loads(data)
        if kind == "error":
            raise MoplaceError(value)
        return value

    try:
        yield result
    finally:
        if not done:  # the body failed: the child's work is not wanted
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                os.close(read)
