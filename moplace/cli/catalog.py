"""The catalogue commands: what moplace has to offer, before any work.

    moplace graphs       bundled profiled graphs: size, profiled device, batch, precision, compute
    moplace clusters     preset clusters, one line each: GPUs, servers, memory, speed, links
                         [--all: every device and link]
    moplace searchers    registered searchers: origin, summary, settings [--json]
"""

from __future__ import annotations

import textwrap

from .. import strictjson


def add_commands(sub) -> None:
    """Register ``graphs``, ``clusters`` and ``searchers`` on the CLI's subparsers."""
    gr = sub.add_parser("graphs", help="list the bundled profiled graphs")
    gr.set_defaults(run=_graphs)
    cl = sub.add_parser("clusters", help="list the preset clusters, one line each")
    cl.add_argument("--all", action="store_true",
                    help="list every device and link of each preset (the long listing)")
    cl.set_defaults(run=_clusters)
    ls = sub.add_parser("searchers", help="list the registered searchers and their settings")
    ls.add_argument("--json", action="store_true", help="print exactly one JSON object")
    ls.set_defaults(run=_searchers)


#: what the clusters' ``speed`` figure means, said under both listings
SPEED = ("speed: each GPU's compute speed relative to a V100 (1.00); an op's time profiled on "
         "another kind is scaled by the ratio of the two speeds")


def _clusters(args) -> int:
    from ..core.presets import list_presets, load_cluster
    from ..review.table import aligned

    clusters = [load_cluster(name) for name in list_presets()]
    if args.all:
        for c in clusters:
            print(c.describe())
            print()
        print(SPEED)
        return 0
    heads = ["preset", "GPUs", "servers", "kind", "memory", "speed", "inside a server",
             "between servers"]
    rows = [[c.name, str(c.n_devices), str(c.n_servers),
             "/".join(dict.fromkeys(d.kind for d in c.devices)),
             "/".join(dict.fromkeys(f"{d.memory_bytes / 2**30:.0f} GiB" for d in c.devices)),
             "/".join(dict.fromkeys(f"{d.speed:.2f}" for d in c.devices)),
             _link(c, same_server=True), _link(c, same_server=False)] for c in clusters]
    print("\n".join(aligned(heads, rows, words={"preset", "kind", "inside a server",
                                                "between servers"})))
    print(f"\n{SPEED}\n`moplace clusters --all` lists every device and link; a cluster of "
          f"your own: a TOML file (docs/cluster-format.md)")
    from ..core.pod import MAX_POD_GPUS, POD_KINDS

    servers = ", ".join(p for p, _ in POD_KINDS.values())
    print(f"pods of 8-GPU servers at any scale, for regular plans (evaluate --plan): "
          f"{', '.join(f'pod:{k}:N' for k in POD_KINDS)} (the {servers} servers, N up to "
          f"{MAX_POD_GPUS:,}), or a file with a [pod] table")
    return 0


def _link(cluster, *, same_server: bool) -> str:
    """The link between the first two GPUs of one server (or of two servers): its label and
    bandwidth per direction; ``-`` where there is no such pair."""
    n = cluster.n_devices
    for i in range(n):
        for j in range(n):
            if i != j and (cluster.server[i] == cluster.server[j]) == same_server:
                label = cluster.link_labels[i * n + j]
                return f"{label + ' ' if label else ''}{cluster.bandwidth[i, j] / 1e9:.4g} GB/s"
    return "-"


def _graphs(args) -> int:
    from ..io import list_bundled, load_graph

    print(f"{'graph':<42} {'ops':>6} {'edges':>6} {'profiled on':>11} {'batch':>7} "
          f"{'precision':>9} {'compute ms':>11}")
    for name in list_bundled():
        g = load_graph(name)
        kind = g.metadata.get("profiled_on", "?")
        batch = g.metadata.get("batch_size") or "unknown"
        precision = g.metadata.get("precision") or "unknown"
        print(f"{name:<42} {len(g.ops):>6} {len(g.edges):>6} {kind:>11} {batch:>7} "
              f"{precision:>9} {g.total_compute(kind) * 1e3:>11.1f}")
    return 0


def _searchers(args) -> int:
    from ..optimize.plugins import REQUIRED, SEARCHERS

    infos = [SEARCHERS.info(name) for name in SEARCHERS.names()]
    if args.json:
        print(strictjson.dumps({"searchers": [
            {"name": i.name, "origin": i.origin, "target": i.target, "summary": i.summary,
             "settings": [{"name": s.name, "type": s.type, "required": s.default is REQUIRED,
                           "default": None if s.default is REQUIRED else _jsonable(s.default),
                           "meaning": s.doc, "allowed": s.allowed} for s in i.settings]}
            for i in infos]}))
        return 0
    for k, info in enumerate(infos):
        if k:
            print()
        print(f"{info.name}  ({info.origin})")
        print(f"  {info.summary}")
        width = max((len(s.name) for s in info.settings), default=0)
        for s in info.settings:
            # a default as --set takes it (VALUE is JSON): true, null, "placement"
            shown = "required" if s.default is REQUIRED else \
                f"= {strictjson.dumps(_jsonable(s.default))}"
            allowed = f"  ({s.allowed})" if s.allowed else ""
            kind = s.type.replace(" | None", " or null")
            print(f"    {s.name:<{width}}  {kind} {shown}{allowed}".rstrip())
            if s.doc:
                pad = " " * (width + 6)
                print(textwrap.fill(s.doc, 100, initial_indent=pad, subsequent_indent=pad))
    print("\npass a setting with --set KEY=VALUE (search) or --set NAME.KEY=VALUE (compare)")
    return 0


def _jsonable(value):
    """``value`` as strict JSON can hold it: tuples as lists, anything else odd as its repr."""
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return value
    return repr(value)
