"""Split strategies rewritten into the real training step: the numbers must not change.

For every op type the genome may split (all of them are in tests/models/splitops.py), on
batch and on channel, and for data parallelism and random strategies of the searchers' own
genome, one training step of the rewritten graph gives the loss and the updated weights of the
original step, within float32 tolerance.
"""

from pathlib import Path

import numpy as np
import pytest

import moplace.tf  # noqa: F401  (sets TensorFlow's environment before keras loads)
from moplace import Problem, simulate
from moplace.core.baselines import data_parallel, topological_priority
from moplace.core.strategy import Split, Strategy
from moplace.tf.apply import apply_strategy, placed_graph_def
from moplace.tf.convert import SPLITTABLE_TYPES, to_op_graph
from moplace.tf.devices import available_devices, host_cluster
from moplace.tf.frontend import trace_model
from moplace.tf.recompute import RecomputeRefused
from moplace.tf.rewrite import SplitRefused
from moplace.tf.session import StepRunner
from moplace.tf.splitrules import CHANNEL_SPLITTABLE, plan_parts

SPLITOPS = str(Path(__file__).parent / "models" / "splitops.py")


class Model:
    def __init__(self, name: str, batch: int):
        self.devices = available_devices(2)
        self.traced = trace_model(name, batch)
        self.graph = to_op_graph(self.traced, {}, "cpu")
        self.cluster = host_cluster(self.devices)
        with StepRunner(self.traced) as runner:
            self.before = runner.variable_values()
            self.loss = runner.step().loss
            self.after = runner.variable_values()

    def run(self, strategy):
        gd, notes = placed_graph_def(self.traced, self.graph, strategy,
                                     simulate(self.graph, self.cluster, strategy), self.devices)
        with StepRunner(self.traced, gd) as runner:
            step = runner.step(trace=True)
            values = runner.variable_values()
        ran_on = {d.device.rsplit("/", 1)[-1] for d in step.metadata.step_stats.dev_stats}
        return gd, step.loss, values, ran_on, notes

    def assert_same_step(self, strategy):
        gd, loss, values, ran_on, _ = self.run(strategy)
        assert abs(loss - self.loss) <= 1e-5 * max(1.0, abs(self.loss))
        for name, after in self.after.items():
            # the update each weight got must be the original one (relative to its size)
            want, got = after - self.before[name], values[name] - self.before[name]
            scale = max(float(np.max(np.abs(want))), 1e-12)
            assert float(np.max(np.abs(got - want))) <= 1e-4 * scale + 1e-7, name
        return gd, ran_on


@pytest.fixture(scope="module")
def splitops():
    return Model(SPLITOPS, 6)


@pytest.fixture(scope="module")
def cnn():
    return Model("cnn", 5)  # 5 rows: batch parts of 3 and 2


def all_split(graph, dim, types=None):
    splits = {i: Split(dim, (0, 1)) for i, op in enumerate(graph.ops)
              if op.splittable and (types is None or op.type in types)}
    return Strategy(np.zeros(len(graph.ops), np.int64), topological_priority(graph), splits)


def test_the_test_model_holds_every_splittable_op_type(splitops):
    assert {op.type for op in splitops.graph.ops if op.splittable} == set(SPLITTABLE_TYPES)
    assert CHANNEL_SPLITTABLE == SPLITTABLE_TYPES


@pytest.mark.parametrize("dim", ["batch", "channel"])
@pytest.mark.parametrize("op_type", sorted(SPLITTABLE_TYPES))
def test_each_op_type_split_gives_the_same_step(splitops, op_type, dim):
    s = all_split(splitops.graph, dim, {op_type})
    assert s.splits
    gd, ran_on = splitops.assert_same_step(s)
    names = {n.name for n in gd.node}
    for i in s.splits:
        op = splitops.graph.ops[i].name
        assert op not in names and {f"{op}/moplace_part0", f"{op}/moplace_part1"} <= names
    assert ran_on >= {"device:CPU:0", "device:CPU:1"}


@pytest.mark.parametrize("dim", ["batch", "channel"])
def test_uneven_parts_give_the_same_step(cnn, dim):
    cnn.assert_same_step(all_split(cnn.graph, dim))


def test_data_parallel_runs_through_the_same_rewriting(cnn, splitops):
    for model in (cnn, splitops):
        s = data_parallel(model.graph, 2)
        assert s.splits and all(sp.dim == "batch" for sp in s.splits.values())
        model.assert_same_step(s)


def test_slices_and_concatenations_are_made_once_and_shared(cnn):
    """A slice of a tensor is made once (on the producer's device) and read by every part that
    needs it: a convolution's input gradient and filter gradient read the same slices of the
    output gradient; a whole tensor is joined once per device."""
    g = cnn.graph
    gd, *_ = cnn.run(all_split(g, "batch"))
    made = [(n.op, tuple(n.input), n.device) for n in gd.node if n.op in ("ConcatV2", "Slice", "AddN")
            and "/moplace_" in n.name]
    assert made and len(made) == len(set(made))
    nodes = {n.name: n for n in gd.node}
    for k in (0, 1):
        grads = [n for n in gd.node if n.name.startswith("gradient_tape/cnn_1/conv2_1/")
                 and n.name.endswith(f"/moplace_part{k}")]
        assert {n.op for n in grads} == {"Conv2DBackpropInput", "Conv2DBackpropFilter"}
        assert len({n.input[2] for n in grads}) == 1  # the same slice of the output gradient
        assert nodes[grads[0].input[2].split(":")[0]].op == "Slice"


@pytest.mark.slow  # 12 strategies of the searchers' genome, each a session: keeps the default suite short
def test_random_genome_strategies_give_the_same_step(cnn):
    problem = Problem(cnn.graph, cnn.cluster)
    rng = np.random.default_rng(3)
    genome = problem.genome
    seen = 0
    for x in genome.sample(12, rng):
        s = genome.decode(x)
        # the testbed recomputes unsplit groups for unsplit readers only (the rest is refused,
        # tested below); micro-batches are left out: cnn's 5 rows cannot be cut into the
        # genome's counts, and its BatchNorm normalises each micro-batch on its own (hybrid
        # pipelines: tests/test_tf_microbatch.py)
        s = s.with_recompute([h for h in s.recompute if h not in s.splits])
        s = s.with_options(micro_batches=1) if s.splits else s
        if s.splits:
            seen += 1
            try:
                placed_graph_def(cnn.traced, cnn.graph, s, simulate(cnn.graph, cnn.cluster, s),
                                 cnn.devices)
            except RecomputeRefused:
                s = s.with_recompute(())
            cnn.assert_same_step(s)
    assert seen >= 6


def test_batch_smaller_than_parts_is_refused_naming_the_op():
    model = Model("mlp", 1)
    s = all_split(model.graph, "batch")
    result = apply_strategy(model.traced, model.graph, s,
                            simulate(model.graph, model.cluster, s), model.devices, steps=1)
    assert not result.expressible
    assert "a batch of 1 cannot be cut into 2 parts" in result.reason
    assert any(f"{op.name!r}" in result.reason for op in model.graph.ops if op.splittable)


def test_an_op_without_a_batch_axis_cannot_be_split_on_batch():
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        w = tf.constant(np.ones((3, 4), np.float32), name="w")
        out = tf.matmul(w, tf.constant(np.ones((4, 2), np.float32)), name="weights_only")
    with pytest.raises(SplitRefused, match="'weights_only'.*reads no tensor with a batch axis"):
        plan_parts(out.op, "batch", 2, {"w": [None]})
    with pytest.raises(SplitRefused, match="'weights_only'.*2 channels cannot be cut into 3"):
        plan_parts(out.op, "channel", 3, {})


# -- recomputation (issue 32): clones of the recomputed forward ops feed the backward ----------

def _recomputing(model, heads, placement=None):
    g = model.graph
    placement = np.zeros(len(g.ops), np.int64) if placement is None else placement
    return Strategy(placement, topological_priority(g), recompute=heads).validate(g, 2)


def test_recomputed_groups_give_the_same_step(cnn):
    from moplace.core.recompute import recomputable_heads
    from moplace.tf.recompute import recompute_name

    g = cnn.graph
    heads = recomputable_heads(g)
    assert heads.size > 3
    s = _recomputing(cnn, heads[::2])
    gd, ran_on = cnn.assert_same_step(s)
    trace = simulate(g, cnn.cluster, s)
    nodes = {n.name: n for n in gd.node}
    clones = {g.ops[int(i)].name for i in trace.task_op[trace.recomputed]}
    assert clones and all(recompute_name(c) in nodes for c in clones)
    readers = [n for n in gd.node if n.name.startswith("gradient_tape/")
               and any(x.split(":")[0] in {recompute_name(c) for c in clones} for x in n.input)]
    assert readers  # the backward reads the clones
    # on two devices, each group on the device of its first op's rank
    halves = (np.arange(len(g.ops)) >= len(g.ops) // 2).astype(np.int64)
    two = Strategy(halves[g.group_head], topological_priority(g), recompute=heads[1::2])
    cnn.assert_same_step(two.validate(g, 2))


def test_data_parallel_with_the_optimizer_state_partitioned_gives_the_same_step(cnn):
    """ZeRO-1 as TensorFlow can run it: each variable, its optimizer slots and its update on
    one device, about half the state on each."""
    from moplace.core.baselines import partition_optimizer_state

    g = cnn.graph
    s = partition_optimizer_state(g, data_parallel(g, 2), 2).validate(g, 2)
    trace = simulate(g, cnn.cluster, s)
    assert min(trace.static_memory) > 0.4 * sum(trace.static_memory)
    cnn.assert_same_step(s)


def test_recomputing_a_split_op_or_sharding_is_refused_by_name(cnn):
    from moplace.core.recompute import recomputable_heads

    g = cnn.graph
    head = int(next(h for h in recomputable_heads(g) if g.ops[int(h)].splittable))
    s = Strategy(np.zeros(len(g.ops), np.int64), topological_priority(g),
                 {head: Split("batch", (0, 1))}, recompute=[head]).validate(g, 2)
    with pytest.raises(SplitRefused, match=f"op '{g.ops[head].name}' is both split and"):
        cnn.run(s)
    # an unsplit recomputed op read backward by a split op: refused too, naming both
    a = g.arrays
    for h in recomputable_heads(g).tolist():
        readers = a.dst[a.out_ptr[h]:a.out_ptr[h + 1]][a.role[a.dst[a.out_ptr[h]:a.out_ptr[h + 1]]]
                                                       != 0]
        split = [int(r) for r in readers if g.ops[int(r)].splittable]
        if split and not g.ops[h].splittable:
            break
    else:
        pytest.fail("no recomputable unsplittable op with a splittable backward reader")
    r = split[0]
    s = Strategy(np.zeros(len(g.ops), np.int64), topological_priority(g),
                 {m: Split("batch", (0, 1)) for m in g.groups[int(g.arrays.group[r])]},
                 recompute=[h]).validate(g, 2)
    with pytest.raises(SplitRefused, match=f"op '{g.ops[h].name}' is recomputed for op "
                       f"'{g.ops[r].name}', which is split"):
        cnn.run(s)
    dp = data_parallel(g, 2).with_options(zero_stage=1)
    with pytest.raises(SplitRefused, match="ZeRO stage 1 .* not applied on the testbed"):
        cnn.run(dp)
