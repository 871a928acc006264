"""GPT-2 small's one-GPU step with SDPA and with eager attention, estimated without a GPU,
against the steps measured on an H200 (issue 47).

    python3 experiments/sdpa_step.py [--kind H200] [--out experiments/results/sdpa-step]

Traces ``hf:gpt2`` at 8 x 1,024 tokens in bf16 with each attention (`moplace.torch.attention`:
SDPA as the H200's flash kernels), costs it with ``--estimate KIND`` (the calibrated estimate
where one ships, else the roofline: the output says which), keeps AdamW's moments in bf16
with no master copy (``--optimizer adam``, as the measured runs did), and holds the
simulator's one-device step and peak against the real ones in
``tests/data/calibration/gpt2-attention.json`` (a copy of
``../shared/gpu-profiles/gpt2-attention.json``: CUDA events, median of 5; peak allocated).
Writes STEM.md and STEM.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "tests" / "data" / "calibration" / "gpt2-attention.json"


def one_device(kind: str):
    from moplace.core.cluster import Cluster

    return Cluster.uniform(1, kind=kind, memory_bytes=141 * 10**9, bandwidth=1e12)


def simulate(attention: str, kind: str, row: dict) -> dict:
    from moplace.core.baselines import baseline
    from moplace.core.optimizer import with_optimizer
    from moplace.simulator.evaluation import evaluate
    from moplace.torch.frontend import profile_torch_model

    traced = profile_torch_model("hf:gpt2", row["batch"], [kind], seq_len=row["seq"],
                                 dtype="bf16", attention=attention)
    graph = with_optimizer(traced.graph, "adam")
    ev = evaluate(graph, one_device(kind), baseline("single", graph, 1)).objectives()
    return {"attention": attention, "kernels": graph.metadata["attention"]["kernels"],
            "costs": graph.metadata["estimated"][kind], "ops": len(graph.ops),
            "real_step_s": row["step_s"], "simulated_step_s": ev["runtime"],
            "step_error": ev["runtime"] / row["step_s"] - 1,
            "real_peak_bytes": row["peak_bytes"], "simulated_peak_bytes": ev["peak_memory"],
            "peak_error": ev["peak_memory"] / row["peak_bytes"] - 1}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", default="H200")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "sdpa-step"))
    args = p.parse_args(argv)
    rows = [simulate(r["attn"], args.kind, r) for r in json.loads(MEASURED.read_text())]
    lines = [f"# GPT-2 small, 8 x 1,024 tokens, bf16, one {args.kind}: estimated against "
             "measured", "",
             "| attention | kernels | real step | simulated | error | real peak | simulated "
             "peak | error |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['attention']} | {', '.join(r['kernels']) or '-'} | "
                     f"{r['real_step_s'] * 1e3:.1f} ms | {r['simulated_step_s'] * 1e3:.1f} ms | "
                     f"{r['step_error']:+.1%} | {r['real_peak_bytes'] / 2**30:.2f} GiB | "
                     f"{r['simulated_peak_bytes'] / 2**30:.2f} GiB | {r['peak_error']:+.1%} |")
    lines += ["", f"Op times: {rows[0]['costs']}. Optimizer state: adam (AdamW's moments in "
              "bf16, no master copy, as the measured runs kept them)."]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    from moplace import strictjson

    Path(args.out + ".json").write_text(strictjson.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
