"""Evaluation on a Dask cluster (`moplace search/compare --dask`): the same result as the
serial run, the problem sent once per worker, a worker lost mid-batch retried, clean errors.

The cluster tests start a real scheduler and two workers as separate processes (the `dask`
command-line tools) and are slow (workers import moplace and compile the simulator)."""

import json

import numpy as np
import pytest

from moplace.cli import main
from moplace.errors import MoplaceError
from moplace.optimize import wire
from moplace.optimize.driver import search
from moplace.optimize.plugins import make_searcher

from daskprocs import DaskProcesses, dask_command

needs_dask = pytest.mark.skipif(dask_command() is None, reason="Dask distributed is not installed")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    procs = DaskProcesses(tmp_path_factory.mktemp("dask"), n_workers=2)
    yield procs
    procs.stop()


def _front(path):
    data = json.loads(path.read_text())
    return data["points"], data["history"], data["evaluations"]


@needs_dask
@pytest.mark.slow
@pytest.mark.parametrize("searcher", ["nsga2", "mcmc", "random"])
def test_search_on_a_dask_cluster_equals_the_serial_search(cluster, tmp_path, searcher, capsys):
    runs = {}
    for how, extra in (("serial", []), ("dask", ["--dask", cluster.address])):
        out = tmp_path / how
        args = ["search", "pipedream:resnet50", "--cluster", "4xV100-NVLink", "--searcher",
                searcher, "--budget", "300", "--seed", "5", "--no-mlflow", "--json",
                "--out", str(out)] + extra
        assert main(args) == 0
        json.loads(capsys.readouterr().out)
        runs[how] = _front(out / "front.json")
    assert runs["dask"] == runs["serial"]
    assert runs["dask"][2] == 300


@needs_dask
@pytest.mark.slow
def test_the_problem_goes_to_each_worker_once(cluster, vgg):
    from moplace.scale.dask import DaskEvaluator

    with DaskEvaluator(cluster.address) as ev:
        r = search(vgg, make_searcher("random", batch_size=16), budget=160, seed=2, evaluator=ev)
        assert r.n_evaluations == 160 and ev.tasks >= 10
        token = ev.bind(vgg)[0]
        loaded = ev.client.run(lambda: dict(__import__("moplace.scale.dask").scale.dask.LOADED))
        assert len(loaded) == 2 and all(v[token] == 1 for v in loaded.values())
        # a batch carries its strategies, not the graph, the cluster or the costs
        batch = make_searcher("random", batch_size=16)
        batch.setup(vgg, np.random.default_rng(0))
        chunk = wire.dumps(batch.ask(), wire.problem_refs(vgg))
        assert b"OpGraph" in wire.dumps(vgg) and b"CostModel" in wire.dumps(vgg)
        assert not any(name in chunk for name in (b"OpGraph", b"Cluster", b"CostModel", b"Problem"))


@needs_dask
@pytest.mark.slow
def test_a_worker_killed_mid_batch_loses_and_repeats_nothing(tmp_path, vgg):
    """SIGKILL one of two workers while a batch is on both: Dask runs its chunks again on the
    other; the search ends with its whole budget, identical to the serial search."""
    from moplace.scale.dask import DaskEvaluator

    serial = search(vgg, make_searcher("nsga2", pop_size=40), budget=240, seed=4)
    procs = DaskProcesses(tmp_path, n_workers=2)
    try:
        with DaskEvaluator(procs.address, chunks_per_worker=4) as ev:
            stream, batches = ev.stream, []

            def killing_stream(problem, strategies):
                batches.append(len(strategies))
                for k, e in enumerate(stream(problem, strategies)):
                    if len(batches) == 3 and k == 0:
                        procs.kill_worker(1)
                    yield e

            ev.stream = killing_stream
            r = search(vgg, make_searcher("nsga2", pop_size=40), budget=240, seed=4, evaluator=ev)
            assert ev.n_workers() == 1
    finally:
        procs.stop()
    assert r.n_evaluations == 240 == serial.n_evaluations
    assert r.hypervolume_history == serial.hypervolume_history
    assert [p.values.tolist() for p in r.front] == [p.values.tolist() for p in serial.front]


@pytest.mark.parametrize("address", ["local:0", "local:x", "local:999"])
def test_a_bad_local_cluster_is_one_line(address, capsys):
    pytest.importorskip("distributed")
    assert main(["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher",
                 "random", "--budget", "10", "--no-mlflow", "--dask", address]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "local:N" in err


@pytest.mark.slow
def test_an_unreachable_scheduler_fails_fast(capsys):
    import time

    pytest.importorskip("distributed")
    from moplace.scale.dask import DaskEvaluator

    t0 = time.perf_counter()
    with pytest.raises(MoplaceError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:1"):
        DaskEvaluator("tcp://127.0.0.1:1", timeout=3)
    assert time.perf_counter() - t0 < 15


def test_a_searchers_thread_locks_travel_as_new_unheld_locks():
    """Optuna 5.1's genetic samplers hold a threading.Lock, which plain pickle refuses: a
    checkpoint or a batch sent to a worker writes each lock as a new one, unheld."""
    import pickle
    import threading

    state = {"lock": threading.Lock(), "rlock": threading.RLock(), "n": 3}
    with pytest.raises(TypeError):
        pickle.dumps(state)
    back = wire.loads(wire.dumps(state))
    assert back["n"] == 3 and back["lock"].acquire(blocking=False)
    assert back["rlock"].acquire(blocking=False)
    optuna = pytest.importorskip("optuna")
    sampler = optuna.samplers.NSGAIISampler(seed=0)
    again = wire.loads(wire.dumps(sampler))
    assert type(again) is type(sampler)
