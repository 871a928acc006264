"""Micro-batches run for real (issue 33): the testbed's step with the forward and backward
once per micro-batch, gradients accumulated and the updates once gives the original step's
loss and updates (to float reassociation), under both schedules, on one device and on two
stages; a batch-statistics op normalises each micro-batch on its own, as in GPipe."""

import numpy as np
import pytest

import moplace.tf  # noqa: F401  (sets TensorFlow's environment before keras loads)
from moplace import simulate
from moplace.core.baselines import layer_split, topological_priority
from moplace.core.recompute import recomputable_heads
from moplace.core.strategy import Split, Strategy
from moplace.tf.apply import apply_strategy
from moplace.tf.microbatch import copy_name
from test_tf_split import Model


@pytest.fixture(scope="module")
def mlp():
    return Model("mlp", 8)


def _one_device(g, m, schedule=0):
    return Strategy(np.zeros(len(g.ops), np.int64), topological_priority(g), micro_batches=m,
                    schedule=schedule).validate(g, 2)


@pytest.mark.parametrize("m, schedule", [(2, 0), (4, 1)])
def test_micro_batches_give_the_same_step(mlp, m, schedule):
    g = mlp.graph
    gd, _ = mlp.assert_same_step(_one_device(g, m, schedule))  # gradient accumulation
    names = {n.name for n in gd.node}
    outside = set(mlp.traced.feeds) | set(mlp.traced.targets)  # (a target stays, as a NoOp)
    forward = [op.name for op in g.ops if op.role == "forward" and op.name not in outside]
    assert all(copy_name(forward[0], i) in names for i in range(m))
    assert forward[0] not in names  # the whole-batch op is gone
    two = layer_split(g, 2).with_options(micro_batches=m, schedule=schedule).validate(g, 2)
    _, ran_on = mlp.assert_same_step(two)  # a two-stage pipeline
    assert ran_on >= {"device:CPU:0", "device:CPU:1"}


def test_the_copies_run_in_the_schedules_order(mlp):
    """Each device runs its copies in the order the simulator started them (control edges
    between copies): on one device, GPipe starts micro-batch 1's forward before micro-batch
    0's backward, 1F1B (one stage: one micro-batch in flight) after it."""
    g = mlp.graph
    for schedule in (0, 1):
        s = _one_device(g, 2, schedule)
        gd, *_ = mlp.run(s)
        assert any(x.startswith("^moplace_mb") for n in gd.node for x in n.input)
        trace = simulate(g, mlp.cluster, s)
        role = np.array([g.ops[o].role for o in trace.task_op])
        first = {(r, b): trace.task_start[(role == r) & (trace.task_micro_batch == b)].min()
                 for r in ("forward", "backward") for b in (0, 1)}
        if schedule == 1:  # GPipe
            assert first[("forward", 1)] < first[("backward", 0)]
        else:
            assert first[("forward", 1)] >= first[("backward", 0)]


@pytest.mark.slow  # traces cnn twice: keeps the default suite short
def test_batch_statistics_are_the_micro_batches(cnn_model):
    """cnn has a BatchNorm: each micro-batch is normalised by its own statistics (GPipe's
    semantics), so the step trains but its loss is not the whole batch's."""
    g = cnn_model.graph
    s = _one_device(g, 2)
    result = apply_strategy(cnn_model.traced, g, s, simulate(g, cnn_model.cluster, s),
                            cnn_model.devices, steps=2, warmup=1)
    assert result.expressible and result.trained
    assert abs(result.losses[0] - cnn_model.loss) > 1e-7


@pytest.fixture(scope="module")
def cnn_model():
    return Model("cnn", 6)


def test_what_the_testbed_cannot_run_is_refused_with_a_reason(mlp):
    g = mlp.graph
    for strategy, reason in [(_one_device(g, 3), "a batch of 8 cannot be cut into 3")]:
        result = apply_strategy(mlp.traced, g, strategy, simulate(g, mlp.cluster, strategy),
                                mlp.devices, steps=1)
        assert not result.expressible and reason in result.reason


def test_recomputation_with_micro_batches_gives_the_same_step(mlp):
    """Each micro-batch's copy of a recomputed op gets its own clone, read by that
    micro-batch's backward copies, on one device and on a two-stage pipeline."""
    g = mlp.graph
    heads = tuple(int(h) for h in recomputable_heads(g))
    assert heads
    for s in (_one_device(g, 2).with_recompute(heads),
              layer_split(g, 2).with_options(micro_batches=4, schedule=1).with_recompute(heads)):
        s.validate(g, 2)
        gd, _ = mlp.assert_same_step(s)
        clones = [n.name for n in gd.node if n.name.endswith("/moplace_recompute")]
        m = int(s.micro_batches)
        assert {c.split("/")[0] for c in clones} == {f"moplace_mb{i}" for i in range(m)}


@pytest.mark.parametrize("dim", ["batch", "channel"])
def test_hybrid_pipelines_give_the_same_step(mlp, dim):
    """Split ops with micro-batches (a stage replicated over two devices, PipeDream's hybrid
    plans): every copy of a split op is cut into parts of its micro-batch, the updates into
    parts of the whole batch's; the step is the original one."""
    g = mlp.graph
    splits = {i: Split(dim, (0, 1)) for i, op in enumerate(g.ops) if dim in op.splittable}
    for m, schedule in ((2, 0), (4, 1)):
        s = Strategy(np.zeros(len(g.ops), np.int64), topological_priority(g), splits,
                     micro_batches=m, schedule=schedule).validate(g, 2)
        gd, ran_on = mlp.assert_same_step(s)
        names = {n.name for n in gd.node}
        i = next(iter(splits))
        assert f"{copy_name(g.ops[i].name, m - 1)}/moplace_part1" in names
        assert ran_on >= {"device:CPU:0", "device:CPU:1"}


@pytest.mark.slow  # traces the transformer twice: keeps the default suite short
def test_sparse_gradients_are_joined_not_averaged():
    """The transformer's embedding gradient is sparse (rows and their token indices, a
    different set per micro-batch): the copies' rows are joined, scaled by 1/m, and the
    indices joined, so the embedding's update is the original one. (Adam normalises each
    update, so a gradient near zero reassociated can move its weight by up to a learning
    rate: the bound is relative to the largest update, 1%.)"""
    model = Model("transformer", 6)
    g = model.graph
    _, loss, values, _, _ = model.run(_one_device(g, 2))
    assert abs(loss - model.loss) <= 1e-5 * max(1.0, abs(model.loss))
    for name, after in model.after.items():
        want, got = after - model.before[name], values[name] - model.before[name]
        scale = max(float(np.max(np.abs(want))), 1e-12)
        assert float(np.max(np.abs(got - want))) <= 1e-2 * scale + 1e-6, \
            model.traced.variables[name].name


@pytest.mark.slow  # traces gnmt twice: keeps the default suite short
def test_while_loops_run_per_micro_batch():
    """gnmt's LSTMs are While loops whose condition and body are functions of the traced
    step: each micro-batch's copies call the micro-batch trace's functions, added to the
    step's library (without them TensorFlow refused the step: found by
    experiments/split_equivalence.py), and the step is the original one."""
    model = Model("gnmt", 6)
    g = model.graph
    assert any(op.type == "While" for op in g.ops)
    gd, _ = model.assert_same_step(_one_device(g, 2))
    called = {f.signature.name for f in gd.library.function}
    assert any(n.name.startswith("moplace_mb1/") and n.op == "While" for n in gd.node)
    assert all(n.attr["body"].func.name in called for n in gd.node if n.op == "While")
