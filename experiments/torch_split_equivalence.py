"""Do plans applied on the PyTorch testbed compute the one-device step?

    python3 experiments/torch_split_equivalence.py [--model experiments/models/gpt.py]
        [--batch 8] [--processes 2] [--steps 2] [--out FILE]

Every plan class (single, data parallel with buckets, layer split, round robin, batch and
channel splits of the matmuls and attention, 1F1B and GPipe pipelines, data parallel with
micro-batches, recomputation, ZeRO-1 and ZeRO-3, tensor-parallel blocks) and NSGA-II front
points, and channel splits of every matmul and attention with the tensor blocks dissolved,
each applied for real on a testbed of ``--processes`` gloo processes (`moplace.torch.apply`)
for ``--steps`` steps against the model
trained the same steps on one device by plain PyTorch (the same seed: the same weights and
batch). Prints the largest difference of the losses (relative) and of the updated weights
(absolute) per plan, and whether they are within the tolerances of
`moplace.testbed.equivalence`. A tiny GPT (``GPT_DIMS``, default 64,4,2,32,256) unless
``GPT_DIMS`` is set.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "experiments" / "models" / "gpt.py"),
                   help="a PyTorch model file, hf:NAME or hf-llama (a two-layer Llama "
                        "configuration, experiments/torch_testbed_fidelity.py's)")
    p.add_argument("--seq-len", type=int, default=16, help="hf: models' tokens per sequence")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--nsga2", type=int, default=2, help="NSGA-II front points applied too")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    os.environ.setdefault("GPT_DIMS", "64,4,2,32,256")
    from moplace.torch.equivalence import (plan_classes, reference_step, run_plans,
                                           split_matmuls, without_tensor_blocks)
    from moplace.torch.frontend import profile_torch_model

    t0 = time.perf_counter()
    model, extra = args.model, {}
    if model == "hf-llama":
        import json
        import tempfile

        from torch_testbed_fidelity import LLAMA

        folder = Path(tempfile.mkdtemp()) / "llama"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(LLAMA))
        model = f"hf:{folder / 'config.json'}"
    if model.startswith("hf:"):
        extra = {"seq_len": args.seq_len}
    graph = profile_torch_model(model, args.batch, ["cpu"], target_kind="cpu", **extra).graph
    ref = reference_step(graph, args.steps)
    plans = plan_classes(graph, args.processes, nsga2_points=args.nsga2)
    lines = [f"{'plan':<56} {'loss rel diff':>14} {'max |d weight|':>15} {'verdict':>8} "
             f"{'step (ms)':>10}"]
    print(lines[0], flush=True)
    loose = without_tensor_blocks(graph)
    rows = itertools.chain(  # printed as each plan finishes
        run_plans(graph, plans, args.processes, ref, steps=args.steps),
        run_plans(loose, [("every matmul and attention on channel (blocks dissolved)",
                           split_matmuls(loose, args.processes, "channel"))],
                  args.processes, ref, steps=args.steps))
    for row in rows:
        line = (f"{row['plan']:<56} {row['loss_rel']:>14.2e} {row['weight_abs']:>15.2e} "
                f"{row['verdict']:>8} {row['step_ms']:>10.1f}" if row["ran"] else
                f"{row['plan']:<56} refused: {row['reason']}")
        lines.append(line)
        print(line, flush=True)
    dims = f" GPT_DIMS={os.environ['GPT_DIMS']}" if not model.startswith("hf:") else ""
    lines.append(f"model {args.model}{dims} batch {args.batch}, "
                 f"{args.processes} processes, {args.steps} steps; "
                 f"{time.perf_counter() - t0:.0f} s")
    print(lines[-1])
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
