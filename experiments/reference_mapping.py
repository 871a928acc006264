"""Is Megatron-Core's published reference mapping on moplace's front, or dominated in its model?

Megatron-Core's MoE README (NVIDIA/Megatron-LM ``megatron/core/transformer/moe/README.md``
before commit 0888a06, MCore v0.8) gives as the "Reference Best Parallel Mapping" for Mixtral
8x7B on 64 H100s (8-GPU servers, 8 x 400G InfiniBand each): TP1 EP8 PP4 with 8 virtual
stages, micro-batch 1, global batch 256, sequence 4096; its example runs the distributed
optimizer with the gradient reduction and weight gather overlapped, no recomputation, BF16.

This walks every regular plan of the Megatron space of the graph on the pod at that global
batch (`moplace.core.regularspace.RegularSpace`), so the front is exact over the space and no
seed is involved: the reference is one plan of the space like any other. A plan whose weights,
gradients and optimizer state alone (its static memory, counted from the replica's graph)
exceed the GPUs' memory cannot be feasible; it is counted, not simulated. Every other plan is
evaluated at scale (`moplace.simulator.atscale`: one replica simulated, the data-parallel
collectives modelled). Prints the front, where the reference stands, and what it took.

    python3 experiments/reference_mapping.py GRAPH [--gpus 64] [--gbs 256] [--workers 2]
        [--reference "tp=1,ep=8,pp=4,v=8,dp=16,mbs=1,gbs=256"] [--out FILE]

GRAPH: Mixtral 8x7B traced at one sequence of 4,096 tokens
(``moplace profile hf:mixtral-8x7b --batch 1 --seq-len 4096 --dtype bf16 --estimate H100``).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np

REFERENCE = "tp=1,ep=8,pp=4,v=8,dp=16,mbs=1,gbs=256,zero=1,recompute=none"


_STATE: dict = {}


def _init(graph_path: str, cluster: str, max_tasks: int) -> None:
    from moplace.core.pod import load_target
    from moplace.io import load_graph

    _STATE["graph"] = load_graph(graph_path)
    _STATE["pod"] = load_target(cluster)
    _STATE["max_tasks"] = max_tasks


def _tasks(graph, plan) -> int:
    """An upper bound of the replica's compute tasks: every op once per micro-batch and part."""
    return plan.micro_batches * len(graph.ops) * plan.tp * plan.cp


def _evaluate(spec: str):
    from moplace.core.regular import parse_plan
    from moplace.optimize.regularsearch import static_bytes
    from moplace.simulator.atscale import evaluate_regular

    g, pod = _STATE["graph"], _STATE["pod"]
    plan = parse_plan(spec)
    t0 = time.perf_counter()
    if static_bytes(g, plan, pod) > pod.memory_bytes:
        return spec, None, 0.0
    if _tasks(g, plan) > _STATE["max_tasks"]:
        return spec, "too big", 0.0
    ev = evaluate_regular(g, pod, plan)
    return spec, (ev.values.tolist(), ev.feasible, ev.tokens_per_s_per_gpu), \
        time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph")
    ap.add_argument("--cluster", default=None, help="default: pod:H100:GPUS")
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--gbs", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reference", default=REFERENCE)
    ap.add_argument("--out", default=None)
    ap.add_argument("--max-tasks", type=int, default=10**12,
                    help="leave out plans whose replica has more compute tasks than this "
                         "(micro-batches x ops x tp x cp; about 1.2 KB of memory each while "
                         "simulated): counted, not simulated")
    ap.add_argument("--framework-levers", action="store_true",
                    help="with Megatron's own ways (FP32 gradients, TP overlap: "
                         "moplace.core.regularspace.FRAMEWORK_LEVERS); the recorded results "
                         "were measured before they were modelled, without them")
    args = ap.parse_args(argv)
    from moplace.core.regular import parse_plan
    from moplace.core.regularspace import RegularSpace
    from moplace.io import load_graph
    from moplace.optimize.archive import no_worse
    from moplace.review.units import fmt, fmt_duration

    cluster = args.cluster or f"pod:H100:{args.gpus}"
    graph = load_graph(args.graph)
    reference = parse_plan(args.reference
                           + (",grad_fp32=1,tp_overlap=1" if args.framework_levers else ""))
    if reference.tp == 1:
        reference = replace(reference, tp_overlap=0)
    plans = RegularSpace(graph, args.gpus, args.gbs, levers=args.framework_levers).all()
    # plans that share a replica graph (micro-batches, EP, ZeRO) one after another, the
    # cheapest first (the simulator keeps the last two replica graphs)
    plans.sort(key=lambda p: (p.micro_batches * p.tp * p.cp, p.ep, p.zero, p.spec()))
    specs = [p.spec() for p in plans]
    if reference.spec() not in specs:
        print(f"the reference {reference.text()} is not a plan of the space", file=sys.stderr)
        return 2
    lines = [f"{graph.name} on {cluster}, global batch {args.gbs}: {len(plans)} regular plans "
             f"of the Megatron space"]
    t0 = time.perf_counter()
    results, done = {}, 0
    with ProcessPoolExecutor(args.workers, initializer=_init,
                             initargs=(args.graph, cluster, args.max_tasks)) as pool:
        for spec, res, _ in pool.map(_evaluate, specs, chunksize=1):
            results[spec] = res
            done += 1
            if done % 100 == 0:
                print(f"  {done}/{len(specs)} in {fmt_duration(time.perf_counter() - t0)}",
                      file=sys.stderr, flush=True)
    took = time.perf_counter() - t0
    skipped = sum(r is None for r in results.values())
    big = sum(r == "too big" for r in results.values())
    feasible = {s: r for s, r in results.items() if isinstance(r, tuple) and r[1]}
    lines.append(f"evaluated {len(plans) - skipped - big} (the other {skipped} hold more "
                 f"weights, gradients and optimizer state than a GPU's memory"
                 + (f", and {big} replicas of over {args.max_tasks:,} tasks were left out"
                    if big else "") + f"); {len(feasible)} fit; "
                 f"{fmt_duration(took)} on {args.workers} worker{'s' if args.workers > 1 else ''}")
    vals = {s: np.array(r[0]) for s, r in feasible.items()}
    keys = list(vals)
    mat = np.array([vals[k] for k in keys])
    front = [k for i, k in enumerate(keys)
             if not any(no_worse(mat[j], mat[i]).all() and (mat[j] < mat[i]).any()
                        for j in range(len(keys)) if j != i)]
    front.sort(key=lambda k: vals[k][0])
    lines.append(f"\nthe front ({len(front)} plans; runtime, peak traffic per GPU, peak memory):")
    for k in front:
        v = vals[k]
        mark = "  <- the reference" if k == reference.spec() else ""
        lines.append(f"  {parse_plan(k).text():<70} {fmt(v[0], 'time'):>9} "
                     f"{fmt(v[1], 'bytes'):>10} {fmt(v[2], 'bytes'):>10} "
                     f"{feasible[k][2]:>7,.0f} tok/s/GPU{mark}")
    ref = results.get(reference.spec())
    if not isinstance(ref, tuple) or not ref[1]:
        lines.append(f"\nthe reference {reference.text()} does not fit")
    else:
        r = np.array(ref[0])
        rank = 1 + sum(vals[k][0] < r[0] for k in keys)
        over = [k for k in front if no_worse(vals[k], r).all() and (vals[k] < r).any()]
        where = ("on the front" if reference.spec() in front else
                 f"dominated by {len(over)} front plan(s), e.g. {parse_plan(over[0]).text()}")
        lines.append(f"\nthe reference {reference.text()}: {fmt(r[0], 'time')}, "
                     f"{fmt(r[2], 'bytes')}, {ref[2]:,.0f} tokens/s per GPU; {where}; "
                     f"{rank} of {len(keys)} fitting plans by step time")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
