"""Worker processes of a testbed, whichever front end runs them: each pinned to its share of
the cores (`core_shares`), its standard input held open (a worker exits when it closes, so none
outlives the process that started it), its stdout read line by line, its stderr kept in a file
whose last line says why it died; all of them killed when one dies or time runs out.

    with Workers([[sys.executable, "-m", "pkg.worker", str(k)] for k in range(2)]) as ws:
        ws.watch(on_line=print, timeout=600)   # until every worker has exited 0
"""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import tempfile
import time

from ..errors import MoplaceError

__all__ = ["WorkerDied", "Workers", "core_shares", "free_port", "host_memory_bytes"]


class WorkerDied(MoplaceError):
    """A worker process exited with an error, or did not finish in time (the message names
    which and why)."""


def core_shares(count: int) -> list[list[int]]:
    """The cores this process may use, dealt out to ``count`` workers (every ``count``-th
    core each; with fewer cores than workers, workers share one)."""
    cores = sorted(os.sched_getaffinity(0))
    return [cores[k::count] or [cores[k % len(cores)]] for k in range(count)]


def host_memory_bytes() -> int:
    """Physical RAM of this host, in bytes."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        with open("/proc/meminfo") as f:  # the same figure where sysconf lacks the names
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    raise MoplaceError("cannot read the host's memory size")


def free_port() -> int:
    """A TCP port on localhost free now (another process may take it before it is bound)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


class Workers:
    """The processes of ``commands`` (one argv each), started at once; ``names`` say each in
    errors (default ``worker K``); ``env``: extra environment variables."""

    def __init__(self, commands: list[list[str]], *, names: list[str] | None = None,
                 env: dict | None = None):
        self.names = names or [f"worker {k}" for k in range(len(commands))]
        self.procs: list[subprocess.Popen] = []
        self.logs: list = []
        self._partial = [b""] * len(commands)  # a line read in part
        environ = {**os.environ, **(env or {})}
        try:
            for cmd in commands:
                log = tempfile.TemporaryFile()
                self.logs.append(log)
                self.procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                                   stdout=subprocess.PIPE, stderr=log,
                                                   env=environ))
        except OSError as exc:
            self.close()
            raise WorkerDied(f"cannot start a worker process: {exc}") from None

    def tell(self, line: str) -> None:
        """Write ``line`` to every worker's standard input."""
        for k, proc in enumerate(self.procs):
            try:
                proc.stdin.write(line.encode() + b"\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                why = self.log_tail(k) or "its standard input is closed"
                self.kill()
                raise WorkerDied(f"{self.names[k]} is gone: {why}") from None

    def alive(self) -> bool:
        """Whether every worker is still running."""
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def log_tail(self, k: int, lines: int = 1) -> str:
        """The last ``lines`` non-blank lines worker ``k`` wrote to its stderr."""
        log = self.logs[k]
        log.seek(0)
        text = [ln.strip() for ln in log.read().decode(errors="replace").splitlines()
                if ln.strip()]
        return " | ".join(text[-lines:])[:600]

    def watch(self, on_line=None, timeout: float = 600.0, until=None) -> None:
        """Read every worker's stdout lines (``on_line(k, line)``) until all have exited 0, or
        ``until(k, line)`` is true for a line of each; a worker exiting otherwise, or the
        ``timeout`` (seconds) passing, kills them all and raises `WorkerDied` naming it."""
        deadline = time.monotonic() + timeout
        done = [False] * len(self.procs)
        with selectors.DefaultSelector() as sel:
            for k, proc in enumerate(self.procs):
                if not proc.stdout.closed:
                    sel.register(proc.stdout.fileno(), selectors.EVENT_READ, k)
            while not all(done):
                left = deadline - time.monotonic()
                if left <= 0:
                    late = [self.names[k] for k in range(len(done)) if not done[k]]
                    self.kill()
                    raise WorkerDied(f"{', '.join(late)} did not finish within {timeout:.0f} s")
                for key, _ in sel.select(min(left, 0.5)):
                    k = key.data
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fd)
                        continue
                    *lines, self._partial[k] = (self._partial[k] + chunk).split(b"\n")
                    for line in lines:
                        text = line.decode(errors="replace")
                        if on_line is not None:
                            on_line(k, text)
                        if until is not None and until(k, text):
                            done[k] = True
                for k, proc in enumerate(self.procs):
                    code = proc.poll()
                    if code is None or done[k]:
                        continue
                    if code != 0:
                        why = self.log_tail(k) or f"exit status {code}"
                        self.kill()
                        raise WorkerDied(f"{self.names[k]} died (exit status {code}): {why}")
                    if until is None:
                        done[k] = True
                    else:
                        self.kill()
                        raise WorkerDied(f"{self.names[k]} exited before it finished")

    def kill(self) -> None:
        """Kill every worker still running."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            proc.wait()

    def close(self) -> None:
        """Close the workers' standard input (they exit), waiting a little, then kill those
        still running."""
        for proc in self.procs:
            if proc.stdin and not proc.stdin.closed:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.stdout.close()
        for log in self.logs:
            log.close()
        self.procs, self.logs = [], []

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "procs", None):
            self.close()
