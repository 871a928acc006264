"""The simulator's one-device step beside a real one: what ``moplace profile --measure`` prints
and what `moplace.torch.fidelity` tabulates.

The real step keeps the optimizer's state as torch keeps it: torch's AdamW (and SGD with
momentum) hold their state in the weights' dtype, with no FP32 master copy, so a real bf16
step's peak is compared with the graph under the optimizer without ``-mixed`` (``adam``), not
with moplace's default for 16-bit weights (``adam-mixed``: FP32 masters and moments), and the
lines say so.
"""

from __future__ import annotations

from ..core.baselines import baseline
from ..core.optimizer import MIXED, with_optimizer
from ..simulator.evaluation import evaluate


def as_torch_keeps_it(graph):
    """``graph`` with its optimizer state as torch's optimizer keeps it (no master copy, the
    state in the weights' dtype), and that optimizer's name."""
    name = str(graph.metadata.get("optimizer") or "adam").removesuffix(MIXED)
    return with_optimizer(graph, name), name


def one_device(graph, cluster, micro_batches: int = 1) -> tuple[float, float]:
    """The simulator's step (seconds) and peak memory (bytes) of ``graph`` on the first device
    of ``cluster``, the batch as one or as ``micro_batches`` accumulating their gradients."""
    plan = baseline("single", graph, cluster.n_devices)
    if micro_batches > 1:
        plan = plan.with_options(micro_batches=micro_batches)
    got = evaluate(graph, cluster, plan).objectives()
    return float(got["runtime"]), float(got["peak_memory"])


def measured_lines(graph, measured, cluster, cluster_path) -> list[str]:
    """The real step and peak beside the simulator's one-device step and peak on the measured
    op times, and where they were measured."""
    real_graph, optimizer = as_torch_keeps_it(graph)
    simulated, peak = one_device(real_graph, cluster)
    error = simulated / measured.step_seconds - 1
    if measured.on_gpu:
        where = (f"measured on the {measured.device_name} (kind {measured.kind}, torch.profiler "
                 f"kernel times of {measured.steps} runs; the real step by CUDA events, median "
                 f"of {max(measured.steps, 3)})")
    else:
        where = (f"measured on this CPU ({measured.threads} threads, torch.profiler, the real "
                 f"step median of {max(measured.steps, 3)})")
    lines = [f"{where}: a real step {measured.step_seconds * 1e3:.3f} ms; the simulator's "
             f"one-device step on the measured op times {simulated * 1e3:.3f} ms ({error:+.1%})"]
    if measured.on_gpu:
        lines.append(f"kernel times summed {measured.kernel_sum_s * 1e3:.3f} ms; CUDA events "
                     f"around each node summed {measured.stream_sum_s * 1e3:.3f} ms (kernels "
                     f"and the launch gaps of running the graph node by node)")
    if measured.peak_bytes:
        perr = peak / measured.peak_bytes - 1
        lines.append(f"peak memory: real {size(measured.peak_bytes)} "
                     f"(torch.cuda.max_memory_allocated); simulated {size(peak)} "
                     f"({perr:+.1%}) with the optimizer state as torch keeps it ({optimizer}: "
                     f"state in the weights' dtype, no FP32 master copy)")
    else:
        lines.append("peak memory: not measured on a CPU (nothing counts the allocator's peak "
                     f"there); simulated {size(peak)} with optimizer {optimizer}")
    if graph.metadata.get("optimizer") != optimizer:
        lines.append(f"the graph written keeps {graph.metadata.get('optimizer')}'s state (FP32 "
                     f"masters and moments for 16-bit weights); --optimizer {optimizer} "
                     f"writes it as the real step keeps it")
    lines.append(f"wrote {cluster_path} (one {measured.kind} device with its "
                 f"{size(measured.memory_bytes)}, as --cluster)")
    return lines


def size(n: float) -> str:
    """Bytes as the lines print them: MiB below a GiB, else GiB."""
    return f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"
