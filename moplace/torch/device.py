"""The device a PyTorch step is measured on: which one (``--device cuda|cpu``), its kind and
memory, the traced graph moved onto it, and the words for a model that does not fit it.

The tracer runs under fake CPU tensors, so every factory op of the joint graph (a causal mask's
``arange``, a ``full`` or ``zeros`` of a loss) was recorded with ``device=cpu``: `on_device`
rewrites those arguments, and moves the graph's tensor constants, before the graph runs on a
GPU. All of it is plain functions of their inputs, tested on a CPU.
"""

from __future__ import annotations

import dataclasses

from ..errors import MoplaceError
from ._torch import torch

DEVICES = ("cuda", "cpu")


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """A device to measure on: torch's name for it, its moplace kind, what the driver calls
    it, and its memory in bytes."""

    device: str  # "cuda:0" or "cpu"
    kind: str  # moplace.costs.devicespecs.kind_of_gpu, or "cpu"
    name: str
    memory_bytes: int


def resolve_device(asked: str | None) -> str:
    """``cuda`` or ``cpu``: ``asked``, or the GPU when one is visible; a `MoplaceError` (one
    line) for ``cuda`` without a visible CUDA device, or a device moplace does not know."""
    if asked is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if asked not in DEVICES:
        raise MoplaceError(f"--device {asked}: one of {', '.join(DEVICES)}")
    if asked == "cuda" and not torch.cuda.is_available():
        raise MoplaceError(f"--device cuda: no CUDA device is visible to torch "
                           f"{torch.__version__} (--device cpu measures on this CPU)")
    return asked


def device_info(device: str) -> DeviceInfo:
    """The `DeviceInfo` of ``cuda`` (the current GPU) or ``cpu`` (this machine: its RAM)."""
    if device.startswith("cuda"):
        from ..costs.devicespecs import kind_of_gpu

        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        name = torch.cuda.get_device_name(index)
        return DeviceInfo(f"cuda:{index}", kind_of_gpu(name, int(props.total_memory)), name,
                          int(props.total_memory))
    from ..testbed.procs import host_memory_bytes

    return DeviceInfo("cpu", "cpu", f"{_cpu_name()}, {torch.get_num_threads()} threads",
                      host_memory_bytes())


def _cpu_name() -> str:
    """This machine's processor as /proc/cpuinfo names it (Linux), else its architecture."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "cpu"


def rewrite_devices(graph, device) -> int:
    """Point every ``torch.device`` argument of ``graph``'s calls (factory ops' ``device=cpu``,
    a ``_to_copy`` onto the CPU) at ``device``, in place; returns how many it changed."""
    target = torch.device(device)
    changed = 0

    def swap(value):
        nonlocal changed
        if isinstance(value, torch.device) and value != target:
            changed += 1
            return target
        return value

    for node in graph.nodes:
        if node.op != "call_function":
            continue
        node.args = torch.fx.node.map_aggregate(node.args, swap)
        node.kwargs = torch.fx.node.map_aggregate(node.kwargs, swap)
    return changed


def on_device(module, device):
    """A copy of the traced ``module`` (a ``torch.fx.GraphModule``) that runs on ``device``:
    its graph's device arguments rewritten (`rewrite_devices`) and its tensor constants moved;
    the node names stay, so times measured on it are the traced graph's nodes'."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(module.graph, {})
    graph.output(out)
    rewrite_devices(graph, device)
    moved = torch.fx.GraphModule(module, graph)
    for node in graph.nodes:
        if node.op == "get_attr":
            value = _attr(moved, node.target)
            if isinstance(value, torch.Tensor):
                _set_attr(moved, node.target, value.to(device))
    return moved


def _attr(module, target: str):
    for part in target.split("."):
        module = getattr(module, part)
    return module


def _set_attr(module, target: str, value) -> None:
    *path, last = target.split(".")
    for part in path:
        module = getattr(module, part)
    setattr(module, last, value)


def gib(n: float) -> str:
    """``n`` bytes in GiB, as the messages print them."""
    return f"{n / 2**30:.2f} GiB"


def oom_message(what: str, info: DeviceInfo, stage: str, held: int, requested: int | None,
                simulated: float | None = None) -> str:
    """One line for a model that did not fit the device: what it held when it asked for more,
    how much more, against the device's memory, and (where known) the simulator's one-device
    peak for the traced step."""
    asked = (f" and asked for {gib(requested)} more: it needs at least {gib(held + requested)}"
             if requested else "")
    need = f"; the simulator puts its step's peak at {gib(simulated)}" if simulated else ""
    return (f"{what} does not fit the {info.name} ({info.kind}, {gib(info.memory_bytes)}): "
            f"{stage} held {gib(held)}{asked}{need}; try a smaller --batch or --seq-len, "
            f"--dtype bf16, or --device cpu")


def requested_bytes(message: str) -> int | None:
    """The bytes an out-of-memory error of PyTorch's allocator says it tried to allocate
    ("Tried to allocate 2.00 GiB"), or None."""
    import re

    found = re.search(r"Tried to allocate ([0-9.]+) ?([KMGT]i?B|B|bytes)", message)
    if not found:
        return None
    scale = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
             "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[found.group(2)]
    return int(float(found.group(1)) * scale)


def cluster_toml(graph_name: str, info: DeviceInfo) -> str:
    """The cluster file of the measured device as one device of its kind, with its memory:
    where ``--measure`` timed the ops, so the graph's times of that kind are evaluated on it.
    A kind with no known speed (a GPU moplace has no datasheet for) gets speed 1: the graph's
    times are its own, measured, and no other kind's are scaled to it."""
    from ..core.cluster import kind_speed

    speed = "" if kind_speed(info.kind) is not None else "speed = 1.0\n"
    where = "this machine's CPU" if info.kind == "cpu" else f"the {info.name}"
    return (f'name = "{graph_name}-{info.kind.replace(" ", "-")}"\n'
            f'description = "{where}, where moplace profile --measure timed every op"\n\n'
            f'[[servers]]\ncount = 1\nkind = "{info.kind}"\nmemory = "{info.memory_bytes}B"\n'
            f'{speed}')
