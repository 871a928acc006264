"""Cluster presets and the TOML cluster format (see docs/cluster-format.md).

A cluster file lists servers (GPUs of one kind joined by an intra-server interconnect), an
inter-server network reached through each server's NIC, and optional per-pair link overrides.
Presets are such files shipped in this package; `load_cluster` takes a preset name or a path.
"""

from __future__ import annotations

import math
import re
from importlib import resources
from pathlib import Path

from ...errors import (MAX_ERROR_LINE, ClusterError, FormatError, did_you_mean,
                       names_within, parse_toml, shown)
from ..cluster import KIND_SPEED, Cluster, Device, kind_speed

__all__ = ["KIND_SPEED", "kind_speed", "list_presets", "load_cluster", "parse_cluster",
           "parse_cluster_doc"]

SHARING = ("dedicated", "port", "bus")
#: Limits no cluster a step is placed on comes near (the papers' largest is 64 GPUs); beyond
#: them a file is damaged (a count of 10**9 would take the memory of the machine reading it).
#: Routes and the simulator's tables grow with the square of the device count: 256 devices
#: load in under a second, 1,000 took 12 s.
MAX_DEVICES = 256
#: The fastest link a cluster file may name (1 PB/s); a fitted link is never faster.
MAX_RATE = 1e15
_RANGE = {"size": (1.0, 2.0**50, "1 B to 1 PiB"), "rate": (1.0, MAX_RATE, "1 B/s to 1 PB/s"),
          "time": (0.0, 1e4, "0 to 10000 s")}
MAX_SPEED = 1e6
_PREFIX = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "ns": 1e-9, "min": 60.0,
         "h": 3600.0}
_QUANTITY = re.compile(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)\s*([kKMGTP]i?)?(B|b|bit)?(/s)?\s*")


def list_presets() -> list[str]:
    """Names of the shipped presets, sorted."""
    files = resources.files(__name__).iterdir()
    return sorted(f.name[:-5] for f in files if f.name.endswith(".toml"))


def load_cluster(preset_or_path) -> Cluster:
    """A preset by name (e.g. ``"4xV100-NVLink"``) or a cluster TOML file by path."""
    if isinstance(preset_or_path, Cluster):
        return preset_or_path
    text = str(preset_or_path)
    if text.lower().startswith("pod:"):
        raise ClusterError(f"--cluster {shown(text)}: {POD_ONLY}")
    names = list_presets()
    path = Path(text)
    try:
        exists = path.exists()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise ClusterError(f"--cluster {shown(text)}: not a preset, and no file can have that "
                           f"name ({exc})") from None
    if path.suffix == ".toml" or exists or ("/" in text and text not in names):
        if not path.is_file():
            raise ClusterError(f"no cluster file {text}; presets are: {', '.join(names)}")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(path, f"not UTF-8 text (TOML files are UTF-8): byte {exc.start} "
                              "cannot be read") from None
        except OSError as exc:
            raise FormatError(path, f"cannot read the file: {exc.strerror or exc}") from None
        return parse_cluster(text, path)
    match = [n for n in names if n == text] or [n for n in names if n.lower() == text.lower()]
    if not match:
        head = f"unknown cluster preset {shown(text)}{_suggested(text, names)}; presets are: "
        raise ClusterError(f"{head}{names_within(names, MAX_ERROR_LINE - len(head) - 80)} "
                           f"(`moplace clusters` lists them; or give the path of a .toml "
                           f"cluster file)")
    source = resources.files(__name__).joinpath(f"{match[0]}.toml")
    return parse_cluster(source.read_text(encoding="utf-8"), f"{match[0]}.toml")


def _words(name: str) -> list[str]:
    """A preset name's words: ``2x8xH100-80GB-8xIB400`` -> 2, 8, h100, 80gb, 8, ib400."""
    return [w for w in re.split(r"-|(?<=\d)x", name.lower()) if w]


def _suggested(text: str, names: list[str]) -> str:
    """`` (did you mean 'a' or 'b'?)``: the presets holding every word of a mistyped name
    (``8xH100``: both 8-GPU H100 presets), else those of its device kind (``16xH100``), else
    the closest spellings; ``""`` when none is near."""
    words = _words(text)
    close = [n for n in names if words and not set(words) - set(_words(n))]
    if not close:
        kinds = {w for w in words if re.fullmatch(r"[a-z]+\d+[a-z]*", w)}
        close = [n for n in names if kinds & set(_words(n))]
    if not close:
        return did_you_mean(text, names)
    import difflib

    close = sorted(close, key=lambda n: -difflib.SequenceMatcher(None, text.lower(),
                                                                  n.lower()).ratio())[:3]
    return " (did you mean " + " or ".join(map(repr, close)) + "?)"


def parse_cluster(text: str, path="<cluster>") -> Cluster:
    """Build a cluster from TOML ``text``; ``path`` names the source in error messages."""
    return parse_cluster_doc(parse_toml(text, path), path)


def parse_cluster_doc(doc: dict, path="<cluster>") -> Cluster:
    """Build a cluster from a parsed cluster document (`parse_cluster`)."""
    if isinstance(doc, dict) and "pod" in doc:
        raise FormatError(path, POD_ONLY, field="pod")
    return _Builder(doc, path).build()


#: what a pod is for, said where a command that places ops is given one
POD_ONLY = ("a pod (pod:KIND:GPUS, or a file with a [pod] table) is evaluated by regular plans "
            "only: moplace evaluate GRAPH --cluster POD --plan \"tp=8,pp=16,dp=128,...\"")




class _Builder:
    """Turns a parsed cluster document into a `Cluster`; every error names its field."""

    def __init__(self, doc: dict, path):
        self.doc, self.path = doc, path
        self.devices, self.server_of, self.server_names, self.nics = [], [], [], []
        self.resources, self.routes, self.lat, self.bw, self.labels = [], {}, {}, {}, {}

    def fail(self, field: str, message: str):
        raise FormatError(self.path, message, field=field)

    def build(self) -> Cluster:
        self.keys(self.doc, "", {"name", "description", "servers", "network", "links"})
        servers = self.doc.get("servers")
        if not isinstance(servers, list) or not servers:
            self.fail("servers", "need a non-empty array of [[servers]] tables")
        for k, server in enumerate(servers):
            self.server(server, f"servers[{k}]")
        if len(self.server_names) > 1:
            self.connect_network()
        elif "network" in self.doc:
            self.table(self.doc["network"], "network")
        for k, link in enumerate(self.table(self.doc.get("links", []), "links", list)):
            self.override(link, f"links[{k}]")
        self.prune()
        n = len(self.devices)
        grid = lambda figures, diag: [[figures.get((i, j), diag) for j in range(n)] for i in range(n)]
        name = self.doc.get("name", Path(str(self.path)).stem)
        if not isinstance(name, str) or not name:
            self.fail("name", f"need a non-empty string, got {shown(name)}")
        try:
            return Cluster(name, self.devices, grid(self.bw, math.inf), grid(self.lat, 0.0),
                           resource_names=[r for r, _ in self.resources], routes=self.routes,
                           resource_bandwidth=[b for _, b in self.resources], labels=self.labels,
                           servers=self.server_of)
        except ClusterError as exc:
            raise FormatError(self.path, str(exc)) from None

    def prune(self) -> None:
        """Drop resources no route uses (an override replaced their pair's route)."""
        used = sorted({r for route in self.routes.values() for r in route})
        index = {r: k for k, r in enumerate(used)}
        self.resources = [self.resources[r] for r in used]
        self.routes = {pair: [index[r] for r in route] for pair, route in self.routes.items()}

    def table(self, value, field: str, kind=dict):
        if not isinstance(value, kind):
            self.fail(field, f"expected {'a table' if kind is dict else 'an array of tables'}")
        return value

    def keys(self, table: dict, field: str, allowed: set[str]) -> None:
        for key in table:
            if key not in allowed:
                where = f"{field}.{key}" if field else key
                self.fail(where, f"unknown key; allowed: {', '.join(sorted(allowed))}")

    def server(self, spec, field: str):
        """Add the devices of one [[servers]] entry (times ``repeat``)."""
        spec = self.table(spec, field)
        self.keys(spec, field, {"name", "count", "repeat", "kind", "memory", "speed", "interconnect",
                                "nics"})
        count, repeat = self.integer(spec, "count", field), self.integer(spec, "repeat", field, 1)
        nics = self.integer(spec, "nics", field, 1)
        if nics > count:
            self.fail(f"{field}.nics", f"a server of {count} GPUs has at most {count} NICs (one "
                      f"per GPU), got {nics}")
        if len(self.devices) + count * repeat > MAX_DEVICES:
            self.fail(f"{field}.count", f"{count} x {repeat} devices take the cluster past the "
                      f"{MAX_DEVICES} devices it may have")
        kind = spec.get("kind")
        if not isinstance(kind, str) or not kind:
            self.fail(f"{field}.kind", "need a device kind string, e.g. \"V100\"")
        memory = quantity(spec.get("memory"), "size", self.path, f"{field}.memory")
        speed = spec.get("speed", kind_speed(kind))
        if speed is None:
            self.fail(f"{field}.speed", f"kind {shown(kind)} has no known speed; give speed = ...")
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) \
                or not 0 < speed <= MAX_SPEED:
            self.fail(f"{field}.speed", f"need a number > 0 and at most {MAX_SPEED:g}, got "
                      f"{shown(speed)}")
        links = None
        if count > 1:
            links = self.link(spec.get("interconnect"), f"{field}.interconnect", sharing=True)
        for r in range(repeat):
            base = spec.get("name", f"server{len(self.server_names)}")
            self.server_names.append(base if repeat == 1 or "name" not in spec else f"{base}{r}")
            self.nics.append(nics)
            members = []
            for _ in range(count):
                members.append(len(self.devices))
                self.devices.append(Device(f"gpu{len(self.devices)}", kind, int(memory), float(speed)))
                self.server_of.append(len(self.server_names) - 1)
            self.connect_intra(links, members)

    def integer(self, spec: dict, key: str, field: str, default=None) -> int:
        value = spec.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEVICES:
            self.fail(f"{field}.{key}", f"need an integer from 1 to {MAX_DEVICES}, got "
                      f"{shown(value)}")
        return value

    def link(self, spec, field: str, sharing=False) -> dict:
        """Bandwidth (bytes/s), latency (s), label and, for interconnects, sharing."""
        spec = self.table(spec, field)
        self.keys(spec, field, {"bandwidth", "latency", "label"} | ({"sharing"} if sharing else set()))
        out = {"bw": quantity(spec.get("bandwidth"), "rate", self.path, f"{field}.bandwidth"),
               "lat": quantity(spec.get("latency"), "time", self.path, f"{field}.latency"),
               "label": spec.get("label", "")}
        if not isinstance(out["label"], str):
            self.fail(f"{field}.label", f"need a string, got {shown(out['label'])}")
        if sharing:
            out["sharing"] = spec.get("sharing", "dedicated")
            if not isinstance(out["sharing"], str) or out["sharing"] not in SHARING:
                self.fail(f"{field}.sharing", f"need one of {', '.join(SHARING)}")
        return out

    def resource(self, name: str, bandwidth: float) -> int:
        self.resources.append((name, bandwidth))
        return len(self.resources) - 1

    def set_pair(self, i: int, j: int, link: dict, route: list[int]) -> None:
        self.bw[i, j], self.lat[i, j], self.routes[i, j] = link["bw"], link["lat"], route
        self.labels[i, j] = link["label"]

    def connect_intra(self, link, members: list[int]) -> None:
        """Routes inside one server, by its interconnect's sharing mode."""
        if link is None:
            return
        names, bw = [self.devices[m].name for m in members], link["bw"]
        server = self.server_names[self.server_of[members[0]]]
        port = {m: (self.resource(f"{n}.tx", bw), self.resource(f"{n}.rx", bw))
                for m, n in zip(members, names)} if link["sharing"] == "port" else {}
        bus = self.resource(f"{server}.bus", bw) if link["sharing"] == "bus" else None
        for i in members:
            for j in members:
                if i == j:
                    continue
                if link["sharing"] == "dedicated":
                    route = [self.resource(f"{self.devices[i].name}->{self.devices[j].name}", bw)]
                else:
                    route = [bus] if bus is not None else [port[i][0], port[j][1]]
                self.set_pair(i, j, link, route)

    def connect_network(self) -> None:
        """Cross-server pairs hold the source GPU's NIC tx and the destination GPU's NIC rx. A
        server with m NICs gives them to its GPUs in equal runs (NIC k to GPUs
        ``k * count / m`` onwards: a DGX-1's four NICs serve a GPU pair each)."""
        link = self.link(self.doc.get("network"), "network")
        nic = {}  # (server, k) -> (tx, rx)
        for s, (name, m) in enumerate(zip(self.server_names, self.nics)):
            for k in range(m):
                stem = f"{name}.nic" if m == 1 else f"{name}.nic{k}"
                nic[s, k] = (self.resource(f"{stem}.tx", link["bw"]),
                             self.resource(f"{stem}.rx", link["bw"]))
        nic_of = []
        for i, s in enumerate(self.server_of):
            rank = i - self.server_of.index(s)
            count = self.server_of.count(s)
            nic_of.append(nic[s, rank * self.nics[s] // count])
        for i, si in enumerate(self.server_of):
            for j, sj in enumerate(self.server_of):
                if si != sj:
                    self.set_pair(i, j, link, [nic_of[i][0], nic_of[j][1]])

    def override(self, spec, field: str) -> None:
        """An explicit pair: its own dedicated link replaces the pair's figures and route."""
        spec = self.table(spec, field)
        self.keys(spec, field, {"from", "to", "bandwidth", "latency", "label", "bidirectional"})
        index = {d.name: k for k, d in enumerate(self.devices)}
        ends = []
        for key in ("from", "to"):
            if not isinstance(spec.get(key), str) or spec.get(key) not in index:
                self.fail(f"{field}.{key}", f"unknown device {shown(spec.get(key))}; devices are "
                          f"{self.devices[0].name}..{self.devices[-1].name}")
            ends.append(index[spec[key]])
        if ends[0] == ends[1]:
            self.fail(f"{field}.to", "a link joins two different devices")
        link = self.link({k: v for k, v in spec.items() if k in ("bandwidth", "latency", "label")},
                         field)
        pairs = [tuple(ends)] + ([tuple(ends[::-1])] if spec.get("bidirectional", True) else [])
        for i, j in pairs:
            name = f"{self.devices[i].name}=>{self.devices[j].name}"
            self.set_pair(i, j, link, [self.resource(name, link["bw"])])


def quantity(value, unit: str, path, field: str) -> float:
    """A number in base units (bytes, bytes/s, s) or a string with units: "16GiB", "100Gb/s",
    "12.5GB/s", "5us". Sizes and rates must be > 0, times >= 0."""
    if value is None:
        raise FormatError(path, "missing value", field=field)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer too large for a float
            number = math.inf
    elif isinstance(value, str):
        number = _parse_unit(value, unit)
        if number is None:
            example = {"size": '"16GiB"', "rate": '"100Gb/s" or "12.5GB/s"', "time": '"5us"'}
            raise FormatError(path, f"cannot read {shown(value)} as a {unit}, e.g. "
                              f"{example[unit]}", field=field)
    else:
        raise FormatError(path, f"expected a number or a string, got {shown(value)}", field=field)
    low, high, words = _RANGE[unit]
    if not low <= number <= high:  # also refuses nan
        raise FormatError(path, f"need a finite {unit} {'>= 0' if unit == 'time' else '> 0'}, "
                          f"from {words}, got {shown(value)}", field=field)
    return number


def parse_size(text: str) -> float | None:
    """Bytes of a size written as in cluster files (``"8GiB"``, ``"16GB"``, ``"512"``), or None
    when ``text`` is not one (no range check)."""
    return _parse_unit(text, "size")


def parse_time(text: str) -> float | None:
    """Seconds of a time written as in cluster files (``"5us"``, ``"12.5ms"``, ``"2"``), or
    None when ``text`` is not one (no range check)."""
    return _parse_unit(text, "time")


def _parse_unit(text: str, unit: str) -> float | None:
    if unit == "time":
        found = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)\s*(s|ms|us|\u00b5s|ns|min|h)?\s*",
                             text)
        return _number(found.group(1)) * _TIME[found.group(2) or "s"] if found else None
    found = _QUANTITY.fullmatch(text)
    if not found:
        return None
    number, prefix, base, per_second = found.groups()
    if (unit == "rate") != bool(per_second) or (unit == "size" and base not in (None, "B")):
        return None
    if prefix and not base:
        return None
    return _number(number) * _PREFIX[prefix or ""] / (8 if base in ("b", "bit") else 1)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # "1.2.3": NaN is then refused by the range check with the field named
        return math.nan
