"""Strategy files: JSON a person can read and write, keyed by op name.

    {"format": "moplace-strategy", "version": 3, "graph": "resnet50",
     "placement": {"node1": 0, "node2": "gpu1", ...},
     "priority": {"node1": 10.0, ...},
     "splits": {"node7": {"dim": "batch", "devices": [0, 1]}},
     "options": {"bucket_bytes": 26214400},
     "recompute": ["node3", "node9"]}

``placement`` must cover every op, directly or through another op of its co-location group;
devices are indices or device names of the cluster. ``priority`` is optional (default: the
graph's topological order) and, when given, names every op. ``splits`` is optional; a split
applies to the whole co-location group of the op it names. ``cluster`` (optional, written when
the strategy was saved with its cluster) names the cluster the strategy was made for: reading
it on another cluster works where the devices exist, and `moplace evaluate` says so.
``options`` (optional; version 2) holds the strategy-wide options
(`moplace.core.strategy.STRATEGY_OPTIONS`): ``bucket_bytes``, the gradient bucket size in bytes
(0: each gradient reduced on its own), ``zero_stage`` (0 to 3: the ZeRO stage; a file
before it has none, 0), and (version 4) ``micro_batches`` (how many micro-batches the batch is
cut into; files before it run 1) and ``schedule`` (``"1f1b"``, ``"gpipe"``, ``"interleaved"``
or ``"zero-bubble"``; before it, 1F1B) and (version 5) ``fp8`` (``"none"``, ``"all"`` or
``"inner"``: which matmuls run in FP8; files before it, none). A version-1 file has none: every option takes its default. ``recompute`` (optional;
version 3) names ops whose co-location groups are recomputed
(`moplace.core.strategy.Strategy.recompute`); files before it recompute nothing. A file of a
version newer than this moplace reads (`VERSION`) is refused by name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import strictjson
from ..core.baselines import topological_priority
from ..core.graph import OpGraph
from ..core.strategy import (FP8_MODES, MAX_BUCKET_BYTES, MAX_MICRO_BATCHES, SCHEDULES,
                             STRATEGY_OPTIONS, ZERO_STAGES, Split, Strategy)
from ..errors import FormatError, StrategyError, shown
from .native import read_json

FORMAT = "moplace-strategy"
#: the strategy file version written (2: strategy-wide options, 3: recomputed groups, 4:
#: micro-batches and the pipeline schedule, 5: the matmuls' precision, ``fp8``), and read (1
#: to 5)
VERSION = 5
#: A search's front file (`moplace.io.fronts`): its points hold strategies in this format.
FRONT_FORMAT = "moplace-front"
#: the front file version written and read (2: its strategies have strategy-wide options, 3:
#: recomputed groups, 4: micro-batches and the pipeline schedule, 5: ``fp8``, 6: a regular
#: front's ``micro_batch_graphs``)
FRONT_VERSION = 6
#: priorities only order ops; beyond this size a value is damaged (and 10**400 is no float)
MAX_PRIORITY = 1e300


def strategy_to_json(graph: OpGraph, strategy: Strategy, cluster=None) -> dict:
    """A JSON-ready dict of ``strategy`` (device names when ``cluster`` is given)."""
    names = [op.name for op in graph.ops]
    dev = (lambda d: cluster.devices[d].name) if cluster is not None else int
    return {
        "format": FORMAT, "version": VERSION, "graph": graph.name,
        **({"cluster": cluster.name} if cluster is not None else {}),
        "placement": {n: dev(int(d)) for n, d in zip(names, strategy.placement)},
        "priority": {n: float(p) for n, p in zip(names, strategy.priority)},
        "splits": {names[i]: {"dim": s.dim, "devices": [dev(d) for d in s.devices]}
                   for i, s in strategy.splits.items()},
        "options": {**strategy.options, "schedule": strategy.schedule_name,
                    "fp8": strategy.fp8_mode},
        "recompute": [names[i] for i in strategy.recompute],
    }


def save_strategy(path, graph: OpGraph, strategy: Strategy, cluster=None) -> None:
    """Write ``strategy`` to ``path`` as JSON."""
    Path(path).write_text(strictjson.dumps(strategy_to_json(graph, strategy, cluster), indent=1) + "\n")


def load_strategy(path, graph: OpGraph, cluster, *, point: int | None = None) -> Strategy:
    """Read a strategy file for ``graph`` on ``cluster``; errors name the file and field.

    A search's ``front.json`` is accepted too: ``point`` chooses which of its points.
    """
    return strategy_from_file(read_json(path), path, graph, cluster, point=point)


def strategy_from_file(data, path, graph: OpGraph, cluster, *,
                       point: int | None = None) -> Strategy:
    """`load_strategy` on a file's content ``data`` already read (``path`` names it in errors)."""
    if isinstance(data, dict) and data.get("format") == FRONT_FORMAT:
        data = front_strategy(data, point, path)
    try:
        return strategy_from_json(data, graph, cluster)
    except StrategyError as exc:
        raise FormatError(path, str(exc)) from None


def strategy_from_json(data, graph: OpGraph, cluster) -> Strategy:
    """Build a validated strategy from the dict form (see module docstring)."""
    if not isinstance(data, dict) or not isinstance(data.get("placement"), dict):
        raise StrategyError("field 'placement' must be an object mapping op names to devices")
    check_version(data.get("version", 1), "strategy")
    named = data.get("graph")
    if named is not None and named != graph.name:
        raise StrategyError(f"field 'graph': the strategy is for graph {named!r}, not {graph.name!r}")
    devices = _device_lookup(cluster)
    group_dev = {}
    for name, d in data["placement"].items():
        group_dev.setdefault(_group_of(graph, name, "placement"), set()).add(_device(devices, d, name))
    placement = np.empty(len(graph.ops), np.int64)
    for g, members in enumerate(graph.groups):
        chosen = group_dev.get(g)
        if not chosen:
            raise StrategyError(f"placement: op {graph.ops[members[0]].name!r} has no device")
        if len(chosen) > 1:
            raise StrategyError(f"placement: co-located ops of group "
                                f"{graph.ops[members[0]].colocation!r} name different devices")
        placement[list(members)] = chosen.pop()
    splits = {}
    if not isinstance(data.get("splits") or {}, dict):
        raise StrategyError("field 'splits' must be an object mapping op names to splits")
    for name, spec in (data.get("splits") or {}).items():
        g = _group_of(graph, name, "splits")
        if not isinstance(spec, dict) or not isinstance(spec.get("dim"), str) \
                or not isinstance(spec.get("devices"), list):
            raise StrategyError(f"splits.{name}: needs 'dim' and a list of 'devices' (dim a "
                                "dimension name)")
        if len(spec["devices"]) < 2:
            raise StrategyError(f"splits.{name}: a split needs at least 2 devices, "
                                f"got {shown(spec['devices'])}")
        split = Split(spec["dim"], tuple(_device(devices, d, name) for d in spec["devices"]))
        if split.devices and placement[_group_head(graph, g)] != split.devices[0]:
            raise StrategyError(f"splits.{name}: the first part's device must be the op's "
                                f"placement ({int(placement[_group_head(graph, g)])}), got {split.devices[0]}")
        for m in graph.groups[g]:
            splits[m] = split
    return Strategy(placement, _priority(data.get("priority"), graph), splits,
                    **_options(data.get("options")),
                    recompute=_recompute(data.get("recompute"), graph)
                    ).validate(graph, cluster.n_devices)


def check_version(version, what: str, newest: int = VERSION) -> None:
    """Refuse a ``what`` file's ``version`` that is not 1..``newest``, by name."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise StrategyError(f"field 'version': a {what} file's version is a whole number from 1, "
                            f"got {shown(version)}")
    if version > newest:
        raise StrategyError(f"field 'version': the {what} file has format version {version}, "
                            f"newer than this moplace reads ({newest}): update moplace to read it")


def _options(spec) -> dict:
    """The strategy-wide options of a file's ``options`` object (defaults where left out)."""
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise StrategyError("field 'options' must be an object mapping option names to values")
    for name, value in spec.items():
        if name not in STRATEGY_OPTIONS:
            raise StrategyError(f"options.{name}: unknown option; options are: "
                                f"{', '.join(STRATEGY_OPTIONS)}")
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        if name == "zero_stage" and not (number and value in ZERO_STAGES):
            raise StrategyError(f"options.{name}: must be a ZeRO stage, one of "
                                f"{', '.join(map(str, ZERO_STAGES))}, got {shown(value)}")
        if name == "bucket_bytes" and not (number and 0 <= value <= MAX_BUCKET_BYTES):
            raise StrategyError(f"options.{name}: must be a number of bytes from 0 to "
                                f"{MAX_BUCKET_BYTES:.0f}, got {shown(value)}")
        if name == "micro_batches" and not (number and 1 <= value <= MAX_MICRO_BATCHES
                                            and value == int(value)):
            raise StrategyError(f"options.{name}: must be a whole number of micro-batches "
                                f"from 1 to {MAX_MICRO_BATCHES}, got {shown(value)}")
        if name == "schedule" and value not in SCHEDULES:
            raise StrategyError(f"options.{name}: must be one of "
                                f"{', '.join(map(repr, SCHEDULES))}, got {shown(value)}")
        if name == "fp8" and value not in FP8_MODES:
            raise StrategyError(f"options.{name}: must be one of "
                                f"{', '.join(map(repr, FP8_MODES))}, got {shown(value)}")
    options = dict(spec)
    if "schedule" in options:
        options["schedule"] = float(SCHEDULES.index(options["schedule"]))
    if "fp8" in options:
        options["fp8"] = float(FP8_MODES.index(options["fp8"]))
    return options


def _recompute(spec, graph: OpGraph) -> list[int]:
    """The group heads of a file's ``recompute`` list of op names (none where left out)."""
    if spec is None:
        return []
    if not isinstance(spec, list):
        raise StrategyError("field 'recompute' must be a list of op names")
    for name in spec:
        if not isinstance(name, str):
            raise StrategyError(f"recompute: an entry must be an op name, got {shown(name)}")
    return [_group_head(graph, _group_of(graph, name, "recompute")) for name in spec]


def _priority(spec, graph: OpGraph) -> np.ndarray:
    if spec is None:
        return topological_priority(graph)
    if not isinstance(spec, dict):
        raise StrategyError("field 'priority' must be an object mapping op names to numbers")
    prio = np.empty(len(graph.ops))
    seen = np.zeros(len(graph.ops), bool)
    for name, p in spec.items():
        i = _op_index(graph, name, "priority")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not -MAX_PRIORITY <= p <= MAX_PRIORITY:
            raise StrategyError(f"priority.{name}: must be a number, finite and at most "
                                f"{MAX_PRIORITY:g} in size, got {shown(p)}")
        prio[i], seen[i] = p, True
    if not seen.all():
        raise StrategyError(f"priority: op {graph.ops[int(np.argmin(seen))].name!r} has no priority "
                            "(give every op one, or leave 'priority' out)")
    return prio


def _group_head(graph: OpGraph, g: int) -> int:
    return graph.groups[g][0]


def _op_index(graph: OpGraph, name: str, field: str) -> int:
    if name not in graph.index:
        raise StrategyError(f"{field}: unknown op {shown(name)} (graph {graph.name!r} has "
                            f"{len(graph.ops)} ops; is the strategy for another graph?)")
    return graph.index[name]


def _group_of(graph: OpGraph, name: str, field: str) -> int:
    return int(graph.arrays.group[_op_index(graph, name, field)])


def _device_lookup(cluster) -> dict:
    return {d.name: i for i, d in enumerate(cluster.devices)}


def _device(lookup: dict, d, op: str) -> int:
    if isinstance(d, str):
        if d not in lookup:
            raise StrategyError(f"op {op!r}: unknown device {shown(d)} (devices: "
                                f"{', '.join(lookup)})")
        return lookup[d]
    if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < len(lookup):
        raise StrategyError(f"op {op!r}: device {shown(d)} out of range 0..{len(lookup) - 1}")
    return d


def front_points(data: dict, path) -> tuple[list, bool]:
    """The points ``--point K`` counts in a front file's dict, as `moplace search` printed them:
    the feasible front, or (when nothing was feasible) the least-violating infeasible points; and
    whether they are the feasible ones."""
    points = _point_list(data, "points", path)
    if points:
        return points, True
    return _point_list(data, "infeasible", path), False


def _point_list(data: dict, field: str, path) -> list:
    value = data.get(field) or []
    if not isinstance(value, list):
        raise FormatError(path, f"must be a list of points, got {type(value).__name__}",
                          field=field)
    return value


def front_strategy(data: dict, point: int | None, path) -> dict:
    """The strategy dict of point ``point`` of a front file's dict (see `moplace.io.fronts`):
    the point `moplace search` printed as number ``point`` (`front_points`)."""
    try:
        check_version(data.get("version", 1), "front", FRONT_VERSION)
    except StrategyError as exc:
        raise FormatError(path, str(exc)) from None
    points, feasible = front_points(data, path)
    if not points:
        raise FormatError(path, "the front holds no point (the search evaluated nothing)")
    what = "points" if feasible else "points, none feasible: the least-violating ones"
    if point is None and len(points) > 1:
        raise FormatError(path, f"the front holds {len(points)} {what}; choose one with --point "
                                f"(0..{len(points) - 1})")
    k = 0 if point is None else point
    if not 0 <= k < len(points):
        raise FormatError(path, f"--point {k} is out of range 0..{len(points) - 1} (the front "
                                f"holds {len(points)} {what})")
    field = "points" if feasible else "infeasible"
    if not isinstance(points[k], dict) or not isinstance(points[k].get("strategy"), dict):
        raise FormatError(path, "must be an object with a 'strategy' object",
                          field=f"{field}[{k}]")
    return points[k]["strategy"]
