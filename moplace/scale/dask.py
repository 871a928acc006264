"""Evaluating batches on a Dask distributed cluster (``--dask ADDRESS``).

``DaskEvaluator(address)`` connects to a running scheduler (``tcp://host:8786``, or a
scheduler file written by ``dask scheduler --scheduler-file F``), or with ``local:N`` starts a
`distributed.LocalCluster` of N worker processes of one thread each (simulation is
single-threaded numba code, and threads of one process would share the GIL).

**What travels.** The problem (graph, cluster, costs, the evaluated baselines) is pickled
once and scattered to every worker (``broadcast=True``); each worker unpickles it once and
keeps it, keyed by a hash of its bytes. A batch then travels as its strategies only, pickled
with the problem's parts as references (`moplace.optimize.wire`), split into about
``chunks_per_worker`` chunks per worker; each chunk is one Dask task returning its
evaluations. Results come back in the batch's order, whatever order the chunks finish in.

**Same numbers.** A worker runs the same `Problem.evaluate` on the same problem, so a search
gets the very evaluations it would get serially, and the same seed gives the same front. (A
searcher's delta hints, `moplace.simulator.delta`, stay here: a worker simulates in full,
which gives the same trace.) A pickled trace leaves out its per-task arrays (see
`moplace.simulator.engine.Trace`), as a checkpoint's does: figures re-simulate the point they
draw.

**Lost workers.** A task whose worker dies is run again on another (Dask retries it; the
scheduler's ``allowed-failures``, 3 by default, bounds how often): tasks are pure, and
results are counted once by their place in the batch, so nothing is lost or counted twice.
A chunk that still fails raises a `MoplaceError` saying so; the search stops as it would on
any failure, with what it had found.
"""

from __future__ import annotations

import hashlib
import math
import time

from ..errors import MoplaceError
from ..optimize import wire

#: Dask's statistical profiler samples every task's stack every 10 ms: it slowed simulation on
#: a worker by up to a third (nasnetamobile, 2 cores); off for ``local:N``, and for workers
#: started by hand with ``DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False``
PROFILER_OFF = {"distributed.worker.profile.enabled": False}
#: problems a worker keeps unpickled, most recent last (a compare or a sweep sends several)
_KEEP = 4
_PROBLEMS: dict[str, object] = {}
#: how often this worker unpickled each problem (once, unless it was dropped to keep _KEEP)
LOADED: dict[str, int] = {}


def _problem(token: str, data: bytes):
    """The problem of ``token`` on this worker, unpickled the first time only."""
    problem = _PROBLEMS.pop(token, None)
    if problem is None:
        problem = wire.loads(data)
        LOADED[token] = LOADED.get(token, 0) + 1
    _PROBLEMS[token] = problem
    while len(_PROBLEMS) > _KEEP:
        _PROBLEMS.pop(next(iter(_PROBLEMS)))
    return problem


def evaluate_chunk(data: bytes, token: str, chunk: bytes) -> bytes:
    """A Dask task: evaluate the pickled strategies ``chunk`` of the problem ``data``."""
    problem = _problem(token, data)
    strategies = wire.loads(chunk, wire.problem_resolver(problem))
    return wire.dumps([problem.evaluate(s) for s in strategies], wire.problem_refs(problem))


def _warm(data: bytes, token: str) -> int:
    """Unpickle the problem and compile the simulator on this worker (first call only)."""
    from ..core.baselines import baseline

    problem = _problem(token, data)

    problem.evaluate(baseline("single", problem.graph, problem.n_devices))
    import gc

    gc.freeze()  # the worker's and the problem's objects: no garbage collection walks them
    return 1


class DaskEvaluator:
    """Evaluates batches of strategies on a Dask cluster; see the module docstring.

    ``address``: ``local:N``, a scheduler address, or a scheduler file. ``timeout``: seconds
    to reach the scheduler (and, for ``local:N``, for the workers to start)."""

    def __init__(self, address: str, *, chunks_per_worker: int = 4, timeout: float = 10.0):
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise MoplaceError("--dask needs Dask distributed: pip install 'distributed'") from None
        self.address, self.cluster = str(address), None
        self.chunks_per_worker = int(chunks_per_worker)
        self._bound: dict[int, tuple[object, str, object]] = {}  # id(problem) -> (problem, token, future)
        #: tasks sent and seconds spent waiting for results (the overhead a benchmark reports)
        self.tasks, self.wait_seconds = 0, 0.0
        try:
            if self.address.startswith("local:"):
                import dask

                n = local_workers(self.address)
                with dask.config.set(PROFILER_OFF):
                    self.cluster = LocalCluster(n_workers=n, threads_per_worker=1,
                                                processes=True, dashboard_address=None,
                                                silence_logs=40)
                self.client = Client(self.cluster, timeout=timeout)
            elif self.address.endswith(".json"):
                self.client = Client(scheduler_file=self.address, timeout=timeout)
            else:
                self.client = Client(self.address, timeout=timeout)
        except MoplaceError:
            raise
        except (OSError, TimeoutError, ValueError) as exc:
            self.close()
            raise MoplaceError(f"cannot reach the Dask scheduler at {self.address} within "
                               f"{timeout:g} s ({type(exc).__name__}: {exc})".replace("\n", " ")) from None
        if not self.n_workers():
            self.client.wait_for_workers(1, timeout=timeout)

    def n_workers(self) -> int:
        return len(self.client.scheduler_info(n_workers=-1)["workers"])

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        client, cluster = getattr(self, "client", None), self.cluster
        self.client = self.cluster = None
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()

    def bind(self, problem):
        """Send ``problem`` to every worker (once); returns (token, future of its bytes)."""
        bound = self._bound.get(id(problem))
        if bound is not None and bound[0] is problem:
            return bound[1], bound[2]
        data = wire.dumps(problem)
        token = hashlib.sha256(data).hexdigest()[:16]
        future = self.client.scatter(data, broadcast=True, hash=False)
        self.client.run(_warm, data, token)  # unpickle and compile everywhere now, not in a batch
        self._bound[id(problem)] = (problem, token, future)
        return token, future

    def stream(self, problem, strategies):
        """Evaluate ``strategies`` on the cluster; yields their evaluations in order. Closing
        the generator early (Ctrl-C, time out) cancels what is still running."""
        strategies = list(strategies)
        if not strategies:
            return
        token, data = self.bind(problem)
        refs, resolve = wire.problem_refs(problem), wire.problem_resolver(problem)
        n_chunks = min(len(strategies), max(1, self.n_workers()) * self.chunks_per_worker)
        size = math.ceil(len(strategies) / n_chunks)
        chunks = [strategies[k:k + size] for k in range(0, len(strategies), size)]
        futures = [self.client.submit(evaluate_chunk, data, token, wire.dumps(c, refs), pure=False,
                                      retries=0) for c in chunks]
        self.tasks += len(futures)
        try:
            for future in futures:
                t0 = time.perf_counter()
                try:
                    payload = future.result()
                except Exception as exc:  # noqa: BLE001 - the worker's error, named
                    raise MoplaceError(f"a batch of evaluations failed on the Dask cluster at "
                                       f"{self.address} ({type(exc).__name__}: {exc})"
                                       .replace("\n", " ")) from None
                finally:
                    self.wait_seconds += time.perf_counter() - t0
                yield from wire.loads(payload, resolve)
        finally:
            left = [f for f in futures if not f.done()]
            if left:  # a round trip to the scheduler: only when there is something to stop
                self.client.cancel(left)


def local_workers(address: str) -> int:
    """N of ``local:N`` (a clear error for anything else)."""
    text = address[len("local:"):]
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 256):
        raise MoplaceError(f"--dask local:N wants N from 1 to 256 worker processes, got {address!r}")
    return int(text)
