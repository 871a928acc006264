"""A recorded trace (simulate(..., record=True)): every transfer and memory change, for
figures, without changing what the simulator computes."""

import numpy as np
import pytest

from moplace import load_cluster, load_graph
from moplace.core.baselines import baseline
from moplace.simulator.engine import simulate


@pytest.fixture(scope="module")
def problem():
    return load_graph("pipedream:alexnet"), load_cluster("4xV100-NVLink")


@pytest.mark.parametrize("name", ["single", "round-robin", "data-parallel", "layer-split"])
def test_recording_changes_nothing_and_explains_the_totals(problem, name):
    graph, cluster = problem
    strategy = baseline(name, graph, cluster.n_devices)
    plain = simulate(graph, cluster, strategy)
    rec = simulate(graph, cluster, strategy, record=True)
    assert plain.transfers.shape == (0, 6) and plain.memory.shape == (0, 3)
    for key in ("task_start", "task_end", "sent", "received", "peak_memory"):
        np.testing.assert_array_equal(getattr(plain, key), getattr(rec, key))
    x = rec.transfers
    assert len(x) == rec.n_transfers
    assert np.all(x[:, 5] >= x[:, 4]) and np.all(x[:, 1] != x[:, 2])
    assert (len(x) > 0) == (name in ("round-robin", "layer-split"))
    # transfers are what each device sends, apart from all-reduces (data-parallel has only those)
    by_source = np.bincount(x[:, 1].astype(int), x[:, 3], minlength=cluster.n_devices)
    n_collectives = len(rec.collective_ptr) - 1
    assert n_collectives == int(np.sum(rec.task_device < 0))
    assert (n_collectives > 0) == (name == "data-parallel")
    if n_collectives == 0:
        np.testing.assert_allclose(by_source, rec.sent)
    # the memory record reaches each device's peak, starts from its parameters, never < 0
    m = rec.memory
    assert np.all(np.diff(m[:, 0]) >= 0)
    for d in range(cluster.n_devices):
        on_d = m[m[:, 1] == d, 2]
        assert max(on_d.max(initial=0.0), rec.static_memory[d]) == rec.peak_memory[d]
        assert on_d.min(initial=rec.static_memory[d]) >= rec.static_memory[d] - 1e-6 * max(
            1.0, rec.peak_memory[d])
