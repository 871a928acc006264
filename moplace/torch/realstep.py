"""A traced model built for real on a device, and its training step timed there.

`build_real` allocates the model that `moplace.torch.modelfile` or `moplace.torch.hf` built
without memory: a model file's ``build(batch_size)`` runs for real and its model and batch are
moved to the device; an ``hf:`` model is made from the very configuration the trace used
(attention implementation included), its random weights allocated directly on the device and
cast to the traced dtype, trained with AdamW as traced (torch's AdamW keeps its moments in the
weights' dtype: no FP32 master copy). `time_steps` runs the real step (forward, backward,
optimizer step) there, as one batch or as micro-batches accumulating their gradients, and
times it: CUDA events on a GPU, the wall clock on a CPU; on a GPU also the peak of
``torch.cuda.max_memory_allocated`` over the timed steps.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from ._torch import torch


@dataclasses.dataclass
class RealStep:
    """A model, loss, optimizer and batch allocated on ``device``."""

    model: object
    loss: object
    optimizer: object
    x: tuple
    y: object
    device: str

    def parameters_by_name(self, name: str):
        """The tensor a traced placeholder naming parameter or buffer ``name`` reads."""
        try:
            return self.model.get_parameter(name).detach()
        except AttributeError:
            return self.model.get_buffer(name)


@dataclasses.dataclass
class StepTimes:
    """Medians (seconds) over the timed steps: the whole step, its optimizer step; the 10th and
    90th percentiles of the whole step; the peak memory allocated (bytes; None on a CPU, where
    nothing counts it)."""

    step_s: float
    optimizer_s: float
    spread_s: tuple
    steps: int
    peak_bytes: int | None
    micro_batches: int = 1


def build_real(setup, batch_size: int, device: str) -> RealStep:
    """``setup`` (a fake-built `moplace.torch.modelfile.TorchSetup`) built for real on
    ``device`` at ``batch_size``."""
    source = str(setup.source)
    if source.startswith("hf:"):
        from transformers import AutoModelForCausalLM

        config = setup.model.config
        dtype = next(setup.model.parameters()).dtype
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config).to(dtype)
        model.train(setup.model.training)
        seq_len = setup.x[0].shape[1]
        x = torch.randint(0, config.vocab_size, (batch_size, seq_len), device=device)
        y = torch.randint(0, config.vocab_size, (batch_size, seq_len), device=device)
        return RealStep(model, setup.loss, torch.optim.AdamW(model.parameters()), (x,), y,
                        device)
    from .modelfile import build_model

    with torch.device(device):  # weights made on the device, not in host memory first
        model, loss, optimizer, x, y = build_model(source, batch_size, meta=False)
    model.to(device)  # the same Parameter objects, so the optimizer's references hold
    if hasattr(loss, "to"):
        loss.to(device)
    return RealStep(model, loss, optimizer, tuple(t.to(device) for t in x), y.to(device), device)


def time_steps(real: RealStep, *, steps: int, warmup: int = 1,
               micro_batches: int = 1) -> StepTimes:
    """Time ``steps`` real training steps of ``real`` after ``warmup`` ones; with
    ``micro_batches`` > 1 each step runs the batch as that many micro-batches, their gradients
    accumulated (each loss divided by their count), then one optimizer step."""
    cuda = str(real.device).startswith("cuda")
    k = int(micro_batches)
    xs = list(zip(*(t.chunk(k) for t in real.x))) if k > 1 else [real.x]
    ys = list(real.y.chunk(k)) if k > 1 else [real.y]
    if len(ys) != k:
        raise ValueError(f"a batch of {real.y.shape[0]} does not make {k} micro-batches")

    def forward_backward():
        real.optimizer.zero_grad(set_to_none=True)
        for x, y in zip(xs, ys):
            loss = real.loss(real.model(*x), y)
            (loss / k if k > 1 else loss).backward()

    for _ in range(warmup):  # the optimizer's state is made in the first step
        forward_backward()
        real.optimizer.step()
    step, opt = [], []
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        marks = []
        for _ in range(steps):
            events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            events[0].record()
            forward_backward()
            events[1].record()
            real.optimizer.step()
            events[2].record()
            marks.append(events)
        torch.cuda.synchronize()
        for a, b, c in marks:
            step.append(a.elapsed_time(c) * 1e-3)
            opt.append(b.elapsed_time(c) * 1e-3)
        peak = int(torch.cuda.max_memory_allocated())
    else:
        for _ in range(steps):
            t0 = time.perf_counter()
            forward_backward()
            t1 = time.perf_counter()
            real.optimizer.step()
            t2 = time.perf_counter()
            step.append(t2 - t0)
            opt.append(t2 - t1)
        peak = None
    ordered = sorted(step)
    spread = (ordered[int(0.1 * (len(ordered) - 1))], ordered[int(round(0.9 * (len(ordered) - 1)))])
    return StepTimes(statistics.median(step), statistics.median(opt), spread, steps, peak, k)
