"""``moplace apply`` for a graph profiled from a PyTorch model file or ``hf:NAME``: the strategy
run for real on the PyTorch testbed (`moplace.torch.apply`), one process per device, the
measured step printed beside the simulated one, with each rank's time."""

from __future__ import annotations

import importlib.util
import statistics

from .. import strictjson
from ..errors import MoplaceError


def is_torch_graph(graph) -> bool:
    """Whether ``graph`` was profiled from a PyTorch model."""
    source = graph.metadata.get("source")
    return isinstance(source, dict) and source.get("framework") == "pytorch"


def apply_torch_graph(args, graph, cluster) -> int:
    """Run ``args``' strategy (``--strategy FILE [--point K]`` or ``--baseline NAME``) on a
    testbed of as many processes as the cluster has devices."""
    if importlib.util.find_spec("torch") is None:
        raise MoplaceError(f"graph {graph.name!r} was profiled from a PyTorch model, and torch "
                           "is not installed: pip install 'moplace[torch]'")
    if args.device_count is not None:
        raise MoplaceError("--device-count: a PyTorch graph runs on a testbed of processes "
                           "(--testbed K), one per device")
    measured = graph.metadata.get("measured") or {}
    count = args.testbed or (cluster.n_devices if cluster else None) or int(
        (measured.get("testbed") or {}).get("processes", 1))
    if cluster is not None and cluster.n_devices != count:
        raise MoplaceError(f"--cluster has {cluster.n_devices} devices but the testbed "
                           f"{count} processes")
    from ..core.baselines import baseline
    from ..io.strategies import load_strategy
    from ..torch.testbed import TorchTestbed

    device = args.device or "cpu"
    TorchTestbed.check_device(device, count)  # before any work

    if cluster is None and device == "cuda":  # the GPUs it runs on
        from ..torch.device import device_info

        info = device_info("cuda")
        cluster = TorchTestbed.placeholder_cluster(count, info.memory_bytes, kind=info.kind)
    plan_cluster = cluster or _recorded_cluster(graph, count)
    strategy = (load_strategy(args.strategy, graph, plan_cluster, point=args.point)
                if args.strategy else baseline(args.baseline, graph, count))
    from ..torch.apply import apply_torch
    from .evaluate import strategy_label
    from .progress import Display

    label = strategy_label(args.strategy, args.point) if args.strategy else args.baseline
    with Display("quiet" if args.json or args.quiet else "auto") as display:
        job = display.job(f"apply to {graph.name} ({count} PyTorch processes"
                          f"{', a GPU each' if device == 'cuda' else ''})")
        result, simulated = apply_torch(graph, strategy, plan_cluster, steps=args.steps,
                                        progress=job, device=device)
    measured_s = result.measured_step_s
    ranks = [statistics.median(r) for r in result.rank_seconds] if result.rank_seconds else []
    out = {"graph": graph.name, "testbed": count, "device": device, "strategy": label,
           "point": args.point, "peak_memory_bytes": result.peak_memory_bytes,
           "expressible": result.expressible, "reason": result.reason,
           "measured_step_s": measured_s, "runtime_s": simulated,
           "relative_error": (simulated - measured_s) / measured_s if measured_s else None,
           "rank_step_s": ranks, "trained": result.trained if result.expressible else None,
           "losses": result.losses, "step_seconds": result.step_seconds, "notes": result.notes}
    code = json_or_refusal(args, out, result, simulated, " on the PyTorch testbed")
    if code is not None:
        return code
    per_rank = ", ".join(f"rank {k} {t * 1e3:.1f}" for k, t in enumerate(ranks))
    print(f"{label} on {count} PyTorch process(es): measured {measured_s * 1e3:.3f} ms (median "
          f"of {args.steps}, the slowest rank's each step), simulated {simulated * 1e3:.3f} ms "
          f"({out['relative_error']:+.1%}); per rank (ms): {per_rank}; loss "
          f"{result.losses[0]:.4f} -> {result.losses[-1]:.4f}")
    if result.peak_memory_bytes:
        from ..review.units import fmt

        print("peak memory per GPU: " + ", ".join(
            f"{name} {fmt(v, 'bytes')}" for name, v in result.peak_memory_bytes.items()))
    for note in result.notes:
        print(f"note: {note}")
    return 0


def json_or_refusal(args, out: dict, result, simulated: float, where: str) -> int | None:
    """What ``apply`` ends with when it prints no report: ``out`` as JSON (exit 0, or 1 for a
    strategy that cannot run), or a strategy that cannot run refused in one line; None when
    the report is still to be printed."""
    if args.json:
        print(strictjson.dumps(out))
        return 0 if result.expressible else 1
    if not result.expressible:
        raise MoplaceError(f"{out['strategy']} cannot run{where}: {result.reason} (simulated "
                           f"{simulated * 1e3:.3f} ms)")
    return None


def _recorded_cluster(graph, count: int):
    """The cluster ``profile --testbed`` measured (recorded in the graph: its device names and
    links), else the testbed's placeholder one."""
    from ..core.cluster import Cluster
    from ..torch.testbed import TorchTestbed

    cluster = TorchTestbed.placeholder_cluster(count)
    measured = graph.metadata.get("measured") or {}
    names = measured.get("device_names")
    if isinstance(names, list) and len(names) == count and len(set(names)) == count:
        cluster = Cluster.uniform([str(n) for n in names], kind="cpu",
                                  memory_bytes=cluster.devices[0].memory_bytes,
                                  bandwidth=float(cluster.bandwidth[0, 1]) if count > 1 else 1e9,
                                  latency=float(cluster.latency[0, 1]) if count > 1 else 0.0,
                                  name=cluster.name)
    links = measured.get("links") or []
    fits = {(int(i), int(j)): (lat, bw) for i, j, lat, bw in links
            if max(int(i), int(j)) < count}
    return cluster.with_links(fits) if fits else cluster
