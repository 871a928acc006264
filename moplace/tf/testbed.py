"""A testbed whose devices are real: K TensorFlow worker processes on this machine.

Each device is a process of its own (`moplace.tf.testbed_worker`) running a
``tf.distribute.Server``: with GPUs, one process per GPU; without, one per share of the CPU
cores, pinned to them, with one inter-op and one intra-op thread, so devices do not take each
other's cores and a device runs one op at a time, as the simulator has it. Tensors between
devices go through TensorFlow's own transport (gRPC on localhost), the feed and fetch of a step
through the master in worker 0. A graph placed on ``testbed.devices`` runs in a session opened
on ``testbed.target``.

    with Testbed(2) as bed:
        runner = StepRunner(traced, placed_graph_def, target=bed.target)

The workers exit when the testbed closes, or when the process holding it dies (their standard
input closes).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from ..core.cluster import Cluster
from ..errors import MoplaceError
from ..testbed.procs import WorkerDied, Workers, core_shares, free_port, host_memory_bytes
from .devices import PLACEHOLDER_BANDWIDTH, PLACEHOLDER_LATENCY

__all__ = ["Testbed", "TestbedError", "Worker"]

MAX_WORKERS = 64


class TestbedError(MoplaceError):
    """The testbed's workers cannot be started or reached."""


@dataclass(frozen=True)
class Worker:
    """One device of the testbed, as its process reported it."""

    task: int
    device: str
    kind: str
    memory_bytes: int
    cores: tuple[int, ...]
    pid: int


class Testbed:
    """``count`` TensorFlow worker processes on localhost, one device each (see the module
    docstring). ``gpus``: use one GPU per worker (default: when at least ``count`` are
    visible). ``threads``: each worker's inter- and intra-op threads."""

    def __init__(self, count: int, *, gpus: bool | None = None, threads: int = 1,
                 start_timeout: float = 120.0):
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_WORKERS:
            raise TestbedError(f"a testbed has 1 to {MAX_WORKERS} workers, got {count!r}")
        if gpus is None:
            gpus = _visible_gpus() >= count
        elif gpus and _visible_gpus() < count:
            raise TestbedError(f"a testbed of {count} GPU workers needs {count} GPUs; "
                               f"{_visible_gpus()} are visible")
        self.count, self.gpus, self.threads = count, bool(gpus), threads
        cores = sorted(os.sched_getaffinity(0))
        #: True when there are fewer cores than CPU workers, so workers share cores
        self.shared_cores = not self.gpus and count > len(cores)
        self._cores = core_shares(count)
        self._workers: Workers | None = None
        self.workers: list[Worker] = []
        last = None
        for _ in range(3):  # a port picked free may be taken before the worker binds it
            try:
                self._start(start_timeout)
                break
            except TestbedError as exc:
                last = exc
                self.close()
        else:
            raise last
        self.devices = [w.device for w in self.workers]
        self.target = f"grpc://{self.addresses[0]}"

    def _start(self, timeout: float) -> None:
        self.addresses = [f"localhost:{free_port()}" for _ in range(self.count)]
        commands = []
        for k in range(self.count):
            cmd = [sys.executable, "-m", "moplace.tf.testbed_worker", str(k),
                   json.dumps(self.addresses), "--threads", str(self.threads)]
            cmd += ["--gpu", str(k)] if self.gpus else ["--cores", ",".join(map(str, self._cores[k]))]
            commands.append(cmd)
        try:
            self._workers = Workers(commands, names=[f"testbed worker {k}"
                                                     for k in range(self.count)])
        except WorkerDied as exc:
            raise TestbedError(str(exc)) from None
        ready: dict = {}

        def heard(k, line):
            if k not in ready and line.startswith("{"):
                ready[k] = json.loads(line)

        try:
            self._workers.watch(on_line=heard, until=lambda k, line: k in ready,
                                timeout=timeout)
        except WorkerDied as exc:
            raise TestbedError(f"{exc} before it was ready") from None
        self.workers = [Worker(info["task"], info["device"], info["kind"],
                               int(info["memory_bytes"]), tuple(info["cores"]), info["pid"])
                        for info in (ready[k] for k in range(self.count))]

    def cluster(self) -> Cluster:
        """The testbed as a `Cluster`, with placeholder links (10 GB/s, 5 us) until
        `moplace.tf.commprofile` measures them. CPU workers share the host's memory equally."""
        return Cluster.uniform([f"w{w.task}-{w.kind}" for w in self.workers],
                               kind=[w.kind for w in self.workers],
                               memory_bytes=[w.memory_bytes or host_memory_bytes() // self.count
                                             for w in self.workers],
                               bandwidth=PLACEHOLDER_BANDWIDTH, latency=PLACEHOLDER_LATENCY,
                               name=f"testbed-{len(self.workers)}x{self.workers[0].kind}")

    def describe(self) -> str:
        """One line: how many workers, of what, on which cores."""
        if self.gpus:
            return f"{self.count} worker processes, one {self.workers[0].kind} GPU each"
        cores = "; ".join(",".join(map(str, w.cores)) for w in self.workers)
        shared = " (fewer cores than workers: they share)" if self.shared_cores else ""
        return f"{self.count} worker processes pinned to cores {cores}{shared}"

    def reset(self) -> None:
        """Free every variable the workers hold (each run loads its own)."""
        from ._tf import tf

        tf.compat.v1.Session.reset(self.target)

    def close(self) -> None:
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    def __enter__(self) -> "Testbed":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_workers", None) is not None:
            self.close()


def _visible_gpus() -> int:
    from ._tf import tf

    return len(tf.config.list_physical_devices("GPU"))
