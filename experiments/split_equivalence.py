"""Do split strategies, rewritten into the real training step, compute the same step?

    python3 experiments/split_equivalence.py [--models cnn mlp ...] [--batch 6] [--out FILE]

For every op type the genome may split (tests/models/splitops.py holds all ten) on batch and
on channel, and for each zoo model with every splittable op split on batch, on channel, and
data parallelism (and with the optimizer state partitioned over the devices), with recomputed
groups (every other, every one; on one device and layer-split on two), and with micro-batches
(2 on one device, 2 and 3 layer-split on two, 2 with data parallelism or every op split on
channel, 2 layer-split with every other group recomputed; BatchNorm then normalises each
micro-batch on its own, as in GPipe): one training step of the rewritten graph against the
original step on one device. Prints the largest absolute difference of the loss and of the updated
weights (every variable: weights and optimizer state), and the largest difference of a
weight's update relative to the largest update of that variable.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import moplace.tf  # noqa: F401  (TensorFlow's environment before anything imports it)

SPLITOPS = str(Path(__file__).resolve().parents[1] / "tests" / "models" / "splitops.py")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+",
                   default=["splitops", "mlp", "cnn", "transformer", "gnmt", "mobilenet_v2"])
    p.add_argument("--batch", type=int, default=6)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "local"
    p.add_argument("--out", default=f"experiments/results/split-equivalence-{rev}.txt")
    args = p.parse_args(argv)
    import numpy as np

    from moplace import simulate
    from moplace.core.baselines import (data_parallel, layer_split, partition_optimizer_state,
                                        topological_priority)
    from moplace.core.recompute import recomputable_heads
    from moplace.core.strategy import Split, Strategy
    from moplace.tf.apply import placed_graph_def
    from moplace.tf.convert import to_op_graph
    from moplace.tf.devices import available_devices, host_cluster
    from moplace.tf.frontend import trace_model
    from moplace.tf.session import StepRunner
    from moplace.tf.splitrules import SplitRefused

    devices = available_devices(2)
    lines = [f"{'model':<14} {'strategy':<42} {'ops':>4} {'max |d loss|':>13} "
             f"{'max |d weight|':>15} "
             f"{'max rel d update':>17}"]
    print(lines[0], flush=True)
    for name in args.models:
        traced = trace_model(SPLITOPS if name == "splitops" else name, args.batch)
        graph = to_op_graph(traced, {}, "cpu")
        cluster = host_cluster(devices)
        with StepRunner(traced) as runner:
            before = runner.variable_values()
            loss = runner.step().loss
            after = runner.variable_values()

        def every(dim, types=None):
            splits = {i: Split(dim, (0, 1)) for i, op in enumerate(graph.ops)
                      if op.splittable and (types is None or op.type in types)}
            return Strategy(np.zeros(len(graph.ops), np.int64), topological_priority(graph), splits)

        cases = []
        if name == "splitops":
            for t in sorted({op.type for op in graph.ops if op.splittable}):
                cases += [(f"{t} on {d}", every(d, {t})) for d in ("batch", "channel")]
        cases += [("every splittable op on batch", every("batch")),
                  ("every splittable op on channel", every("channel")),
                  ("data parallel", data_parallel(graph, 2))]
        dp = data_parallel(graph, 2)  # ZeRO-1 as TensorFlow shards it: by parameter
        cases.append(("data parallel, optimizer state partitioned",
                      partition_optimizer_state(graph, dp, 2)))
        heads = recomputable_heads(graph)
        if heads.size:  # recomputation (issue 32): clones of forward ops feed the backward
            one = Strategy(np.zeros(len(graph.ops), np.int64), topological_priority(graph))
            cases += [("every other group recomputed", one.with_recompute(heads[::2])),
                      ("every group recomputed", one.with_recompute(heads)),
                      ("layer-split, every other recomputed",
                       layer_split(graph, 2).with_recompute(heads[1::2]))]
        if args.batch % 2 == 0:  # micro-batches (issue 33): copies per micro-batch, accumulated
            one = Strategy(np.zeros(len(graph.ops), np.int64), topological_priority(graph))
            cases += [("2 micro-batches, 1F1B (gradient accumulation)",
                       one.with_options(micro_batches=2)),
                      ("layer-split, 2 micro-batches, GPipe",
                       layer_split(graph, 2).with_options(micro_batches=2, schedule=1))]
            if args.batch % 3 == 0:
                cases.append(("layer-split, 3 micro-batches, 1F1B",
                              layer_split(graph, 2).with_options(micro_batches=3)))
            cases += [("data parallel, 2 micro-batches (hybrid)",
                       data_parallel(graph, 2).with_options(micro_batches=2)),
                      ("every op on channel, 2 micro-batches, GPipe",
                       every("channel").with_options(micro_batches=2, schedule=1))]
            if heads.size:
                cases.append(("layer-split, 2 micro-batches, every other rec.",
                              layer_split(graph, 2).with_options(micro_batches=2)
                              .with_recompute(heads[1::2])))
        for label, s in cases:
            try:
                gd, _ = placed_graph_def(traced, graph, s, simulate(graph, cluster, s), devices)
            except SplitRefused as exc:  # not expressible on the testbed: say so, go on
                line = f"{name:<14} {label:<42} refused: {exc}"
                print(line, flush=True)
                lines.append(line)
                continue
            with StepRunner(traced, gd) as runner:
                got_loss = runner.step().loss
                values = runner.variable_values()
            dw = max(float(np.max(np.abs(values[k] - after[k]))) for k in after)
            rel = max(float(np.max(np.abs((values[k] - before[k]) - (after[k] - before[k]))))
                      / max(float(np.max(np.abs(after[k] - before[k]))), 1e-30) for k in after)
            line = (f"{name:<14} {label:<42} {len(s.splits) + len(s.recompute):>4} "
                    f"{abs(got_loss - loss):>13.3g} "
                    f"{dw:>15.3g} {rel:>17.3g}")
            print(line, flush=True)
            lines.append(line)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
