"""How well does the simulator predict real TensorFlow training steps? Measured on a testbed.

    python3 experiments/fidelity.py [--models cnn mlp ...] [--testbed 2] [--steps 20]
                                    [--front-points 6] [--budget 2000] [--calibration 6]
                                    [--out experiments/results/fidelity-REV] [--mlflow URI]

For each zoo model, on a testbed of K TensorFlow worker processes (one core each on a CPU
machine, one GPU each where there are GPUs; see moplace.tf.testbed): profile the training step,
measure the links, fit the testbed's corrections on random calibration strategies, then run the
baselines, the list schedulers and points of an NSGA-II front for real and compare each median
step with the simulator's prediction, as measured and corrected (moplace.tf.fidelity). Writes
the tables (OUT.txt) and everything (OUT.json); with --mlflow, logs one run per model with the
table and a predicted-vs-measured scatter plot.

Anchors: FlexFlow's simulator is within 30% of real time and preserves the order of
strategies; Trinity reports about +-0.05 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import moplace.tf  # noqa: F401  (TensorFlow's environment before anything imports it)

#: model and batch size: large enough that compute, not the testbed's RPCs, fills a step
DEFAULT_MODELS = {"mlp": 2048, "cnn": 128, "transformer": 32, "gnmt": 32, "mobilenet_v2": 16,
                  "resnet50": 8, "inception_v3": 4, "vgg19": 16, "nasnet_mobile": 8}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS),
                   help="zoo names, optionally NAME:BATCH")
    p.add_argument("--testbed", type=int, default=2, help="worker processes (devices)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per strategy")
    p.add_argument("--front-points", type=int, default=6)
    p.add_argument("--budget", type=int, default=2000, help="NSGA-II evaluations")
    p.add_argument("--calibration", type=int, default=6, help="random calibration strategies")
    p.add_argument("--seed", type=int, default=0)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "local"
    p.add_argument("--out", default=f"experiments/results/fidelity-{rev}",
                   help="path stem of the .txt and .json written")
    p.add_argument("--mlflow", metavar="URI", help="also log each model's report to MLflow")
    p.add_argument("--from-json", metavar="FILE",
                   help="run nothing: fit the corrections again on the calibration runs of a JSON "
                   "this wrote, tabulate (to FILE's .txt) and log")
    args = p.parse_args(argv)
    from moplace.testbed.fidelity import FidelityReport, report_table, summary_table
    from moplace.tf.fidelity import run_fidelity
    from moplace.tf.testbed import Testbed

    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        reports = [FidelityReport.from_dict(m).refit() for m in saved["models"]]
        text = "\n\n".join([*map(report_table, reports), summary_table(reports)])
        print(text)
        Path(args.from_json).with_suffix(".txt").write_text(text + "\n")
        _log(reports, args.mlflow)
        return 0

    reports, texts = [], []
    t0 = time.perf_counter()
    with Testbed(args.testbed) as bed:
        print(f"testbed: {bed.describe()}", flush=True)
        for item in args.models:
            name, _, batch = item.partition(":")
            batch = int(batch) if batch else DEFAULT_MODELS.get(name, 16)
            report = run_fidelity(name, batch, bed, steps=args.steps, front_points=args.front_points,
                                  budget=args.budget, calibration=args.calibration, seed=args.seed,
                                  progress=lambda stage, done, total, n=name: print(
                                      f"  {n}: {stage} ({done}/{total})", file=sys.stderr, flush=True))
            text = report_table(report)
            print("\n" + text + f"\n({report.seconds:.0f} s)", flush=True)
            reports.append(report)
            texts.append(text)
    total = summary_table(reports)
    print("\n" + total)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text("\n\n".join([*texts, total]) + "\n")
    from moplace import strictjson

    out.with_suffix(".json").write_text(strictjson.dumps(
        {"args": vars(args), "seconds": time.perf_counter() - t0,
         "models": [r.as_dict() for r in reports]}, indent=1))
    print(f"wrote {out.with_suffix('.txt')} and {out.with_suffix('.json')}")
    _log(reports, args.mlflow)
    return 0


def _log(reports, uri) -> None:
    if uri:
        from moplace.testbed.fidelitylog import log_fidelity

        for report in reports:
            print(f"logged {report.model} to MLflow run {log_fidelity(report, uri)}")


if __name__ == "__main__":
    raise SystemExit(main())
