"""``moplace profile MODEL.py`` for a PyTorch model file (one that imports torch) or
``hf:NAME`` (a Hugging Face model by configuration): traced under fake tensors, its times
roofline estimates for ``--estimate``'s device kinds (`moplace.torch.frontend`). A Keras model
file goes to the TensorFlow front end as before."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..core.coarsen import COARSEN_ABOVE, coarsen
from ..core.recompute import CORE_SUFFIX
from ..errors import MoplaceError

__all__ = ["profile_torch"]
#: the device kind a PyTorch model is estimated for when --estimate names none
DEFAULT_KIND = "H100"


def profile_torch(args, path) -> int:
    """Trace the PyTorch model file ``path`` (a `Path`, or ``hf:NAME``) and write its op graph
    to ``args.output``."""
    hf = str(path).startswith("hf:")
    what = f"{path} is a Hugging Face model" if hf else f"{path} is a PyTorch model file"
    if importlib.util.find_spec("torch") is None:
        raise MoplaceError(f"{what}, and torch is not installed: pip install 'moplace[torch]' "
                           f"(the CPU wheel, torch==2.13.0)")
    if args.device_count not in (None, 1) or args.parts:
        raise MoplaceError(f"{what}: --device-count and --parts measure ops with TensorFlow; "
                           f"a PyTorch model is measured on --testbed K processes, or with "
                           f"--measure on one device")
    if args.testbed is not None:
        if getattr(args, "device", None) not in (None, "cpu"):
            raise MoplaceError("--testbed: the PyTorch testbed's processes share this machine's "
                               "CPU cores (--device cuda measures one GPU: --measure alone)")
        args.measure, args.device = True, "cpu"
    if getattr(args, "device", None) is not None and not args.measure:
        raise MoplaceError("--device: the device --measure runs the model on (without "
                           "--measure nothing runs)")
    if not hf and (args.seq_len is not None or args.dtype is not None
                   or getattr(args, "attention", None) is not None):
        raise MoplaceError(f"{what}: --seq-len, --dtype and --attention are for hf:NAME models "
                           f"(a model file sets its own shapes, dtypes and attention)")
    if args.batch < 1:
        raise MoplaceError(f"--batch must be at least 1, got {args.batch}")
    from ..costs.devicespecs import DeviceSpecError, require_spec

    kinds = [k.strip() for k in (args.estimate or DEFAULT_KIND).split(",") if k.strip()]
    try:
        kinds = [require_spec(k).kind for k in kinds]
    except DeviceSpecError as exc:
        raise MoplaceError(f"--estimate: {exc}") from None
    calibrations = _calibrations(getattr(args, "calibration", None) or [], kinds,
                                 named=bool(args.estimate))
    dtype, precision = args.dtype, None
    routing = _routing(args)
    if hf:  # a mistyped name or a bad config.json is refused before the output is checked
        from ..torch.hf import check_routing, check_seq_len, hf_config, resolve_dtype

        config, _ = hf_config(str(path)[3:], getattr(args, "attention", None))
        seq_len = check_seq_len(str(path)[3:], config, args.seq_len)
        dtype, precision = resolve_dtype(str(path)[3:], args.dtype)
        check_routing(str(path)[3:], config, routing, args.batch * seq_len)
    from .output import check_output

    out_dir = Path(args.output).resolve().parent
    if not out_dir.is_dir():
        raise MoplaceError(f"-o {args.output}: folder {out_dir} does not exist")
    check_output(args.output, force=args.force, flag="-o")  # before tracing, not after
    cluster_path = Path(args.output).with_suffix(".cluster.toml")
    info, lines = None, []
    if args.measure:
        check_output(cluster_path, force=args.force, flag="-o")
        from ..torch.device import device_info, resolve_device

        info = device_info(resolve_device(getattr(args, "device", None)))  # before any work
        if info.kind in kinds:  # measured, not estimated: the two are never mixed
            lines.append(f"{info.kind}: measured on the {info.name}, not estimated "
                         f"(--estimate {info.kind} dropped)")
            kinds.remove(info.kind)
    from ..io import save_graph
    from ..torch.frontend import profile_torch_model
    from .progress import Display

    threads = _testbed_threads(args.testbed)
    with Display("quiet" if args.quiet or args.json else "auto") as display, threads:
        traced = profile_torch_model(path, args.batch, kinds, seq_len=args.seq_len,
                                     dtype=dtype, measure_steps=args.steps if args.measure
                                     else 0,
                                     progress=display.job(f"trace {getattr(path, 'name', path)}"),
                                     cache=not args.no_cache,
                                     attention=getattr(args, "attention", None),
                                     calibrations=calibrations, routing=routing,
                                     **({"device": info.device, "target_kind": info.kind}
                                        if info is not None else {}))
    g = traced.graph
    if getattr(args, "optimizer", None):
        from ..core.optimizer import with_optimizer

        g = with_optimizer(g, args.optimizer)
    fine = len(g.ops)
    if args.coarsen == "yes" or (args.coarsen == "auto" and fine > COARSEN_ABOVE):
        g = coarsen(g)
    testbed_lines = []
    if args.testbed is not None:
        g, toml, testbed_lines = _testbed_cluster(g, args.testbed)
    save_graph(g, args.output)
    if args.testbed is not None:
        cluster_path.write_text(toml)
    elif traced.measured is not None:
        from ..torch.device import cluster_toml

        cluster_path.write_text(cluster_toml(g.name, info))
    steps = ", ".join(f"{k} {g.total_compute(k) * 1e3:.3f} ms" for k in kinds)
    kind = (f"a Hugging Face model (transformers, {g.metadata['attention']['implementation']} "
            f"attention)" if hf else "a PyTorch model")
    how = (f"read from the trace cache in {traced.total_seconds:.1f} s (traced in "
           f"{traced.trace_seconds:.1f} s before; {traced.cached}; --no-cache traces again)"
           if traced.cached else f"traced in {traced.total_seconds:.1f} s without allocating "
           f"it (fake tensors)")
    lines.append(f"{g.name}: {kind}, {traced.parameters:,} parameters; {len(g.ops)} ops, "
                 f"{len(g.edges)} edges ({g.metadata['folded_views']} views folded); {how}")
    if len(g.ops) < fine:
        lines.append(f"coarsened: {fine} ops -> {len(g.ops)}, each op whose output only one op "
                     f"reads merged into it (--coarsen no keeps every aten op; plans name the "
                     f"real ops)")
    layers, blocks = g.metadata.get("layers"), {
        op.colocation for op in g.ops if (op.colocation or "").startswith("tensor:")
        and not op.colocation.endswith(CORE_SUFFIX)}
    if layers and layers.get("count"):
        lines.append(f"structure: {layers['count']} repeated layers of {layers['period']} "
                     f"segments (found from the data flow); {len(blocks)} tensor-parallel "
                     f"blocks")
    if kinds:  # each kind's own words: calibrated where a calibration ships, else roofline
        estimated = g.metadata.get("estimated") or {}
        calibrated = [k for k in kinds if str(estimated.get(k, "")).startswith("calibrated")]
        said = [f"on {k}: {estimated[k]}" for k in calibrated]
        roof = [k for k in kinds if k not in calibrated]
        said += [f"on {' and '.join(roof)}: roofline estimates"] if roof else []
        lines.append(f"op times {'; '.join(said)}, not measurements: one device's step {steps}")
    from ..costs.origin import assumption_notes

    notes = ([precision] if precision else []) + assumption_notes(g)
    lines += notes
    if traced.measured is not None:
        said = _measured_lines(g, traced.measured, cluster_path)
        lines += [ln for ln in said if not (testbed_lines and ln.startswith("wrote "))]
    lines += testbed_lines
    kinds += [info.kind] if info is not None else []
    lines.append(f"wrote {args.output} (search it on a cluster of {' or '.join(kinds)} "
                 f"devices: `moplace clusters` lists the presets)")
    if args.json:  # the same facts, one JSON object
        from .. import strictjson

        print(strictjson.dumps({
            "graph": g.name, "output": str(args.output), "framework": "pytorch",
            "source": g.metadata.get("source"), "parameters": traced.parameters,
            "ops": len(g.ops), "edges": len(g.edges), "dtype": dtype if hf else None,
            "optimizer": g.metadata.get("optimizer"), "kinds": kinds,
            "moe": {k: v for k, v in (g.metadata.get("moe") or {}).items()
                    if k != "layer_ops"} or None,
            "cached": str(traced.cached) if traced.cached else None, "notes": notes,
            "lines": lines}))
    else:
        print("\n".join(lines))
    return 0


def _routing(args):
    """The routing assumption of ``--routing``, ``--capacity-factor`` and ``--imbalance``
    (`moplace.torch.routing`), checked; None when none is given (balanced)."""
    given = [getattr(args, k, None) for k in ("routing", "capacity_factor", "imbalance")]
    if all(v is None for v in given):
        return None
    from ..torch.routing import routing_of

    return routing_of(*given)


def _testbed_threads(count):
    """A context in which torch runs as many threads as one of ``count`` testbed processes
    (None: a context that changes nothing)."""
    import contextlib

    if count is None:
        return contextlib.nullcontext()
    from ..testbed.procs import core_shares

    @contextlib.contextmanager
    def threads():
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(len(core_shares(count)[0]))
        try:
            yield
        finally:
            torch.set_num_threads(before)

    return threads()


def _testbed_cluster(graph, count: int):
    """(the graph with the testbed recorded and its ops timed there
    (`moplace.torch.testbedtimes`), the testbed's cluster file, lines saying so): its ``count``
    processes as ``cpu`` devices, the links between them measured."""
    from ..core.graph import OpGraph
    from ..core.presets import parse_cluster
    from ..core.presets.export import cluster_to_toml
    from ..torch.testbed import TorchTestbed
    from ..torch.testbedtimes import testbed_op_times

    with TorchTestbed(count) as bed:
        latency, bandwidth = bed.measure_links()
        describe = bed.describe()
        graph = testbed_op_times(graph, bed)
    fits = {(i, j): (latency, bandwidth) for i in range(count) for j in range(count) if i != j}
    cluster = TorchTestbed.placeholder_cluster(count).with_links(fits)
    meta = dict(graph.metadata)
    meta["measured"] = {**meta.get("measured", {}), "testbed": {"processes": count},
                        "device_count": count,
                        "links": [[i, j, latency, bandwidth] for (i, j) in fits]}
    toml = cluster_to_toml(cluster, description=f"the PyTorch testbed: {describe}; links "
                                                 "measured by moplace profile --testbed")
    names = [d.name for d in parse_cluster(toml, "the testbed's cluster").devices]
    meta["measured"]["device_names"] = names
    timed = graph.metadata["measured"]["testbed_op_times"]["batches"]
    line = (f"testbed: {describe}; links {latency * 1e6:.0f} us + {bandwidth / 1e9:.2f} GB/s "
            f"(gloo, measured); every op timed as the testbed runs it at batch "
            f"{', '.join(map(str, timed))}; `moplace apply` runs plans on it")
    return OpGraph(graph.ops, graph.edges, name=graph.name, metadata=meta), toml, [line]


def _measured_lines(graph, measured, cluster_path) -> list:
    """The measured step and peak beside the simulator's one-device step and peak on the
    measured op times (`moplace.torch.onedevice`)."""
    from ..core.presets import load_cluster
    from ..torch.onedevice import measured_lines

    return list(measured_lines(graph, measured, load_cluster(str(cluster_path)), cluster_path))


def _calibrations(paths, kinds: list, *, named: bool) -> dict:
    """The calibration files of ``--calibration``, by kind (checked before any work). Their
    kinds are the ones estimated (``kinds``, in place) when ``--estimate`` was not ``named``,
    else each joins it where it did not name it."""
    from ..costs.calibration import load_calibration
    from ..costs.devicespecs import device_spec

    out = {}
    for path in paths:
        cal = load_calibration(path)
        spec = device_spec(cal.kind)
        if spec is None:
            raise MoplaceError(f"--calibration {path}: calibrated for kind {cal.kind!r}, which "
                               f"moplace has no device spec for (`moplace clusters` lists kinds)")
        if spec.kind in out:
            raise MoplaceError(f"--calibration {path}: a second calibration for {spec.kind}")
        out[spec.kind] = cal
    if out and not named:
        kinds[:] = list(out)
    kinds += [k for k in out if k not in kinds]
    return out

