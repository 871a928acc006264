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

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import moplace  # noqa: E402
from moplace.core.baselines import baseline  # noqa: E402
from moplace.core.graph import OpGraph  # noqa: E402
from moplace.core.recompute import layer_checkpoints  # noqa: E402
from moplace.core.strategy import Split, Strategy  # noqa: E402

GiB = 2**30


def cut(graph, n_devices: int, c: int, dim: str, **levers) -> Strategy:
    """Every group whose ops may all be cut on ``dim`` cut so over devices 0..c-1."""
    single = baseline("single", graph, n_devices)
    splits = {i: Split(dim, tuple(range(c))) for members in graph.groups
              if all(dim in graph.ops[i].splittable for i in members) for i in members}
    return Strategy(single.placement, single.priority, splits, **levers)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph")
    ap.add_argument("--cluster", default="8xH100-80GB-NVLink")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
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
    rows = [("one device", single)]
    local = OpGraph(g.ops, g.edges, name=g.name,
                    metadata={k: v for k, v in g.metadata.items() if k != "context"})
    c = 2
    while c <= n:
        rows.append((f"CP {c} (ring), all on sequence", moplace.simulate(g, cl, cut(g, n, c, "sequence"))))
        rows.append((f"same, keys and values local, {c}",
                     moplace.simulate(local, cl, cut(g, n, c, "sequence"))))
        c *= 2
    full = list(layer_checkpoints(g))
    for z in (0, 1, 3):
        rows.append((f"CP {n}, full recompute, ZeRO-{z}", moplace.simulate(
            g, cl, cut(g, n, n, "sequence", recompute=full, zero_stage=float(z)))))
    for label, t in rows:
        act = (t.peak_memory - t.static_memory).max()
        lines.append(f"{label:34} {t.makespan:8.3f} {t.peak_memory.max() / GiB:9.2f} "
                     f"{act / GiB:16.2f} {t.static_memory.max() / GiB:11.2f} "
                     f"{t.sent.max() / GiB:9.2f}")
    lines.append("")
    for label, t in rows[1:]:
        if label.startswith("CP") and "recompute" not in label:
            c = int(label.split()[1])
            act = (t.peak_memory - t.static_memory).max()
            lines.append(f"CP {c}: activations {act / GiB:.2f} GiB, one device's / {c} "
                         f"{one / c / GiB:.2f} GiB ({100 * (act / (one / c) - 1):+.1f}%)")
        if label.startswith("same, keys"):
            c = int(label.split()[-1])
            act = (t.peak_memory - t.static_memory).max()
            lines.append(f"  keys and values local: {act / GiB:.2f} GiB "
                         f"({100 * (act / (one / c) - 1):+.1f}%)")
    lines.append(f"({time.perf_counter() - start:.1f} s to simulate)")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
