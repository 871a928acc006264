"""Trace one training step of a fake-built model (`moplace.torch.modelfile`) at aten level.

AOTAutograd's joint export (``aot_export_module(..., trace_joint=True)``) is used, not
``torch.export`` (which traces the forward only) nor a bare ``make_fx`` of a function calling
``torch.autograd.grad`` (which works but names neither the parameters nor their gradients):
it returns one FX graph of the forward and the backward, decomposed to aten ops with exact
shapes and dtypes, together with a signature naming which placeholders are parameters,
buffers and inputs, which node is the loss and which node is each parameter's gradient. Under
the setup's fake mode nothing is computed or allocated.

The optimizer step is not traced: `moplace.torch.convert` adds one update op per parameter
with the state the optimizer keeps (`moplace.core.optimizer`). Attention through SDPA is traced
as the kernels of the device kind the step is traced for (`moplace.torch.attention`), and a
mixture-of-experts layer's experts with the static shapes of a stated routing assumption
(`moplace.torch.moe`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ..errors import MoplaceError
from ._torch import quiet_logs, torch
from .modelfile import TorchSetup


@dataclasses.dataclass
class TracedTorchStep:
    """The joint forward-backward graph of one step and what its nodes are."""

    name: str
    graph: Any  # torch.fx.Graph
    module: Any  # the torch.fx.GraphModule that runs it
    parameters: dict  # placeholder name -> parameter (or buffer) name
    trainable: set  # the parameter names that get a gradient
    gradients: dict  # node name -> parameter name
    tied: dict  # a parameter name -> the name of the parameter it shares storage with
    loss: str  # the loss node's name
    inputs: list  # the batch's placeholder names
    batch_size: int
    optimizer: str  # sgd, momentum or adam
    source: str
    seconds: float
    attention: dict = dataclasses.field(default_factory=dict)  # attention.graph_attention
    moe: list = dataclasses.field(default_factory=list)  # per MoE layer: moe.static_experts


class _Step(torch.nn.Module):
    """The model and its loss as one module returning the loss (what the joint export takes)."""

    def __init__(self, model, loss, n_inputs: int):
        super().__init__()
        self.model, self.loss_fn, self.n_inputs = model, loss, n_inputs

    def forward(self, *batch):
        x, y = batch[:self.n_inputs], batch[self.n_inputs]
        return (self.loss_fn(self.model(*x), y),)


def trace_step(setup: TorchSetup, kind: str | None = None) -> TracedTorchStep:
    """The joint graph of ``setup``'s step, its SDPA calls as ``kind``'s attention kernels
    (`moplace.torch.attention.gpu_attention`; None or ``cpu``: the CPU's); a `MoplaceError`
    naming the model file when PyTorch cannot trace it."""
    from torch._functorch.aot_autograd import aot_export_module

    from .attention import graph_attention, gpu_attention
    from .moe import static_experts

    t0 = time.perf_counter()
    step = _Step(setup.model, setup.loss, len(setup.x))
    try:
        with static_experts(setup.model, setup.routing) as moe, gpu_attention(kind), \
                traceable(), quiet_logs(), setup.mode:
            gm, sig = aot_export_module(step, (*setup.x, setup.y), trace_joint=True,
                                        output_loss_index=0)
    except MoplaceError:
        raise
    except Exception as exc:  # noqa: BLE001 - PyTorch's tracing errors, many kinds
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MoplaceError(f"{setup.source}: PyTorch could not trace the training step: "
                           f"{_line_of(exc, setup.source)}{type(exc).__name__}: "
                           f"{first}") from None
    names = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
    backward = sig.backward_signature
    prefix = "model."  # the wrapper's attribute
    strip = {k: v.removeprefix(prefix) for k, v in names.items()}
    first: dict = {}  # tied weights (an embedding and the head): one tensor, several names
    tied = {}
    for name, p in setup.model.named_parameters(remove_duplicate=False):
        tied[name] = first.setdefault(id(p), name)
    return TracedTorchStep(
        setup.name, gm.graph, gm, strip,
        {v.removeprefix(prefix) for v in sig.inputs_to_parameters.values()},
        {k: v.removeprefix(prefix) for k, v in backward.gradients_to_parameters.items()},
        {k: v for k, v in tied.items() if k != v}, backward.loss_output,
        list(sig.user_inputs), setup.batch_size, setup.optimizer_name, setup.source,
        time.perf_counter() - t0,
        graph_attention(gm.graph, setup.attention or "model", kind), moe)


@contextlib.contextmanager
def traceable():
    """What a step needs to trace without data, for every model (a model file's or ``hf:``'s):
    transformers, where the model uses it, looks for several sequences packed into one row
    by reading the position ids' values when no key-value cache is kept (training keeps
    none), which fake tensors do not have; the steps moplace traces hold one sequence per
    row, so the answer is none."""
    masking = sys.modules.get("transformers.masking_utils")
    find = getattr(masking, "find_packed_sequence_indices", None)
    if find is None:
        yield
        return
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = find


def _line_of(exc: Exception, source: str) -> str:
    """``line N: `` of the model file ``source`` where ``exc`` passed last, or nothing."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if f.filename == source or (not source.startswith("hf:")
                                         and Path(f.filename).resolve() == Path(source).resolve())]
    return f"line {lines[-1]}: " if lines else ""
