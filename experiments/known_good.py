"""Do moplace's fronts hold the plans practitioners run (issue 35)?

    python3 experiments/known_good.py [--models hf:gpt3-1.3b hf:llama-3-8b]
        [--clusters 8xH100-80GB-NVLink 2x8xH100-80GB-8xIB400] [--evaluations 2000] [--seq-len N]
        [--withheld-only] [--json FILE]

For each model (bf16, AdamW; GPT-3 1.3B at 2,048 tokens, Llama 3 8B at 4,096, one sequence
per GPU) and cluster, the configurations people train such models with are built and simulated:

- ``DDP``: data parallelism, 25 MiB gradient buckets;
- ``ZeRO-1``: the same, optimizer state sharded;
- ``FSDP``: ZeRO-3 (weights, gradients and state sharded, weights gathered before each use),
  and ``FSDP + layers checkpointed`` (activation checkpointing per layer: every group
  recomputed but the layer boundaries found from the graph's repeated structure);
- ``TP=8 + SP``: Megatron-LM tensor parallelism with sequence parallelism over one server's 8
  GPUs (on 16 GPUs: only the first server's), and ``TP=8 + SP, selective recompute`` (each
  attention's core recomputed, Korthikanti et al. 2022);
- not built yet: TP = 8 in each server with the layers pipelined across servers (a stage
  cut by `layer_split` puts a layer's backward-only groups on the other stage).

Then nsga2 searches ``--evaluations`` strategies twice: seeded as usual, and with the baselines
withheld from the seeds (``seed_baselines=false``: the list schedulers' plans and the
single-device ones only). Each configuration is then either *on* the front (its objectives
equal a front point's), *dominated* by a front point (no worse in every objective: which one),
or *neither*; infeasible configurations (over the GPUs' memory) are said so. Deterministic for
a seed. Minutes per model and cluster on 2 cores (Llama 3 8B's trace is 5,000 ops).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import moplace  # noqa: E402
from moplace.core.baselines import baseline  # noqa: E402
from moplace.core.recompute import attention_cores, layer_checkpoints  # noqa: E402
from moplace.review.units import plan_text  # noqa: E402
from moplace.core.levers import plan_of  # noqa: E402

MODELS = {"hf:gpt3-1.3b": 2048, "hf:llama-3-8b": 4096}
CLUSTERS = ("8xH100-80GB-NVLink", "2x8xH100-80GB-8xIB400")


def configurations(graph, cluster) -> dict:
    """The configurations people run (module docstring), by name."""
    n = cluster.n_devices
    dp = baseline("data-parallel", graph, n)
    out = {"DDP": dp, "ZeRO-1": dp.with_options(zero_stage=1),
           "FSDP": dp.with_options(zero_stage=3),
           "FSDP + layers checkpointed": dp.with_options(zero_stage=3).with_recompute(
               layer_checkpoints(graph))}
    tp = moplace.core.baselines.on_devices("tensor-parallel", graph, range(min(n, 8)))
    out["TP=8 + SP"] = tp
    out["TP=8 + SP, selective recompute"] = tp.with_recompute(attention_cores(graph))
    return out


def verdict(ev, front) -> str:
    """On the front, dominated by a front point (which), or neither."""
    if not ev.feasible:
        return "infeasible"
    v = ev.values
    for k, p in enumerate(front):
        if np.allclose(p.values, v, rtol=1e-9, atol=0):
            return f"on the front (#{k})"
    for k, p in enumerate(front):
        if np.all(p.values <= v * (1 + 1e-9)):
            return f"dominated by #{k}"
    return "neither"


def row(name, ev) -> str:
    o = ev.objectives()
    return (f"{name:34s} {o['runtime'] * 1e3:10.1f} ms {o['peak_communication'] / 2**30:8.2f} GiB "
            f"{o['peak_memory'] / 2**30:8.2f} GiB  {'yes' if ev.feasible else 'no '}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--clusters", nargs="+", default=list(CLUSTERS))
    ap.add_argument("--evaluations", type=int, default=2000)
    ap.add_argument("--seq-len", type=int, help="tokens per sequence (default: 2048 for "
                    "GPT-3 1.3B, 4096 for Llama 3 8B)")
    ap.add_argument("--withheld-only", action="store_true",
                    help="search only with the baselines withheld from the seeds")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    report = []
    for model in args.models:
        seq = args.seq_len or MODELS.get(model, 2048)
        for preset in args.clusters:
            cluster = moplace.load_cluster(preset)
            t0 = time.perf_counter()
            from moplace.torch.frontend import profile_torch_model

            traced = profile_torch_model(model, cluster.n_devices, [cluster.kinds[0]],
                                         seq_len=seq, dtype="bf16")
            graph = traced.graph
            print(f"\n{model} ({traced.parameters / 1e9:.2f} G parameters, {len(graph.ops)} "
                  f"ops, traced in {time.perf_counter() - t0:.1f} s), {cluster.n_devices} "
                  f"sequences of {seq} tokens on {preset}")
            problem = moplace.Problem(graph, cluster)
            known = {name: problem.evaluate(s) for name, s in configurations(graph,
                                                                               cluster).items()}
            print(f"{'configuration':34s} {'runtime':>13s} {'peak comm':>12s} "
                  f"{'peak memory':>12s}  fits")
            for name, ev in known.items():
                print(row(name, ev))
            runs = ([("withheld", False)] if args.withheld_only
                    else [("seeded", True), ("withheld", False)])
            entry = {"model": model, "cluster": preset, "ops": len(graph.ops),
                     "known": {k: ev.as_dict() for k, ev in known.items()}, "searches": {}}
            for label, seeded in runs:
                t1 = time.perf_counter()
                searcher = moplace.make_searcher("nsga2", seed_baselines=seeded)
                result = moplace.search(problem, searcher, budget=args.evaluations, seed=0)
                front = sorted(result.front, key=lambda p: float(p.values[0]))
                secs = time.perf_counter() - t1
                how = "baselines among the seeds" if seeded else "baselines withheld"
                print(f"\nnsga2, {label} ({how}): {result.n_evaluations} evaluations in "
                      f"{secs:.1f} s, {len(front)} points")
                for k, p in enumerate(front[:12]):
                    print(row(f"  #{k}", p.evaluation) + "  " + plan_text(plan_of(p.strategy,
                                                                                  graph)))
                verdicts = {name: verdict(ev, front) for name, ev in known.items()}
                for name, v in verdicts.items():
                    print(f"  {name:32s} {v}")
                entry["searches"][label] = {
                    "seconds": secs, "evaluations": result.n_evaluations,
                    "front": [p.evaluation.as_dict() for p in front], "verdicts": verdicts}
            report.append(entry)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
