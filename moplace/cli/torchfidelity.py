"""``moplace fidelity`` for a PyTorch model file or ``hf:NAME``: its one-device plans run for
real on one GPU (or this CPU) at several shapes against the simulator (`moplace.torch.fidelity`),
the table printed, written (``-o STEM``) and logged to MLflow; and a report saved before
(``moplace fidelity STEM.json``) logged where mlflow is at hand."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from ..errors import MoplaceError
from .fidelityout import report_outputs

#: the options of a testbed's report, refused for a PyTorch model's one-device report
KERAS_ONLY = ("front_points", "budget", "calibration", "seed", "rounds")


def is_torch_model(model: str) -> bool:
    """Whether ``model`` is an ``hf:`` configuration, a PyTorch model file, or a PyTorch
    fidelity report saved as JSON (``-o STEM`` wrote STEM.json)."""
    if model.startswith("hf:"):
        return True
    path = Path(model)
    if path.suffix == ".json" and path.is_file():
        return True
    from .modelarg import model_kind

    return model_kind(model)[0] == "torch"  # a missing file or a syntax error: one line


def torch_fidelity(args) -> int:
    """Run (or, for a saved report, log) the PyTorch fidelity report of ``args.model``."""
    for flag in KERAS_ONLY:
        if getattr(args, flag) is not None:
            raise MoplaceError(f"--{flag.replace('_', '-')}: {args.model} is a PyTorch model, "
                               f"run on one device; the option is for a testbed's report "
                               f"(--testbed K)")
    if importlib.util.find_spec("torch") is None:
        raise MoplaceError(f"{args.model}: a PyTorch model, and torch is not installed: pip "
                           f"install 'moplace[torch]'")
    if not args.no_mlflow and importlib.util.find_spec("mlflow") is None:
        raise MoplaceError("mlflow is not installed: pass --no-mlflow (with -o STEM to keep "
                           "the report; `moplace fidelity STEM.json` logs it later where "
                           "mlflow is)")
    hf = args.model.startswith("hf:")
    if not hf and args.model.endswith(".json"):
        return _log_saved(args)
    if args.batch is None:
        raise MoplaceError("--batch is required (one size or several, e.g. 4,8)")
    if not hf and (args.seq_len is not None or args.dtype is not None):
        raise MoplaceError(f"--seq-len and --dtype are for hf:NAME models ({args.model} sets "
                           f"its own shapes and dtypes)")
    if any(k < 1 for k in args.micro_batches):
        raise MoplaceError("--micro-batches: whole numbers from 1")
    from ..torch.device import resolve_device

    device = resolve_device(args.device)  # a missing GPU is refused before any work
    dtype = args.dtype or "fp32"
    if hf:
        from ..torch.hf import hf_config, resolve_dtype

        hf_config(args.model[3:])
        dtype = resolve_dtype(args.model[3:], args.dtype)[0]  # else the configuration's
    else:
        from ..torch.modelfile import build_model

        build_model(args.model, args.batch[0], meta=True)  # a broken file, before any work
    drawn = importlib.util.find_spec("matplotlib") is not None
    if args.output and not drawn:  # a GPU machine may lack it: the JSON draws again elsewhere
        print(f"matplotlib is not installed: no {Path(args.output).with_suffix('.png')} (the "
              f"report's JSON keeps every figure)", file=sys.stderr)
    outputs = report_outputs(args, figure=drawn)
    from ..torch.fidelity import run_torch_fidelity
    from .progress import Display

    with Display("quiet" if args.json or args.quiet else "auto") as display:
        report = run_torch_fidelity(args.model, args.batch, args.seq_len or [None],
                                    device=device, dtype=dtype, steps=args.steps or 10,
                                    plans=tuple(dict.fromkeys(args.micro_batches)),
                                    progress=display.job(f"fidelity {args.model}"))
    if not report.measured:
        raise MoplaceError(f"no plan of {args.model} could be run: "
                           f"{report.rows[0].reason if report.rows else 'no shape given'}")
    return _finish(args, report, outputs)


def _log_saved(args) -> int:
    """Log a report ``-o STEM`` saved as STEM.json."""
    from ..torch.fidelity import TorchFidelityReport

    path = Path(args.model)
    try:
        data = json.loads(path.read_text())
        report = TorchFidelityReport.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MoplaceError(f"{path}: not a PyTorch fidelity report (-o STEM writes one as "
                           f"STEM.json): {exc}") from None
    if args.no_mlflow:
        raise MoplaceError(f"{path}: a saved report; without --no-mlflow it is logged to MLflow")
    return _finish(args, report, report_outputs(
        args, figure=importlib.util.find_spec("matplotlib") is not None))


def _finish(args, report, outputs) -> int:
    from ..torch.fidelity import draw, log_torch_fidelity, report_table
    from .fidelityout import finish

    run_id = None
    if not args.no_mlflow:
        run_id = log_torch_fidelity(report, args.tracking_uri, args.experiment)
    return finish(args, report.as_dict(), report_table(report), outputs, run_id,
                  lambda path: draw(report, path))
