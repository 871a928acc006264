"""The simulator against real steps on the PyTorch testbed (2 gloo processes on this CPU).

    python3 experiments/torch_testbed_fidelity.py [--models gpt hf-llama] [--batch 16]
        [--steps 10] [--calibration 16] [--front-points 8] [--rounds 3] [--out FILE]

Per model: at least 20 strategies (baselines, recomputation, micro-batches, list schedulers,
NSGA-II points) each run for real for ``--steps`` timed steps (`moplace.torch.testbedfidelity`)
against the simulator, as measured and corrected on calibration strategies never judged;
prints each model's table and the summary (median |error| and Kendall's tau per model).
Models: ``gpt`` (experiments/models/gpt.py at GPT_DIMS, default 64,4,2,32,256) and
``hf-llama`` (a two-layer Llama configuration, 64 hidden, 16 tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
         "vocab_size": 500, "max_position_embeddings": 64, "torch_dtype": "float32"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["gpt", "hf-llama"])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--calibration", type=int, default=16,
                   help="random strategies the corrections are fitted on (8 left the fit "
                   "to chance: run to run, the tiny GPT's median 10-22%%)")
    p.add_argument("--front-points", type=int, default=8,
                   help="NSGA-II points run (8: the list schedulers often find the one-device "
                   "plan on so small a model, and at least 20 strategies are judged)")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3,
                   help="each strategy's median of so many rounds (the op times: their least "
                   "disturbed)")
    p.add_argument("--out", default=None, help="write the tables here (and FILE.json)")
    args = p.parse_args(argv)
    os.environ.setdefault("GPT_DIMS", "64,4,2,32,256")
    from moplace.testbed.fidelity import report_table, summary_table
    from moplace.torch.testbed import TorchTestbed
    from moplace.torch.testbedfidelity import run_testbed_fidelity

    t0 = time.perf_counter()
    reports, texts = [], []
    with tempfile.TemporaryDirectory() as tmp, TorchTestbed(args.processes) as bed:
        config = Path(tmp) / "llama" / "config.json"
        config.parent.mkdir()
        config.write_text(json.dumps(LLAMA))
        for name in args.models:
            model, extra = ((str(ROOT / "experiments" / "models" / "gpt.py"), {})
                            if name == "gpt" else (f"hf:{config}", {"seq_len": 16}))

            def say(stage, done, total, name=name):
                print(f"  {name}: {stage} ({done}/{total}) {time.perf_counter() - t0:.0f} s",
                      file=sys.stderr, flush=True)

            report = run_testbed_fidelity(model, args.batch, bed, steps=args.steps,
                                          calibration=args.calibration,
                                          front_points=args.front_points, rounds=args.rounds,
                                          progress=say, **extra)
            report.model = name
            reports.append(report)
            texts.append(report_table(report))
            print(texts[-1], flush=True)
    ending = [summary_table(reports),
              f"{len(reports)} models, {args.processes} processes (gloo) on this machine, "
              f"batch {args.batch}, {args.steps} timed steps each; "
              f"{time.perf_counter() - t0:.0f} s"]
    print("\n".join(ending))
    _write(args.out, texts + ending, reports)
    return 0


def _write(out, texts, reports) -> None:
    """The tables to ``out`` and the reports to its .json, where ``out`` is given."""
    if out:
        Path(out).write_text("\n\n".join(texts) + "\n")
        Path(out).with_suffix(".json").write_text(
            json.dumps([r.as_dict() for r in reports], indent=1))


if __name__ == "__main__":
    sys.exit(main())
