"""Each pipeline schedule on a traced model's regular plans: the simulated step and peak memory
of 1F1B, GPipe, interleaved 1F1B and zero-bubble (one and several virtual stages) for a few
pipeline shapes (issue 49).

    python3 -m moplace profile hf:gpt2 --batch 8 --seq-len 1024 --dtype bf16 --estimate H100 \\
        -o gpt2.json
    python3 experiments/schedules_on_a_model.py gpt2.json --cluster 8xH100-80GB-NVLink \\
        --out experiments/results/schedules-gpt2-8xH100.txt
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import moplace  # noqa: E402
from moplace.core.degrees import Degrees, regular_plan  # noqa: E402
from moplace.costs.costmodel import CostModel  # noqa: E402
from report import graph_arguments, hand_out  # noqa: E402

SCHEDULES = (("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("interleaved", 3),
             ("zero-bubble", 1), ("zero-bubble", 3))


def main() -> int:
    args = graph_arguments(__doc__)
    g, c = moplace.load_graph(args.graph), moplace.load_cluster(args.cluster)
    costs = CostModel(g, c)
    layers = g.metadata["layers"]["count"]
    start = time.perf_counter()
    lines = [f"{g.name} ({layers} layers) on {c.name}: step ms / peak GiB per device",
             f"{'devices':>7} {'pp':>3} {'m':>3}  " + "  ".join(
                 f"{s + (f' v{v}' if s in ('interleaved', 'zero-bubble') else ''):>16}"
                 for s, v in SCHEDULES)]
    for n, pp, m in ((4, 4, 8), (8, 4, 8), (8, 4, 16), (8, 2, 8)):
        cells = []
        for schedule, v in SCHEDULES:
            if layers % (pp * v) or (schedule == "interleaved" and m % pp):
                cells.append(f"{'-':>16}")
                continue
            s = regular_plan(g, Degrees(n, pp, "data", m, schedule, "none", 0, v))
            tr = moplace.simulate(g, c, s, costs=costs)
            cells.append(f"{tr.makespan * 1e3:>8.2f} {tr.peak_memory.max() / 2**30:>6.2f}G")
        lines.append(f"{n:>7} {pp:>3} {m:>3}  " + "  ".join(cells))
    lines.append(f"({time.perf_counter() - start:.1f} s)")
    return hand_out(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
