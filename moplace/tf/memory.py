"""Measured memory of a training step, per device, to set beside the simulator's peak.

The simulator's peak on a device is its parameters (resident all step) plus the tensors alive
at the worst moment. The measured counterpart: the bytes of the variables placed on the device
(allocated before the step, so absent from the step's records) plus the peak of the step's
allocations, replayed in time order from the allocation records TensorFlow keeps for every
node when a step is fully traced (each allocation and each free, with its time). Kernels'
scratch space (a convolution's im2col buffer) counts here, as the allocator really held it,
while the simulator knows only ops' outputs: `largest_scratch` says how much that can be.
"""

from __future__ import annotations

from ._tf import tf


def device_index(name: str, devices: list[str]) -> int | None:
    """Which of ``devices`` the step-stats device ``name`` is (None: none of them)."""
    got = tf.DeviceSpec.from_string(name)
    for k, device in enumerate(devices):
        want = tf.DeviceSpec.from_string(device)
        if (got.device_type, got.device_index or 0) == (want.device_type, want.device_index or 0) \
                and want.job in (None, got.job) and want.task in (None, got.task):
            return k
    return None


def device_peaks(metadata, devices: list[str], resident: list[int]) -> list[int]:
    """Peak bytes per device of a traced step's ``metadata``: ``resident[k]`` (variables on
    device k) plus the peak of the step's allocations there."""
    records: list[list[tuple[int, int]]] = [[] for _ in devices]
    for dev in metadata.step_stats.dev_stats:
        k = device_index(dev.device, devices)
        if k is None:
            continue
        for ns in dev.node_stats:
            for mem in ns.memory:
                records[k].extend((r.alloc_micros, r.alloc_bytes) for r in mem.allocation_records)
    peaks = []
    for k, recs in enumerate(records):
        held = peak = 0
        for _, nbytes in sorted(recs):
            held += nbytes
            peak = max(peak, held)
        peaks.append(int(resident[k]) + peak)
    return peaks


def node_scratch(ns) -> int:
    """Bytes a node (its step stats ``ns``) held at its peak beyond its outputs: a kernel's
    temporary buffers."""
    peak = max((int(m.peak_bytes) for m in ns.memory), default=0)
    outputs = sum(int(o.tensor_description.allocation_description.allocated_bytes)
                  for o in ns.output)
    return max(peak - outputs, 0)


def largest_scratch(metadata, devices: list[str]) -> list[int]:
    """Per device, the most scratch one node of a traced step held (`node_scratch`)."""
    out = [0] * len(devices)
    for dev in metadata.step_stats.dev_stats:
        k = device_index(dev.device, devices)
        if k is not None:
            out[k] = max([out[k], *(node_scratch(ns) for ns in dev.node_stats)])
    return out
