"""Write a `Cluster` as a TOML cluster file (see docs/cluster-format.md).

One server of identical devices; every ordered pair is written as its own link with its
latency and bandwidth, so measured per-pair figures survive. Resource sharing other than
dedicated links is not written: the file describes each pair, not the wiring behind it.
"""

from __future__ import annotations

import numpy as np

from ...errors import ClusterError, FormatError
from . import parse_cluster


def cluster_to_toml(cluster, *, description: str = "") -> str:
    """The TOML text of ``cluster`` (devices must all be of one kind, memory and speed).

    The text is read back before it is returned: a figure the loader would refuse (a fitted
    link beyond 1 PB/s) is a `ClusterError` here, not a file no command can load later.
    """
    d0 = cluster.devices[0]
    if any((d.kind, d.memory_bytes, d.speed) != (d0.kind, d0.memory_bytes, d0.speed)
           for d in cluster.devices):
        raise ClusterError("only clusters of identical devices can be written as TOML")
    lines = [f"name = {_q(cluster.name)}"]
    if description:
        lines.append(f"description = {_q(description)}")
    lines += ["", "[[servers]]", f"count = {cluster.n_devices}", f"kind = {_q(d0.kind)}",
              f"memory = {int(d0.memory_bytes)}", f"speed = {float(d0.speed)!r}"]
    n = cluster.n_devices
    if n > 1:
        off = ~np.eye(n, dtype=bool)
        lines += ["", "[servers.interconnect]",
                  f"bandwidth = {float(np.median(cluster.bandwidth[off]))!r}",
                  f"latency = {float(np.median(cluster.latency[off]))!r}", 'sharing = "dedicated"']
    for i in range(n):
        for j in range(n):
            if i != j:
                lines += ["", "[[links]]", f'from = "gpu{i}"', f'to = "gpu{j}"',
                          f"bandwidth = {float(cluster.bandwidth[i, j])!r}",
                          f"latency = {float(cluster.latency[i, j])!r}", "bidirectional = false"]
    text = "\n".join(lines) + "\n"
    try:
        parse_cluster(text, f"cluster {cluster.name!r}")
    except (ClusterError, FormatError) as exc:
        raise ClusterError(f"cannot write a cluster file that would not load: {exc}") from None
    return text


def _q(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'
