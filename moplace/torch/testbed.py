"""The PyTorch testbed: K worker processes on this machine joined by ``torch.distributed``,
one per device of a cluster, kept for as many strategies as are run on them.

Without GPUs each process is a device of its own: pinned to its share of the cores
(`moplace.testbed.procs.core_shares`), one thread per core, gloo between them. With
``device="cuda"`` process K runs on GPU K and they talk over NCCL: one process on a machine
with one GPU (what our GPU machines have); several, on as many GPUs, written for and not
tested. A job is a folder holding ``job.pkl``; every worker runs its rank's part and says
``done``.

    with TorchTestbed(2) as bed:
        result, simulated = apply_torch(graph, strategy, bed.cluster(), testbed=bed)
"""

from __future__ import annotations

import sys

from ..core.cluster import Cluster
from ..errors import MoplaceError
from ..testbed.procs import WorkerDied, Workers, core_shares, free_port, host_memory_bytes

__all__ = ["TorchTestbed", "MAX_RANKS"]

MAX_RANKS = 64
#: the links of a cluster of CPU processes until measured (gloo over loopback)
PLACEHOLDER_BANDWIDTH, PLACEHOLDER_LATENCY = 1e9, 50e-6


class TorchTestbed:
    """``count`` PyTorch worker processes (see the module docstring); ``start_timeout``:
    seconds for all of them to start and join."""

    def __init__(self, count: int, *, device: str = "cpu", start_timeout: float = 300.0):
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_RANKS:
            raise MoplaceError(f"a testbed has 1 to {MAX_RANKS} processes, got {count!r}")
        self.check_device(device, count)
        self.count, self.start_timeout, self.device = count, start_timeout, device
        self.cores = core_shares(count)
        self.shared_cores = len({c for share in self.cores for c in share}) < count
        self._start()

    def _start(self) -> None:
        count, last = self.count, None
        for _ in range(3):  # a port found free may be taken before rank 0 binds it
            port = free_port()
            self.workers = Workers(
                [[sys.executable, "-m", "moplace.torch.applyworker", str(k), str(count),
                  str(port), ",".join(map(str, self.cores[k])), self.device]
                 for k in range(count)],
                names=[f"rank {k}" for k in range(count)],
                env={"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
            try:
                self.workers.watch(until=lambda k, line: line == "ready",
                                   timeout=self.start_timeout)
                return
            except WorkerDied as exc:
                last = exc
                self.workers.close()
        raise last

    def run(self, job_dir: str, on_line=None, timeout: float = 600.0) -> None:
        """Every rank runs the job in ``job_dir``; ``on_line(rank, line)`` hears their
        progress. A rank that dies or overruns stops them all (`WorkerDied`); the next job
        starts them again."""
        if not self.workers.alive():
            self.workers.close()
            self._start()
        self.workers.tell(job_dir)
        self.workers.watch(on_line=on_line, until=lambda k, line: line == "done",
                           timeout=timeout)

    def measure_links(self) -> tuple[float, float]:
        """(latency s, bandwidth B/s) between two processes, fitted to one-way times of
        messages from 4 KiB to 16 MiB sent back and forth by ranks 0 and 1 (the loopback every
        pair shares); the placeholders on a testbed of one."""
        import json
        import os
        import tempfile

        if self.count < 2:
            return PLACEHOLDER_LATENCY, PLACEHOLDER_BANDWIDTH
        with tempfile.TemporaryDirectory(prefix="moplace-links-") as out:
            self.run(f"links {out}")
            with open(os.path.join(out, "links.json")) as f:
                times = {int(k): float(v) for k, v in json.load(f).items()}
        from ..costs.linkfit import fit_link

        fit = fit_link(sorted(times.items()), relative=True)
        return fit.latency_s, fit.bandwidth_Bps

    @staticmethod
    def check_device(device: str, count: int) -> None:
        """A `MoplaceError` (one line) unless ``count`` processes can run on ``device``:
        ``cpu``, or ``cuda`` with a visible GPU for each."""
        if device == "cpu":
            return
        if device != "cuda":
            raise MoplaceError(f"--device {device}: a testbed runs on cpu or cuda")
        from ._torch import torch

        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < count:
            many = "es" if count > 1 else ""
            raise MoplaceError(f"--device cuda: a testbed of {count} process{many} needs "
                               f"{count} GPU{'s' if count > 1 else ''}, one each; torch "
                               f"{torch.__version__} sees {have}")

    @staticmethod
    def trace_kind(device: str) -> str:
        """The kind whose attention kernels a plan is traced with on ``device``: ``cpu``, or
        the GPU's (`moplace.torch.device.device_info`)."""
        if device == "cpu":
            return "cpu"
        from .device import device_info

        return device_info("cuda").kind

    @property
    def alive(self) -> bool:
        return self.workers.alive()

    def cluster(self, memory_bytes: int | None = None) -> Cluster:
        """The testbed as a cluster (`placeholder_cluster`)."""
        return self.placeholder_cluster(self.count, memory_bytes)

    @staticmethod
    def placeholder_cluster(count: int, memory_bytes: int | None = None,
                            kind: str = "cpu") -> Cluster:
        """``count`` devices of ``kind`` (``cpu``: sharing this machine's memory, unless
        ``memory_bytes`` says each one's), their links placeholders (1 GB/s, 50 us) until
        measured."""
        mem = memory_bytes or host_memory_bytes() // count
        return Cluster.uniform([f"rank{k}" for k in range(count)], kind=kind,
                               memory_bytes=mem, bandwidth=PLACEHOLDER_BANDWIDTH,
                               latency=PLACEHOLDER_LATENCY, name=f"testbed-{count}x{kind}")

    def describe(self) -> str:
        """One line: how many processes, on which cores (or GPUs)."""
        if self.device == "cuda":
            from .device import device_info

            return (f"{self.count} PyTorch process(es) (NCCL), a GPU each "
                    f"({device_info('cuda').name})")
        cores = "; ".join(",".join(map(str, c)) for c in self.cores)
        shared = " (fewer cores than processes: they share)" if self.shared_cores else ""
        return f"{self.count} PyTorch processes (gloo) pinned to cores {cores}{shared}"

    def close(self) -> None:
        self.workers.close()

    def __enter__(self) -> "TorchTestbed":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
