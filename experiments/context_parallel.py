"""Context parallelism on a traced long-context model: the step, the traffic and the memory of
every token-wise op on ``sequence`` over c devices (ring attention), beside the same cut with
each attention reading only its own tokens' keys and values (the graph's ``metadata.context``
left out: the activations a CP plan holds without what CP adds), and with full recomputation
and ZeRO (issue 49).

    python3 -m moplace profile hf:llama-3.1-8b --batch 1 --seq-len 131072 --dtype bf16 \\
        --estimate H100 -o llama31-131k.json
    python3 experiments/context_parallel.py llama31-131k.json --cluster 8xH100-80GB-NVLink \\
        --out experiments/results/context-parallel-llama31-8b-8xH100.txt
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import moplace  # noqa: E402
from moplace.core.baselines import baseline, data_parallel, with_context_parallel  # noqa: E402
from moplace.core.graph import OpGraph  # noqa: E402
from moplace.core.recompute import layer_checkpoints  # noqa: E402
from report import graph_arguments, hand_out  # noqa: E402

GiB = 2**30


def main() -> int:
    args = graph_arguments(__doc__)
    g, cl = moplace.load_graph(args.graph), moplace.load_cluster(args.cluster)
    n = cl.n_devices
    source = g.metadata.get("source") or {}
    lines = [f"{g.name} at {source.get('batch_size')} x {source.get('seq_len')} tokens on "
             f"{cl.name} ({g.metadata.get('estimated')})",
             f"{'plan':34} {'step s':>8} {'peak GiB':>9} {'activations GiB':>16} "
             f"{'static GiB':>11} {'sent GiB':>9}"]
    start = time.perf_counter()
    single = moplace.simulate(g, cl, baseline("single", g, n))
    one = (single.peak_memory - single.static_memory).max()
    local = OpGraph(g.ops, g.edges, name=g.name,
                    metadata={k: v for k, v in g.metadata.items() if k != "context"})
    rows, shares, c = [("one device", single)], [], 2
    while c <= n:
        cp = with_context_parallel(g, data_parallel(g, c), c)
        for label, what, graph in ((f"CP {c} (ring)", f"CP {c}: activations", g),
                                   (f"same, keys and values local, {c}",
                                    "  keys and values local:", local)):
            t = moplace.simulate(graph, cl, cp)
            rows.append((label, t))
            shares.append((what, (t.peak_memory - t.static_memory).max(), c))
        c *= 2
    cp = with_context_parallel(g, data_parallel(g, n), n).with_recompute(layer_checkpoints(g))
    for z in (0, 1, 3):
        rows.append((f"CP {n}, full recompute, ZeRO-{z}",
                     moplace.simulate(g, cl, cp.with_options(zero_stage=float(z)))))
    for label, t in rows:
        act = (t.peak_memory - t.static_memory).max()
        lines.append(f"{label:34} {t.makespan:8.3f} {t.peak_memory.max() / GiB:9.2f} "
                     f"{act / GiB:16.2f} {t.static_memory.max() / GiB:11.2f} "
                     f"{t.sent.max() / GiB:9.2f}")
    lines.append("")
    lines += [f"{what} {act / GiB:.2f} GiB, one device's / {c} {one / c / GiB:.2f} GiB "
              f"({100 * (act / (one / c) - 1):+.1f}%)" for what, act, c in shares]
    lines.append(f"({time.perf_counter() - start:.1f} s to simulate)")
    return hand_out(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
