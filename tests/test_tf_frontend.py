"""TensorFlow front end: extraction, profiling, apply-and-measure, and its errors (CPU)."""

import re
import subprocess
import sys
import textwrap

import pytest

import moplace.tf  # noqa: F401  (sets TensorFlow's environment before keras loads)
from moplace import baseline, simulate
from moplace.tf.apply import ApplyError, apply_strategy
from moplace.tf.frontend import apply_to_model, profile_model, rebuild_traced, trace_model
from moplace.tf.modelfile import load_setup
from moplace.tf.session import StepRunError, StepRunner


@pytest.fixture(scope="module")
def cnn():
    return profile_model("cnn", 8, device_count=2, steps=3)


@pytest.fixture(scope="module")
def mlp():
    return profile_model("mlp", 8, device_count=2, steps=3)


class TestExtraction:
    def test_forward_backward_and_update_ops(self, cnn):
        roles = {op.role for op in cnn.graph.ops}
        assert {"forward", "backward", "update"} <= roles
        types = {op.type for op in cnn.graph.ops}
        assert {"Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"} <= types
        assert any(op.type.startswith("ResourceApply") or op.type.startswith("Assign")
                   for op in cnn.graph.ops if op.role == "update")

    @pytest.mark.parametrize("name", ["cnn", "mlp"])
    def test_parameter_bytes_are_the_models_parameters(self, name, cnn, mlp):
        pm = {"cnn": cnn, "mlp": mlp}[name]
        setup = load_setup(name, 8)
        model_vars = [v for v in pm.traced.variables.values() if not v.optimizer_state]
        assert sum(v.nbytes for v in model_vars) == setup.model.count_params() * 4
        by_name = {op.name: op for op in pm.graph.ops}
        assert all(by_name[v.node].param_bytes == v.nbytes for v in pm.traced.variables.values())

    def test_every_op_has_a_measured_cost(self, cnn):
        g = cnn.graph
        kind = g.metadata["profiled_on"]
        assert kind == "cpu"
        assert all(kind in op.compute and op.compute[kind] >= 0 for op in g.ops)
        fed = set(g.metadata["untimed"]["fed_inputs"])
        assert fed == {"x", "y"} and not g.metadata["untimed"]["not_run"]
        assert all(op.compute[kind] > 0 for op in g.ops if op.name not in fed)

    def test_variables_and_their_readers_are_colocated(self, cnn):
        g = cnn.graph
        for node in cnn.traced.variables:
            group = g.op(node).colocation
            assert group == node
            readers = [op for op in g.ops if op.colocation == group]
            assert len(readers) >= 2 and any(op.type == "ReadVariableOp" for op in readers)

    def test_consts_are_folded_and_said_so(self, cnn):
        folded = cnn.graph.metadata["folded"]
        assert folded["count"] > 0 and folded["types"] == ["Const"]
        assert not any(op.type == "Const" for op in cnn.graph.ops)
        assert sum(len(v) for v in folded["into"].values()) == folded["count"]

    def test_splittable_dims_on_conv_and_matmul_only(self, cnn):
        for op in cnn.graph.ops:
            expected = op.type in {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                                   "MatMul", "BatchMatMulV2"}
            assert bool(op.splittable) == expected, op.type

    def test_weight_gradients_are_marked(self, cnn):
        grads = [op for op in cnn.graph.ops if op.grad_bytes]
        assert grads and all(op.role == "backward" for op in grads)
        assert {op.type for op in grads} & {"Conv2DBackpropFilter", "MatMul", "BiasAddGrad"}

    def test_profiled_ops_fit_in_the_step_they_were_measured_in(self, cnn):
        """The ops' times are seconds of the profiled step: ops run one at a time while
        profiling, so together they fit in the same profile's untraced step (the tracing
        correction scales them down where tracing inflated them). Both figures come from one
        profile, so a slow or busy machine moves them alike; no wall-clock bound is asserted.
        How the profiled step compares with the tf.function's own wall time is a measurement:
        ``python3 experiments/bench_profile.py`` prints it."""
        measured = cnn.graph.metadata["measured"]
        total = cnn.graph.total_compute("cpu")
        assert 0 < total <= measured["step_median_s"] * (1 + 1e-9)
        assert 0 < measured["tracing_correction"] <= 1 and measured["step_overhead_s"] >= 0

    def test_graph_records_its_source(self, cnn):
        assert cnn.graph.metadata["source"] == {"model": "cnn", "batch_size": 8}
        again = rebuild_traced(cnn.graph)
        assert [n.name for n in again.graph_def.node] == [n.name for n in cnn.traced.graph_def.node]


def test_node_times_are_read_in_seconds():
    """Step stats give a node's start and duration in nanoseconds, or only in microseconds
    (older runtimes): both become seconds, and nodes of one loop that overlap count once.
    (What the removed wall-clock test guarded against: times off by a unit factor.)"""
    from types import SimpleNamespace

    from moplace.tf.profile import _covered_seconds, _interval

    micros = SimpleNamespace(all_start_nanos=0, all_end_rel_nanos=0, all_start_micros=1_000,
                             all_end_rel_micros=250)
    nanos = SimpleNamespace(all_start_nanos=2_000_000_000, all_end_rel_nanos=500_000,
                            all_start_micros=2_000_000, all_end_rel_micros=500)
    assert _interval(micros) == (1_000_000, 1_250_000)
    assert _covered_seconds([_interval(micros)]) == pytest.approx(250e-6)
    assert _covered_seconds([_interval(nanos)]) == pytest.approx(500e-6)
    inside = (1_100_000, 1_400_000)  # overlaps the first: 1.00 to 1.40 ms covered
    assert _covered_seconds([_interval(micros), inside, _interval(nanos)]) == pytest.approx(900e-6)


class TestApply:
    @pytest.mark.parametrize("name", ["single", "round-robin", "layer-split"])
    def test_strategies_run_and_train(self, cnn, name):
        s = baseline(name, cnn.graph, 2)
        result, simulated = apply_to_model(cnn.graph, s, cnn.cluster, steps=3, traced=cnn.traced)
        assert result.expressible and result.trained
        assert result.measured_step_s > 0 and simulated > 0
        used = {int(d) for d in s.placement}
        assert len(result.peak_memory_bytes) == len(used)

    def test_two_device_placement_is_really_used(self, cnn):
        s = baseline("round-robin", cnn.graph, 2)
        traced = cnn.traced
        from moplace.tf.apply import placed_graph_def
        gd, _ = placed_graph_def(traced, cnn.graph, s, simulate(cnn.graph, cnn.cluster, s),
                              ["/device:CPU:0", "/device:CPU:1"])
        devices = {n.device for n in gd.node if n.name in cnn.graph.index}
        assert devices == {"/device:CPU:0", "/device:CPU:1"}
        with StepRunner(traced, gd) as runner:
            ran_on = {d.device.split("/")[-1] for d in runner.step(trace=True).metadata.step_stats.dev_stats}
        assert {"device:CPU:0", "device:CPU:1"} <= ran_on

    def test_data_parallel_runs_and_trains(self, cnn):
        s = baseline("data-parallel", cnn.graph, 2)
        assert s.splits
        result, simulated = apply_to_model(cnn.graph, s, cnn.cluster, steps=2, traced=cnn.traced)
        assert result.expressible and result.trained and result.measured_step_s > 0
        assert len(result.peak_memory_bytes) == 2

    def test_strategy_for_another_graph_is_refused(self, cnn, mlp):
        s = baseline("single", mlp.graph, 2)
        trace = simulate(mlp.graph, mlp.cluster, s)
        with pytest.raises(ApplyError, match="does not match the model"):
            apply_strategy(cnn.traced, mlp.graph, s, trace, ["/device:CPU:0", "/device:CPU:1"])


class TestErrors:
    def test_failing_op_is_named(self, tmp_path):
        path = tmp_path / "bad_numbers.py"
        path.write_text(textwrap.dedent("""
            import numpy as np, keras, tensorflow as tf

            class Check(keras.layers.Layer):
                def call(self, x):
                    return tf.debugging.check_numerics(tf.math.log(x), "log of a negative")

            def build(batch_size):
                inp = keras.Input((4,))
                model = keras.Model(inp, keras.layers.Dense(2)(Check()(inp)))
                x = -np.ones((batch_size, 4), np.float32)
                y = np.zeros((batch_size,), np.int64)
                return (model, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                        keras.optimizers.SGD(0.1), (x, y))
        """))
        traced = trace_model(str(path), 2)
        with StepRunner(traced) as runner, pytest.raises(StepRunError, match="CheckNumerics"):
            runner.step()

    @pytest.mark.parametrize("name", ["notes.txt", "./notes.txt", "{tmp}/notes.txt", "{tmp}/notes"])
    def test_a_file_that_is_not_python_is_refused_naming_it(self, tmp_path, monkeypatch, name):
        from moplace.errors import FormatError

        (tmp_path / "notes.txt").write_text("Meeting notes\n- try a bigger batch\n")
        (tmp_path / "notes").write_text("import os\n")  # Python, but not named .py
        monkeypatch.chdir(tmp_path)
        name = name.format(tmp=tmp_path)
        with pytest.raises(FormatError, match=r"notes(\.txt)?: not a model file: a model file is "
                                              r"a Python file \(a name ending in \.py\)"):
            load_setup(name, 4)

    def test_graph_without_source_cannot_be_applied(self):
        from moplace.core.synthetic import layered_dag
        from moplace.errors import MoplaceError
        with pytest.raises(MoplaceError, match="does not say which model"):
            rebuild_traced(layered_dag(10, width=2))


@pytest.mark.slow  # a fresh TensorFlow process with oneDNN's rewrites on (about 11 s)
def test_profiling_refuses_graphs_rewritten_by_onednn():
    code = ("import os; os.environ['TF_ENABLE_ONEDNN_OPTS'] = '1'\n"
            "import tensorflow\n"  # imported first: moplace.tf cannot switch oneDNN off
            "from moplace.tf.frontend import profile_model\n"
            "from moplace.errors import MoplaceError\n"
            "try:\n    profile_model('cnn', 4, steps=1, warmup=1)\n"
            "except MoplaceError as e:\n    print('REFUSED', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "REFUSED" in out.stdout and "TF_ENABLE_ONEDNN_OPTS=0" in out.stdout, out.stderr[-2000:]


def test_loops_are_timed_whole():
    # Keras LSTMs trace to While loops; they run as single kernels (not lowered into
    # Switch/Merge nodes placed one by one), timed whole
    pm = profile_model("gnmt", 2, steps=2, warmup=1)
    g, measured = pm.graph, pm.graph.metadata["measured"]
    loops = [op for op in g.ops if op.type in ("While", "StatelessWhile")]
    assert loops and not g.metadata["untimed"]["not_run"]
    assert all(op.compute["cpu"] > 0 for op in loops)
    nodes = {n.name: n for n in pm.traced.graph_def.node}
    assert all(not nodes[op.name].attr["_lower_using_switch_merge"].b for op in loops)
    # ops run one at a time while profiling: together they fit in an untraced step
    assert g.total_compute("cpu") <= measured["step_median_s"] * (1 + 1e-9)
    assert sum(op.compute["cpu"] for op in loops) > 0.3 * g.total_compute("cpu")
    assert 0 < measured["tracing_correction"] <= 1


class TestCommandLine:
    def run(self, *args):
        return subprocess.run([sys.executable, "-m", "moplace.cli", *args], capture_output=True,
                              text=True, timeout=300)

    @pytest.mark.slow  # four TensorFlow processes, ~50 s: the default suite keeps under 4 min
    def test_profile_then_apply(self, tmp_path):
        graph = tmp_path / "mlp.json"
        out = self.run("profile", "mlp", "--batch", "4", "--device-count", "2", "--steps", "2",
                       "-o", str(graph))
        assert out.returncode == 0, out.stderr[-2000:]
        assert graph.exists() and (tmp_path / "mlp.cluster.toml").exists()
        # stderr is no terminal: a plain progress line at each stage, the last one complete
        lines = [ln for ln in out.stderr.splitlines() if ln.startswith("  profile mlp: ")]
        stages = [ln.split(": ", 1)[1].rsplit(" (", 1)[0] for ln in lines]
        for stage in ("tracing at batch 4", "warm-up steps", "timed steps", "traced steps",
                      "link 0 -> 1", "link 1 -> 0"):
            assert stage in stages, out.stderr[-2000:]
        done, total = lines[-1].rsplit("(", 1)[1].rstrip(")").split("/")
        assert done == total == str(1 + 2 + 2 * 2 + 2)  # trace, warm-up, timed + traced, links
        out = self.run("apply", str(graph), "--baseline", "round-robin", "--steps", "2")
        assert out.returncode == 0, out.stderr[-2000:]
        assert "  apply to " in out.stderr and "timed steps (" in out.stderr
        assert out.stderr.rstrip().endswith("(5/5)")  # 2 warm-up, 2 timed, 1 memory step
        out = self.run("apply", str(graph), "--baseline", "round-robin", "--steps", "2", "--json")
        assert out.returncode == 0, out.stderr[-2000:]
        assert "apply to" not in out.stderr  # --json is quiet
        import json
        result = json.loads(out.stdout)
        assert result["measured_step_s"] > 0 and result["runtime_s"] > 0 and result["trained"]
        assert len(result["devices"]) == 2
        out = self.run("evaluate", str(graph), "--cluster", str(tmp_path / "mlp.cluster.toml"),
                       "--baseline", "single", "--json")
        assert out.returncode == 0 and json.loads(out.stdout)["runtime_s"] > 0

    @pytest.mark.parametrize("args, message", [
        (("profile", "no_such_model.py", "--batch", "2", "-o", "x.json"), "no_such_model.py"),
        (("profile", "mlp", "--batch", "0", "-o", "x.json"), "argument --batch: must be from 1 to"),
        (("profile", "mlp", "--batch", "2", "-o", "no_such_dir/x.json"), "does not exist"),
        (("apply", "pipedream:vgg16", "--baseline", "single", "--steps", "1"),
         "does not say which model"),
        (("profile", "./notes.txt", "--batch", "2", "-o", "x.json"),
         "notes.txt: not a model file"),
    ])
    def test_bad_input_is_one_clear_line(self, tmp_path, args, message):
        (tmp_path / "notes.txt").write_text("Meeting notes\n- try a bigger batch\n")
        out = subprocess.run([sys.executable, "-m", "moplace.cli", *args], capture_output=True,
                             text=True, timeout=300, cwd=tmp_path)
        assert out.returncode == 2 and message in out.stderr
        assert "Traceback" not in out.stderr
        # the error is the last line (a progress line may come before it)
        assert re.match(r"moplace( [a-z]+)?: error: ", out.stderr.splitlines()[-1]), out.stderr


def test_part_profiles_give_split_parts_measured_costs():
    reports = []
    pm = profile_model("cnn", 8, steps=2, warmup=1, part_counts=(2,),
                       progress=lambda *r: reports.append(r))
    # two traced profiles (3 traces with the final one) of 1 + 2 * 2 steps each, every unit
    # counted once, in order, up to the total
    done = [d for _, d, _ in reports]
    assert done == sorted(done) and done[-1] == reports[-1][2] == 3 + 2 * 5
    stages = {s for s, _, _ in reports}
    assert {"batch 8: timed steps", "batch 4: traced steps", "tracing at batch 4"} <= stages
    splittable = [op for op in pm.graph.ops if op.splittable]
    assert splittable and all(2 in op.part_compute and op.part_compute[2]["cpu"] > 0
                              for op in splittable)
    assert not any(op.part_compute for op in pm.graph.ops if not op.splittable)
    assert pm.graph.metadata["measured"]["part_counts"] == [2]
    from moplace.errors import MoplaceError
    with pytest.raises(MoplaceError, match="must be >= 2 and divide the batch size 8"):
        profile_model("cnn", 8, part_counts=(3,))
