"""The fuzzed formats: valid seed files made from the project itself, and per input a mutated
file plus the command that reads it (or, for ``arguments``, a mutated command line).

`make_format(name, workdir).case(rng, i)` -> `Case`; ``"{input}"`` in its argv stands for the
path its ``data`` is written to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import warnings
from pathlib import Path

from . import mutate

CLUSTER = "4xV100-NVLink"
GRAPH = "pipedream:alexnet"
FORMATS = ("pipedream", "dnn-partitioning", "native", "cluster", "strategy", "front", "sweep",
           "arguments", "torch-model", "hf-config")
EVALUATE_ALL = ["--baseline", "all", "--json"]


@dataclasses.dataclass
class Case:
    argv: list
    data: bytes | None = None
    ext: str = "txt"
    mutations: tuple = ()
    seed_name: str = ""


def _cli(argv) -> str:
    """Run the CLI for a seed; its stdout (it must succeed)."""
    from moplace.cli import main

    out = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        code = main([str(a) for a in argv])
    assert code == 0, f"seed command failed: {argv}"
    return out.getvalue()


def _search(workdir: Path, searcher: str, name: str) -> Path:
    out = workdir / "seeds" / name
    _cli(["search", GRAPH, "--cluster", CLUSTER, "--searcher", searcher, "--budget", "20",
          "--no-mlflow", "--out", out, "--force", "--quiet"])
    return out / "front.json"


class FileFormat:
    """A file format: seeds, how to mutate them, the command reading the result."""

    ext, json_share, table = "txt", 0.0, None

    def __init__(self, workdir: Path):
        self.workdir = workdir
        (workdir / "seeds").mkdir(parents=True, exist_ok=True)
        self.seeds = self.make_seeds()

    def make_seeds(self) -> list[tuple[str, bytes]]:
        raise NotImplementedError

    def command(self, rng) -> list:
        return ["evaluate", "{input}", "--cluster", CLUSTER, *EVALUATE_ALL]

    def case(self, rng, i) -> Case:
        name, seed = self.seeds[i % len(self.seeds)]
        if rng.random() < self.json_share:
            data, names = mutate.mutate_json(seed, rng)
            names = ["json:" + n for n in names]
        else:
            data, names = mutate.mutate_text(seed, rng, self.table)
        return Case(self.command(rng), data, self.ext, tuple(names), name)


class PipeDream(FileFormat):
    def make_seeds(self):
        from moplace.io import bundled_path

        return [(m, bundled_path(f"pipedream:{m}").read_bytes()) for m in ("alexnet", "gnmt")]


class DnnPartitioning(FileFormat):
    ext, json_share = "json", 0.7

    def make_seeds(self):
        from moplace.io import bundled_path

        return [(m, bundled_path(f"dnn:LayerGraphs/{m}").read_bytes())
                for m in ("bert24_inference", "bert24_training")]


class Native(FileFormat):
    ext, json_share = "json", 0.7

    def make_seeds(self):
        from moplace.core.graph import OpGraph
        from moplace.io import load_graph, save_graph

        seeds = []
        for spec in (GRAPH, "dnn:LayerGraphs/bert24_inference"):
            path = self.workdir / "seeds" / (spec.replace(":", "_").replace("/", "_") + ".json")
            save_graph(load_graph(spec), path)
            seeds.append((f"native {spec}", path.read_bytes()))
        # measured part costs ("part_compute", keyed by part count), as `profile --parts` writes
        graph = load_graph(GRAPH)
        ops = [dataclasses.replace(op, part_compute={
                   n: {kind: t / n * 1.1 for kind, t in op.compute.items()} for n in (2, 4)})
               if op.splittable else op for op in graph.ops]
        path = self.workdir / "seeds" / "native_part_costs.json"
        save_graph(OpGraph(ops, graph.edges, name=graph.name, metadata=graph.metadata), path)
        seeds.append(("native with part costs", path.read_bytes()))
        # a Megatron block: tensor splits and partial sums, as the PyTorch front end writes
        from moplace.core.graph import Edge, Op

        t = ("batch", "tensor")
        block = [Op("x", compute={"H100": 1e-4}, output_bytes=8, splittable=("batch",),
                    role="forward"),
                 Op("w", "Parameter", param_bytes=64, splittable=t, colocation="b",
                    role="forward"),
                 Op("fc1", compute={"H100": 1e-3}, output_bytes=32, splittable=t,
                    colocation="b", role="forward"),
                 Op("fc2", compute={"H100": 1e-3}, output_bytes=8, splittable=t,
                    colocation="b", role="forward", partial_sums=True)]
        path = self.workdir / "seeds" / "native_tensor_block.json"
        save_graph(OpGraph(block, [Edge("x", "fc1", 8), Edge("w", "fc1", 64),
                                   Edge("fc1", "fc2", 32)], name="block"), path)
        seeds.append(("native tensor block", path.read_bytes()))
        # a coarsened graph: merged ops with scratch bytes and the mapping back
        from moplace.core.coarsen import coarsen

        chain = [Op(n, compute={"H100": 1e-4}, output_bytes=b, splittable=("batch",),
                    role="forward") for n, b in (("a", 64), ("b", 32), ("c", 16), ("d", 8))]
        path = self.workdir / "seeds" / "native_coarsened.json"
        save_graph(coarsen(OpGraph(chain + [Op("e", role="forward")],
                                   [(0, 1, 64), (1, 2, 32), (2, 3, 16), (2, 4, 16)])), path)
        seeds.append(("native coarsened", path.read_bytes()))
        return seeds


HAND_TOML = """\
name = "fuzz-2x2"
description = "two servers of two GPUs, port sharing, one explicit link"

[[servers]]
name = "box"
repeat = 2
count = 2
kind = "V100"
memory = "16GiB"
speed = 1.0

[servers.interconnect]
label = "NVLink"
bandwidth = "48GB/s"
latency = "2us"
sharing = "port"

[[servers]]
count = 1
kind = "A100"
memory = 42949672960

[network]
label = "IB"
bandwidth = "100Gb/s"
latency = "10us"

[[links]]
from = "gpu0"
to = "gpu3"
bandwidth = 24e9
latency = 2e-6
bidirectional = false
"""


class ClusterToml(FileFormat):
    ext, table = "toml", mutate.TOML_MUTATIONS

    def make_seeds(self):
        from importlib import resources

        from moplace.core.presets import load_cluster, parse_cluster
        from moplace.core.presets.export import cluster_to_toml

        presets = resources.files("moplace.core.presets")
        seeds = [("exported 4xV100-NVLink", cluster_to_toml(load_cluster(CLUSTER)).encode()),
                 ("hand-written count/repeat", HAND_TOML.encode())]
        for name in ("2x4xV100-IB100", "8xV100-16GB-NVLink", "2x4xV100-2xIB100"):
            seeds.append((f"preset {name}", presets.joinpath(f"{name}.toml").read_bytes()))
        parse_cluster(HAND_TOML)  # the hand-written seed must be valid
        # what a testbed profile once wrote: a link fitted on noise at 1.3e20 B/s (now refused
        # by the fit and by the writer; the loader must name the field)
        seeds.append(("profiled link beyond 1 PB/s", HAND_TOML.replace(
            "bandwidth = 24e9", "bandwidth = 1.3152454065223967e+20").encode()))
        return seeds

    def command(self, rng):
        return ["evaluate", GRAPH, "--cluster", "{input}", *EVALUATE_ALL]


class StrategyJson(FileFormat):
    ext, json_share = "json", 0.8

    def make_seeds(self):
        from moplace.core.baselines import baseline
        from moplace.core.presets import load_cluster
        from moplace.io import load_graph
        from moplace.io.strategies import save_strategy

        graph, cluster = load_graph(GRAPH), load_cluster(CLUSTER)
        seeds = []
        for name, named in (("data-parallel", cluster), ("round-robin", None)):
            path = self.workdir / "seeds" / f"{name}.strategy.json"
            save_strategy(path, graph, baseline(name, graph, cluster.n_devices), named)
            seeds.append((f"baseline {name}" + (" (device indices)" if named is None else ""),
                          path.read_bytes()))
        # a version-1 file, written before strategies had options (issue 32)
        old = json.loads(seeds[0][1])
        old.update(version=1)
        old.pop("options"), old.pop("recompute")
        seeds.append(("version 1 (no options)", json.dumps(old, indent=1).encode()))
        # every other group recomputed (version 3, issue 32): names the mutator can damage
        from moplace.core.recompute import recomputable_heads

        path = self.workdir / "seeds" / "recompute.strategy.json"
        save_strategy(path, graph, baseline("data-parallel", graph, cluster.n_devices)
                      .with_recompute(recomputable_heads(graph)[::2]), cluster)
        seeds.append(("data-parallel, every other group recomputed", path.read_bytes()))
        # a pipeline: 4 micro-batches under GPipe (version 4, issue 33)
        path = self.workdir / "seeds" / "pipeline.strategy.json"
        save_strategy(path, graph, baseline("layer-split", graph, cluster.n_devices)
                      .with_options(micro_batches=4, schedule=1), cluster)
        seeds.append(("layer-split, 4 micro-batches under GPipe", path.read_bytes()))
        # zero-bubble, and the same in FP8, which alexnet on V100s refuses by name (version 5,
        # issue 49): the names the mutator can damage
        for label, fp8 in (("zero-bubble", 0), ("zero-bubble, FP8", 1)):
            path = self.workdir / "seeds" / f"{label.replace(', ', '-')}.strategy.json"
            save_strategy(path, graph, baseline("layer-split", graph, cluster.n_devices)
                          .with_options(micro_batches=4, schedule=3, fp8=fp8), cluster)
            seeds.append((f"layer-split, 4 micro-batches {label}", path.read_bytes()))
        front = json.loads(_search(self.workdir, "random", "strategy-search").read_text())
        point = max(front["points"], key=lambda p: len(p["strategy"]["splits"]))
        seeds.append(("random-search point with splits",
                      json.dumps(point["strategy"], indent=1).encode()))
        return seeds

    def command(self, rng):
        return ["evaluate", GRAPH, "--cluster", CLUSTER, "--strategy", "{input}", "--json"]


class FrontJson(StrategyJson):
    def make_seeds(self):
        return [("random search front", _search(self.workdir, "random", "front").read_bytes()),
                ("heft front (1 point)", _search(self.workdir, "heft", "front1").read_bytes())]

    def command(self, rng):
        point = rng.choice([["--point", "0"]] * 6 + [["--point", "1"], ["--point", "3"], []])
        # the file alone (issue 34): show reads its baselines, notes and points; evaluate
        # its graph, cluster, memory cap, optimizer and in-place setting
        return rng.choice([
            ["evaluate", GRAPH, "--cluster", CLUSTER, "--strategy", "{input}", *point, "--json"],
            ["evaluate", GRAPH, "--cluster", CLUSTER, "--strategy", "{input}", *point, "--json"],
            ["evaluate", "{input}", *point, "--json"], ["show", "{input}"],
            ["show", "{input}", "--all"]])


# -- command lines -------------------------------------------------------------------------------
#: settings whose values the random cases replace with junk, per searcher
SETTINGS = {
    "random": ["batch_size", "splits"],
    "nsga2": ["pop_size", "seed_heuristics", "crossover_prob", "rates", "coarsen", "mutants",
              "seed_baselines"],
    "mcmc": ["chains", "steps_per_ask", "temperature", "restart_after", "neighbour_prob", "rho",
             "penalty", "move_weights", "restarts", "reweight", "adjacent_prob", "extra_move",
             "known_steps", "delta"],
    "optuna-tpe": ["storage", "study_name", "batch_size", "priorities", "max_priority_ops",
                   "n_startup_trials", "seed_heuristics", "known_trials", "polish",
                   "ei_candidates"],
}
SET_JUNK = ["abc", "-3", "1e400", "-1e400", "0", "-1", "1" + "0" * 40, "null", "true", "[]", "{}",
            "[1,2,3]", '""', '"x"', "NaN", "Infinity", "0.5", "1.5", "[0,0,0]", "[-1,1,1]",
            '["nosuch"]', '{"moves": -1}', '{"nosuch": 1}', "1_000", "0x10", "\u00b2", ""]
BIG = "1" + "0" * 40


def with_option(argv, option, value):
    """``argv`` with ``option value`` (the value after ``option`` replaced, else both added);
    also used by tests/test_readme_commands.py."""
    argv = list(argv)
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [option, value]
    return argv


def _drop(argv, *tokens):
    return [a for a in argv if a not in tokens]


def _to_time(argv, value):
    k = argv.index("--budget")
    return argv[:k] + ["--time", value] + argv[k + 2:]


class Arguments:
    """Command lines: named cases first (every id below their count), then random mutations
    of valid commands. Searches log nowhere (--no-mlflow) unless the case is about tracking."""

    def __init__(self, workdir: Path):
        wd = workdir / "args"
        wd.mkdir(parents=True, exist_ok=True)
        existing = wd / "existing.txt"
        existing.write_text("not a graph, a cluster or a strategy\n")
        binary = wd / "binary.bin"
        binary.write_bytes(b"\xff\xfe\x00\x80 not UTF-8\n")
        odd = ["x" * 5000, "nul\x00byte", str(binary)]  # too long, NUL, not UTF-8
        front = str(_search(workdir, "random", "args-front"))
        uri = f"sqlite:///{wd / 'mlflow.db'}"
        logged = json.loads(_cli(["search", GRAPH, "--cluster", CLUSTER, "--searcher", "random",
                                  "--budget", "20", "--tracking-uri", uri, "--figures", "off",
                                  "--out", wd / "logged", "--force", "--quiet", "--json"]))
        run = logged["mlflow_run_id"]
        sweep_file = wd / "sweep.toml"
        sweep_file.write_text(SWEEP_TOML)
        common = ["--cluster", CLUSTER, "--budget", "20", "--no-mlflow", "--quiet",
                  "--out", str(wd / "out"), "--force"]
        b = self.bases = {
            "search-random": ["search", GRAPH, "--searcher", "random", *common],
            "search-random-json": ["search", GRAPH, "--searcher", "random", *common, "--json"],
            "search-nsga2": ["search", GRAPH, "--searcher", "nsga2", *common, "--set", "pop_size=10"],
            "search-tpe": ["search", GRAPH, "--searcher", "optuna-tpe", *common],
            "search-mcmc": ["search", GRAPH, "--searcher", "mcmc", *common],
            "search-checkpoint": ["search", GRAPH, "--searcher", "random", *common,
                                  "--checkpoint", str(wd / "ck.bin")],
            "evaluate": ["evaluate", GRAPH, "--cluster", CLUSTER, *EVALUATE_ALL],
            "evaluate-text": ["evaluate", GRAPH, "--cluster", CLUSTER, "--baseline", "single"],
            "evaluate-front": ["evaluate", GRAPH, "--cluster", CLUSTER, "--strategy", front,
                               "--point", "0", "--json"],
            "compare": ["compare", GRAPH, "--cluster", CLUSTER, "--searchers", "random,heft",
                        "--budget", "20", "--no-mlflow", "--quiet", "--json",
                        "--out", str(wd / "compared"), "--force"],
            "runs": ["runs", "--tracking-uri", uri, "--json"],
            "show": ["show", run[:8], "--tracking-uri", uri, "--json"],
            "show-point": ["show", run, "--tracking-uri", uri, "--point", "0"],
            "sweep-check": ["sweep", str(sweep_file), "--check", "--json", "--no-mlflow"],
            "show-front": ["show", front, "--where", "runtime<=1.05x", "--best",
                           "peak_communication", "--json"],
            "show-all": ["show", front, "--all"],
            "evaluate-front-alone": ["evaluate", front, "--point", "0", "--json"],
        }
        self.junk = mutate.argv_junk(str(existing)) + [front, str(wd), str(binary)]
        searches = ["search-random", "search-nsga2", "search-tpe", "search-mcmc"]
        n = []
        for v in ("pop_size=abc", "pop_size=-3", "pop_size=1e400", f"pop_size={BIG}",
                  "seed_heuristics=abc", "nosuchkey=1", "=1", "pop_size"):
            n.append((f"nsga2 --set {v}", with_option(b["search-nsga2"], "--set", v)))
        n.append(("random --set nosuchkey=1", b["search-random"] + ["--set", "nosuchkey=1"]))
        for s in ("optuna-tpe", "optuna-nsga2"):
            n.append((f"{s} --set storage=foo://bar", with_option(b["search-tpe"], "--searcher", s)
                      + ["--set", "storage=foo://bar"]))
        for v in ("true", "3", "[1]"):  # values --set reads as a bool, a number, a list
            n.append((f"optuna-tpe --set storage={v}", b["search-tpe"] + ["--set", f"storage={v}"]))
        for s in searches + ["compare"]:
            for v in ("-1", BIG):
                n.append((f"{s} --seed {v[:8]}", b[s] + ["--seed", v]))
            for v in ("0", "-5", "abc", ""):
                n.append((f"{s} --budget {v!r}", with_option(b[s], "--budget", v)))
            for v in ("0s", "abc", "0.01s"):  # ("" reads as no --time: 2000 evaluations)
                n.append((f"{s} --time {v!r}", _to_time(b[s], v)))
            n.append((f"{s} --cluster nosuch", with_option(b[s], "--cluster", "nosuch")))
            n.append((f"{s} graph pipedream:nosuch", [b[s][0], "pipedream:nosuch", *b[s][2:]]))
        for v in ("/proc/nope", str(existing), "", "/dev/null", *odd):
            n.append((f"search --out {v[:20]!r}", with_option(b["search-random"], "--out", v)))
        for v in ("/proc/nope", str(existing), ""):
            n.append((f"compare --out {v[:20]!r}", with_option(b["compare"], "--out", v)))
        for v in ("/proc/nope/ck", str(existing), str(wd), "", *odd):
            n.append((f"search --checkpoint {v[:20]!r}",
                      with_option(b["search-random"], "--checkpoint", v)))
        for k in ("search-random", "compare"):
            n.append((f"{k} --tracking-uri bogus://x",
                      _drop(b[k], "--no-mlflow") + ["--tracking-uri", "bogus://x"]))
        damaged = wd / "damaged.db"  # a store whose making was killed part-way, or garbage
        damaged.write_bytes(b"not an SQLite database\n" * 64)
        for k in ("search-random", "compare"):
            n.append((f"{k} --tracking-uri damaged db",
                      _drop(b[k], "--no-mlflow") + ["--tracking-uri", f"sqlite:///{damaged}"]))
        for v in ("nosuch", "", "runtime,runtime", "runtime,,peak_memory"):
            n.append((f"search --objectives {v!r}", b["search-random"] + ["--objectives", v]))
        for v in ("random.batch_size=0", "mcmc.extra_move=1", "mcmc.restarts=best,nosuch"):
            n.append((f"compare --set {v} (out of bounds)",
                      with_option(b["compare"], "--searchers", "random,mcmc") + ["--set", v]))
        for k in ("runs", "show", "show-point"):
            n.append((f"{k} --tracking-uri damaged db",
                      with_option(b[k], "--tracking-uri", f"sqlite:///{damaged}")))
            n.append((f"{k} --tracking-uri bogus://x",
                      with_option(b[k], "--tracking-uri", "bogus://x")))
            n.append((f"{k} --tracking-uri missing db",
                      with_option(b[k], "--tracking-uri", f"sqlite:///{wd / 'nosuch' / 'x.db'}")))
        for v in ("nosuch", "", "hierarchical,nosuch"):
            n.append((f"search --searcher {v!r}",
                      with_option(b["search-random"], "--searcher", v)))
        for v in ("nosuch,random", "", ",", "random,random"):
            n.append((f"compare --searchers {v!r}", with_option(b["compare"], "--searchers", v)))
        for v in ("random.batch_size=abc", "nosuch.x=1", "random.nosuch=1", "batch_size=1"):
            n.append((f"compare --set {v}", b["compare"] + ["--set", v]))
        for k in ("evaluate-front", "show-point"):
            for v in ("99", "-1", BIG):
                n.append((f"{k} --point {v[:8]}", with_option(b[k], "--point", v)))
        for v in ("0", "-1", "abc", BIG):
            n.append((f"runs --limit {v[:8]}", b["runs"] + ["--limit", v]))
        for v in ("nosuch", "", "0" * 40):
            n.append((f"show run {v[:8]!r}", ["show", v, *b["show"][2:]]))
        for g in ("pipedream:nosuch", "dnn:nosuch", "nosuch", "pipedream:", "dnn:",
                  "dnn:resnet50_training", "/proc/nope", str(existing), str(wd), front, "-",
                  *odd):
            n.append((f"evaluate graph {g[-30:]!r}", ["evaluate", g, *b["evaluate"][2:]]))
        for v in ("nosuch", "", "all,single", "ALL"):
            n.append((f"evaluate --baseline {v!r}", with_option(b["evaluate"], "--baseline", v)))
        for v in ("", "/proc/nope", str(existing), str(wd), "nosuch.toml", *odd):
            n.append((f"evaluate --cluster {v[-20:]!r}",
                      with_option(b["evaluate"], "--cluster", v)))
        for v in ("", "/proc/nope", str(existing), str(wd), *odd):
            n.append((f"evaluate --strategy {v[-20:]!r}",
                      with_option(b["evaluate-front"], "--strategy", v)))
        sweep = ["sweep", str(sweep_file), "--no-mlflow", "--json"]
        for extra in (["--workers", "0"], ["--workers", BIG], ["--trials", "0"], ["--on-dask"],
                      ["--dask", "local:0"], ["--dask", "local:x"], ["--storage", "bogus"],
                      ["--storage", f"sqlite:///{wd / 'nosuch' / 'x.db'}"], ["--storage", ""],
                      ["--tracking-uri", "bogus://x"]):
            n.append((f"sweep {' '.join(extra)[:30]}", sweep + extra))
        for v in ("/proc/nope", str(existing), str(wd), "", "nosuch.toml", *odd):
            n.append((f"sweep file {v[-20:]!r}", ["sweep", v, *sweep[2:]]))
        # the TensorFlow commands: refused before TensorFlow loads or a testbed worker starts
        fidelity = ["fidelity", "nosuch.py", "--batch", "8", "--no-mlflow", "--json"]
        for extra in (["--testbed", "0"], ["--testbed", "65"], ["--testbed", BIG], ["--steps", "2"],
                      ["--calibration", "-1"], ["--front-points", "abc"], ["--batch", "0"],
                      ["--rounds", "0"], ["--rounds", "x"], ["--rounds", "3"],
                      ["-o", "/proc/nope/x"], ["-o", str(wd)]):
            n.append((f"fidelity {' '.join(extra)[:30]}", fidelity + extra))
        n.append(("fidelity missing model file", fidelity))
        # a model file that is not Python (its name does not end in .py), found by path or
        # by a bare name in the working folder; --quiet: the error is then the only line
        (workdir / "notes.txt").write_text("Meeting notes\n- try a bigger batch\n")
        for model in (str(existing), str(binary), "notes.txt", str(wd / "nosuch.txt")):
            n.append((f"profile model file {Path(model).name!r}",
                      ["profile", model, "--batch", "2", "--quiet", "-o", str(wd / "g.json")]))
        # a missing model file and syntax errors (issue 48): one line, whichever front end
        for model, text in (("nosuch.py", None), ("keras_syntax.py", "import keras\ndef b(:\n"),
                            ("torch_syntax.py", "import torch\ndef b(:\n"),
                            ("nul.py", "import torch\x00\n")):
            if text is not None:
                (wd / model).write_text(text)
            for command in (["profile", "--batch", "2", "-o", str(wd / "g.json")],
                            ["fidelity", "--batch", "2", "--no-mlflow"]):
                n.append((f"{command[0]} {model}", [command[0], str(wd / model), *command[1:]]))
        for extra in (["--dtype", "bf16"], ["--seq-len", "8"], ["--json"], ["--measure"]):
            n.append((f"profile Keras {extra[0]}",  # a PyTorch option: refused before TF loads
                      ["profile", "mlp", "--batch", "2", "-o", str(wd / "g.json"), *extra]))
        for extra in (["--testbed", "0"], ["--testbed", "2", "--device-count", "2"],
                      ["--testbed", "x"], ["--no-cache"], ["--no-cache", "x"],
                      # the PyTorch front end's options: refused for a Keras model
                      ["--attention", "eager"], ["--attention", "flex"], ["--optimizer", "adam"],
                      ["--calibration", str(existing)], ["--device", "cuda"]):
            n.append((f"profile {' '.join(extra)[:30]}",
                      ["profile", "mlp", "--batch", "4", "-o", str(wd / "g.json"), *extra]))
            n.append((f"apply {' '.join(extra)[:30]}",
                      ["apply", GRAPH, "--baseline", "single", "--steps", "1", *extra]))
        # mixture-of-experts routing (issue 49): a bad value, or a model without experts, is
        # one line before anything is built or traced
        moe = ["profile", "hf:mixtral-8x7b", "--batch", "1", "--seq-len", "64", "--quiet",
               "-o", str(wd / "moe.json")]
        for extra in (["--routing", "zipf"], ["--capacity-factor", "0"],
                      ["--capacity-factor", "-1"], ["--capacity-factor", "inf"],
                      ["--capacity-factor", "abc"], ["--capacity-factor", "2000"],
                      ["--imbalance", "1"], ["--imbalance", "nan"], ["--imbalance", "5"],
                      ["--routing", "balanced", "--imbalance", "2"]):
            n.append((f"profile moe {' '.join(extra)[:30]}", moe + extra))
        for model in ("hf:gpt2", "mlp"):
            n.append((f"profile {model} --routing skewed",
                      ["profile", model, "--batch", "2", "--routing", "skewed", "--quiet",
                       "-o", str(wd / "moe.json")]))
        # the per-device memory cap (issue 32): not a size, and one no strategy fits under
        n.append(("search --memory-limit 0", b["search-random"] + ["--memory-limit", "0"]))
        n.append(("evaluate --memory-limit 1KiB", b["evaluate"] + ["--memory-limit", "1KiB"]))
        # (issue 48) below the floor no plan goes under, negative in both spellings, above
        # every device's memory (a warning), and one under which nothing is found (exit 3)
        for k in ("search-random", "compare", "evaluate"):
            n.append((f"{k} --memory-limit 10MB", b[k] + ["--memory-limit", "10MB"]))
            n.append((f"{k} --memory-limit -4GB", b[k] + ["--memory-limit", "-4GB"]))
            n.append((f"{k} --memory-limit=-4GB", b[k] + ["--memory-limit=-4GB"]))
        n.append(("search --memory-limit 1PiB", b["search-random"] + ["--memory-limit", "1PiB"]))
        n.append(("search --memory-limit 200MB", b["search-random"] + ["--memory-limit", "200MB"]))
        # a cluster that is no preset, named by its devices (issue 48); an --out folder the
        # refused command must not leave behind
        for v in ("8xH100", "16xh100", "8xMI300", "x" * 200):
            n.append((f"evaluate --cluster {v[:10]!r}",
                      with_option(b["evaluate"], "--cluster", v)))
        n.append(("clusters --all", ["clusters", "--all"]))
        n.append(("clusters extra word", ["clusters", "8xH100"]))
        n.append(("search --cluster 8xH100 --out new folder",
                  with_option(with_option(b["search-random"], "--cluster", "8xH100"), "--out",
                        str(wd / "refused" / "out"))))
        # an optimizer for a graph without update ops, and one that does not exist
        n.append(("evaluate --optimizer adam, no update ops",
                  ["evaluate", "dnn:LayerGraphs/gnmt_training", "--cluster", CLUSTER,
                   "--baseline", "single", "--optimizer", "adam"]))
        n.append(("evaluate --optimizer lion", b["evaluate"] + ["--optimizer", "lion"]))
        n.append(("evaluate --optimizer adam-mixed --json",
                  b["evaluate"] + ["--optimizer", "adam-mixed", "--json"]))
        # micro-batches (issue 33): none, too many, a fraction, a schedule that does not exist
        for value in ("0", "2000", "2.5", "-1"):
            n.append((f"evaluate --micro-batches {value}",
                      b["evaluate"] + ["--micro-batches", value]))
        n.append(("evaluate --micro-batches 4 --schedule gpipe --json",
                  b["evaluate"] + ["--micro-batches", "4", "--schedule", "gpipe", "--json"]))
        n.append(("evaluate --schedule interleaved", b["evaluate"] + ["--schedule", "interleaved"]))
        # the schedules of fixed actions and FP8 (issue 49): a layout that is not round-robin,
        # micro-batches Megatron's rule refuses, FP8 on V100s and on a graph naming no matmuls
        for extra in (["--baseline", "round-robin", "--micro-batches", "4", "--schedule",
                       "interleaved"],
                      ["--baseline", "layer-split", "--micro-batches", "3", "--schedule",
                       "zero-bubble", "--json"],
                      ["--baseline", "layer-split", "--micro-batches", "4", "--schedule",
                       "zero-bubble", "--json"],
                      ["--baseline", "single", "--fp8", "all"], ["--baseline", "single",
                                                                  "--fp8", "half"]):
            n.append((f"evaluate {' '.join(extra)[:40]}",
                      ["evaluate", GRAPH, "--cluster", CLUSTER, *extra]))
        # context parallelism (issue 49): on a graph of no fused attention, over more devices
        # than the cluster has, a degree or a way that does not exist, --cp-comm alone
        for extra in (["--context-parallel", "2"], ["--context-parallel", "0"],
                      ["--context-parallel", "99"], ["--context-parallel", "x"],
                      ["--cp-comm", "a2a"], ["--context-parallel", "2", "--cp-comm", "ulysses"]):
            n.append((f"evaluate {' '.join(extra)[:40]}", ["evaluate", GRAPH, "--cluster",
                                                          CLUSTER, "--baseline", "data-parallel",
                                                          *extra]))
        # regular plans at scale (issue 50): degrees that do not parse or do not fit, pods
        # that are not, and a pod given to a command that places ops
        for plan in ("", "tp", "tp=", "tp=x", "tp=1,tp=2", "nosuch=1", "tp=0,pp=1,dp=4,mbs=1,gbs=4",
                     "tp=1,pp=1,dp=4", "tp=1,pp=1,dp=4,mbs=1,gbs=4", "tp=1,pp=3,dp=1,mbs=1,gbs=1",
                     "tp=1,pp=1,dp=1,mbs=1,gbs=1,zero=9", "tp=1,pp=1,dp=1,mbs=1,gbs=1,ep=2",
                     "tp=1,pp=1,dp=1,mbs=1,gbs=1,precision=fp4", "tp=99999999999,pp=1,dp=1,mbs=1,gbs=1",
                     "tp=1,pp=1,dp=1,mbs=1,gbs=1,v=2", "tp=1,,pp=1",
                     "tp=1,pp=1,dp=1,mbs=1,gbs=1,tp_overlap=2", "tp=1,pp=1,dp=1,mbs=1,gbs=1,grad_fp32=x",
                     # virtual stages with uneven first and last ones that cannot share
                     "tp=1,pp=2,v=3,dp=1,mbs=1,gbs=2,first=1,last=1",
                     "tp=1,pp=2,v=2,dp=1,mbs=1,gbs=2,first=99,last=0",
                     # a profile file's graph names no tokens (its source a name, not a table)
                     "tp=1,pp=1,dp=8,mbs=256,gbs=2048,tp_overlap=1,grad_fp32=1"):
            for cl in ("pod:V100:8", "pod:H100:8", "pod:H100:12", "pod:H100:99999999", "pod:",
                       CLUSTER):
                n.append((f"evaluate --plan {plan[:24]!r} {cl}", ["evaluate", GRAPH, "--cluster",
                                                                cl, "--plan", plan]))
        n.append(("evaluate pod baseline", ["evaluate", GRAPH, "--cluster", "pod:H100:16",
                                            "--baseline", "all"]))
        # a search at scale (issue 50, part 3): what a pod's search cannot take, a --gbs or
        # --workers without a pod, and a regular front whose points are damaged
        pod_search = ["search", GRAPH, "--cluster", "pod:H100:8", "--space", "megatron",
                      "--gbs", "2048", "--searcher", "random", "--budget", "2", "--out",
                      str(wd / "pod-search")]
        n.append(("search on a pod", pod_search))
        for extra in (["--searcher", "heft"], ["--space", "any"], ["--gbs", "0"],
                      ["--gbs", "x"], ["--gbs", "100"], ["--workers", "0"],
                      ["--checkpoint", str(wd / "pod.ckpt")], ["--set", "nosuch=1"],
                      ["--dask", "local:2"], ["--searcher", "mcmc"],
                      ["--searcher", "optuna-tpe"], ["--searcher", "optuna-cmaes"],
                      # other micro-batch sizes' graphs: none, the same graph, not a graph
                      ["--micro-batch-graphs", str(wd / "nosuch.json")],
                      ["--micro-batch-graphs", GRAPH], ["--micro-batch-graphs", ","],
                      ["--micro-batch-graphs", str(wd)],
                      # precisions: one not searched, none, both
                      ["--precision", "fp8"], ["--precision", ","],
                      ["--precision", "fp16,bf16"]):
            n.append((f"search on a pod {' '.join(extra)[:30]}",
                      with_option(pod_search, extra[0], extra[1])))
        n.append(("search --gbs on a listed cluster", b["search-random"] + ["--gbs", "8"]))
        n.append(("search --micro-batch-graphs on a listed cluster",
                  b["search-random"] + ["--micro-batch-graphs", GRAPH]))
        n.append(("search --precision on a listed cluster",
                  b["search-random"] + ["--precision", "fp16"]))
        regular = {"format": "moplace-front", "version": 3, "kind": "regular",
                   "objectives": ["runtime"], "graph": "g", "cluster": "pod:H100:8",
                   "points": [{"runtime_s": 1.0, "feasible": True, "violation_bytes": 0.0,
                               "regular": {"spec": "tp=1,pp=1,dp=8,mbs=1,gbs=8",
                                           "text": "TP1 PP1 DP8", "summary": "TP1 PP1 DP8"}}]}
        for name, damage in (("no spec", {"spec": None}), ("bad spec", {"spec": "tp=x"}),
                             ("no regular", None), ("graphs not paths", "micro_batch_graphs")):
            bad = json.loads(json.dumps(regular))
            if damage is None:
                bad["points"][0]["regular"] = "TP1"
            elif isinstance(damage, str):
                bad[damage] = {"1": 7}
            else:
                bad["points"][0]["regular"].update(damage)
            path = wd / f"regular-front-{name.replace(' ', '-')}.json"
            path.write_text(json.dumps(bad))
            for argv in (["export", str(path), "--point", "0"], ["show", str(path)]):
                n.append((f"regular front {name}: {argv[0]}", argv))
        # questions asked of a front (issue 34): constraints and goals that do not parse,
        # name no objective or leave nothing; a --save path that cannot be written
        for v in ("runtime", "runtime<=", "runtime=1s", "runtime<=abc", "runtime<=1GiB",
                  "peak_memory<=16GHz", "nosuch<=1", "runtime<=-1x", "runtime<=1e400",
                  "runtime<=nan", "peak_memory<=1B", "", "<=1", "runtime<=1.05xx"):
            n.append((f"show --where {v!r}", with_option(b["show-front"], "--where", v)))
        for v in ("nosuch", "", "knees", "RUNTIME"):
            n.append((f"show --best {v!r}", with_option(b["show-front"], "--best", v)))
        for v in ("/proc/nope/f.json", str(existing), str(wd), "", *odd):
            n.append((f"show --save {v[-20:]!r}", b["show"] + ["--save", v]))
        for v in (str(existing), str(binary), "/proc/nope.json", str(wd / "nosuch.json")):
            n.append((f"show front file {v[-20:]!r}", ["show", v, "--best", "runtime"]))
        n.append(("search --all", b["search-random"] + ["--all"]))
        # a front.json alone names the graph and cluster (issue 34): and when it cannot
        for argv in (["evaluate"], ["evaluate", GRAPH], ["evaluate", front],
                     ["evaluate", front, "--point", "99"], ["evaluate", front, "--baseline", "all"],
                     ["evaluate", "--strategy", str(existing), "--point", "0"],
                     ["evaluate", "--strategy", str(binary)], ["evaluate", str(binary)],
                     ["evaluate", "--strategy", str(wd / "nosuch.json")]):
            n.append((" ".join(a[-12:] for a in argv), argv))
        # numbers JSON should not hold (Python's json reads them) in each numeric field of a
        # strategy file: a micro-batch count of Infinity once raised OverflowError (issue 49)
        plan = json.loads(Path(front).read_text())["points"][0]["strategy"]
        op = next(iter(plan["placement"]))
        for v in ("Infinity", "-Infinity", "NaN", "1e400", "4.5"):
            for field in ("micro_batches", "bucket_bytes", "zero_stage", "schedule", "fp8",
                          "priority", "placement", "version"):
                bad = json.loads(json.dumps(plan))
                if field in ("priority", "placement"):
                    bad[field][op] = float(v)
                elif field == "version":
                    bad[field] = float(v)
                else:
                    bad.setdefault("options", {})[field] = float(v)
                path = wd / f"nonfinite-{field}-{v}.strategy.json"
                path.write_text(json.dumps(bad))
                n.append((f"strategy {field} {v}", ["evaluate", GRAPH, "--cluster", CLUSTER,
                                                    "--strategy", str(path), "--json"]))
        # a front point exported as the plan a user trains with (issue 35): points, files
        # and formats that are not there
        for argv in (["export"], ["export", front], ["export", front, "--point", "99"],
                     ["export", str(existing)], ["export", str(binary)],
                     ["export", front, "--point", "0", "--format", "nosuch"],
                     ["export", front, "--point", "0", "--format", "megatron"],
                     ["export", front, "--point", "0", "-o", str(existing)],
                     ["export", front, "--point", "0", "-o", str(wd)],
                     ["export", front, "--point", "0", "-o", "/proc/nope/plan.json"]):
            n.append((" ".join(a[-12:] for a in argv), argv))
        for name, argv in b.items():  # an empty string for every value
            for k in range(1, len(argv)):
                if not argv[k].startswith("--"):
                    n.append((f"{name}: token {k} ({argv[k - 1]}) empty",
                              argv[:k] + [""] + argv[k + 1:]))
        self.named = n

    def case(self, rng, i) -> Case:
        if i < len(self.named):
            name, argv = self.named[i]
            return Case(list(argv), mutations=(name,), seed_name="named")
        base = rng.choice(sorted(self.bases))
        argv = list(self.bases[base])
        searcher = argv[argv.index("--searcher") + 1] if "--searcher" in argv else None
        if searcher in SETTINGS and rng.random() < 0.35:
            key = rng.choice(SETTINGS[searcher])
            value = rng.choice(SET_JUNK)
            argv += ["--set", f"{key}={value}"]
            names = [f"--set {key}={value[:12]}"]
        else:
            argv, names = mutate.mutate_argv(argv, rng, self.junk)
        return Case(_bounded(argv), mutations=tuple(names), seed_name=base)


def _bounded(argv):
    """A search or compare stays short: a valid but long --budget or --time becomes small
    (a long search is no hang), and a lost budget is given back."""
    from moplace.cli.search import parse_seconds

    if not argv or argv[0] not in ("search", "compare"):
        return argv
    argv = list(argv)
    for k, tok in enumerate(argv[:-1]):
        nxt = argv[k + 1]
        if tok == "--budget":
            with contextlib.suppress(ValueError):
                if int(nxt) > 200:
                    argv[k + 1] = "20"
        elif tok == "--time":
            with contextlib.suppress(Exception):  # a bad time is the case under test
                if parse_seconds(nxt) > 3:
                    argv[k + 1] = "1s"
    if "--budget" not in argv and "--time" not in argv:
        argv += ["--budget", "20"]
    return argv


SWEEP_TOML = """\
[sweep]
name = "fuzz"
sampler = "random"
trials = 3
returns = ["hypervolume", "best_runtime_within_memory"]
heartbeat_seconds = 2

[fixed]
graph = "pipedream:alexnet"
budget = 20

[space]
searcher = ["random", "mcmc"]
devices = { low = 1, high = 8 }
link_bandwidth_gbps = { low = 1.0, high = 300.0, log = true }
memory_limit_gib = [2, 8.5]
"random.batch_size" = { low = 4, high = 64, step = 4 }
"mcmc.temperature" = [0.001, 0.01]
"""


class SweepToml(FileFormat):
    """Sweep files, checked with ``sweep --check`` (a valid one would run searches)."""

    ext, table = "toml", mutate.TOML_MUTATIONS

    def make_seeds(self):
        folder = Path(__file__).resolve().parents[2] / "experiments" / "sweeps"
        nested = SWEEP_TOML.replace('returns = ["hypervolume", "best_runtime_within_memory"]',
                                    'returns = [["hypervolume"], "best_runtime"]')
        return [("hand-written", SWEEP_TOML.encode()),
                ("returns nested in a list (a traceback once)", nested.encode())] + [
            (f"example {p.name}", p.read_bytes()) for p in sorted(folder.glob("*.toml"))]

    def command(self, rng):
        return ["sweep", "{input}", "--check", "--json", "--no-mlflow"]


# -- PyTorch model files and Hugging Face config.json files (issue 48) --------------------------
#: a small PyTorch model file; torch is imported twice, so that one dropped line leaves it a
#: PyTorch file (a file without the import is a Keras one: `arguments` covers those)
TORCH_MODEL = """\
import torch
from torch import nn


def build(batch_size):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(),
                          nn.LayerNorm(32), nn.Linear(32, 10))
    x = torch.randn(batch_size, 16)
    y = torch.randint(0, 10, (batch_size,))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, nn.CrossEntropyLoss(), optimizer, (x, y)
"""
TORCH_SHAPE_ERROR = TORCH_MODEL.replace("nn.Linear(32, 32)", "nn.Linear(64, 32)")


class TorchModel(FileFormat):
    """PyTorch model files, profiled (traced under fake tensors; nothing cached)."""

    ext, table = "py", mutate.PYTHON_MUTATIONS

    def make_seeds(self):
        return [("mlp", TORCH_MODEL.encode()), ("shape error", TORCH_SHAPE_ERROR.encode()),
                ("syntax error", TORCH_MODEL.replace("(batch_size):", "(batch_size:").encode())]

    def command(self, rng):
        return ["profile", "{input}", "--batch", "2", "--no-cache", "--quiet", "--force",
                "-o", str(self.workdir / "torch-graph.json")]


HF_CONFIGS = {
    "llama": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 500, "max_position_embeddings": 64, "torch_dtype": "bfloat16",
              "rms_norm_eps": 1e-5, "tie_word_embeddings": False},
    "qwen2": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 500, "max_position_embeddings": 64, "dtype": "float32",
              "attn_implementation": "eager"},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
             "vocab_size": 500},
}


class HfConfig(FileFormat):
    """config.json files given as hf:PATH, read and checked by `profile`: a valid one gets
    as far as the output file, which exists (no --force), so nothing is traced here
    (tests/test_torch_hf.py traces valid ones)."""

    ext, json_share = "json", 0.8

    def make_seeds(self):
        (self.workdir / "hf-graph.json").write_text("{}")
        return [(name, json.dumps(config, indent=1).encode())
                for name, config in HF_CONFIGS.items()]

    def command(self, rng):
        return ["profile", "hf:{input}", "--batch", "2", "--quiet",
                "-o", str(self.workdir / "hf-graph.json")]


def make_format(name: str, workdir: Path):
    kinds = {"pipedream": PipeDream, "dnn-partitioning": DnnPartitioning, "native": Native,
             "cluster": ClusterToml, "strategy": StrategyJson, "front": FrontJson,
             "sweep": SweepToml, "arguments": Arguments, "torch-model": TorchModel,
             "hf-config": HfConfig}
    if name not in kinds:
        raise ValueError(f"unknown format {name!r}; formats: {', '.join(FORMATS)}")
    return kinds[name](Path(workdir))
