"""A real Dask cluster for tests: ``dask scheduler`` and ``dask worker`` as separate processes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def dask_command() -> list[str] | None:
    exe = shutil.which("dask") or str(Path(sys.executable).with_name("dask"))
    return [exe] if Path(exe).exists() else None


class DaskProcesses:
    """A scheduler and ``n_workers`` one-thread workers (no nanny: a killed worker stays dead),
    started in ``folder``; ``address`` is the scheduler's, ``workers`` the worker processes."""

    def __init__(self, folder, n_workers: int = 2, timeout: float = 60.0):
        self.folder, self.procs, self.workers = Path(folder), [], []
        self.file = self.folder / "scheduler.json"
        dask = dask_command()
        env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False",
               "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}  # as the README says
        self.procs.append(self._start(dask + ["scheduler", "--scheduler-file", str(self.file),
                                              "--host", "127.0.0.1", "--port", "0",
                                              "--no-dashboard"], "scheduler", env))
        deadline = time.time() + timeout
        while not self.file.exists() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(0.3)  # the file is written in one go; let it land
        self.address = json.loads(self.file.read_text())["address"]
        for k in range(n_workers):
            self.workers.append(self._start(
                dask + ["worker", self.address, "--nthreads", "1", "--no-nanny",
                        "--no-dashboard", "--name", f"w{k}"], f"worker{k}", env))
        self.procs += self.workers
        from distributed import Client

        with Client(self.address, timeout=timeout) as client:
            client.wait_for_workers(n_workers, timeout=timeout)

    def _start(self, cmd, name, env):
        log = open(self.folder / f"{name}.log", "w")
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)

    def kill_worker(self, k: int) -> None:
        os.kill(self.workers[k].pid, signal.SIGKILL)
        self.workers[k].wait(10)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
