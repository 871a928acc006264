"""The simulated pipeline bubble of each schedule on a balanced chain with free transfers,
beside the published formula (issue 49): interleaved 1F1B (p - 1) / (v m) (Narayanan et al.
2021), zero-bubble (p - 1)(T_F + T_B - T_W) / (m (T_F + T_B + T_W)) (ZB-H1, Qi et al. 2024),
and the simulator's 1F1B. The bubble is (step - ideal) / ideal, the ideal one device's
compute.

    python3 experiments/pipeline_bubbles.py --out experiments/results/pipeline-bubbles.txt
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import moplace  # noqa: E402
from moplace.core.strategy import SCHEDULES, Strategy  # noqa: E402
from moplace.core.synthetic import pipeline_chain, pipeline_chain_placement  # noqa: E402
from moplace.costs.costmodel import CostModel  # noqa: E402
from report import hand_out  # noqa: E402

MS = 1e-3


def bubble(p: int, v: int, m: int, schedule: str, tf: float, tb: float, tw: float) -> float:
    g = pipeline_chain(p * v, m, forward_s=tf * MS, backward_s=tb * MS, weight_s=tw * MS)
    c = moplace.Cluster.uniform(p, bandwidth=1e15, latency=0.0)
    s = Strategy(pipeline_chain_placement(g, p), micro_batches=m,
                 schedule=SCHEDULES.index(schedule))
    tr = moplace.simulate(g, c, s, costs=CostModel(g, c, split_overhead_s=0.0))
    ideal = m * v * (tf + tb + tw) * MS
    return (tr.makespan - ideal) / ideal


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args()
    start = time.perf_counter()
    lines = ["interleaved 1F1B (each layer's backward one op: T_F 1, T_B 2 per micro-batch)",
             f"{'p':>3} {'v':>3} {'m':>4} {'simulated':>10} {'(p-1)/(vm)':>11} {'miss':>7}"]
    worst = 0.0
    for p in (2, 4, 8):
        for v in (2, 4, 8):
            for m in (p, 2 * p, 4 * p):
                got, want = bubble(p, v, m, "interleaved", 1, 2, 0), (p - 1) / (v * m)
                worst = max(worst, abs(got / want - 1))
                lines.append(f"{p:>3} {v:>3} {m:>4} {got:>10.4f} {want:>11.4f} "
                             f"{100 * (got / want - 1):>6.2f}%")
    lines.append(f"largest miss: {100 * worst:.2f}%")
    lines += ["", "zero-bubble (one stage a device: ZB-H1) against the paper and the simulator's "
              "1F1B", f"{'T_F,T_B,T_W':>12} {'p':>3} {'m':>4} {'simulated':>10} {'paper':>8} "
              f"{'miss':>7} {'1F1B':>8}"]
    worst = 0.0
    for times in ((1, 1, 1), (1, 1.5, 0.75), (1, 2, 1)):
        tf, tb, tw = times
        for p in (2, 4, 8):
            for m in (p, 2 * p, 4 * p):
                got = bubble(p, 1, m, "zero-bubble", *times)
                want = (p - 1) * (tf + tb - tw) / (m * (tf + tb + tw))
                worst = max(worst, abs(got / want - 1))
                lines.append(f"{','.join(f'{t:g}' for t in times):>12} {p:>3} {m:>4} "
                             f"{got:>10.4f} {want:>8.4f} {100 * (got / want - 1):>6.2f}% "
                             f"{bubble(p, 1, m, '1f1b', *times):>8.4f}")
    lines.append(f"largest miss: {100 * worst:.2f}%")
    lines.append(f"({time.perf_counter() - start:.1f} s)")
    return hand_out(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
