"""The RL policies' features (searchers.rl.features): vocabulary, op numbers, BFS neighbours,
group features for any assignment, and one computation per problem."""

import numpy as np
import pytest

import moplace
from moplace.core.graph import Edge, Op, OpGraph
from moplace.optimize.problem import Problem
from searchers.rl.features import (
    NEIGHBOURS,
    NUMERIC,
    UNKNOWN,
    VOCABULARY,
    group_features,
    op_features,
    problem_features,
    type_index,
    type_token,
)

from conftest import make_cluster


@pytest.mark.parametrize("name, token", [
    ("Conv2d", "conv"), ("Conv2D", "conv"), ("Conv", "conv"), ("Conv2dGrad", "conv"),
    ("Conv2DBackpropInput", "conv"), ("Gemm", "matmul"), ("Linear", "matmul"),
    ("MatMul", "matmul"), ("ReLU", "relu"), ("ReluGrad", "relu"), ("BatchNorm2d", "batchnorm"),
    ("FusedBatchNormV3", "batchnorm"), ("ReshapeGradient", "reshape"), ("TanhGradient", "tanh"),
    ("__getitem__Grad", "slice"), ("AvgPool2d", "avgpool"), ("SGDUpdate", "sgdupdate"),
    ("AdamOptimizer", "adamupdate"), ("SparseSoftmaxCrossEntropyGrad", "crossentropy"),
    ("op", UNKNOWN), ("Bert", UNKNOWN), ("", UNKNOWN), ("Grad", UNKNOWN),
])
def test_type_names_fold_to_one_token(name, token):
    assert type_token(name) == token
    assert VOCABULARY[type_index(name)] == token


def test_vocabulary_is_unique_with_unknown_first():
    assert VOCABULARY[0] == UNKNOWN and len(set(VOCABULARY)) == len(VOCABULARY)


def _chain_with_branch():
    # 0 -> 1 -> 2 -> 3, and 0 -> 4 -> 3
    ops = [Op("a", "Conv2d", {"V100": 1.0}, output_bytes=1023, param_bytes=0, role="forward",
              splittable=("batch",)),
           Op("b", "ReLU", {"V100": 2.0}, output_bytes=0, role="forward"),
           Op("c", "Conv2dGrad", {"V100": 3.0}, output_bytes=2**32 - 1, role="backward",
              splittable=("batch", "channel")),
           Op("d", "SGDUpdate", {"V100": 4.0}, param_bytes=255, role="update"),
           Op("e", "Mystery", {"V100": 5.0}, output_bytes=1)]
    edges = [Edge(0, 1, 10), Edge(1, 2, 10), Edge(2, 3, 10), Edge(0, 4, 10), Edge(4, 3, 10)]
    return OpGraph(ops, edges, name="branch")


def test_op_numbers_and_types():
    g = _chain_with_branch()
    f = op_features(g, np.array([[1.0], [2.0], [3.0], [4.0], [5.0]]))
    col = {name: k for k, name in enumerate(NUMERIC)}
    assert f.types.tolist() == [type_index(t) for t in ("conv", "relu", "conv", "sgdupdate")] + [0]
    np.testing.assert_array_equal(f.numbers[:, col["role_forward"]], [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(f.numbers[:, col["role_other"]], [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(f.numbers[:, col["splits_batch"]], [1, 0, 1, 0, 0])
    np.testing.assert_array_equal(f.numbers[:, col["splits_channel"]], [0, 0, 1, 0, 0])
    np.testing.assert_allclose(f.numbers[:, col["log_output_bytes"]], [10 / 32, 0, 1, 0, 1 / 32])
    np.testing.assert_allclose(f.numbers[:, col["log_param_bytes"]], [0, 0, 0, 8 / 32, 0])
    z = f.numbers[:, col["compute_z"]]
    assert z.mean() == pytest.approx(0, abs=1e-6) and z.std() == pytest.approx(1, abs=1e-6)
    assert np.all(np.diff(z) > 0)
    # the place in the topological order, 0 to 1, with its sines and cosines
    position = f.numbers[:, col["position"]]
    topo = g.arrays.topo
    np.testing.assert_allclose(position[topo], np.linspace(0, 1, 5), atol=1e-6)
    np.testing.assert_allclose(f.numbers[:, col["position_sin4"]], np.sin(4 * np.pi * position),
                               atol=1e-6)


def test_neighbours_are_nearest_first_and_padded():
    f = op_features(_chain_with_branch(), np.ones((5, 1)))
    before, after = f.neighbours[:, :NEIGHBOURS], f.neighbours[:, NEIGHBOURS:]
    assert before[3].tolist() == [2, 4, 1, 0, -1, -1]  # direct predecessors, then theirs
    assert after[0].tolist() == [1, 4, 2, 3, -1, -1]
    assert before[0].tolist() == [-1] * NEIGHBOURS and after[3].tolist() == [-1] * NEIGHBOURS


def test_neighbours_stop_at_six():
    hub = OpGraph([Op(f"o{i}", compute={"V100": 1.0}) for i in range(10)],
                  [Edge(0, i) for i in range(1, 10)])
    f = op_features(hub, np.ones((10, 1)))
    assert f.neighbours[0, NEIGHBOURS:].tolist() == [1, 2, 3, 4, 5, 6]


def test_group_features_of_an_assignment():
    g = _chain_with_branch()
    f = op_features(g, np.ones((5, 1)))
    gf = group_features(f, np.array([0, 0, 1, 1, 0]), 3)  # group 2 is empty
    assert gf.sizes.tolist() == [3, 2, 0]
    conv, relu = type_index("conv"), type_index("relu")
    np.testing.assert_allclose(gf.type_share[0, [conv, relu, 0]], [1 / 3, 1 / 3, 1 / 3])
    np.testing.assert_allclose(gf.type_share.sum(axis=1), [1, 1, 0], atol=1e-6)
    np.testing.assert_allclose(gf.numbers[1], f.numbers[[2, 3]].mean(axis=0), rtol=1e-6)
    assert not gf.numbers[2].any()
    np.testing.assert_allclose(gf.log_output, np.log2([1023 + 0 + 1 + 1, 2**32 - 1 + 0 + 1, 1]) / 32,
                               rtol=1e-6)
    # edges 1->2 and 4->3 cross from group 0 to group 1; nothing touches group 2
    np.testing.assert_array_equal(gf.adjacency, [[0, 1, 0], [1, 0, 0], [0, 0, 0]])
    with pytest.raises(ValueError, match="0..2"):
        group_features(f, np.array([0, 0, 3, 1, 0]), 3)
    with pytest.raises(ValueError, match="5 ops"):
        group_features(f, np.zeros(4, np.int64), 3)


def test_more_groups_than_ops_and_one_op():
    one = OpGraph([Op("x", "MatMul", {"V100": 1.0})])
    f = op_features(one, np.ones((1, 2)))
    assert f.numbers[0, NUMERIC.index("compute_z")] == 0  # a single op: no spread to z-score against
    gf = group_features(f, np.array([0]), 8)
    assert gf.sizes.tolist() == [1] + [0] * 7 and not gf.adjacency.any()


def test_features_are_computed_once_per_problem_and_read_only():
    problem = Problem(moplace.load_graph("pipedream:vgg16"), make_cluster(4))
    f = problem_features(problem)
    assert problem_features(problem) is f
    assert f.n_ops == len(problem.graph.ops) and f.numbers.shape == (f.n_ops, len(NUMERIC))
    assert (f.types > 0).mean() > 0.9  # the bundled graphs' types are in the vocabulary
    with pytest.raises(ValueError):
        f.numbers[0, 0] = 1.0


def test_every_bundled_graph_types_mostly_known():
    unknown = {}
    for name in moplace.list_bundled():
        g = moplace.load_graph(name)
        types = [type_token(op.type) for op in g.ops if op.type != "op"]
        if types:
            unknown[name] = sum(t == UNKNOWN for t in types) / len(types)
    assert unknown and max(unknown.values()) < 0.1, unknown
