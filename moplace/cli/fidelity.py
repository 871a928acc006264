"""``moplace fidelity``: run a model's strategies for real on a testbed against the simulator.

    moplace fidelity MODEL_OR_PY --batch N [--testbed 2] [--steps 20] [--front-points 6]
                     [--budget 2000] [--calibration 6] [--seed 0] [-o STEM] [--force]
                     [--json] [--quiet] [--no-mlflow] [--tracking-uri URI] [--experiment NAME]

Prints the table of `moplace.tf.fidelity` (strategies, measured and simulated steps, errors,
Kendall tau, memory); ``-o STEM`` writes STEM.txt, STEM.json and STEM.png (the scatter plot);
the report is logged to MLflow (experiment ``moplace-fidelity``) unless ``--no-mlflow``.
"""

from __future__ import annotations

from pathlib import Path

from .. import strictjson
from ..errors import MoplaceError
from .args import file_arg, integer


def add_commands(sub) -> None:
    """Register ``fidelity`` on the CLI's subparsers."""
    f = sub.add_parser("fidelity", help="run baselines, heuristics and front points for real on "
                       "a testbed and compare with the simulator")
    f.add_argument("model", type=file_arg, help="zoo name (see `moplace zoo`) or a .py file defining build(batch_size)")
    f.add_argument("--batch", type=integer(1, 2**20), required=True, help="batch size")
    f.add_argument("--testbed", type=integer(1, 64), default=2, metavar="K",
                   help="worker processes, one device each (default 2)")
    f.add_argument("--steps", type=integer(3, 10**5), default=20, help="timed steps per strategy (default 20)")
    f.add_argument("--front-points", type=integer(0, 100), default=6,
                   help="points of the NSGA-II front to run (default 6)")
    f.add_argument("--budget", type=integer(1, 10**7), default=2000, help="NSGA-II evaluations (default 2000)")
    f.add_argument("--calibration", type=integer(0, 100), default=6,
                   help="random strategies the corrections are fitted on (default 6; 0: none)")
    f.add_argument("--seed", type=integer(0, 2**32 - 1), default=0,
                   help="random seed of the searches and calibration (default 0)")
    f.add_argument("-o", "--output", type=file_arg, metavar="STEM",
                   help="write STEM.txt, STEM.json and STEM.png")
    f.add_argument("--force", action="store_true", help="replace existing output files")
    f.add_argument("--json", action="store_true", help="print exactly one JSON object")
    f.add_argument("--quiet", action="store_true", help="no progress display on stderr")
    f.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    f.add_argument("--tracking-uri", type=file_arg, help="MLflow tracking URI (default: "
                   "$MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)")
    f.add_argument("--experiment", default="moplace-fidelity",
                   help="MLflow experiment (default: moplace-fidelity)")
    f.set_defaults(run=_fidelity)


def _fidelity(args) -> int:
    from .tf import _require_tensorflow

    _require_tensorflow("fidelity")
    from ..tf.source import check_model_file

    check_model_file(args.model)
    outputs = []
    if args.output:
        from .output import check_output

        stem = Path(args.output)
        outputs = [check_output(stem.with_suffix(s), force=args.force, flag="-o")
                   for s in (".txt", ".json", ".png")]
    from ..tf.fidelity import report_table, run_fidelity
    from ..tf.testbed import Testbed
    from .progress import Display

    with Display("quiet" if args.json or args.quiet else "auto") as display, \
            Testbed(args.testbed) as bed:
        report = run_fidelity(args.model, args.batch, bed, steps=args.steps,
                              front_points=args.front_points, budget=args.budget,
                              calibration=args.calibration, seed=args.seed,
                              progress=display.job(f"fidelity {args.model}"))
    if not report.measured:
        raise MoplaceError(f"no strategy of {args.model} could be run on the testbed: "
                           f"{report.rows[0].reason if report.rows else 'none found'}")
    data = report.as_dict()
    run_id = None
    if not args.no_mlflow:
        from ..tf.fidelitylog import log_fidelity

        run_id = log_fidelity(report, args.tracking_uri, args.experiment)
    if outputs:
        from ..review.figures.fidelity import fidelity_scatter

        outputs[0].write_text(report_table(report) + "\n")
        outputs[1].write_text(strictjson.dumps(data, indent=1))
        fidelity_scatter(data["rows"], outputs[2], title=f"{report.model}: simulated vs measured step")
    if args.json:
        print(strictjson.dumps({**data, "mlflow_run_id": run_id,
                                "files": [str(p) for p in outputs]}))
        return 0
    print(report_table(report))
    if outputs:
        print(f"wrote {', '.join(map(str, outputs))}")
    if run_id:
        print(f"logged to MLflow: run {run_id} in experiment {args.experiment!r}")
    return 0
