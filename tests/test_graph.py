"""OpGraph and Op: validation, immutability, compiled arrays, networkx round trip."""

import math
import re

import networkx as nx
import numpy as np
import pytest

from moplace.core.graph import ROLES, SPLIT_DIMS, Edge, Op, OpGraph
from moplace.core.synthetic import layered_dag, random_dag
from moplace.errors import GraphError

V = "V100"


def op(name, t=1.0, **kw):
    return Op(name, compute={V: t}, **kw)


def small_graph():
    """a -> b -> d, a -> c -> d; b and c co-located in group "bc"."""
    ops = [op("a", 1.0, output_bytes=10), op("b", 2.0, colocation="bc", param_bytes=5),
           op("c", 3.0, colocation="bc", grad_bytes=7), op("d", 0.5, splittable=("batch",))]
    edges = [("a", "b", 10), ("a", "c", 20), ("b", "d", 30), ("c", "d", 40)]
    return OpGraph(ops, edges, name="small", metadata={"profiled_on": V})


class TestValidation:
    def test_cycle_is_rejected_naming_the_ops_on_it(self):
        ops = [op("start"), op("x"), op("y"), op("z"), op("end")]
        edges = [("start", "x"), ("x", "y"), ("y", "z"), ("z", "x"), ("z", "end")]
        with pytest.raises(GraphError, match="cycle") as err:
            OpGraph(ops, edges, name="loopy")
        msg = str(err.value)
        assert "'loopy'" in msg
        for name in ("x", "y", "z"):
            assert re.search(rf"\b{name}\b", msg), msg
        # ops off the cycle are not reported as on it
        assert "start" not in msg and "end" not in msg

    def test_long_cycle_message_is_shortened_but_names_ops(self):
        n = 30
        ops = [op(f"n{i}") for i in range(n)]
        edges = [(f"n{i}", f"n{(i + 1) % n}") for i in range(n)]
        with pytest.raises(GraphError, match="cycle") as err:
            OpGraph(ops, edges)
        msg = str(err.value)
        assert "..." in msg and len(msg) < 300
        assert sum(bool(re.search(rf"\bn{i}\b", msg)) for i in range(n)) >= 10

    def test_duplicate_op_names(self):
        with pytest.raises(GraphError, match="duplicate op name 'a'"):
            OpGraph([op("a"), op("b"), op("a")])

    @pytest.mark.parametrize("bad", [-1.0, -1e-12, float("nan"), float("inf"), -float("inf")])
    def test_bad_compute_is_rejected_naming_op_and_kind(self, bad):
        with pytest.raises(GraphError, match=r"op 'conv1': compute\['V100'\]"):
            Op("conv1", compute={V: bad})

    @pytest.mark.parametrize("bad", [float("nan"), -2.0, float("inf")])
    def test_bad_part_compute_is_rejected(self, bad):
        with pytest.raises(GraphError, match=r"op 'p': part_compute\[2\]"):
            Op("p", compute={V: 1.0}, part_compute={2: {V: bad}})

    def test_part_compute_needs_two_or_more_parts(self):
        with pytest.raises(GraphError, match="part counts >= 2"):
            Op("p", compute={V: 1.0}, part_compute={1: {V: 0.5}})

    @pytest.mark.parametrize("bad", ["1.0", None, True])
    def test_compute_must_be_a_number(self, bad):
        with pytest.raises(GraphError, match="op 'a'"):
            Op("a", compute={V: bad})

    @pytest.mark.parametrize("key", ["output_bytes", "param_bytes", "grad_bytes"])
    @pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
    def test_bad_bytes_are_rejected(self, key, bad):
        with pytest.raises(GraphError, match=f"op 'a': {key} must be a non-negative integer"):
            Op("a", **{key: bad})

    def test_numpy_integer_bytes_are_accepted(self):
        assert Op("a", output_bytes=np.int64(5)).output_bytes == 5

    def test_negative_edge_bytes(self):
        with pytest.raises(GraphError, match="edge 'a' -> 'b': bytes"):
            OpGraph([op("a"), op("b")], [("a", "b", -1)])

    def test_float_edge_bytes(self):
        with pytest.raises(GraphError, match="edge 'a' -> 'b': bytes"):
            OpGraph([op("a"), op("b")], [("a", "b", 2.5)])

    def test_unknown_split_dim(self):
        with pytest.raises(GraphError, match="op 'a': unknown split dimension 'time'"):
            Op("a", splittable=("batch", "time"))

    def test_unknown_role(self):
        with pytest.raises(GraphError, match="op 'a': unknown role 'fwd'"):
            Op("a", role="fwd")

    @pytest.mark.parametrize("name", ["", None, 3])
    def test_bad_op_name(self, name):
        with pytest.raises(GraphError, match="name"):
            Op(name)

    def test_edge_to_unknown_op(self):
        with pytest.raises(GraphError, match="unknown op 'ghost'"):
            OpGraph([op("a")], [("a", "ghost")])

    def test_edge_from_unknown_op(self):
        with pytest.raises(GraphError, match="unknown op 'ghost'"):
            OpGraph([op("a")], [("ghost", "a")])

    @pytest.mark.parametrize("ref", [5, -1, 1.0, True])
    def test_edge_index_out_of_range_or_wrong_type(self, ref):
        with pytest.raises(GraphError, match="edge endpoint"):
            OpGraph([op("a"), op("b")], [(0, ref)])

    def test_self_loop(self):
        with pytest.raises(GraphError, match="op 'a' has an edge to itself"):
            OpGraph([op("a"), op("b")], [("a", "b"), ("a", "a")])

    def test_duplicate_edge_by_name(self):
        with pytest.raises(GraphError, match="duplicate edge 'a' -> 'b'"):
            OpGraph([op("a"), op("b")], [("a", "b", 1), ("a", "b", 2)])

    def test_duplicate_edge_by_name_and_index(self):
        with pytest.raises(GraphError, match="duplicate edge 'a' -> 'b'"):
            OpGraph([op("a"), op("b")], [("a", "b"), Edge(0, 1, 3)])

    def test_opposite_edges_are_a_cycle_not_a_duplicate(self):
        with pytest.raises(GraphError, match="cycle"):
            OpGraph([op("a"), op("b")], [("a", "b"), ("b", "a")])

    def test_non_op_records(self):
        with pytest.raises(GraphError, match="Op records"):
            OpGraph([op("a"), {"name": "b"}])

    def test_op_lookup(self):
        g = small_graph()
        assert g.op("c") is g.ops[2]
        with pytest.raises(GraphError, match="no op 'zz'"):
            g.op("zz")

    def test_valid_graph_accepts_every_role_and_dim(self):
        ops = [Op(f"o{i}", role=r, splittable=SPLIT_DIMS) for i, r in enumerate(ROLES)]
        g = OpGraph(ops, [(i, i + 1) for i in range(len(ops) - 1)])
        assert len(g) == len(ROLES) and len(g.edges) == len(ROLES) - 1

    def test_empty_graph(self):
        g = OpGraph([])
        assert len(g) == 0 and g.arrays.topo.size == 0 and g.arrays.n_groups == 0


class TestImmutability:
    def test_op_is_frozen(self):
        a = op("a")
        with pytest.raises(AttributeError):
            a.name = "b"
        with pytest.raises(AttributeError):
            a.output_bytes = 3

    def test_compute_mapping_is_read_only_and_a_copy(self):
        times = {V: 1.0}
        a = Op("a", compute=times)
        with pytest.raises(TypeError):
            a.compute[V] = 2.0
        times[V] = 5.0  # the caller's dict does not reach the op
        assert a.compute[V] == 1.0

    def test_part_compute_is_read_only(self):
        a = Op("a", compute={V: 1.0}, part_compute={2: {V: 0.6}})
        with pytest.raises(TypeError):
            a.part_compute[3] = {V: 0.4}
        with pytest.raises(TypeError):
            a.part_compute[2][V] = 0.1

    def test_splittable_is_a_tuple(self):
        assert Op("a", splittable=["batch"]).splittable == ("batch",)

    def test_graph_containers_are_read_only(self):
        g = small_graph()
        assert isinstance(g.ops, tuple) and isinstance(g.edges, tuple)
        with pytest.raises(TypeError):
            g.index["zz"] = 0
        with pytest.raises(TypeError):
            g.metadata["profiled_on"] = "A100"

    def test_graph_attributes_cannot_be_rebound(self):
        g = small_graph()
        with pytest.raises(AttributeError):
            g.ops = ()
        with pytest.raises(AttributeError):
            g.name = "other"

    def test_input_lists_do_not_reach_the_graph(self):
        ops = [op("a"), op("b")]
        edges = [("a", "b", 1)]
        g = OpGraph(ops, edges)
        ops.append(op("c"))
        edges.append(("b", "a", 1))
        assert len(g.ops) == 2 and len(g.edges) == 1

    def test_compiled_arrays_are_read_only(self):
        g = small_graph()
        a = g.arrays
        for name in ("src", "dst", "edge_bytes", "out_ptr", "out_edge", "in_ptr", "in_edge",
                     "output_bytes", "param_bytes", "grad_bytes", "role", "split_mask",
                     "group", "topo"):
            arr = getattr(a, name)
            assert isinstance(arr, np.ndarray)
            with pytest.raises(ValueError):
                arr[...] = 0
        with pytest.raises(AttributeError):
            a.n_groups = 9

    def test_arrays_are_computed_once(self):
        g = small_graph()
        assert g.arrays is g.arrays
        assert g.groups is g.groups


class TestCompiledArrays:
    def check(self, g: OpGraph):
        a = g.arrays
        n, m = len(g.ops), len(g.edges)
        # edges sorted by (src, dst) and equal to g.edges
        assert [(e.src, e.dst, e.bytes) for e in g.edges] == list(
            zip(a.src.tolist(), a.dst.tolist(), a.edge_bytes.astype(int).tolist()))
        assert list(zip(a.src.tolist(), a.dst.tolist())) == sorted(zip(a.src.tolist(), a.dst.tolist()))
        # CSR: the edges out of / into each op, exactly
        for ptr, idx, key in ((a.out_ptr, a.out_edge, a.src), (a.in_ptr, a.in_edge, a.dst)):
            assert ptr.shape == (n + 1,) and ptr[0] == 0 and ptr[-1] == m
            assert (np.diff(ptr) >= 0).all()
            assert sorted(idx.tolist()) == list(range(m))
            for i in range(n):
                got = idx[ptr[i]:ptr[i + 1]]
                assert sorted(got.tolist()) == np.flatnonzero(key == i).tolist()
        # topo: a permutation in which every edge goes forward
        assert sorted(a.topo.tolist()) == list(range(n))
        pos = np.empty(n, int)
        pos[a.topo] = np.arange(n)
        assert (pos[a.src] < pos[a.dst]).all()
        # per-op arrays
        assert a.output_bytes.tolist() == [o.output_bytes for o in g.ops]
        assert a.param_bytes.tolist() == [o.param_bytes for o in g.ops]
        assert a.grad_bytes.tolist() == [o.grad_bytes for o in g.ops]
        assert [ROLES[r] for r in a.role] == [o.role for o in g.ops]
        for i, o in enumerate(g.ops):
            assert bool(a.split_mask[i] & 1) == ("batch" in o.splittable)
            assert bool(a.split_mask[i] & 2) == ("channel" in o.splittable)
        # groups: same co-location name <=> same group; no name -> alone
        assert a.group.shape == (n,) and a.n_groups == len(g.groups)
        assert sorted(set(a.group.tolist())) == list(range(a.n_groups))
        for i in range(n):
            for j in range(n):
                ci, cj = g.ops[i].colocation, g.ops[j].colocation
                same = i == j or (ci is not None and ci == cj)
                assert (a.group[i] == a.group[j]) == same
        for k, members in enumerate(g.groups):
            assert list(members) == sorted(members)
            assert (a.group[list(members)] == k).all()
        assert sorted(i for m in g.groups for i in m) == list(range(n))

    def test_small_graph(self):
        g = small_graph()
        self.check(g)
        a = g.arrays
        assert a.topo.tolist() == [0, 1, 2, 3]
        assert a.n_groups == 3 and g.groups == ((0,), (1, 2), (3,))
        assert a.split_mask.tolist() == [0, 0, 0, 1]
        assert a.edge_bytes.tolist() == [10, 20, 30, 40]

    def test_edges_given_out_of_order_are_sorted(self):
        ops = [op(n) for n in "abcd"]
        g = OpGraph(ops, [("c", "d", 4), ("a", "c", 2), ("b", "d", 3), ("a", "b", 1)])
        assert [(e.src, e.dst, e.bytes) for e in g.edges] == [(0, 1, 1), (0, 2, 2), (1, 3, 3), (2, 3, 4)]
        self.check(g)

    def test_topological_order_is_lexicographic(self):
        # op index order is not a topological order here
        g = OpGraph([op("late"), op("early"), op("free")], [("early", "late")])
        assert g.arrays.topo.tolist() == [1, 0, 2]
        self.check(g)

    def test_colocation_groups_across_the_graph(self):
        ops = [op("f1", colocation="L1"), op("f2", colocation="L2"), op("x"),
               op("b2", colocation="L2"), op("b1", colocation="L1"), op("y")]
        g = OpGraph(ops, [("f1", "f2"), ("f2", "x"), ("x", "b2"), ("b2", "b1"), ("b1", "y")])
        self.check(g)
        assert g.groups == ((0, 4), (1, 3), (2,), (5,))

    def test_colocation_name_equal_to_an_op_name_is_its_own_group(self):
        g = OpGraph([op("a"), op("b", colocation="a")])
        assert g.arrays.n_groups == 2

    @pytest.mark.parametrize("seed", range(3))
    def test_random_graphs(self, seed):
        self.check(random_dag(30, edge_prob=0.25, seed=seed))
        self.check(layered_dag(120, width=5, seed=seed))


class TestNetworkx:
    def test_to_networkx(self):
        g = small_graph()
        nxg = g.to_networkx()
        assert list(nxg.nodes) == ["a", "b", "c", "d"]
        assert nxg.nodes["c"]["op"] is g.ops[2]
        assert nxg.edges["c", "d"]["bytes"] == 40
        assert nxg.graph["name"] == "small"
        nxg.remove_node("a")  # a fresh copy every time
        assert "a" in g.to_networkx()

    @pytest.mark.parametrize("make", [small_graph, lambda: random_dag(20, seed=1),
                                      lambda: layered_dag(60, width=4, seed=2)])
    def test_round_trip(self, make):
        g = make()
        back = OpGraph.from_networkx(g.to_networkx(), metadata=g.metadata)
        assert back.ops == g.ops
        assert back.edges == g.edges
        assert back.name == g.name
        assert dict(back.metadata) == dict(g.metadata)
        for name in ("src", "dst", "edge_bytes", "group", "topo", "split_mask"):
            np.testing.assert_array_equal(getattr(back.arrays, name), getattr(g.arrays, name))

    def test_from_networkx_checks_the_graph(self):
        nxg = small_graph().to_networkx()
        nxg.add_edge("d", "a", bytes=1)
        with pytest.raises(GraphError, match="cycle"):
            OpGraph.from_networkx(nxg)

    def test_from_networkx_needs_op_records(self):
        nxg = nx.DiGraph()
        nxg.add_node("a", op=Op("not-a"))
        with pytest.raises(GraphError, match="node 'a' needs an 'op' attribute"):
            OpGraph.from_networkx(nxg)

    @pytest.mark.parametrize("nbytes", [2.7, -0.5])
    def test_from_networkx_does_not_truncate_bad_bytes(self, nbytes):
        nxg = small_graph().to_networkx()
        nxg.edges["a", "b"]["bytes"] = nbytes
        with pytest.raises(GraphError, match="bytes"):
            OpGraph.from_networkx(nxg)

    def test_name_override(self):
        assert OpGraph.from_networkx(small_graph().to_networkx(), name="renamed").name == "renamed"


def test_total_compute_and_kinds():
    g = OpGraph([Op("a", compute={V: 1.0, "A100": 0.5}), Op("b", compute={V: 2.0}), Op("c")])
    assert g.device_kinds() == {V, "A100"}
    assert g.total_compute(V) == 3.0
    assert g.total_compute("A100") == 0.5
    assert g.total_compute("P100") == 0.0
    assert not math.isnan(g.total_compute("none"))


def test_topological_order_is_networkx_lexicographic_one():
    rng = np.random.default_rng(0)
    for n, seed in ((300, 1), (1000, 2)):
        base = layered_dag(n, width=7, seed=seed)
        perm = rng.permutation(n)  # edges from higher to lower indices too
        edges = [(int(perm[e.src]), int(perm[e.dst]), e.bytes) for e in base.edges]
        g = OpGraph([Op(f"op{i}", "x", {"V100": 1e-3}) for i in range(n)], edges)
        d = nx.DiGraph()
        d.add_nodes_from(range(n))
        d.add_edges_from((s, t) for s, t, _ in edges)
        assert g.arrays.topo.tolist() == list(nx.lexicographical_topological_sort(d))
