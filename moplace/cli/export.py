"""The export command: one front point as the plan a user trains with.

    moplace export FRONT_JSON [--point K] [-o FILE] [--force]
                   [--format text|json|megatron|torchtitan] [--json]

It prints a short summary (degrees, stages with their layers and devices, levers, and the
Megatron-LM flags and torchtitan keys where the plan has that regular shape, else why not);
``-o FILE`` writes the plan in ``--format`` (default from FILE's suffix: ``.json`` the full plan
with its per-op placement, ``.toml`` torchtitan's job config, else the summary); without
``-o``, ``--format`` other than text prints that form instead of the summary. The front.json
records the graph and cluster it was searched on, so nothing else is needed.
"""

from __future__ import annotations

import shlex
import sys
from types import SimpleNamespace

from .. import strictjson
from ..errors import MoplaceError
from .args import file_arg, integer

FORMATS = ("text", "json", "megatron", "torchtitan")
#: the format ``-o FILE`` gets from its suffix when --format is not given
SUFFIX_FORMATS = {".json": "json", ".toml": "torchtitan", ".sh": "megatron"}


def add_commands(sub) -> None:
    """Register ``export`` on the CLI's subparsers."""
    e = sub.add_parser("export", help="write a front point as the plan a user trains with: "
                       "degrees, stages, levers, Megatron/torchtitan flags or per-op placement")
    e.add_argument("front", type=file_arg, metavar="FRONT_JSON",
                   help="a front.json written by `moplace search` or `moplace show --save`")
    e.add_argument("--point", type=integer(0, 10**6),
                   help="the front point (as `search` and `show` number them; needed when the "
                        "front holds more than one)")
    e.add_argument("-o", "--output", type=file_arg, metavar="FILE",
                   help="write the plan to FILE (refuses to replace a file unless --force)")
    e.add_argument("--force", action="store_true", help="replace the -o file")
    e.add_argument("--format", choices=FORMATS,
                   help="text (the summary), json (the plan with per-op placement), megatron "
                        "(Megatron-LM flags), torchtitan (a job-config TOML); the last two for "
                        "regular plans only. Default: from -o's suffix (.json, .toml, .sh), "
                        "else text")
    e.add_argument("--json", action="store_true", help="print exactly one JSON object: the plan")
    e.set_defaults(run=_export)


def _export(args) -> int:
    from pathlib import Path

    from .output import check_output

    out = None
    if args.output is not None:
        out = check_output(args.output, force=args.force, flag="-o")
    fmt = args.format or (SUFFIX_FORMATS.get(Path(args.output).suffix.lower(), "text")
                          if args.output else "text")
    doc, title = export_point(args.front, args.point)
    body = render(doc, fmt, title)
    if out is not None:
        try:
            out.write_text(body)
        except OSError as exc:
            raise MoplaceError(f"-o {out}: cannot write ({exc.strerror or exc})") from None
    if args.json:
        print(strictjson.dumps(doc))
    elif out is not None or fmt == "text":
        from ..io.export import plan_text

        print(doc["text"] if doc.get("kind") == "regular" else plan_text(doc, title=title))
        if out is not None:
            print(f"wrote {out} ({fmt})")
    else:
        sys.stdout.write(body)
    return 0


def export_point(front, point) -> tuple[dict, str]:
    """The plan document of ``front``'s point ``point`` and its summary's title line."""
    from ..core.planshape import plan_shape
    from ..io.export import plan_document
    from ..io.native import read_json
    from ..io.strategies import FRONT_FORMAT, front_points, strategy_from_file
    from .problem import cluster_arg, from_front, graph_arg

    data = read_json(front)
    if not isinstance(data, dict) or data.get("format") != FRONT_FORMAT:
        raise MoplaceError(f"{front}: not a front.json (written by `moplace search` or "
                           f"`moplace show --save`); export takes a search's front")
    if data.get("kind") == "regular":
        return _regular_point(data, front, point)
    ns = SimpleNamespace(graph=None, cluster=None, strategy=str(front), baseline=None,
                         optimizer=None, memory_limit=None, no_inplace=False)
    from_front(ns, needs_cluster=True)
    graph, cluster = graph_arg(ns), cluster_arg(ns)
    strategy = strategy_from_file(data, front, graph, cluster, point=point)
    k = 0 if point is None else point
    _, feasible = front_points(data, front)
    shape = plan_shape(graph, strategy)
    doc = plan_document(graph, strategy, shape, cluster.device_names, source=str(front),
                        point=k, feasible=feasible, cluster=cluster.name)
    title = (f"{front} point {k}: {graph.name} on {cluster.name}"
             + ("" if feasible else " (no feasible point: one of the least-violating)"))
    return doc, title


def _regular_point(data: dict, front, point) -> tuple[dict, str]:
    """A search at scale's point (`moplace.io.regularfronts`) as Megatron-LM flags and
    torchtitan keys (`moplace.io.regularexport`)."""
    from ..core.regular import parse_plan
    from ..io.export import PLAN_FORMAT, PLAN_VERSION
    from ..io.frontcheck import check_front
    from ..io.regularexport import regular_megatron, regular_text, regular_torchtitan
    from ..io.regularfronts import graph_of_point

    check_front(data, front)
    points = data["points"] or data.get("infeasible") or []
    feasible = bool(data["points"])
    if not points:
        raise MoplaceError(f"{front}: the front holds no point")
    if point is None and len(points) > 1:
        raise MoplaceError(f"--point: {front} holds {len(points)} points; give one (0 to "
                           f"{len(points) - 1}, as `moplace show {front}` numbers them)")
    k = 0 if point is None else point
    if k >= len(points):
        raise MoplaceError(f"--point {k}: {front} holds {len(points)} points (0 to "
                           f"{len(points) - 1})")
    p = points[k]
    regular = p.get("regular") if isinstance(p, dict) else None
    try:
        plan = parse_plan(regular["spec"])
    except (TypeError, KeyError, MoplaceError) as exc:
        raise MoplaceError(f"{front}: point {k}'s plan cannot be read "
                           f"(points[{k}].regular.spec: {exc})") from None
    layers = data.get("layers") if isinstance(data.get("layers"), int) else None
    title = (f"{front} point {k}: {data.get('graph')} on {data.get('cluster')}"
             + ("" if feasible else " (no feasible point: one of the least-violating)"))
    mega, titan = regular_megatron(plan, layers), regular_torchtitan(plan, layers)
    doc = {"format": PLAN_FORMAT, "version": PLAN_VERSION, "kind": "regular",
           "source": str(front), "point": k, "feasible": feasible,
           "graph": data.get("graph"), "cluster": data.get("cluster"), "plan": plan.spec(),
           "degrees": regular.get("degrees"), "summary": regular.get("summary"),
           "megatron": mega, "torchtitan": titan,
           "text": regular_text(p, title, mega, titan, graph_of_point(data, plan.mbs),
                                data.get("cluster_source"))}
    return doc, title


def render(doc: dict, fmt: str, title: str) -> str:
    """The plan ``doc`` in format ``fmt`` (`FORMATS`), as a file's text."""
    from ..io.export import plan_text

    if fmt == "json":
        return strictjson.dumps(doc, indent=1) + "\n"
    if fmt == "text":
        return (doc["text"] if doc.get("kind") == "regular" else plan_text(doc, title=title)) \
            + "\n"
    if not doc[fmt]:
        raise MoplaceError(f"point {doc['point']} has no {fmt} flags: "
                           f"{'; '.join(doc['why_not'][fmt])} (--format json writes its "
                           f"per-op placement)")
    if fmt == "megatron":
        notes = "".join(f"# {n}\n" for n in doc["megatron"]["notes"])
        return notes + shlex.join(doc["megatron"]["args"]) + "\n"
    notes = "".join(f"# {n}\n" for n in doc["torchtitan"]["notes"])
    return notes + doc["torchtitan"]["toml"]
