"""The backward's program order (`moplace.simulator.backward`): in a traced PyTorch step no
root of the backward (a backward op no backward op feeds) starts before the forward's last op
of its micro-batch has ended, however long a device waits in the forward; the fast event loop
gives the reference loop's trace with the gates, bit for bit; graphs of other sources keep the
list scheduler's freedom.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from moplace import CostModel, load_cluster, load_graph  # noqa: E402
from moplace.core.baselines import baseline, data_parallel, with_context_parallel  # noqa: E402
from moplace.core.graph import OpGraph  # noqa: E402
from moplace.simulator.backward import backward_gates  # noqa: E402
from moplace.simulator.build import build_task_graph  # noqa: E402
from moplace.simulator.engine import run_task_graph  # noqa: E402
from moplace.simulator.reference import reference_trace  # noqa: E402

from test_simcore_reference import assert_same_trace  # noqa: E402

CLUSTER = "8xH100-80GB-NVLink"


@pytest.fixture(scope="module")
def llama(tiny_llama_file):
    return load_graph(str(tiny_llama_file))


def _plans(graph):
    """Plans whose devices wait in the forward: context parallel (keys and values), tensor
    parallel (all-reduces), a pipeline with micro-batches, and one device."""
    return {"context parallel 4": with_context_parallel(graph, data_parallel(graph, 4), 4),
            "tensor parallel": baseline("tensor-parallel", graph, 8),
            "pipeline": baseline("layer-split", graph, 4).with_options(micro_batches=4),
            "one device": baseline("single", graph, 8)}


def _unordered(graph) -> OpGraph:
    """``graph`` as if from another front end: no program order for its backward."""
    return OpGraph(graph.ops, graph.edges, name=graph.name,
                   metadata={**graph.metadata, "format": "elsewhere"})


def _early_roots(graph, strategy, cluster, gates) -> int:
    """Roots of the backward (``gates``: `backward_gates` of the traced graph) that started
    before the forward's last op of their micro-batch ended, on a trace of ``strategy``."""
    root, last = gates
    tg = build_task_graph(graph, strategy, CostModel(graph, cluster))
    trace = run_task_graph(tg, cluster, len(graph.ops))
    nc = tg.n_compute
    op, start, end = tg.task_op[:nc], trace.task_start[:nc], trace.task_end[:nc]
    mb = tg.task_mb[:nc] if tg.task_mb.size else np.zeros(nc, np.int64)
    early = 0
    for m in np.unique(mb):
        forward_end = end[last[op] & (mb == m)].min()
        early += int(np.count_nonzero(root[op] & (mb == m) & (start < forward_end)))
    return early


def test_a_traced_steps_backward_has_roots_and_begins_at_the_loss(llama):
    root, last = backward_gates(llama)
    names = {llama.ops[i].name for i in np.flatnonzero(last)}
    assert names & {"nll_loss_forward", "nll_loss_forward.output1"}
    types = {llama.ops[i].type for i in np.flatnonzero(root)}
    assert any(t.startswith("sigmoid") for t in types)  # SiLU's gradient needs it
    assert backward_gates(_unordered(llama)) is None


@pytest.mark.parametrize("plan", ["context parallel 4", "tensor parallel", "pipeline",
                                  "one device"])
def test_no_root_of_the_backward_starts_before_the_forward_ends(llama, plan):
    cluster = load_cluster(CLUSTER)
    assert _early_roots(llama, _plans(llama)[plan], cluster, backward_gates(llama)) == 0


def test_without_the_order_a_waiting_device_runs_backward_roots_early(llama):
    """The same plans on the graph without program order: the list scheduler runs some roots
    in the forward while a device waits (what the gates prevent)."""
    cluster = load_cluster(CLUSTER)
    free = _unordered(llama)
    gates = backward_gates(llama)
    assert sum(_early_roots(free, s, cluster, gates) for s in _plans(free).values()) > 0


def test_every_way_of_building_gives_the_full_builds_gates(llama):
    """The gates come with the task graph's shape: a skeleton's instance and a patch of a
    parent's carry what a full build makes."""
    from moplace.simulator.build import FILLED, PATCHED, build
    from moplace.simulator.delta import SimulationBase
    from moplace.simulator.taskgraph import build_split_task_graph

    costs = CostModel(llama, load_cluster(CLUSTER))
    for name, strategy in _plans(llama).items():
        if not strategy.splits and not strategy.pipelined:
            continue
        full, _ = build_split_task_graph(llama, strategy, costs)
        filled, how = build(llama, strategy, costs)
        assert how == FILLED
        for tg in (full, filled):
            assert np.array_equal(tg.gate, full.gate) and np.array_equal(tg.opens, full.opens)
        if strategy.pipelined:
            continue
        moved = strategy.derive(priority=strategy.priority[::-1].copy())
        patched, how = build(llama, moved, costs, SimulationBase(strategy, filled, llama, costs))
        assert how == PATCHED and np.array_equal(patched.gate, full.gate)
    one, _ = build(llama, _plans(llama)["one device"], costs)
    root, last = backward_gates(llama)
    assert np.array_equal(one.gate >= 0, root) and np.array_equal(one.opens >= 0, last)


def test_the_fast_loop_gives_the_reference_trace_with_the_gates(llama):
    cluster = load_cluster(CLUSTER)
    costs = CostModel(llama, cluster)
    for name, strategy in _plans(llama).items():
        tg = build_task_graph(llama, strategy, costs)
        assert (tg.gate >= 0).any() and (tg.opens >= 0).any(), name
        for record in (False, True):
            assert_same_trace(run_task_graph(tg, cluster, len(llama.ops), record=record),
                              reference_trace(tg, cluster, len(llama.ops), record=record),
                              f"{name}, record={record}")
