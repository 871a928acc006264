import os

# before any test module can import TensorFlow: oneDNN rewrites would rename profiled nodes
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from moplace.core.cluster import Cluster, Device


def make_cluster(n, *, bandwidth=1e9, latency=0.0, memory=2**40, kind="V100", routes=None,
                 resource_names=None):
    """n identical devices, every ordered pair linked at ``bandwidth`` B/s with ``latency`` s."""
    devices = [Device(f"d{i}", kind, int(memory), 1.0) for i in range(n)]
    bw = np.full((n, n), float(bandwidth))
    np.fill_diagonal(bw, np.inf)
    lat = np.full((n, n), float(latency))
    np.fill_diagonal(lat, 0.0)
    return Cluster(f"test-{n}", devices, bw, lat, routes=routes, resource_names=resource_names)


@pytest.fixture(scope="session", autouse=True)
def _session_working_folder(tmp_path_factory):
    """Fixtures wider than one test (a module's profiled model, a shared search) run in a
    temporary folder of the session, not in the checkout: see `_own_working_folder`. What
    moplace caches (traced PyTorch graphs) goes to a folder of the session too, never to the
    user's ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path_factory.mktemp("session-cwd"))
        mp.setenv("MOPLACE_CACHE", str(tmp_path_factory.mktemp("moplace-cache")))
        yield


@pytest.fixture(autouse=True)
def _own_working_folder(tmp_path_factory, monkeypatch):
    """Every test runs in an empty temporary folder of its own, so what a command writes by
    default (front.json, mlflow.db, mlartifacts/, an Optuna database) lands there, and what was
    left in the checkout (a front.json from any `moplace search`) cannot change a test's
    outcome. Tests find the project's files from ``__file__`` (``ROOT``), never from the
    working directory. A folder apart from ``tmp_path``: a test that lists its tmp_path
    finds only what it put there."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture
def cluster2():
    return make_cluster(2, bandwidth=1e9, latency=1e-3)


def pytest_configure(config):
    """On a fresh checkout, compile the numba kernels once, in two processes, before the test
    workers start (each would compile them all otherwise): see tests/warm_numba.py."""
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller warmed up
        return
    import warm_numba

    if not warm_numba.cached():
        warm_numba.warm()


def pytest_collection_finish(session):
    """Split the CPU into two logical devices before any TensorFlow test starts its runtime
    (TensorFlow fixes its devices at first use), only when such tests were collected."""
    if any(item.path.name.startswith("test_tf") for item in session.items):
        from moplace.tf.devices import configure_logical_cpus

        configure_logical_cpus(2)


@pytest.fixture(scope="module")
def small():
    """A 40-op layered graph on 3 devices: quick searches."""
    from moplace.core.synthetic import layered_dag
    from moplace.optimize.problem import Problem
    return Problem(layered_dag(40, width=4, seed=2), make_cluster(3, bandwidth=5e9, latency=2e-6))


@pytest.fixture(scope="module")
def vgg():
    """PipeDream's VGG-16 on 4 V100s: searches on a real graph."""
    import moplace
    from moplace.optimize.problem import Problem
    return Problem(moplace.load_graph("pipedream:vgg16"), moplace.load_cluster("4xV100-NVLink"))


#: a 2-layer Llama with grouped-query attention (4 heads, 2 of keys and values)
TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 500, "max_position_embeddings": 256, "torch_dtype": "bfloat16"}


@pytest.fixture(scope="session")
def tiny_llama_file(tmp_path_factory):
    """`TINY_LLAMA` traced at one sequence of 128 tokens for H100s (flash attention kernels:
    its graph names them in metadata.context), as an op-graph file; traced once a session."""
    pytest.importorskip("torch", reason="the PyTorch front end needs torch")
    pytest.importorskip("transformers", reason="hf: models need transformers ('moplace[torch]')")
    import json

    from moplace.cli import main

    folder = tmp_path_factory.mktemp("tiny-llama")
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    out = folder / "g.json"
    assert main(["profile", f"hf:{folder / 'config.json'}", "--batch", "1", "--seq-len", "128",
                 "--estimate", "H100", "--quiet", "--no-cache", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_llama_batch2_file(tiny_llama_file):
    """`TINY_LLAMA` as `tiny_llama_file`, at a micro-batch of two sequences."""
    from moplace.cli import main

    out = tiny_llama_file.parent / "g-mbs2.json"
    assert main(["profile", f"hf:{tiny_llama_file.parent / 'config.json'}", "--batch", "2",
                 "--seq-len", "128", "--estimate", "H100", "--quiet", "--no-cache", "-o",
                 str(out)]) == 0
    return out


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a CUDA device: skipped where torch sees none (CI, laptops).
    torch is imported only when such a test was collected."""
    gpu = [item for item in items if "gpu" in item.keywords]
    if not gpu:
        return
    import importlib.util

    visible = importlib.util.find_spec("torch") is not None
    if visible:
        import torch

        visible = torch.cuda.is_available()
    if not visible:
        skip = pytest.mark.skip(reason="needs a CUDA device (marker gpu)")
        for item in gpu:
            item.add_marker(skip)
