"""Trinity's structural embedding (searchers.rl.structure): Node2vec walks and the skip-gram."""

import numpy as np
import pytest

from moplace.core.graph import Edge, Op, OpGraph
from moplace.core.synthetic import layered_dag
from searchers.rl.structure import random_walks, structural_embedding


def _graph(n, edges):
    return OpGraph([Op(f"o{i}", compute={"V100": 1.0}) for i in range(n)],
                   [Edge(a, b) for a, b in edges])


def _undirected(g):
    return {(e.src, e.dst) for e in g.edges} | {(e.dst, e.src) for e in g.edges}


def test_walks_start_at_their_op_and_follow_edges_both_ways():
    g = layered_dag(60, width=4, seed=1)
    walks = random_walks(g, walks_per_op=3, length=12, p=0.5, q=2.0, seed=0)
    assert walks.shape == (180, 12)
    np.testing.assert_array_equal(walks[:, 0], np.tile(np.arange(60), 3))
    adjacent = _undirected(g)
    assert all((int(a), int(b)) in adjacent for row in walks for a, b in zip(row, row[1:]))
    # edges are walked against their direction too: sinks do not trap the walks
    sinks = {i for i in range(60) if not any(e.src == i for e in g.edges)}
    assert len(set(walks[:, -1].tolist()) - sinks) > 10


def test_same_seed_same_walks():
    g = layered_dag(40, width=3, seed=2)
    a, b = random_walks(g, seed=5), random_walks(g, seed=5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, random_walks(g, seed=6))


def _returns_and_outward(walks, adjacent):
    back = out = total = 0
    for row in walks:
        for t, _, x in zip(row, row[1:], row[2:]):
            total += 1
            back += x == t
            out += x != t and (int(t), int(x)) not in adjacent
    return back / total, out / total


def test_p_and_q_bias_the_walks():
    g = layered_dag(80, width=4, seed=3)
    adjacent = _undirected(g)
    plain = _returns_and_outward(random_walks(g, length=15, seed=0), adjacent)
    homing = _returns_and_outward(random_walks(g, length=15, p=0.05, seed=0), adjacent)
    roaming = _returns_and_outward(random_walks(g, length=15, q=0.05, seed=0), adjacent)
    assert homing[0] > 2 * plain[0]   # small p: back to where it came from
    assert roaming[1] > plain[1] and roaming[0] < plain[0] / 2  # small q: outward


def test_ops_without_edges_stay_put():
    g = _graph(3, [(0, 1)])
    walks = random_walks(g, walks_per_op=2, length=5, seed=0)
    assert np.all(walks[2::3] == 2)
    alone = random_walks(_graph(3, []), walks_per_op=2, length=4)
    np.testing.assert_array_equal(alone, np.tile(np.arange(3), 2)[:, None].repeat(4, axis=1))


def test_bad_walk_settings_are_refused():
    with pytest.raises(ValueError, match="positive"):
        random_walks(_graph(2, [(0, 1)]), p=0)


def test_embedding_separates_parts_of_the_graph_and_is_repeatable():
    # two chains of 30 ops joined by nothing: ops of one chain sit nearer each other
    edges = [(i, i + 1) for i in range(29)] + [(30 + i, 31 + i) for i in range(29)]
    g = _graph(60, edges)
    e = structural_embedding(g, dim=8, epochs=3, seed=0)
    assert e.shape == (60, 8) and e.dtype == np.float32
    unit = e / np.linalg.norm(e, axis=1, keepdims=True)
    sim = unit @ unit.T
    same = np.mean([sim[i, j] for i in range(60) for j in range(60)
                    if i != j and (i < 30) == (j < 30)])
    other = np.mean([sim[i, j] for i in range(60) for j in range(60) if (i < 30) != (j < 30)])
    assert same > other + 0.1, (same, other)  # seeds 0-2: 0.20-0.28 apart; random vectors: 0
    np.testing.assert_array_equal(e, structural_embedding(g, dim=8, epochs=3, seed=0))


def test_embedding_of_an_empty_graph():
    assert structural_embedding(_graph(0, []), dim=4).shape == (0, 4)
