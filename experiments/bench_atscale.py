"""Seconds per evaluation of a regular plan at scale: every plan of Megatron-LM's space for a
traced model on a pod, each evaluated once as a search meets it (the first plan of a
structure builds its replica's strategy and task graph; the next plans of other data-parallel
degrees or levers reuse what they can), then a few again (warm), and the fastest few that fit
simulated with every micro-batch (``whole=True``) against the composed step.

    python3 experiments/bench_atscale.py --graph /tmp/l405.json [--cluster pod:H100:16384]
        [--gbs 2048] [--whole 3]

The graph is a ``moplace profile`` trace of one micro-batch (Llama 3.1 405B: ``moplace
profile hf:llama-3.1-405b --batch 1 --seq-len 8192 --dtype bf16 --estimate H100 -o
l405.json``, about two minutes). Plans whose static state cannot fit are skipped as the search
skips them (`moplace.optimize.regularsearch.static_bytes`). Results are printed and written to
experiments/results/bench_atscale-<commit>.txt.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--cluster", default="pod:H100:16384")
    ap.add_argument("--gbs", type=int, default=2048)
    ap.add_argument("--whole", type=int, default=3,
                    help="plans also simulated with every micro-batch, for the ratio")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    from moplace.core.pod import load_target
    from moplace.core.regularspace import RegularSpace
    from moplace.errors import MoplaceError
    from moplace.io import load_graph
    from moplace.optimize.regularsearch import static_bytes
    from moplace.simulator.atscale import evaluate_regular

    t0 = time.perf_counter()
    graph = load_graph(args.graph)
    load_s = time.perf_counter() - t0
    pod = load_target(args.cluster)
    plans = RegularSpace(graph, pod.gpus, args.gbs).all()
    fit = [p for p in plans if static_bytes(graph, p, pod) <= pod.memory_bytes]
    first, again, evaluated, refused = [], [], [], 0
    seen = set()
    for plan in fit:
        t = time.perf_counter()
        try:
            ev = evaluate_regular(graph, pod, plan)
        except MoplaceError:
            refused += 1
            continue
        took = time.perf_counter() - t
        key = (plan.tp, plan.cp, plan.pp, plan.v, plan.recompute, plan.first, plan.last)
        (again if key in seen else first).append(took)
        seen.add(key)
        evaluated.append((plan, ev, took))
    warm = []
    for plan, ev, _ in evaluated[-5:]:
        t = time.perf_counter()
        evaluate_regular(graph, pod, plan)
        warm.append(time.perf_counter() - t)
    every = [t for _, _, t in evaluated]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    lines = [f"bench_atscale at {commit}, {time.strftime('%Y-%m-%d %H:%M')}, this machine "
             f"(2 cores, one used)",
             f"{Path(args.graph).name} ({len(graph.ops):,} ops, loaded in {load_s:.1f} s) on "
             f"{args.cluster}, gbs {args.gbs}: {len(plans)} plans in Megatron-LM's space, "
             f"{len(fit)} whose static state fits, {len(evaluated)} evaluated, {refused} "
             f"refused",
             f"  seconds per evaluation, all: median {statistics.median(every):.3f}, mean "
             f"{statistics.mean(every):.3f}, max {max(every):.3f}, total {sum(every):.1f}",
             f"  a structure's first plan ({len(first)}): median "
             f"{statistics.median(first):.3f}, max {max(first):.3f}"]
    if again:
        lines.append(f"  the next plans of a structure ({len(again)}): median "
                     f"{statistics.median(again):.3f}, max {max(again):.3f}")
    lines.append(f"  warm (the last {len(warm)} again): median {statistics.median(warm):.3f}")
    fastest = sorted((x for x in evaluated if x[1].feasible),
                     key=lambda x: x[1].runtime_s)[:args.whole]
    for plan, ev, took in fastest:
        t = time.perf_counter()
        whole = evaluate_regular(graph, pod, plan, whole=True)
        w_s = time.perf_counter() - t
        lines.append(f"  {ev.summary()}: composed {ev.runtime_s:.3f} s step, "
                     f"{ev.trace.peak_memory.max() / 2**30:.1f} GiB in {took:.2f} s; every "
                     f"micro-batch simulated {whole.runtime_s:.3f} s step "
                     f"({ev.runtime_s / whole.runtime_s - 1:+.1%}), "
                     f"{whole.trace.peak_memory.max() / 2**30:.1f} GiB in {w_s:.2f} s")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    lines.append(f"  largest resident memory of this process: {rss:.1f} GiB")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    out = args.out or HERE / "results" / f"bench_atscale-{commit}.txt"
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
