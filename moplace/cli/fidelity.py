"""``moplace fidelity``: run a model's strategies for real on a testbed against the simulator.

    moplace fidelity MODEL_OR_PY --batch N [--testbed 2] [--steps 20] [--front-points 6]
                     [--budget 2000] [--calibration 6] [--seed 0] [-o STEM] [--force]
                     [--json] [--quiet] [--no-mlflow] [--tracking-uri URI] [--experiment NAME]
    moplace fidelity MODEL.py|hf:NAME --batch 4,8 [--seq-len 256,512] [--dtype bf16]
                     [--device cuda|cpu] [--micro-batches 1,2,4,8] [--steps 10] ...

Prints the table of `moplace.tf.fidelity` (strategies, measured and simulated steps, errors,
Kendall tau, memory); ``-o STEM`` writes STEM.txt, STEM.json and STEM.png (the scatter plot);
the report is logged to MLflow (experiment ``moplace-fidelity``) unless ``--no-mlflow``. A
PyTorch model file or ``hf:`` configuration runs its one-device plans on one GPU (or this
CPU) instead, at each batch and sequence length given (`moplace.torch.fidelity`), logged and
written the same way.
"""

from __future__ import annotations

from ..errors import MoplaceError
from .args import file_arg, integer


def add_commands(sub) -> None:
    """Register ``fidelity`` on the CLI's subparsers."""
    f = sub.add_parser("fidelity", help="run baselines, heuristics and front points for real on "
                       "a testbed and compare with the simulator")
    f.add_argument("model", type=file_arg, help="zoo name (see `moplace zoo`), a .py file "
                   "defining build(batch_size) (Keras, or PyTorch when it imports torch), or "
                   "hf:NAME (a Hugging Face model by configuration)")
    f.add_argument("--batch", type=integers(1, 2**20),
                   help="batch size (PyTorch and hf: models: several, e.g. 4,8; required but "
                        "to log a saved report)")
    f.add_argument("--seq-len", type=integers(1, 2**22), metavar="TOKENS",
                   help="(hf:NAME only) tokens per sequence, one or several (e.g. 256,512; "
                        "default: the model's longest context)")
    f.add_argument("--dtype", choices=("fp32", "bf16", "fp16"),
                   help="(hf:NAME only) the weights' precision (default: the configuration's "
                        "torch_dtype, else fp32)")
    f.add_argument("--device", choices=("cuda", "cpu"),
                   help="(PyTorch only) the GPU (default where one is visible) or "
                        "this CPU; with --testbed K, where its processes run (default cpu; "
                        "cuda: a GPU each, NCCL)")
    f.add_argument("--micro-batches", type=integers(1, 1024), default=[1, 2, 4, 8],
                   metavar="K,...", help="(PyTorch only) the one-device plans, as "
                   "micro-batches accumulating their gradients (default 1,2,4,8; 1: single)")
    f.add_argument("--testbed", type=integer(1, 64), metavar="K",
                   help="(Keras, or PyTorch with --testbed) worker processes, one device "
                        "each (Keras: default 2; a PyTorch model: its plans on the PyTorch "
                        "testbed of K gloo processes instead of one device's report)")
    f.add_argument("--steps", type=integer(3, 10**5), default=None,
                   help="timed steps per strategy (default 20; PyTorch and hf: models 10)")
    f.add_argument("--front-points", type=integer(0, 100),
                   help="(Keras, or PyTorch with --testbed) points of the NSGA-II front to "
                   "run (default 6)")
    f.add_argument("--budget", type=integer(1, 10**7),
                   help="(Keras, or PyTorch with --testbed) NSGA-II evaluations (default "
                   "2000)")
    f.add_argument("--calibration", type=integer(0, 100),
                   help="(Keras, or PyTorch with --testbed) random strategies the "
                   "corrections are fitted on (default 6; PyTorch 16: fewer leave its fit "
                   "to chance; 0: none)")
    f.add_argument("--rounds", type=integer(1, 100),
                   help="(PyTorch with --testbed) each strategy's median of so many rounds "
                   "(on GPUs its least disturbed), run one after the other over all of "
                   "them, for a machine other jobs share (default 1)")
    f.add_argument("--seed", type=integer(0, 2**32 - 1),
                   help="(Keras, or PyTorch with --testbed) random seed of the searches "
                   "and calibration (default 0)")
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


#: the Keras testbed's options (None when not given: a PyTorch model refuses them)
KERAS_DEFAULTS = {"testbed": 2, "steps": 20, "front_points": 6, "budget": 2000,
                  "calibration": 6, "seed": 0}


def integers(low: int, high: int):
    """An argparse ``type``: whole numbers from ``low`` to ``high``, separated by commas."""
    one = integer(low, high)

    def parse(text: str) -> list[int]:
        return [one(part.strip()) for part in text.split(",")]

    return parse


def _fidelity(args) -> int:
    from .torchfidelity import is_torch_model, torch_fidelity

    if is_torch_model(args.model) and args.testbed is None:
        return torch_fidelity(args)
    if is_torch_model(args.model):
        return _torch_testbed(args)
    for flag in ("seq_len", "device", "rounds"):
        if getattr(args, flag) is not None:
            raise MoplaceError(f"--{flag.replace('_', '-')}: {args.model} is a Keras model; "
                               f"the option is for PyTorch and hf: models")
    if args.batch is None:
        raise MoplaceError("--batch is required")
    if len(args.batch) > 1 or args.micro_batches != [1, 2, 4, 8] or args.dtype is not None:
        raise MoplaceError(f"--batch with one size: {args.model} is a Keras model (several "
                           f"sizes, --micro-batches and --dtype are for PyTorch and hf: models)")
    args.batch = args.batch[0]
    _testbed_defaults(args, steps=20)
    from .tf import _require_tensorflow

    _require_tensorflow("fidelity")
    from ..tf.source import check_model_file

    check_model_file(args.model)
    from ..tf.fidelity import run_fidelity
    from ..tf.testbed import Testbed

    return _testbed_report(args, Testbed, run_fidelity, {})


def _testbed_defaults(args, steps: int, calibration: int = 6) -> None:
    for flag, value in {**KERAS_DEFAULTS, "steps": steps, "calibration": calibration}.items():
        setattr(args, flag, value if getattr(args, flag) is None else getattr(args, flag))


def _torch_testbed(args) -> int:
    """``--testbed K`` with a PyTorch model: its strategies on the PyTorch testbed
    (`moplace.torch.testbedfidelity`), reported as the Keras testbed's are."""
    if args.batch is None or len(args.batch) > 1:
        raise MoplaceError("--testbed: one --batch size (the plans run at it)")
    if args.seq_len is not None and len(args.seq_len) > 1:
        raise MoplaceError("--testbed: one --seq-len (the plans run at it)")
    if args.micro_batches != [1, 2, 4, 8]:
        raise MoplaceError("--testbed: --micro-batches is for one device's report, without "
                           "--testbed (the testbed's plans choose their micro-batches)")
    args.batch = args.batch[0]
    _testbed_defaults(args, steps=10, calibration=16)
    from ..torch.testbed import TorchTestbed
    from ..torch.testbedfidelity import run_testbed_fidelity

    device = args.device or "cpu"
    TorchTestbed.check_device(device, args.testbed)  # before any work
    extra = {"seq_len": args.seq_len[0] if args.seq_len else None, "dtype": args.dtype,
             "rounds": args.rounds or 1}
    return _testbed_report(args, lambda k: TorchTestbed(k, device=device),
                           run_testbed_fidelity, extra)


def _testbed_report(args, make_testbed, run, extra: dict) -> int:
    """Run ``run(model, batch, testbed, ...)`` (a front end's testbed report) on a testbed of
    ``args.testbed`` processes, then print, write and log its report."""
    from .fidelityout import finish, report_outputs

    outputs = report_outputs(args)
    from ..testbed.fidelity import report_table
    from .progress import Display

    with Display("quiet" if args.json or args.quiet else "auto") as display, \
            make_testbed(args.testbed) as bed:
        report = run(args.model, args.batch, bed, steps=args.steps,
                     front_points=args.front_points, budget=args.budget,
                     calibration=args.calibration, seed=args.seed,
                     progress=display.job(f"fidelity {args.model}"), **extra)
    if not report.measured:
        raise MoplaceError(f"no strategy of {args.model} could be run on the testbed: "
                           f"{report.rows[0].reason if report.rows else 'none found'}")
    data = report.as_dict()
    run_id = None
    if not args.no_mlflow:
        from ..testbed.fidelitylog import log_fidelity

        run_id = log_fidelity(report, args.tracking_uri, args.experiment)
    from ..review.figures.fidelity import fidelity_scatter

    return finish(args, data, report_table(report), outputs, run_id,
                  lambda path: fidelity_scatter(data["rows"], path, title=f"{report.model}: "
                                                f"simulated vs measured step"))
