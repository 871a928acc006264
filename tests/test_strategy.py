"""Strategies: validation, the JSON strategy file, and the genome encoding."""

import json
import math

import numpy as np
import pytest

from moplace.core.baselines import BASELINES, baseline, topological_priority
from moplace.core.genome import GenomeSpace
from moplace.core.graph import Op, OpGraph
from moplace.core.presets import load_cluster
from moplace.core.strategy import Split, SplitTable, Strategy, spread_groups
from moplace.errors import FormatError, MoplaceError, StrategyError
from moplace.io import load_graph
from moplace.io.strategies import load_strategy, save_strategy, strategy_from_json, strategy_to_json

from conftest import make_cluster

V = "V100"


def tiny():
    """in -> f -> b -> upd, f and b co-located as layer "L"; in -> side."""
    ops = [Op("in", compute={V: 1.0}, splittable=("batch",)),
           Op("f", compute={V: 2.0}, colocation="L", splittable=("batch", "channel")),
           Op("b", compute={V: 3.0}, colocation="L", splittable=("batch", "channel"), grad_bytes=8),
           Op("upd", compute={V: 0.5}, role="update"),
           Op("side", compute={V: 1.0})]
    return OpGraph(ops, [("in", "f", 4), ("f", "b", 4), ("b", "upd", 8), ("in", "side", 2)],
                   name="tiny")


@pytest.fixture
def g():
    return tiny()


@pytest.fixture
def cl():
    return make_cluster(4)


# -- Strategy.validate ---------------------------------------------------------------------------
class TestValidate:
    def test_valid(self, g):
        s = Strategy([0, 1, 1, 2, 3], splits={1: Split("batch", (1, 2)), 2: Split("batch", (1, 2))})
        assert s.validate(g, 4) is s

    def test_default_priority_is_index_order(self):
        s = Strategy([0, 0, 0])
        assert s.priority.tolist() == [0.0, -1.0, -2.0]

    def test_wrong_length(self, g):
        with pytest.raises(StrategyError, match="places 4 ops but graph 'tiny' has 5"):
            Strategy([0, 0, 0, 0]).validate(g, 4)

    def test_wrong_priority_length(self):
        with pytest.raises(StrategyError, match="priority has 2 entries for 3 ops"):
            Strategy([0, 0, 0], priority=[1.0, 2.0])

    @pytest.mark.parametrize("device", [4, -1, 100])
    def test_device_out_of_range(self, g, device):
        with pytest.raises(StrategyError, match=rf"op 'upd' is placed on device {device}, "
                                                r"out of range 0\.\.3"):
            Strategy([0, 0, 0, device, 0]).validate(g, 4)

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    def test_non_finite_priority(self, g, bad):
        prio = [1.0, 2.0, 3.0, 4.0, 5.0]
        prio[4] = bad
        with pytest.raises(StrategyError, match="op 'side' has a non-finite priority"):
            Strategy([0] * 5, prio).validate(g, 4)

    def test_split_of_unsplittable_dim(self, g):
        with pytest.raises(StrategyError, match=r"op 'in' cannot be split on 'channel'"):
            Strategy([0] * 5, splits={0: Split("channel", (0, 1))}).validate(g, 4)

    def test_split_of_unsplittable_op(self, g):
        with pytest.raises(StrategyError, match=r"op 'side' cannot be split on 'batch' "
                                                r"\(splittable: none\)"):
            Strategy([0] * 5, splits={4: Split("batch", (0, 1))}).validate(g, 4)

    def test_split_first_device_must_be_the_placement(self, g):
        with pytest.raises(StrategyError, match="op 'in': placement must equal the first part"):
            Strategy([2, 0, 0, 0, 0], splits={0: Split("batch", (1, 2))}).validate(g, 4)

    def test_split_needs_two_parts(self, g):
        with pytest.raises(StrategyError, match="op 'in': a split needs at least 2 parts"):
            Strategy([1, 0, 0, 0, 0], splits={0: Split("batch", (1,))}).validate(g, 4)

    def test_split_device_out_of_range(self, g):
        with pytest.raises(StrategyError, match="op 'in': split part on device 4"):
            Strategy([1] + [0] * 4, splits={0: Split("batch", (1, 4))}).validate(g, 4)

    @pytest.mark.parametrize("i", [
        -1,
        9,
    ])
    def test_split_of_unknown_op_index(self, g, i):
        with pytest.raises(StrategyError, match=f"op index {i}"):
            Strategy([0] * 5, splits={i: Split("batch", (0, 1))}).validate(g, 4)

    def test_colocated_ops_on_different_devices(self, g):
        with pytest.raises(StrategyError, match="ops 'f' and 'b' share co-location group 'L'"):
            Strategy([0, 1, 2, 0, 0]).validate(g, 4)

    def test_colocated_ops_with_different_splits(self, g):
        one = Split("batch", (0, 1))
        with pytest.raises(StrategyError, match="'f' and 'b' share co-location group 'L'"):
            Strategy([0] * 5, splits={1: one}).validate(g, 4)
        with pytest.raises(StrategyError, match="'f' and 'b' share co-location group 'L'"):
            Strategy([0] * 5, splits={2: one}).validate(g, 4)
        with pytest.raises(StrategyError, match="'f' and 'b' share co-location group 'L'"):
            Strategy([0] * 5, splits={1: one, 2: Split("channel", (0, 1))}).validate(g, 4)

    def test_strategy_is_immutable(self):
        s = Strategy([0, 1], [1.0, 2.0])
        with pytest.raises(ValueError):
            s.placement[0] = 1
        with pytest.raises(ValueError):
            s.priority[0] = 5.0
        with pytest.raises(TypeError):
            s.splits[0] = Split("batch", (0, 1))

    def test_equality_and_hash(self):
        a = Strategy([0, 1], [1.0, 2.0], {0: Split("batch", (0, 1))})
        b = Strategy(np.array([0, 1]), np.array([1.0, 2.0]), {0: Split("batch", [0, 1])})
        assert a == b and hash(a) == hash(b)
        assert a != Strategy([0, 1], [1.0, 2.0])
        assert a != Strategy([0, 1], [1.0, 3.0], {0: Split("batch", (0, 1))})

    def test_spread_groups_fills_groups(self, g):
        s = spread_groups(g, [3, 1, 2, 0], {1: Split("batch", (1, 2))})
        assert s.placement.tolist() == [3, 1, 1, 2, 0]
        assert set(s.splits) == {1, 2}
        s.validate(g, 4)


# -- strategy files ------------------------------------------------------------------------------
def write(tmp_path, data, name="s.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def full_placement(g, device=0):
    return {op.name: device for op in g.ops}


class TestStrategyFile:
    @pytest.mark.parametrize("with_names", [True, False])
    def test_round_trip(self, g, cl, tmp_path, with_names):
        rng = np.random.default_rng(0)
        split = Split("channel", (2, 0, 3))
        s = Strategy([1, 2, 2, 3, 0], rng.random(5), {1: split, 2: split}).validate(g, 4)
        path = tmp_path / "s.json"
        save_strategy(path, g, s, cl if with_names else None)
        data = json.loads(path.read_text())
        assert data["format"] == "moplace-strategy" and data["graph"] == "tiny"
        devices = {d for d in data["placement"].values()}
        if with_names:
            assert devices <= {"d0", "d1", "d2", "d3"}
            assert data["splits"]["f"]["devices"] == ["d2", "d0", "d3"]
        else:
            assert devices <= {0, 1, 2, 3}
        back = load_strategy(path, g, cl)
        assert back == s
        assert back.priority.tolist() == s.priority.tolist()  # bit for bit

    @pytest.mark.parametrize("spec", ["pipedream:resnet18", "dnn:LayerGraphs/gnmt_training"])
    @pytest.mark.parametrize("name", list(BASELINES))
    def test_round_trip_baselines(self, spec, name, tmp_path):
        graph, cluster = load_graph(spec), load_cluster("4xV100-NVLink")
        s = baseline(name, graph, cluster.n_devices)
        for with_names in (True, False):
            path = tmp_path / f"{with_names}.json"
            save_strategy(path, graph, s, cluster if with_names else None)
            assert load_strategy(path, graph, cluster) == s

    def test_one_member_places_its_group(self, g, cl):
        data = {"placement": {"in": 0, "b": 3, "upd": 1, "side": "d2"}}
        s = strategy_from_json(data, g, cl)
        assert s.placement.tolist() == [0, 3, 3, 1, 2]

    def test_group_members_naming_different_devices(self, g, cl):
        data = {"placement": {"in": 0, "f": 1, "b": 3, "upd": 1, "side": 0}}
        with pytest.raises(StrategyError, match="'L' name different devices"):
            strategy_from_json(data, g, cl)

    def test_op_without_device(self, g, cl):
        with pytest.raises(StrategyError, match="op 'upd' has no device"):
            strategy_from_json({"placement": {"in": 0, "f": 0, "side": 0}}, g, cl)

    def test_split_applies_to_the_whole_group(self, g, cl):
        data = {"placement": {**full_placement(g), **{g.ops[i].name: "d1" for i in (1, 2)}},
                "splits": {"b": {"dim": "batch", "devices": ["d1", 2]}}}
        s = strategy_from_json(data, g, cl)
        assert s.splits[1] == s.splits[2] == Split("batch", (1, 2))
        assert s.placement.tolist() == [0, 1, 1, 0, 0]

    def test_split_that_contradicts_the_placement_is_refused(self, g, cl):
        data = {"placement": full_placement(g),  # b's group on device 0
                "splits": {"b": {"dim": "batch", "devices": ["d1", 2]}}}
        with pytest.raises(StrategyError, match=r"splits\.b: the first part's device must be the op's placement \(0\), got 1"):
            strategy_from_json(data, g, cl)

    def test_strategy_for_another_graph_is_refused(self, g, cl):
        with pytest.raises(StrategyError, match="field 'graph'"):
            strategy_from_json({"graph": "other", "placement": full_placement(g)}, g, cl)

    def test_default_priority_is_topological(self, g, cl):
        s = strategy_from_json({"placement": full_placement(g)}, g, cl)
        np.testing.assert_array_equal(s.priority, topological_priority(g))

    @pytest.mark.parametrize("field", ["placement", "priority", "splits"])
    def test_unknown_op(self, g, cl, tmp_path, field):
        data = {"placement": full_placement(g)}
        if field == "placement":
            data["placement"]["nosuchop"] = 0
        elif field == "priority":
            data["priority"] = {**{op.name: 1.0 for op in g.ops}, "nosuchop": 2.0}
        else:
            data["splits"] = {"nosuchop": {"dim": "batch", "devices": [0, 1]}}
        with pytest.raises(FormatError, match=rf"s\.json: {field}: unknown op 'nosuchop'"):
            load_strategy(write(tmp_path, data), g, cl)

    def test_unknown_device_name(self, g, cl, tmp_path):
        data = {"placement": {**full_placement(g), "upd": "gpu7"}}
        with pytest.raises(FormatError, match=r"op 'upd': unknown device 'gpu7' \(devices: d0, d1"):
            load_strategy(write(tmp_path, data), g, cl)

    @pytest.mark.parametrize("device", [4, -1, 1.0, True, None, [0]])
    def test_device_index_out_of_range_or_not_an_index(self, g, cl, tmp_path, device):
        data = {"placement": {**full_placement(g), "side": device}}
        with pytest.raises(FormatError, match=r"op 'side': device .* out of range 0\.\.3"):
            load_strategy(write(tmp_path, data), g, cl)

    def test_split_device_out_of_range(self, g, cl, tmp_path):
        data = {"placement": full_placement(g), "splits": {"in": {"dim": "batch", "devices": [0, 9]}}}
        with pytest.raises(FormatError, match=r"op 'in': device 9 out of range"):
            load_strategy(write(tmp_path, data), g, cl)

    @pytest.mark.parametrize("devices", [[], [1]])
    def test_split_with_fewer_than_two_devices(self, g, cl, tmp_path, devices):
        data = {"placement": full_placement(g), "splits": {"in": {"dim": "batch", "devices": devices}}}
        with pytest.raises(FormatError, match=r"s\.json: .*in.* at least 2"):
            load_strategy(write(tmp_path, data), g, cl)

    @pytest.mark.parametrize("spec", [{"dim": "batch"}, {"devices": [0, 1]}, [0, 1],
                                      {"dim": "batch", "devices": "01"}])
    def test_malformed_split(self, g, cl, tmp_path, spec):
        data = {"placement": full_placement(g), "splits": {"in": spec}}
        with pytest.raises(FormatError, match=r"splits\.in: needs 'dim' and a list of 'devices'"):
            load_strategy(write(tmp_path, data), g, cl)

    def test_splits_must_be_an_object(self, g, cl, tmp_path):
        data = {"placement": full_placement(g), "splits": [["in", "batch", [0, 1]]]}
        with pytest.raises(FormatError, match="'splits' must be an object"):
            load_strategy(write(tmp_path, data), g, cl)

    def test_split_on_wrong_dim(self, g, cl, tmp_path):
        data = {"placement": full_placement(g), "splits": {"in": {"dim": "channel", "devices": [0, 1]}}}
        with pytest.raises(FormatError, match="op 'in' cannot be split on 'channel'"):
            load_strategy(write(tmp_path, data), g, cl)

    def test_partial_priority(self, g, cl, tmp_path):
        data = {"placement": full_placement(g), "priority": {"in": 1.0, "f": 2.0}}
        with pytest.raises(FormatError, match="priority: op 'b' has no priority"):
            load_strategy(write(tmp_path, data), g, cl)

    @pytest.mark.parametrize("value", ["high", True, None])
    def test_priority_not_a_number(self, g, cl, tmp_path, value):
        data = {"placement": full_placement(g), "priority": {op.name: value for op in g.ops}}
        with pytest.raises(FormatError, match=r"priority\.in: must be a number"):
            load_strategy(write(tmp_path, data), g, cl)

    def test_priority_nan(self, g, cl, tmp_path):
        text = json.dumps({"placement": full_placement(g),
                           "priority": {op.name: float("nan") for op in g.ops}})
        assert "NaN" in text
        with pytest.raises(FormatError, match=r"priority\.\w+: must be a number, finite"):
            load_strategy(write(tmp_path, text), g, cl)

    @pytest.mark.parametrize("data", [[], {"placement": [0, 0]}, {"priority": {}}, "x"])
    def test_placement_must_be_an_object(self, g, cl, tmp_path, data):
        with pytest.raises(FormatError, match="'placement' must be an object"):
            load_strategy(write(tmp_path, json.dumps(data)), g, cl)

    def test_malformed_json_names_file_and_line(self, g, cl, tmp_path):
        text = '{\n "placement": {\n  "in": 0,\n  "f": 1,,\n  "b": 1\n }\n}\n'
        path = write(tmp_path, text, "broken.json")
        with pytest.raises(FormatError) as err:
            load_strategy(path, g, cl)
        assert err.value.line == 4
        assert str(path) in str(err.value) and "line 4" in str(err.value)

    def test_missing_file(self, g, cl, tmp_path):
        with pytest.raises(FormatError, match="nothere.json: cannot read"):
            load_strategy(tmp_path / "nothere.json", g, cl)

    def test_binary_file(self, g, cl, tmp_path):
        path = tmp_path / "bin.json"
        path.write_bytes(b"\xff\xfe\x00{\x80")
        with pytest.raises(FormatError, match="bin.json: cannot read"):
            load_strategy(path, g, cl)

    def test_errors_are_moplace_errors(self):
        assert issubclass(FormatError, MoplaceError) and issubclass(StrategyError, MoplaceError)

    def test_to_json_is_plain_json(self, g, cl):
        s = Strategy(np.array([0, 1, 1, 2, 3], np.int64), np.arange(5, dtype=np.float64))
        text = json.dumps(strategy_to_json(g, s))  # no numpy types left
        assert json.loads(text)["placement"]["upd"] == 2


# -- genome --------------------------------------------------------------------------------------
GENOME_GRAPHS = ["pipedream:vgg16", "pipedream:resnet18", "dnn:LayerGraphs/gnmt_training",
                 "dnn:OperatorGraphs/bert_l-3_training"]
GENOME_CLUSTERS = ["1xV100", "4xV100-NVLink", "8xV100-16GB-NVLink", "2x4xV100-IB100"]


@pytest.fixture(scope="module")
def graphs():
    return {spec: load_graph(spec) for spec in GENOME_GRAPHS}


class TestGenome:
    @pytest.mark.parametrize("cluster", GENOME_CLUSTERS)
    @pytest.mark.parametrize("spec", GENOME_GRAPHS)
    def test_decode_encode_every_baseline(self, graphs, spec, cluster):
        graph, n = graphs[spec], load_cluster(cluster).n_devices
        space = GenomeSpace(graph, n)
        for name in BASELINES:
            s = baseline(name, graph, n)
            x = space.encode(s)
            assert x.shape == (space.size,)
            lo, hi = space.bounds
            assert (x[space.integer_mask] >= lo[space.integer_mask]).all()
            assert (x[space.integer_mask] <= hi[space.integer_mask]).all()
            assert space.decode(x) == s, name

    @pytest.mark.parametrize("n", [4, 8])
    def test_data_parallel_parts_are_on_devices_0_to_n_minus_1(self, graphs, n):
        graph = graphs["pipedream:vgg16"]
        s = baseline("data-parallel", graph, n)
        assert s.splits and all(sp.devices == tuple(range(n)) for sp in s.splits.values())
        space = GenomeSpace(graph, n)
        x = space.encode(s)
        G = space.n_groups
        assert (x[:G] == 0).all()
        assert space.options[0][int(x[G])] == ("batch", n)
        assert space.decode(x) == s

    @pytest.mark.parametrize("n", [2, 3, 4, 8])
    @pytest.mark.parametrize("spec", ["pipedream:vgg16", "dnn:LayerGraphs/gnmt_training"])
    def test_random_integer_genomes_round_trip(self, graphs, spec, n):
        graph = graphs[spec]
        space = GenomeSpace(graph, n)
        lo, hi = space.bounds
        rng = np.random.default_rng(n)
        ints = space.integer_mask
        for _ in range(20):
            x = rng.random(space.size)  # priorities: any real in [0, 1]
            x[ints] = rng.integers(lo[ints].astype(int), hi[ints].astype(int) + 1)
            space.one_decoding(x[None])  # ZeRO-3 with micro-batches runs as ZeRO-1
            s = space.decode(x)
            s.validate(graph, n)
            np.testing.assert_array_equal(space.encode(s), x)

    def test_decode_rounds_and_clips_integer_genes(self, graphs):
        graph = graphs["pipedream:vgg16"]
        space = GenomeSpace(graph, 4)
        G = space.n_groups
        x = np.zeros(space.size)
        x[:G] = 2.4                     # rounds to 2
        x[0] = 99                       # clipped to 3
        x[1] = -5                       # clipped to 0
        x[G:2 * G] = 0.3                # rounds to 0: no split
        x[G] = 1000                     # clipped to the last option
        s = space.decode(x)
        s.validate(graph, 4)
        head = [m[0] for m in graph.groups]
        assert s.placement[head[0]] == 3 and s.placement[head[1]] == 0
        assert s.placement[head[2]] == 2
        last = space.options[0][-1]
        assert s.splits[head[0]] == Split(last[0], tuple((3 + k) % 4 for k in range(last[1])))
        assert set(s.splits) == set(graph.groups[0])

    def test_random_genomes_always_validate(self, graphs):
        graph = graphs["pipedream:resnet18"]
        for n in (2, 5, 8):
            space = GenomeSpace(graph, n, max_parts=3)
            lo, hi = space.bounds
            rng = np.random.default_rng(7)
            for _ in range(10):
                x = rng.uniform(lo - 2, hi + 2)  # out of bounds and fractional too
                space.decode(x).validate(graph, n)

    @pytest.mark.parametrize("spec", GENOME_GRAPHS)
    def test_decode_makes_the_split_table_of_its_splits(self, graphs, spec):
        """decode builds the split table from its option tables: it must be the table of the
        strategy's splits, signatures (equal for equal splits) included."""
        graph = graphs[spec]
        rng = np.random.default_rng(3)
        for n in (2, 4, 8):
            space = GenomeSpace(graph, n)
            X = space.sample(8, rng)
            X[::2, space.n_groups:2 * space.n_groups] *= rng.random((4, space.n_groups)) < 0.5
            for x in X:
                s = space.decode(x)
                made, ref = s.split_table, SplitTable.of(s.splits)
                for name in ("ops", "parts", "dims", "devices", "signature"):
                    np.testing.assert_array_equal(getattr(made, name), getattr(ref, name), name)
                assert s == Strategy(s.placement, s.priority, dict(s.splits),
                                     **s.options, recompute=s.recompute)

    def test_options(self, g):
        space = GenomeSpace(g, 4, max_parts=3)
        # groups: in, L (f+b), upd, side
        # + bucket, ZeRO, micro-batch and schedule genes
        assert space.n_groups == 4 and space.size == 2 * 4 + 5 + 4
        assert space.options[0] == (None, ("batch", 2), ("batch", 3))
        assert space.options[1] == (None, ("batch", 2), ("batch", 3), ("channel", 2), ("channel", 3))
        assert space.options[2] == (None,) and space.options[3] == (None,)
        lo, hi = space.bounds
        assert hi.tolist()[:-4] == [3, 3, 3, 3, 2, 4, 0, 0, 1, 1, 1, 1, 1] and (lo == 0).all()
        assert hi[-4] == len(space.bucket_choices) - 1 and hi[-3] == len(space.zero_choices) - 1
        # no forward or backward op: nothing to micro-batch
        assert space.micro_batch_choices == (1,) and hi[-2] == 0 and hi[-1] == 0

    def test_wrapping_consecutive_split_round_trips(self, g):
        space = GenomeSpace(g, 4)
        split = Split("batch", (3, 0, 1))
        s = Strategy([3, 0, 0, 1, 2], [0.5, 0.4, 0.3, 0.2, 0.1], {0: split}).validate(g, 4)
        assert space.decode(space.encode(s)) == s

    @pytest.mark.parametrize("devices", [(0, 2), (1, 0), (0, 1, 3), (2, 2)])
    def test_non_consecutive_split_has_no_genome(self, g, devices):
        space = GenomeSpace(g, 4)
        s = Strategy([devices[0], 0, 0, 0, 0], splits={0: Split("batch", devices)})
        with pytest.raises(StrategyError, match="op 'in'.*consecutive"):
            space.encode(s)

    def test_split_beyond_max_parts_has_no_genome(self, g):
        space = GenomeSpace(g, 4, max_parts=2)
        s = Strategy([0] * 5, splits={0: Split("batch", (0, 1, 2))})
        with pytest.raises(StrategyError, match="op 'in'"):
            space.encode(s)

    def test_encode_validates(self, g):
        space = GenomeSpace(g, 4)
        with pytest.raises(StrategyError, match="share co-location group"):
            space.encode(Strategy([0, 1, 2, 0, 0]))

    def test_wrong_genome_length(self, g):
        space = GenomeSpace(g, 4)
        with pytest.raises(StrategyError, match=f"expected {space.size}"):
            space.decode(np.zeros(space.size + 1))


def _vgg_problem():
    from moplace.core.presets import load_cluster
    from moplace.optimize.problem import Problem
    return Problem(load_graph("pipedream:vgg16"), load_cluster("4xV100-NVLink"))


def test_simulation_key_is_shared_by_strategies_that_simulate_alike():
    p = _vgg_problem()
    rng = np.random.default_rng(0)
    G = p.genome.n_groups
    for x in p.genome.sample(20, rng):
        x[G:2 * G] = 0  # no splits: every op has one device
        s = p.genome.decode(x)
        assert not s.splits
        prio = np.empty_like(s.priority)  # new values, each device's order kept, the order
        for d in range(p.n_devices):      # across devices scrambled
            on = np.flatnonzero(s.placement == d)
            on = on[np.lexsort((on, -s.priority[on]))]
            prio[on] = np.sort(rng.random(on.size))[::-1] * 1e3  # the first: the highest
        t = Strategy(s.placement, prio, **s.options, recompute=s.recompute)
        assert not np.array_equal(np.argsort(-t.priority), np.argsort(-s.priority))
        assert t.simulation_key == s.simulation_key
        a, b = p.evaluate(s), p.evaluate(t)
        np.testing.assert_array_equal(a.values, b.values)
        np.testing.assert_array_equal(a.trace.task_start, b.trace.task_start)
    for x in p.genome.sample(20, rng):  # with splits: any order-keeping map of the priorities
        s = p.genome.decode(x)
        assert s.splits
        t = Strategy(s.placement, np.exp(s.priority / 7.0) - 5.0, s.splits, **s.options,
                     recompute=s.recompute)
        assert t.simulation_key == s.simulation_key
        np.testing.assert_array_equal(p.evaluate(s).values, p.evaluate(t).values)


def test_simulation_key_tells_apart_what_changes_the_simulation():
    p = _vgg_problem()
    s = baseline("data-parallel", p.graph, p.n_devices)
    keys = {s.simulation_key}
    on0 = np.flatnonzero(s.placement == 0)
    i, j = on0[0], on0[1]  # two ops on one device: swap their order
    prio = s.priority.copy()
    prio[i], prio[j] = prio[j], prio[i]
    keys.add(Strategy(s.placement, prio, s.splits).simulation_key)
    keys.add(Strategy(s.placement, s.priority).simulation_key)  # no splits
    moved = s.placement.copy()
    moved[on0[-1]] = 1  # an op on another device
    keys.add(Strategy(moved, s.priority).simulation_key)
    assert len(keys) == 4


def test_sampled_genomes_recompute_sparsely_and_replication_pulls_no_lever():
    """Half the sampled genomes recompute nothing (uniform genes would recompute half of every
    genome's groups); data parallelism made by the device-set move shards and recomputes
    nothing, as the data-parallel baseline."""
    g = load_graph("pipedream:resnet50")
    space = GenomeSpace(g, 4)
    X = space.sample(400, np.random.default_rng(0))
    share = X[:, space.recompute_genes].mean(axis=1)
    assert 0.4 < np.mean(share == 0) < 0.6 and 0.15 < share.mean() < 0.35
    y = space.replicate(X[np.argmax(share)], 0, 4)
    s = space.decode(y)
    assert s.recompute == () and s.zero_stage == 0
