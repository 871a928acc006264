"""TensorFlow devices for the front end: logical CPUs, GPU kinds, and a `Cluster` of them.

With no GPUs, one physical CPU is split into logical CPU devices so that a placed graph can
still run across "devices"; `host_cluster` describes them as a `Cluster` whose links are
placeholders until `moplace.tf.commprofile` measures real ones.
"""

from __future__ import annotations

from ..core.cluster import Cluster, Device, kind_speed
from ..errors import MoplaceError
from ..testbed.procs import host_memory_bytes
from ._tf import tf

__all__ = ["DeviceSetupError", "available_devices", "configure_logical_cpus", "device_kind",
           "gpu_kind", "host_cluster", "host_memory_bytes"]

#: Placeholder link figures for `host_cluster`, meant to be replaced by measured ones.
PLACEHOLDER_BANDWIDTH = 10e9   # bytes/s
PLACEHOLDER_LATENCY = 5e-6     # s


class DeviceSetupError(MoplaceError, RuntimeError):
    """TensorFlow's devices cannot be set up as asked (e.g. too late to change them)."""


def configure_logical_cpus(count: int) -> list[str]:
    """Split the physical CPU into ``count`` logical CPU devices; returns their names.

    Must be called before TensorFlow initialises its runtime (before the first op or logical
    device listing); it then initialises the runtime, so the split cannot change under the
    caller (configure GPUs, if any, first). Afterwards, asking for the count already in place
    returns its names, and asking for another count raises `DeviceSetupError`.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DeviceSetupError(f"logical CPU count must be an integer >= 1, got {count!r}")
    cpu = tf.config.list_physical_devices("CPU")[0]  # physical listing does not initialise
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError:  # TensorFlow refuses once its runtime is initialised
        have = [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(have) != count:
            raise DeviceSetupError(
                f"cannot configure {count} logical CPUs: TensorFlow's runtime is already "
                f"initialised with {len(have)}; call configure_logical_cpus before any "
                "TensorFlow op runs (or use a fresh process)") from None
        return have
    # listing initialises the runtime: a later call with another count then fails loudly
    # instead of silently giving later sessions a different split from earlier ones
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def available_devices(count: int) -> list[str]:
    """``count`` device names: GPUs when at least ``count`` are visible, else logical CPUs
    (the first ``count`` of them when the CPU is already split into more)."""
    if len(tf.config.list_physical_devices("GPU")) >= count:
        return [d.name for d in tf.config.list_logical_devices("GPU")][:count]
    try:
        return configure_logical_cpus(count)
    except DeviceSetupError:  # already split: fewer devices than that are fine
        have = [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(have) >= count:
            return have[:count]
        raise


def gpu_kind(model: str) -> str:
    """The device kind of a GPU model string ("Tesla V100-PCIE-16GB" -> "V100-PCIe",
    "NVIDIA A100-SXM4-80GB" -> "A100-80GB"): `moplace.costs.devicespecs.kind_of_gpu`, which
    the PyTorch front end uses too. Models it does not know come back as given, less a leading
    "NVIDIA"/"Tesla"."""
    from ..costs.devicespecs import kind_of_gpu

    return kind_of_gpu(model)


def device_kind(name: str) -> str:
    """"cpu" for a CPU device; for a GPU its `gpu_kind`, or "gpu" when TF gives no model."""
    spec = tf.DeviceSpec.from_string(name)
    if (spec.device_type or "").upper() != "GPU":
        return "cpu"
    gpus = tf.config.list_physical_devices("GPU")
    index = spec.device_index or 0
    # logical GPU k is physical GPU k unless GPUs were split into virtual ones
    if index >= len(gpus) or len(tf.config.list_logical_devices("GPU")) != len(gpus):
        return "gpu"
    model = tf.config.experimental.get_device_details(gpus[index]).get("device_name")
    return gpu_kind(model) if model else "gpu"


def host_cluster(devices: list[str], memory_bytes: int | None = None) -> Cluster:
    """A `Cluster` of TensorFlow ``devices`` with placeholder links (10 GB/s, 5 us).

    Memory is ``memory_bytes`` per device when given; otherwise logical CPUs share the host's
    RAM equally and a GPU gets the memory TensorFlow's allocator may use on it.
    """
    if not devices:
        raise DeviceSetupError("host_cluster needs at least one device")
    n_cpu = sum(device_kind(d) == "cpu" for d in devices)
    gpu_memory = None
    out = []
    for name in devices:
        spec = tf.DeviceSpec.from_string(name)
        kind = device_kind(name)
        if memory_bytes is not None:
            mem = int(memory_bytes)
        elif kind == "cpu":
            mem = host_memory_bytes() // n_cpu
        else:
            gpu_memory = gpu_memory or _session_memory_limits()
            mem = gpu_memory.get(_short(name), 0)
            if mem <= 0:
                raise DeviceSetupError(f"no memory size for {name}; pass memory_bytes")
        speed = kind_speed(kind) or 1.0
        out.append(Device(f"{spec.device_type.lower()}{spec.device_index or 0}", kind, mem, speed))
    n = len(out)
    bw = [[PLACEHOLDER_BANDWIDTH] * n for _ in range(n)]
    lat = [[PLACEHOLDER_LATENCY] * n for _ in range(n)]
    return Cluster(f"host-{n}x{out[0].kind}", out, bw, lat)


def _short(name: str) -> str:
    spec = tf.DeviceSpec.from_string(name)
    return f"/device:{spec.device_type}:{spec.device_index or 0}"


def _session_memory_limits() -> dict[str, int]:
    # TF's public device API reports no GPU memory size; a session lists its allocator limits
    with tf.compat.v1.Session() as sess:
        return {_short(d.name): int(d.memory_limit_bytes) for d in sess.list_devices()}
