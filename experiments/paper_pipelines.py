"""The pipelines of the papers are inside moplace's space (issue 33): on 6 V100s (16 GiB each,
NVLink at 48 GB/s; for resnet50 also the host CPU over 12 GB/s PCIe, as the dnn-partitioning
plan uses it), moplace's best feasible plan for dnn:LayerGraphs/{resnet50, gnmt,
bert24}_training, flush included, against the NeurIPS'20 dynamic program's pipelines scored
in moplace's cost model (../shared/PAPERS.md section 6: 78.3 / 107.0 / 41.7 ms per minibatch
in the 1F1B steady state, 137.6 / 173.9 / 67.8 ms under GPipe with 8 micro-batches).

    python3 experiments/paper_pipelines.py [--budget 3000] [--searchers ...] [--json FILE]

Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import moplace  # noqa: E402
from compute_limit import best_plans, print_table  # noqa: E402  (beside this file)
from moplace.review.units import plan_text  # noqa: E402

GIB = 2**30
#: graph: (1F1B steady state, GPipe x8) of the dnn-partitioning pipelines, ms per minibatch
PAPER = {"dnn:LayerGraphs/resnet50_training": (78.3, 137.6),
         "dnn:LayerGraphs/gnmt_training": (107.0, 173.9),
         "dnn:LayerGraphs/bert24_training": (41.7, 67.8)}


def six_v100(with_cpu: bool) -> moplace.Cluster:
    """Six V100s on NVLink (48 GB/s), and the host CPU over 12 GB/s PCIe when asked."""
    n = 6 + with_cpu
    bw = np.full((n, n), 48e9)
    if with_cpu:
        bw[6, :] = bw[:, 6] = 12e9
    return moplace.Cluster.uniform(
        [f"gpu{i}" for i in range(6)] + (["cpu"] if with_cpu else []),
        kind=["V100"] * 6 + (["cpu"] if with_cpu else []),
        memory_bytes=[16 * GIB] * 6 + ([256 * GIB] if with_cpu else []),
        bandwidth=bw, latency=5e-6, name="6xV100-NVLink" + ("+CPU-PCIe" if with_cpu else ""))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=int, default=3000, help="NSGA-II's evaluations")
    p.add_argument("--searchers", nargs="+", default=["pipedream", "os-dpos", "nsga2"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    rows = []
    for name, (steady, gpipe) in PAPER.items():
        g = moplace.load_graph(name)
        c = six_v100("resnet50" in name)
        problem = moplace.Problem(g, c)
        print(f"{name} on {c.name}", flush=True)
        _, best = best_plans(problem, args.searchers, args.budget, args.seed)
        if best is not None:
            best = (best[0] * 1e3, *best[1:])
        row = {"graph": name, "cluster": c.name, "paper_1f1b_ms": steady,
               "paper_gpipe8_ms": gpipe}
        if best:
            row.update(best_ms=best[0], by=best[1], plan=best[2], ratio_to_gpipe=best[0] / gpipe)
            print(f"  best {best[0]:.2f} ms by {best[1]} ({plan_text(best[2])}): "
                  f"{best[0] / gpipe:.2f}x the paper's GPipe x8 ({gpipe} ms), "
                  f"{best[0] / steady:.2f}x its 1F1B steady state ({steady} ms)", flush=True)
        rows.append(row)
    print_table(rows, [("graph", "<36", "", "graph"), ("best ms", ">9", ".2f", "best_ms"),
                       ("GPipe x8", ">9", ".1f", "paper_gpipe8_ms"),
                       ("ratio", ">6", ".2f", "ratio_to_gpipe"),
                       ("steady", ">7", ".1f", "paper_1f1b_ms"),
                       ("by", "", "", lambda r: r.get("by", "-"))], args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
