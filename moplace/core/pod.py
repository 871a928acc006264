"""Pods of 8-GPU servers at any scale, without listing each device: what ``--cluster
pod:H100:16384`` names, and what a cluster file with a ``[pod]`` table says.

A `Pod` is one server's template (the ``[[servers]]`` and ``[network]`` tables of a cluster
file: its GPUs, their NVLink/NVSwitch interconnect, one NIC per GPU) repeated ``gpus /
per_server`` times on a rail-optimized fat-tree. Nothing builds a device matrix of the whole
pod: `Pod.servers` makes the first ``k`` servers as a `Cluster` (what a regular plan's
simulated replica runs on: `moplace.simulator.replica`), and the collectives that cross
replicas are timed from the pod's figures (`moplace.simulator.nccl`).

The presets ``pod:H100:N``, ``pod:H200:N`` and ``pod:B200:N`` take their server from the
shipped ``2x8x<KIND>-...-8xIB400`` presets (their sources are cited there) and add the bus
bandwidths NCCL reaches, as NVIDIA's maintainers report them from nccl-tests (NVIDIA/nccl-tests
issues #212 and #290, NCCL 2.18-2.21 on DGX H100): about 370 GB/s ring bus bandwidth inside an
8-GPU NVLink server, about 480 GB/s with NVLink SHARP (NVLS) for all-reduces above 256 MB, and
46-48 GB/s per 400G NDR NIC across servers (the server's ``network`` bandwidth, 48 GB/s).
B200's NVLink 5 doubles the in-server figures (an assumption: no nccl-tests figure is cited).

A cluster file says the same with ``[pod] gpus = N`` (and optionally ``oversubscription``,
the fat-tree's ratio above the leaf, and ``nvls_bandwidth``) beside one ``[[servers]]`` table
without ``repeat``.
"""

from __future__ import annotations

import math
import re

import numpy as np
from dataclasses import dataclass, field
from functools import lru_cache

from ..errors import ClusterError, FormatError, parse_toml, shown

#: the largest pod a plan is made for (the issue's 32,768 GPUs)
MAX_POD_GPUS = 32768
#: device kind -> the 2-server preset whose server a pod repeats, and its NVLS all-reduce bus
#: bandwidth (bytes/s; module docstring)
POD_KINDS = {"H100": ("2x8xH100-80GB-8xIB400", 480e9),
             "H200": ("2x8xH200-141GB-8xIB400", 480e9),
             "B200": ("2x8xB200-180GB-8xIB400", 960e9)}
#: NVLS (NVLink SHARP) serves all-reduces from this size up (nccl-tests #290: above 256 MB)
NVLS_FROM_BYTES = 256e6
_NAME = re.compile(r"pod:([A-Za-z0-9]+):(\d+)$")


@dataclass(frozen=True)
class Pod:
    """``gpus`` GPUs in servers of ``per_server`` (the ``server`` template, a parsed cluster
    document of one server with its network), each GPU its own NIC of ``nic_bandwidth``;
    ``nvlink_bandwidth`` the in-server ring bus bandwidth, ``nvls_bandwidth`` NVLink SHARP's
    (0: none), latencies in seconds, ``oversubscription`` >= 1 above the leaf."""

    name: str
    kind: str
    gpus: int
    per_server: int
    memory_bytes: float
    nvlink_bandwidth: float
    nvlink_latency: float
    nic_bandwidth: float
    nic_latency: float
    nvls_bandwidth: float = 0.0
    oversubscription: float = 1.0
    server: dict = field(default_factory=dict, repr=False, compare=False, hash=False)

    @property
    def n_servers(self) -> int:
        return self.gpus // self.per_server

    @property
    def n_devices(self) -> int:
        return self.gpus

    def servers(self, k: int):
        """The pod's first ``k`` servers as a `moplace.core.cluster.Cluster` (device ``i`` is
        the pod's GPU ``i``)."""
        if not 1 <= k <= self.n_servers:
            raise ClusterError(f"{self.name}: {k} servers asked of {self.n_servers}")
        return _servers(self, k)

    def describe(self) -> str:
        over = (f", {self.oversubscription:g}:1 oversubscribed above the leaf"
                if self.oversubscription > 1 else "")
        return (f"{self.name}: {self.gpus:,} {self.kind} in {self.n_servers:,} "
                f"server{'s' if self.n_servers != 1 else ''} of "
                f"{self.per_server} (NVLink {self.nvlink_bandwidth / 1e9:.0f} GB/s bus, one "
                f"{self.nic_bandwidth / 1e9:.0f} GB/s NIC per GPU{over})")


@lru_cache(maxsize=16)
def _servers(pod: Pod, k: int):
    from .presets import parse_cluster_doc

    doc = dict(pod.server)
    doc["servers"] = [dict(doc["servers"][0], repeat=k)]
    doc["name"] = f"{pod.name} ({k} of {pod.n_servers} servers)"
    return parse_cluster_doc(doc, pod.name)


def load_target(preset_or_path):
    """A `Pod` for ``pod:KIND:N`` or a cluster file with a ``[pod]`` table; the `Cluster` of
    any other preset or file (`moplace.core.presets.load_cluster`)."""
    from pathlib import Path

    from .presets import load_cluster

    if is_pod_name(preset_or_path):
        return pod_preset(str(preset_or_path))
    path = Path(str(preset_or_path))
    try:
        toml_file = path.suffix == ".toml" and path.is_file()
    except (OSError, ValueError):
        toml_file = False
    if toml_file:
        try:
            doc = parse_toml(path.read_text(encoding="utf-8"), path)
        except (UnicodeDecodeError, OSError):
            return load_cluster(preset_or_path)  # its error names the file
        if isinstance(doc, dict) and "pod" in doc:
            return pod_from_doc(doc, path)
    return load_cluster(preset_or_path)


def is_pod_name(text) -> bool:
    return isinstance(text, str) and text.lower().startswith("pod:")


def pod_preset(text: str) -> Pod:
    """The pod ``pod:KIND:N`` names; one `ClusterError` line for a bad name."""
    m = _NAME.match(text.strip())
    kinds = {k.lower(): k for k in POD_KINDS}
    if not m or m.group(1).lower() not in kinds:
        raise ClusterError(f"--cluster {shown(text)}: a pod is named pod:KIND:GPUS with KIND one "
                           f"of {', '.join(POD_KINDS)}, e.g. pod:H100:16384")
    kind, gpus = kinds[m.group(1).lower()], int(m.group(2))
    if gpus < 8 or gpus % 8 or gpus > MAX_POD_GPUS:
        raise ClusterError(f"--cluster {text}: a pod has whole 8-GPU servers, 8 to "
                           f"{MAX_POD_GPUS:,} GPUs; got {gpus:,}")
    from importlib import resources

    preset, nvls = POD_KINDS[kind]
    source = resources.files("moplace.core.presets").joinpath(f"{preset}.toml")
    doc = parse_toml(source.read_text(encoding="utf-8"), f"{preset}.toml")
    return _pod_of(doc, gpus, f"pod:{kind}:{gpus}", f"{preset}.toml", nvls, 1.0)


def pod_from_doc(doc: dict, path) -> Pod:
    """The pod of a cluster file with a ``[pod]`` table (module docstring)."""
    from .presets import quantity

    spec = doc.get("pod")
    if not isinstance(spec, dict):
        raise FormatError(path, "expected a table", field="pod")
    for key in spec:
        if key not in ("gpus", "oversubscription", "nvls_bandwidth"):
            raise FormatError(path, "unknown key; allowed: gpus, nvls_bandwidth, "
                              "oversubscription", field=f"pod.{key}")
    gpus = spec.get("gpus")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 2 <= gpus <= MAX_POD_GPUS:
        raise FormatError(path, f"need an integer from 2 to {MAX_POD_GPUS:,}, got "
                          f"{shown(gpus)}", field="pod.gpus")
    over = spec.get("oversubscription", 1.0)
    if isinstance(over, bool) or not isinstance(over, (int, float)) or not 1 <= over <= 64:
        raise FormatError(path, f"need a number from 1 to 64, got {shown(over)}",
                          field="pod.oversubscription")
    nvls = (quantity(spec["nvls_bandwidth"], "rate", path, "pod.nvls_bandwidth")
            if "nvls_bandwidth" in spec else 0.0)
    servers = doc.get("servers")
    if not isinstance(servers, list) or len(servers) != 1 or not isinstance(servers[0], dict) \
            or "repeat" in servers[0]:
        raise FormatError(path, "a pod repeats one server: give one [[servers]] table without "
                          "repeat", field="servers")
    body = {k: v for k, v in doc.items() if k != "pod"}
    name = doc.get("name") if isinstance(doc.get("name"), str) else str(path)
    return _pod_of(body, gpus, name, path, nvls, float(over))


def _pod_of(doc: dict, gpus: int, name: str, path, nvls: float, over: float) -> Pod:
    from .presets import parse_cluster_doc

    one = dict(doc, servers=[dict(doc["servers"][0], repeat=2)])
    two = parse_cluster_doc(one, path)  # checks every field, and gives the links' figures
    per = two.n_devices // 2
    if gpus % per:
        raise FormatError(path, f"{gpus:,} GPUs are not whole servers of {per}", field="pod.gpus")
    if two.n_devices < 2 or per < 1:
        raise FormatError(path, "a pod's server needs GPUs", field="servers")
    intra = (0, 1) if per > 1 else None
    cross = (0, per)
    server_doc = dict(doc)
    server_doc.pop("name", None)
    return Pod(name=name, kind=two.kinds[0], gpus=gpus, per_server=per,
               memory_bytes=float(two.memory[0]),
               nvlink_bandwidth=float(two.bandwidth[intra]) if intra else math.inf,
               nvlink_latency=float(two.latency[intra]) if intra else 0.0,
               nic_bandwidth=float(two.bandwidth[cross]), nic_latency=float(two.latency[cross]),
               nvls_bandwidth=nvls, oversubscription=over, server=server_doc)


def sub_cluster(cluster, devices, name: str | None = None):
    """The cluster of ``cluster``'s ``devices`` (in that order) with their links, routes and
    servers as they are there (a regular plan's replica on a listed cluster)."""
    from .cluster import Cluster

    idx = [int(d) for d in devices]
    n = len(idx)
    used: dict[int, int] = {}
    routes = {}
    for a, i in enumerate(idx):
        for b, j in enumerate(idx):
            if a != b:
                routes[a, b] = [used.setdefault(int(r), len(used)) for r in cluster.route(i, j)]
    order = sorted(used, key=used.get)
    sel = np.ix_(idx, idx)
    labels = {(a, b): cluster.link_labels[i * cluster.n_devices + j]
              for a, i in enumerate(idx) for b, j in enumerate(idx)
              if a != b and cluster.link_labels[i * cluster.n_devices + j]}
    servers = cluster.server[idx]
    _, servers = np.unique(servers, return_inverse=True)
    first = {}
    renum = [first.setdefault(int(s), len(first)) for s in servers]
    return Cluster(name or f"{cluster.name} (devices {idx[0]}..{idx[-1]})",
                   [cluster.devices[i] for i in idx], cluster.bandwidth[sel],
                   cluster.latency[sel], resource_names=[cluster.resource_names[r] for r in order],
                   routes=routes, resource_bandwidth=cluster.resource_bandwidth[order],
                   labels=labels, servers=renum)


def pod_of_cluster(cluster) -> Pod:
    """A listed cluster's figures as a `Pod` (its servers' size, the links inside a server and
    between two), for timing collectives across it; servers of unequal size or a device kind
    that changes are refused."""
    sizes = np.bincount(cluster.server) if cluster.n_devices else []
    if len(set(sizes.tolist())) != 1 or len(set(cluster.kinds)) != 1:
        raise ClusterError(f"cluster {cluster.name!r}: a regular plan needs servers of one "
                           f"size and one device kind")
    per = int(sizes[0])
    same = [(i, j) for i in range(per) for j in range(per) if i != j]
    cross = (0, per) if cluster.n_servers > 1 else None
    nv, nvlat = ((float(cluster.bandwidth[same[0]]), float(cluster.latency[same[0]])) if same
                 else (math.inf, 0.0))
    nic, niclat = ((float(cluster.bandwidth[cross]), float(cluster.latency[cross])) if cross
                   else (nv, nvlat))
    return Pod(name=cluster.name, kind=cluster.kinds[0], gpus=cluster.n_devices,
               per_server=per, memory_bytes=float(cluster.memory.min()), nvlink_bandwidth=nv,
               nvlink_latency=nvlat, nic_bandwidth=nic, nic_latency=niclat)
