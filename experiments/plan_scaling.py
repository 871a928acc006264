"""How a plan's throughput scales with GPUs: the plan's TP x CP x PP replica kept, its
data-parallel degree stepped from 1 (or ``--min-dp``) up to the largest pod, at the same
micro-batches per replica (weak scaling: the global batch grows with DP) and at the plan's
global batch (strong scaling: fewer micro-batches per replica as DP grows), each point
evaluated at scale (`moplace.simulator.atscale.evaluate_regular`). Prints a table and draws
model TFLOP/s per GPU and step time against GPUs.

    python3 experiments/plan_scaling.py GRAPH --plan "tp=8,pp=16,dp=128,mbs=1,gbs=2048,..."
        [--kind H100] [--min-dp 1] [--max-gpus 32768] [--out FILE.txt] [--figure FILE.png]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph")
    ap.add_argument("--plan", required=True)
    ap.add_argument("--kind", default="H100")
    ap.add_argument("--min-dp", type=int, default=1)
    ap.add_argument("--max-gpus", type=int, default=32768)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--figure", type=Path)
    args = ap.parse_args(argv)
    from moplace.core.pod import load_target
    from moplace.core.regular import parse_plan
    from moplace.errors import MoplaceError
    from moplace.io import load_graph
    from moplace.simulator.atscale import evaluate_regular

    try:
        graph = load_graph(args.graph)
        plan = parse_plan(args.plan)
    except MoplaceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    m = plan.micro_batches
    lines = [f"{plan.degrees_text()} on pod:{args.kind}:N, DP stepped (this machine, "
             f"{time.strftime('%Y-%m-%d')}); weak: {m} micro-batches per replica (gbs grows with "
             f"DP); strong: gbs {plan.gbs:,} throughout",
             f"{'GPUs':>6} {'DP':>5}  {'weak TFLOP/s/GPU':>17} {'step':>8}  "
             f"{'strong TFLOP/s/GPU':>18} {'step':>8} {'m':>5}"]
    points = []
    dp = args.min_dp
    while plan.replica_gpus * dp <= args.max_gpus:
        gpus = plan.replica_gpus * dp
        pod = load_target(f"pod:{args.kind}:{gpus}")
        weak = dataclasses.replace(plan, dp=dp, gbs=m * dp * plan.mbs)
        row = [gpus, dp]
        for p in (weak, dataclasses.replace(plan, dp=dp)):
            try:
                ev = evaluate_regular(graph, pod, p)
                row.append((ev.tflops_per_gpu, ev.runtime_s, p.micro_batches, ev.feasible))
            except MoplaceError:
                row.append(None)
        points.append(row)
        w, s = row[2], row[3]
        lines.append(f"{gpus:>6,} {dp:>5}  "
                     + (f"{w[0]:>17.1f} {w[1]:>7.2f}s" if w else f"{'-':>17} {'-':>8}")
                     + "  "
                     + (f"{s[0]:>18.1f} {s[1]:>7.2f}s {s[2]:>5}" if s else
                        f"{'-':>18} {'-':>8} {'-':>5}"))
        print(lines[-1], file=sys.stderr, flush=True)
        dp *= 2
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    if args.figure and points:
        draw(points, plan, args.kind, args.figure)
        print(f"figure: {args.figure}")
    return 0


def draw(points, plan, kind: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    for k, (label, style) in enumerate((("weak scaling (micro-batches per replica fixed)",
                                         "o-"), (f"strong scaling (gbs {plan.gbs:,})", "s--"))):
        xs = [r[0] for r in points if r[2 + k]]
        ax.plot(xs, [r[2 + k][0] for r in points if r[2 + k]], style, label=label)
        bx.plot(xs, [r[2 + k][1] for r in points if r[2 + k]], style, label=label)
    gpus = [r[0] for r in points]
    for a in (ax, bx):
        a.set_xscale("log", base=2)
        a.set_xticks(gpus, [f"{g:,}" for g in gpus], fontsize=7, rotation=45)
        a.minorticks_off()
        a.set_xlabel(f"{kind} GPUs")
        a.grid(alpha=0.3)
    ax.set_ylabel("model TFLOP/s per GPU")
    ax.set_ylim(bottom=0)
    bx.set_ylabel("step (s)")
    bx.set_yscale("log")
    ax.legend(fontsize=8)
    fig.suptitle(f"{plan.degrees_text()}: throughput against GPUs (DP stepped)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
