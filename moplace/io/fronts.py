"""Search results as files: ``front.json`` holds every front point with its full strategy.

    {"format": "moplace-front", "version": 3, "graph": ..., "cluster": ..., "searcher": ...,
     "seed": ..., "evaluations": ..., "seconds": ..., "hypervolume": ..., "reference": [...],
     "objectives": ["runtime", ...], "feasible_found": true,
     "points": [{"runtime_s": ..., "peak_comm_bytes": ..., "peak_mem_bytes": ...,
                 "feasible": true, "violation_bytes": 0.0, "plan": {"devices": 4, ...},
                 "strategy": {strategy file}}, ...],
     "infeasible": [... the least-violating infeasible points, same shape ...],
     "history": {"evaluations": [...], "hypervolume": [...],
                 "best": {"runtime_s": [...], ...}}}

``graph_source`` and ``cluster_source`` (when the search came from the command line) say where
the graph and cluster came from, and ``memory_limit_bytes`` the per-device memory cap it ran
under (``--memory-limit``; null: none), ``inplace`` whether ops ran in place (false:
``--no-inplace``, or a front written before moplace modelled in-place ops), ``optimizer`` the
optimizer whose state the update ops kept (`moplace.core.optimizer`; null: the bytes as the
graph gave them). Each objective is under the JSON key it was registered with
(`objectives.Objective.json_key`). ``history`` has one entry per batch the searcher was told:
evaluations so far, hypervolume and the best feasible value of each objective (``null`` before
a feasible point was found).
``runs`` (optional, per point) lists the runners able to run it (`moplace.core.runners`:
torchtitan, megatron, moplace-apply); ``space`` (optional) the framework whose plans a
``--space`` search kept to. ``baselines`` (optional) holds the baselines' points on the same problem
(`moplace.review.marks.baselines_json`), so a front point equal to one is named; ``notes`` what
the searcher and the costs' origin (`moplace.costs.origin`) said. Both are optional: absent in
older files and ignored by an older moplace, so they need no new version.
`moplace.io.frontcheck.check_front` checks every field `show` and the front-alone commands read.
``graph_fingerprint``, ``cluster_devices`` and ``cluster_fingerprint`` record what the search
ran on (a hash of the graph's ops, sizes and times; the device names; a hash of the devices'
kinds, names, memory, speeds and links), so a front read on another graph or cluster is told
apart from one read on the same (`searched_on`).

Version 2 (issue 32): the strategies are strategy files of version 2 (with strategy-wide
options); a version-1 front reads as strategies with every option at its default. Version 3:
strategy files of version 3 (with recomputed groups); fronts before it recompute nothing. A
front of a version newer than this moplace reads is refused by name.

``throughput`` (optional, per point, on a transformer graph that records its tokens) is the
point's tokens/s, model TFLOP/s and MFU per GPU of the cluster (`moplace.core.flops`). A
search at scale writes a front of ``"kind": "regular"`` whose points hold a plan by its
degrees instead of a strategy (`moplace.io.regularfronts`): ``show`` reads it as any front,
``export`` from its degrees; a moplace from before it reads the table and cannot export it.

`moplace evaluate --strategy front.json --point K` evaluates point K again: a point of the front,
or, when no point is feasible, of the least-violating ones (``infeasible``), as `moplace search`
numbered the points it printed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from objectives import json_key

from .. import strictjson
from ..core.levers import plan_of
from .strategies import FRONT_FORMAT as FORMAT
from .strategies import FRONT_VERSION as VERSION
from .strategies import strategy_to_json


def read_front(path) -> dict:
    """The content of the front.json at ``path``; a `MoplaceError` naming the file when it
    is missing, not JSON, not a front moplace wrote, or a field is damaged (`check_front`)."""
    from ..errors import MoplaceError
    from .frontcheck import check_front
    from .native import read_json

    path = Path(path)
    if not path.is_file():
        raise MoplaceError(f"{path}: no such file")
    return check_front(read_json(path), path)


def point_json(point, problem) -> dict:
    """One evaluated point: objectives under their JSON names, feasibility, the plan at a
    glance (`moplace.core.levers.plan_of`), the runners able to run it
    (`moplace.core.runners.runners`), the strategy."""
    from ..core.runners import runners

    values = dict(zip(problem.objectives, point.values.tolist()))
    out = {json_key(name): value for name, value in values.items()}
    rate = _throughput(problem, values.get("runtime"))
    out.update(feasible=point.feasible, violation_bytes=point.evaluation.violation,
               **({"throughput": rate} if rate else {}),
               plan=plan_of(point.strategy, problem.graph),
               runs=runners(problem.graph, point.strategy),
               strategy=strategy_to_json(problem.graph, point.strategy, problem.cluster))
    return out


def _throughput(problem, runtime_s) -> dict | None:
    """A point's tokens/s, model TFLOP/s and MFU per GPU of the cluster
    (`moplace.core.flops.step_throughput`), for a transformer graph that records its tokens;
    None elsewhere."""
    from ..core.flops import step_throughput
    from ..costs.devicespecs import device_spec

    if runtime_s is None:
        return None
    kinds = set(problem.cluster.kinds)
    spec = device_spec(next(iter(kinds))) if len(kinds) == 1 else None
    return step_throughput(problem.graph, float(runtime_s), problem.cluster.n_devices,
                           spec.mfu_peak if spec else 0.0)


def result_json(result) -> dict:
    """The whole search result as a JSON-ready dict (see module docstring)."""
    p = result.problem
    return {"format": FORMAT, "version": VERSION, "graph": p.graph.name, "cluster": p.cluster.name,
            "searcher": result.searcher, "seed": result.seed, "status": result.status,
            "evaluations": result.n_evaluations, "seconds": result.seconds,
            "hypervolume": result.hypervolume, "reference": result.reference.tolist(),
            "objectives": list(p.objectives), "feasible_found": result.feasible_found,
            **recorded_problem(p.graph, p.cluster),
            "points": [point_json(pt, p) for pt in result.front],
            "infeasible": [point_json(pt, p) for pt in result.infeasible],
            "history": history_json(result)}


def history_json(result) -> dict:
    """How the search went, batch by batch (see module docstring)."""
    names = [json_key(name) for name in result.problem.objectives]
    best = [values for _, values in result.best_history]
    return {"evaluations": [n for n, _ in result.hypervolume_history],
            "hypervolume": [hv for _, hv in result.hypervolume_history],
            "best": {name: [None if v[k] != v[k] else v[k] for v in best]
                     for k, name in enumerate(names)}}


def sources(graph_spec, cluster_spec) -> dict:
    """Where a search's graph and cluster came from, as front.json records them
    (``graph_source``, ``cluster_source``) so its figures can be drawn again later: a bundled
    or preset name as given, a file as an absolute path."""

    def one(spec):
        if spec is None:
            return None
        path = Path(spec)  # a bundled graph or a preset is no file: kept as given
        return str(path.resolve()) if path.is_file() else str(spec)

    return {"graph_source": one(graph_spec), "cluster_source": one(cluster_spec)}


def save_result(result, directory, extra: dict | None = None) -> Path:
    """Write ``front.json`` into ``directory`` (created if needed), with ``extra`` keys (such
    as `sources`); returns its path."""
    return write_front({**result_json(result), **(extra or {})}, directory)


def write_front(data: dict, directory) -> Path:
    """Write ``data`` (a front.json's content) as ``front.json`` in ``directory`` (created if
    needed); returns its path."""
    path = Path(directory) / "front.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(strictjson.dumps(data, indent=1) + "\n")
    return path


# -- what a front was searched on ---------------------------------------------------------------

def recorded_problem(graph, cluster) -> dict:
    """What front.json records of the graph and cluster besides their names (module docstring)."""
    return {"graph_fingerprint": graph_fingerprint(graph),
            "cluster_devices": list(cluster.device_names),
            "cluster_fingerprint": cluster_fingerprint(cluster)}


def hash_arrays(h, *arrays) -> None:
    """Feed ``arrays`` (dtype, shape and bytes) to the hash ``h``."""
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())


def hash_graph(h, graph) -> None:
    """Feed what a strategy's figures depend on in ``graph`` to the hash ``h``: its edges,
    sizes, roles, co-location groups, op names and compute times (not its name). Checkpoints
    (`moplace.optimize.checkpoint`) hash the same, and the problem's split overhead."""
    a = graph.arrays
    hash_arrays(h, a.src, a.dst, a.edge_bytes, a.output_bytes, a.param_bytes, a.grad_bytes,
                a.role, a.split_mask, a.group)
    if a.partial_sums.any():  # (graphs without them hash as they did before they existed)
        hash_arrays(h, a.partial_sums)
    for op in graph.ops:
        parts = sorted((n, sorted(t.items())) for n, t in op.part_compute.items())
        h.update(repr((op.name, sorted(op.compute.items()), op.splittable, parts)).encode())


def graph_fingerprint(graph) -> str:
    """A 16-hex-digit hash of ``graph`` (`hash_graph`)."""
    h = hashlib.sha256()
    hash_graph(h, graph)
    return h.hexdigest()[:16]


def cluster_fingerprint(cluster) -> str:
    """A hash of ``cluster``'s devices (names, kinds, memory, speeds) and links (not its name)."""
    h = hashlib.sha256()
    h.update(repr((cluster.device_names, cluster.kinds)).encode())
    hash_arrays(h, cluster.memory, cluster.speed, cluster.bandwidth, cluster.latency,
                 cluster.route_ptr, cluster.route_res, cluster.resource_bandwidth)
    return h.hexdigest()[:16]


def searched_on(data, path, graph, cluster, cluster_spec=None) -> dict:
    """What a front or strategy file's content ``data`` (read from ``path``) says it was made for,
    against the ``graph`` and ``cluster`` (given on the command line as ``cluster_spec``) it is
    read on now, as ``moplace evaluate --json`` prints it:

    ``searched_on_cluster`` (the recorded cluster's name, None when the file names none),
    ``cluster_differs`` and ``graph_differs`` (None when the file does not say), and ``notes``,
    one line each for a human. Clusters are the same when their recorded fingerprints agree;
    for files written before fingerprints, when their sources (a preset name, case aside, or the
    same TOML file) or else their names agree. A graph of another name is refused when the
    strategy is read; one of the same name is compared by fingerprint."""
    data = data if isinstance(data, dict) else {}
    text = {key: data.get(key) if isinstance(data.get(key), str) else None
            for key in ("cluster", "cluster_fingerprint", "cluster_source", "graph_fingerprint")}
    name = text["cluster"]
    cluster_differs = _cluster_differs(name, text["cluster_fingerprint"], text["cluster_source"],
                                       cluster, cluster_spec)
    graph_differs = None
    if text["graph_fingerprint"] is not None:
        graph_differs = text["graph_fingerprint"] != graph_fingerprint(graph)
    notes = []
    label = str(path)
    verb = "was searched on" if data.get("format") == FORMAT else "was saved for"
    if cluster_differs:
        if name is not None and name != cluster.name:
            notes.append(f"{label} {verb} cluster {name!r}; evaluating on "
                         f"{cluster.name!r}")
        else:
            named = f" named {name!r}" if name is not None else ""
            notes.append(f"{label} {verb} another cluster{named} (other devices, "
                         f"memory or links than --cluster {cluster_spec or cluster.name} has "
                         f"now)")
    if graph_differs:
        notes.append(f"{label} {verb} another graph named {graph.name!r} (other ops, "
                     f"sizes or times than the graph given now)")
    return {"searched_on_cluster": name, "cluster_differs": cluster_differs,
            "graph_differs": graph_differs, "notes": notes}


def _cluster_differs(name, fingerprint, source, cluster, cluster_spec) -> bool | None:
    if name is None and fingerprint is None:
        return None
    if fingerprint is not None:
        return fingerprint != cluster_fingerprint(cluster)
    now = sources(None, cluster_spec)["cluster_source"] if cluster_spec is not None else None
    if source is not None and now is not None:
        if not (os.path.isabs(source) or os.path.isabs(now)):  # two preset names
            return source.lower() != now.lower()
        return source != now
    return name != cluster.name


def searched_on_devices(data) -> list | None:
    """The device names a front file's content records its cluster had (None: not recorded)."""
    devices = data.get("cluster_devices") if isinstance(data, dict) else None
    if isinstance(devices, list) and all(isinstance(d, str) for d in devices):
        return devices
    return None
