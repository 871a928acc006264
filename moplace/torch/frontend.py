"""`moplace profile` for a PyTorch model file: build it without memory, trace its step twice
(at the batch and at twice the batch, which tells every op's batch dimension; the two at once
where a core is free: `moplace.torch.twin`), and write the op graph with roofline estimates
for the device kinds asked for.

A trace is kept per model, batch, sequence length, dtype and device kinds
(`moplace.torch.cache`), so tracing the same model again reads it back.

With ``--measure`` the model is also built for real on a GPU (``--device cuda``, the default
where one is visible) or this machine's CPU and every op timed there (`moplace.torch.measure`),
as the device's kind (``H100``, ``cpu``...); every other kind's time is an estimate, and the
graph and every result computed on it say so.
"""

from __future__ import annotations

import dataclasses
import time

from ..progress import Ticker

STAGES = ("building the model (fake tensors)", "tracing the step",
          "tracing at twice the batch", "writing the op graph")


@dataclasses.dataclass
class TracedModel:
    """A PyTorch model's op graph and how long each part took."""

    graph: object
    parameters: int
    trace_seconds: float
    total_seconds: float
    measured: object = None  # moplace.torch.measure.Measured, when measured
    cached: object = None  # the trace cache's file, when the graph came from it


def profile_torch_model(path, batch_size: int, kinds, *, seq_len: int | None = None,
                        dtype: str | None = None, measure_steps: int = 0, progress=None,
                        cache: bool = True, attention: str | None = None,
                        target_kind: str | None = None, device: str = "cpu",
                        calibrations: dict | None = None, routing=None) -> TracedModel:
    """The op graph of the model file at ``path`` (or ``hf:NAME``, a Hugging Face model by
    configuration at ``seq_len`` tokens and ``dtype`` (None: the configuration's) with
    ``attention``: `moplace.torch.hf`)
    at ``batch_size``, its SDPA traced as the attention kernels of ``target_kind`` (default:
    the first of ``kinds``; `moplace.torch.attention`), its compute estimated on each device
    kind of ``kinds`` (`moplace.torch.estimate`; ``calibrations``: kind -> a user's
    `Calibration` in place of the shipped one), its mixture-of-experts layers under
    ``routing`` (`moplace.torch.routing.Routing`; None: balanced), and with ``measure_steps``,
    measured on ``device`` (``cuda`` or ``cpu``) over that many runs
    (`moplace.torch.measure`: built for real there; pass the device's kind as
    ``target_kind``). With ``cache`` (and no
    measuring) a graph traced before with the same inputs is read from the trace cache, and a
    new one kept there (`moplace.torch.cache`)."""
    from .cache import TraceCache, trace_key
    from .convert import to_op_graph
    from .routing import Routing
    from .twin import beside, node_shapes
    from .trace import trace_step

    t0 = time.perf_counter()
    if str(path).startswith("hf:"):
        from .hf import resolve_dtype

        dtype = resolve_dtype(str(path)[3:], dtype)[0]
    else:
        dtype = dtype or "fp32"

    def load_setup(spec, batch):
        if str(spec).startswith("hf:"):
            from .hf import load_hf_setup

            return load_hf_setup(str(spec)[3:], batch, seq_len, dtype, attention, routing)
        from .modelfile import load_setup as from_file

        return from_file(spec, batch, routing)

    ticker = Ticker(progress, len(STAGES) + bool(measure_steps))
    ticker.stage(STAGES[0])
    setup = load_setup(path, batch_size)
    parameters = sum(p.numel() for p in setup.model.parameters())
    ticker.tick()
    # SDPA as the kernels of the device that runs the graph, else of the first kind estimated
    target = target_kind or ("cpu" if measure_steps and str(device).startswith("cpu")
                             else list(kinds)[0] if kinds else None)
    mine = tuple(sorted((k, repr(c)) for k, c in (calibrations or {}).items()))
    stated = routing is not None and routing != Routing()  # (the default keeps older keys)
    ours = (setup.attention, target, *mine, *(routing.key() if stated else ()))
    key = (trace_key(setup, kinds, seq_len, dtype, ours)
           if cache and not measure_steps else None)
    store = TraceCache()
    if key is not None:
        kept = store.load(key)
        if kept is not None:
            kept = _with_shape(kept, setup)
            ticker.tick(len(STAGES) - 1)
            return TracedModel(kept, int(parameters),
                               float(kept.metadata.get("trace_seconds", 0.0)),
                               time.perf_counter() - t0, cached=store.path(key))
    ticker.stage(STAGES[1])
    with beside(lambda: node_shapes(trace_step(load_setup(path, 2 * batch_size), target))) \
            as twin_shapes:  # the twin traced in a process of its own meanwhile (twin.py)
        traced = trace_step(setup, target)
        ticker.tick()
        ticker.stage(STAGES[2])
        twin = twin_shapes()
    ticker.tick()
    measured = None
    if measure_steps:
        from .measure import measure

        ticker.stage(f"measuring every op on {device} (built for real)")
        measured = measure(setup, batch_size, traced, device=device, steps=measure_steps,
                           ticker=ticker)
        ticker.tick()
    ticker.stage(STAGES[3])
    graph = to_op_graph(traced, kinds, twin, measured, calibrations)
    source = {"model": str(path), "batch_size": int(batch_size), "framework": "pytorch",
              **({"seq_len": setup.x[0].shape[1], "dtype": dtype}
                 if str(path).startswith("hf:") else {}),
              **({"routing": dataclasses.asdict(routing)} if stated else {})}
    graph = _with_shape(type(graph)(graph.ops, graph.edges, name=setup.name,
                                    metadata={**graph.metadata, "source": source,
                                              "parameters": int(parameters)}), setup)
    ticker.tick()
    if key is not None:
        store.store(key, graph)
    return TracedModel(graph, int(parameters), traced.seconds, time.perf_counter() - t0,
                       measured)


def _with_shape(graph, setup):
    """``graph`` with its model's transformer shape in ``metadata["transformer"]`` (for its
    FLOPs: `moplace.core.flops`), when the model is a Hugging Face transformer."""
    from .modelshape import transformer_shape

    config = getattr(setup.model, "config", None)
    shape = transformer_shape(config) if config is not None else None
    if shape is None or graph.metadata.get("transformer") == shape:
        return graph
    return type(graph)(graph.ops, graph.edges, name=graph.name,
                       metadata={**graph.metadata, "transformer": shape})
