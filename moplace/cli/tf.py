"""The TensorFlow commands of the CLI: ``profile``, ``apply`` and ``zoo``.

    moplace profile MODEL_OR_PY --batch N [--device-count K | --testbed K] [--steps 5] [--estimate V100,A100] -o graph.json
    moplace apply GRAPH (--strategy FILE [--point K] | --baseline NAME) [--device-count K | --testbed K] [--cluster C] --steps N [--json]
    moplace apply FRONT_JSON --point K --steps N      # the graph and cluster it records

``--testbed K`` runs K TensorFlow worker processes (`moplace.tf.testbed`), one device each, so
devices do not share cores; `apply` uses a testbed of the same size on its own when the graph
was profiled on one.

TensorFlow is imported only when one of these runs, and the logical devices are set up before
anything else touches TensorFlow (it fixes its devices at first use).
"""

from __future__ import annotations

from pathlib import Path

from .. import strictjson
from ..errors import MoplaceError
from .args import file_arg, integer


PROFILE = """\
Trace one training step of a model into an op graph. A Keras model (a zoo name or a Keras .py
file) is traced and every op measured with TensorFlow. A PyTorch model file (one that imports
torch) or hf:NAME (a Hugging Face model by configuration) is traced under fake tensors, its op
times estimated for --estimate's kinds. "(Keras only)" and "(PyTorch only)" mark the options
of one front end (PyTorch includes hf:NAME)."""


def add_commands(sub) -> None:
    """Register the front-end subcommands on the CLI's subparsers."""
    p = sub.add_parser("profile", help="trace a model's training step into an op graph (Keras: "
                       "measured; PyTorch file or hf:NAME: estimated)", description=PROFILE)
    p.add_argument("model", type=file_arg,
                   help="zoo name (see `moplace zoo`), a .py file defining build(batch_size) "
                        "(Keras, or PyTorch when it imports torch), or hf:NAME, a Hugging Face "
                        "model by configuration (hf:gpt2, hf:llama-3-8b..., or "
                        "hf:PATH/config.json)")
    p.add_argument("--batch", type=integer(1, 2**20), required=True, help="batch size")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--device-count", type=integer(1, 256), default=1,
                       help="(Keras only) devices to set up in this process (logical CPUs "
                       "without GPUs); with 2+ the links are measured")
    where.add_argument("--testbed", type=integer(1, 64), metavar="K",
                       help="profile on a testbed of K worker processes (Keras: one GPU or one "
                       "share of the cores each; PyTorch: K gloo processes sharing this CPU, "
                       "every op timed as they run it) and measure the links between them")
    p.add_argument("--steps", type=integer(1, 10**6), default=5,
                   help="traced steps (after 2 warm-up steps; PyTorch: with --measure); "
                        "default 5")
    p.add_argument("--measure", action="store_true",
                   help="(PyTorch only) also build the model for real (hf: random "
                        "weights) and time every op on --device with torch.profiler (--steps "
                        "runs), as that device's kind (H100, A100-80GB..., or cpu)")
    p.add_argument("--device", choices=("cuda", "cpu"),
                   help="(PyTorch only) with --measure: the GPU (default where one is "
                        "visible) or this CPU")
    p.add_argument("--seq-len", type=integer(1, 2**22), metavar="TOKENS",
                   help="(hf:NAME only) tokens per sequence (default: the model's longest "
                        "context)")
    p.add_argument("--dtype", choices=("fp32", "bf16", "fp16"),
                   help="(hf:NAME only) the weights' and activations' precision (default: the "
                        "configuration's torch_dtype, else fp32; 16-bit: FP32 master weights "
                        "and optimizer state unless --optimizer says otherwise)")
    p.add_argument("--attention", choices=("sdpa", "eager"),
                   help="(hf:NAME only) sdpa (the GPU's flash or memory-efficient kernels) or "
                        "eager (matmuls and a softmax); default: the configuration's "
                        "attn_implementation, else sdpa")
    p.add_argument("--routing", choices=("balanced", "skewed"),
                   help="(PyTorch only, mixtures of experts) the tokens each expert is assumed "
                        "to get, never taken from data: balanced (default: the mean, "
                        "tokens x top-k / experts) or skewed (the hottest expert --imbalance "
                        "times the mean, 2 by default)")
    p.add_argument("--capacity-factor", type=float, metavar="X",
                   help="(PyTorch only, mixtures of experts) every expert's buffer holds "
                        "ceil(X x the mean) tokens, those beyond dropped (Switch, GShard); "
                        "default: the busiest expert's tokens, none dropped")
    p.add_argument("--imbalance", type=float, metavar="X",
                   help="(PyTorch only, mixtures of experts) skewed routing: the hottest "
                        "expert gets X times the mean (X > 1, at most experts / top-k), the "
                        "others share the rest")
    from ..core.optimizer import OPTIMIZERS

    p.add_argument("--optimizer", choices=tuple(OPTIMIZERS),
                   help="(PyTorch only) the optimizer state the update ops keep; "
                        "default: the model's optimizer, its state in FP32 with FP32 master "
                        "weights for 16-bit weights (adam-mixed); adam: torch's AdamW on bf16 "
                        "weights, moments in bf16 and no master copy")
    p.add_argument("--estimate", default="", help="device kinds to estimate costs for, e.g. "
                   "V100,H100 (PyTorch default: H100)")
    p.add_argument("--calibration", action="append", type=file_arg, metavar="FILE",
                   help="(PyTorch only) a calibration file written by `moplace "
                        "calibrate` (kernels measured on your GPU), used for its kind's "
                        "estimates in place of the one moplace ships; repeat for more kinds")
    p.add_argument("--no-cache", action="store_true",
                   help="(PyTorch only) trace again even when the same model, "
                        "batch, sequence length and dtype were traced before (traces are kept "
                        "in $MOPLACE_CACHE or ~/.cache/moplace)")
    p.add_argument("--coarsen", choices=("auto", "yes", "no"), default="auto",
                   help="(PyTorch only) merge each op whose output only one op "
                        "reads into that op (moplace.core.coarsen; the graph maps the merged "
                        "ops back); auto: only for graphs of more than 20,000 ops")
    p.add_argument("--parts", default="", help="(Keras only) also profile at batch/n for "
                   "these n, e.g. 2,4, so split parts get measured costs")
    p.add_argument("-o", "--output", type=file_arg, required=True, help="graph JSON to write")
    p.add_argument("--force", action="store_true", help="replace existing output files")
    p.add_argument("--quiet", action="store_true", help="no progress display on stderr")
    p.add_argument("--json", action="store_true", help="(PyTorch only) print exactly one JSON "
                   "object: the graph written and its notes (dtype, attention, optimizer "
                   "state)")
    p.set_defaults(run=_profile)
    a = sub.add_parser("apply", help="run a strategy for real on the profiled model and time it")
    a.add_argument("graph", type=file_arg, nargs="?",
                   help="graph JSON written by `moplace profile`; or a front.json searched on "
                        "one (then --point K picks the point, and the graph and cluster are "
                        "those it records)")
    how = a.add_mutually_exclusive_group()
    how.add_argument("--strategy", type=file_arg, help="strategy JSON file")
    how.add_argument("--baseline", help="single, data-parallel, round-robin or layer-split")
    a.add_argument("--point", type=integer(0, 10**6), help="which point of a front.json given as --strategy")
    where = a.add_mutually_exclusive_group()
    where.add_argument("--device-count", type=integer(1, 256),
                       help="(Keras only) devices in this process (default: those it was "
                            "profiled with)")
    where.add_argument("--testbed", type=integer(1, 64), metavar="K",
                       help="run on a testbed of K worker processes (default: the testbed the "
                       "graph was profiled on, if any; a PyTorch graph: K processes joined by "
                       "torch.distributed, gloo)")
    a.add_argument("--device", choices=("cpu", "cuda"),
                   help="(PyTorch graphs) where the testbed's processes run: cpu (default; "
                   "gloo) or cuda (a GPU each, NCCL)")
    a.add_argument("--cluster", type=file_arg, help="cluster for the simulated runtime (default: the measured one)")
    a.add_argument("--steps", type=integer(1, 10**6), required=True, help="timed steps (after 2 warm-up steps)")
    a.add_argument("--json", action="store_true", help="print exactly one JSON object")
    a.add_argument("--quiet", action="store_true", help="no progress display on stderr")
    a.set_defaults(run=_apply)
    z = sub.add_parser("zoo", help="list the Keras models `moplace profile` knows by name "
                       "(profiling them needs TensorFlow)")
    z.set_defaults(run=_zoo)


def _require_tensorflow(command: str) -> None:
    """A clear line, not a ModuleNotFoundError, where TensorFlow or Keras is not installed."""
    import importlib.util

    for module in ("tensorflow", "keras"):
        if importlib.util.find_spec(module) is None:
            raise MoplaceError(f"`moplace {command}` needs TensorFlow (Keras 3), and {module} is "
                               "not installed: pip install 'moplace[tf]' (or tensorflow-cpu)")


def _profile(args) -> int:
    from .modelarg import model_kind

    kind, path = model_kind(args.model)  # a missing file or a syntax error: one line, first
    if kind in ("hf", "torch"):  # a Hugging Face model by configuration, or a PyTorch file
        from .torchprofile import profile_torch

        return profile_torch(args, path or str(args.model))
    if args.json:
        raise MoplaceError(f"--json: {args.model} is a Keras model; the option is for PyTorch "
                           f"and hf: models")
    if args.coarsen == "yes":
        raise MoplaceError(f"--coarsen: {args.model} is a Keras model, whose graph `apply` "
                           f"runs for real op by op; coarsening is for PyTorch and hf: models")
    if args.no_cache:
        raise MoplaceError(f"--no-cache: {args.model} is a Keras model, whose ops are measured "
                           f"each time, never cached (the flag is for PyTorch and hf: models)")
    for flag in ("attention", "optimizer", "calibration", "dtype", "seq_len", "routing",
                 "capacity_factor", "imbalance"):
        if getattr(args, flag, None) is not None:
            raise MoplaceError(f"--{flag.replace('_', '-')}: {args.model} is a Keras model, "
                               f"profiled as it is built (the flag is for PyTorch and hf: "
                               f"models)")
    if args.measure:
        raise MoplaceError(f"--measure: {args.model} is a Keras model, whose ops are always "
                           f"measured (the flag builds a PyTorch or hf: model for real)")
    if getattr(args, "device", None) is not None:
        raise MoplaceError(f"--device: {args.model} is a Keras model, profiled on the devices "
                           f"TensorFlow sees (--device-count, --testbed); --device is for "
                           f"PyTorch and hf: models' --measure")
    _require_tensorflow("profile")
    for flag, value in (("--batch", args.batch), ("--device-count", args.device_count),
                        ("--steps", args.steps)):
        _positive(flag, value)
    from ..tf.source import check_model_file

    check_model_file(args.model)  # a missing file is refused before TensorFlow loads
    from .output import check_output

    out_dir = Path(args.output).resolve().parent
    if not out_dir.is_dir():
        raise MoplaceError(f"-o {args.output}: folder {out_dir} does not exist")
    check_output(args.output, force=args.force, flag="-o")  # before profiling, not after
    check_output(Path(args.output).with_suffix(".cluster.toml"), force=args.force, flag="-o")
    from ..core.presets import parse_cluster
    from ..core.presets.export import cluster_to_toml
    from ..io import save_graph
    from ..tf.devices import available_devices
    if args.testbed is None:
        available_devices(args.device_count)  # before TensorFlow's runtime starts
    from ..tf.frontend import profile_model

    kinds = [k.strip() for k in args.estimate.split(",") if k.strip()]
    try:
        parts = [int(n) for n in args.parts.split(",") if n.strip()]
    except ValueError:
        raise MoplaceError(f"--parts must be comma-separated integers, got {args.parts!r}") from None
    from .progress import Display

    with Display("quiet" if args.quiet else "auto") as display, _testbed(args.testbed) as bed:
        pm = profile_model(args.model, args.batch, device_count=args.device_count,
                           steps=args.steps, estimate_kinds=kinds, part_counts=parts,
                           progress=display.job(f"profile {args.model}"), testbed=bed)
    cluster_text = cluster_to_toml(pm.cluster, description=f"measured by moplace profile {args.model}")
    # the graph records the names the cluster file gives its devices: a strategy searched on
    # that file names them so, and `apply` reads it against those names
    filed = parse_cluster(cluster_text, Path(args.output).with_suffix(".cluster.toml"))
    graph = _with_links(pm.graph, pm.cluster, [d.name for d in filed.devices])
    save_graph(graph, args.output)  # after the cluster is known to write: both files or neither
    cluster_path = Path(args.output).with_suffix(".cluster.toml")
    cluster_path.write_text(cluster_text)
    m, untimed = graph.metadata["measured"], graph.metadata["untimed"]
    print(f"{graph.name}: {len(graph.ops)} ops, {len(graph.edges)} edges "
          f"({graph.metadata['folded']['count']} constants folded, "
          f"{graph.metadata['pruned_nodes']} unused nodes dropped)")
    print(f"traced in {pm.trace_seconds:.2f} s, profiled in {pm.profile_seconds:.2f} s on "
          f"{m['device']} ({m['kind']}): step {m['step_median_s'] * 1e3:.3f} ms, ops sum to "
          f"{graph.total_compute(m['kind']) * 1e3:.3f} ms")
    if "testbed" in m:
        print(f"testbed: {m['testbed']['setup']}")
    print(f"untimed: {len(untimed['fed_inputs'])} fed inputs, {len(untimed['not_run'])} ops that "
          f"did not run ({untimed['costed_as']})")
    print(f"wrote {args.output} and {cluster_path} (use it as --cluster)")
    return 0


def _apply(args) -> int:
    _positive("--steps", args.steps)
    from .problem import from_front

    from_front(args, needs_cluster=False)
    if not (args.strategy or args.baseline):
        raise MoplaceError("say what to run: --strategy FILE or --baseline NAME")
    from ..core.presets import load_cluster
    from ..io import load_graph

    graph = load_graph(args.graph)
    cluster = load_cluster(args.cluster) if args.cluster else None
    from .torchapply import apply_torch_graph, is_torch_graph

    if is_torch_graph(graph):
        return apply_torch_graph(args, graph, cluster)
    if args.device is not None:
        raise MoplaceError(f"--device: graph {graph.name!r} was not profiled from a PyTorch "
                           "model; the option is for a PyTorch graph's testbed")
    _require_tensorflow("apply")
    from ..tf.source import profiled_source

    profiled_source(graph)  # a graph that cannot be applied is refused before TensorFlow loads
    measured = graph.metadata.get("measured", {})
    testbed = args.testbed
    if testbed is None and args.device_count is None and "testbed" in measured:
        testbed = int(measured["testbed"]["workers"])
    count = testbed or args.device_count or (
        cluster.n_devices if cluster else int(measured.get("device_count", 1)))
    _positive("--testbed" if testbed else "--device-count", count)
    if cluster and cluster.n_devices != count:
        raise MoplaceError(f"--cluster has {cluster.n_devices} devices but "
                           f"{'the testbed has' if testbed else '--device-count is'} {count}")
    from ..core.baselines import baseline
    from ..io.strategies import load_strategy

    # the strategy is read and checked before any worker starts, its device names against
    # those of the cluster it was searched on: --cluster, else the file profile wrote
    plan_cluster = cluster or _placeholder_cluster(_device_names(measured, count))
    strategy = (load_strategy(args.strategy, graph, plan_cluster, point=args.point) if args.strategy
                else baseline(args.baseline, graph, count))
    from ..tf.devices import available_devices, host_cluster
    devices = None if testbed else available_devices(count)
    from ..tf.frontend import apply_to_model
    from .evaluate import strategy_label
    from .progress import Display

    with Display("quiet" if args.json or args.quiet else "auto") as display, _testbed(testbed) as bed:
        if bed is not None:
            devices = bed.devices
        cluster = cluster or _measured_cluster(graph, bed.cluster() if bed else host_cluster(devices))
        result, simulated = apply_to_model(graph, strategy, cluster, steps=args.steps, testbed=bed,
                                           progress=display.job(f"apply to {graph.name}"))
    out = {"graph": graph.name, "devices": devices, "testbed": testbed,
           "strategy": strategy_label(args.strategy, args.point) if args.strategy
           else args.baseline, "point": args.point,
           "expressible": result.expressible, "reason": result.reason,
           "measured_step_s": result.measured_step_s, "runtime_s": simulated,
           "relative_error": (simulated - result.measured_step_s) / result.measured_step_s
           if result.measured_step_s else None,
           "trained": result.trained if result.expressible else None,
           "losses": result.losses, "step_seconds": result.step_seconds,
           "peak_memory_bytes": result.peak_memory_bytes, "notes": result.notes}
    from .torchapply import json_or_refusal

    code = json_or_refusal(args, out, result, simulated, "")
    if code is not None:
        return code
    print(f"{out['strategy']} on {count} device(s): measured {result.measured_step_s * 1e3:.3f} ms "
          f"(median of {args.steps}), simulated {simulated * 1e3:.3f} ms "
          f"({out['relative_error']:+.1%}); loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}")
    return 0


def _zoo(args) -> int:
    from ..tf.source import ZOO_NAMES  # the names, without TensorFlow (profiling them needs it)

    print("\n".join(ZOO_NAMES))
    return 0


def _with_links(graph, cluster, names: list[str]):
    """The graph with the measured devices and links recorded in its metadata; ``names``: the
    names the cluster file gives the devices, in order."""
    from ..core.graph import OpGraph

    n = cluster.n_devices
    links = [[i, j, float(cluster.latency[i, j]), float(cluster.bandwidth[i, j])]
             for i in range(n) for j in range(n) if i != j]
    meta = dict(graph.metadata)
    meta["measured"] = {**meta["measured"], "device_count": n, "device_names": list(names),
                        "links": links}
    return OpGraph(graph.ops, graph.edges, name=graph.name, metadata=meta)


def _measured_cluster(graph, cluster):
    links = graph.metadata.get("measured", {}).get("links") or []
    fits = {(int(i), int(j)): (lat, bw) for i, j, lat, bw in links
            if max(int(i), int(j)) < cluster.n_devices}
    return cluster.with_links(fits) if fits else cluster


def _testbed(count: int | None):
    """A started testbed of ``count`` workers as a context, or a context of None."""
    from contextlib import nullcontext

    if not count:
        return nullcontext()
    from ..tf.testbed import Testbed

    return Testbed(count)


def _device_names(measured: dict, n: int) -> list[str]:
    """The names of ``n`` devices as a strategy file gives them: those the cluster file written
    by ``profile`` gives (recorded in the graph), else those any cluster file gives ``n``
    devices (a graph profiled before the names were recorded, or another device count)."""
    recorded = measured.get("device_names")
    if isinstance(recorded, list) and len(recorded) == n and len(set(recorded)) == n \
            and all(isinstance(name, str) for name in recorded):
        return list(recorded)
    return _filed_device_names(n)


def _filed_device_names(n: int) -> list[str]:
    """The names a cluster file of ``n`` devices gives them, as the cluster loader reads it
    (docs/cluster-format.md), not as a copy of its rule."""
    from ..core.presets import parse_cluster

    text = (f'name = "names"\n[[servers]]\ncount = {n}\nkind = "cpu"\nmemory = 1\nspeed = 1.0\n'
            + ('[servers.interconnect]\nbandwidth = 1.0\nlatency = 0.0\n' if n > 1 else ""))
    return [d.name for d in parse_cluster(text, "device names").devices]


def _placeholder_cluster(names: list[str]):
    """A cluster of devices named ``names``, with no figures that matter: for checking a
    strategy's shape and device names before the real devices exist."""
    from ..core.cluster import Cluster

    return Cluster.uniform(names, kind="cpu", memory_bytes=2**40, speed=1.0, bandwidth=1e10,
                           name=f"check-{len(names)}")


def _positive(flag: str, value) -> None:
    if value is None or value < 1:
        raise MoplaceError(f"{flag} must be at least 1, got {value}")
