"""``moplace profile MODEL.py`` for a PyTorch model file (one that imports torch) or
``hf:NAME`` (a Hugging Face model by configuration): traced under fake tensors, its times
roofline estimates for ``--estimate``'s device kinds (`moplace.torch.frontend`). A Keras model
file goes to the TensorFlow front end as before."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import MoplaceError
from ..torch.modelfile import imports_torch

__all__ = ["imports_torch", "profile_torch"]
#: the device kind a PyTorch model is estimated for when --estimate names none
DEFAULT_KIND = "H100"


def profile_torch(args, path) -> int:
    """Trace the PyTorch model file ``path`` (a `Path`, or ``hf:NAME``) and write its op graph
    to ``args.output``."""
    hf = str(path).startswith("hf:")
    what = f"{path} is a Hugging Face model" if hf else f"{path} is a PyTorch model file"
    if importlib.util.find_spec("torch") is None:
        raise MoplaceError(f"{what}, and torch is not installed: pip install 'moplace[torch]' "
                           f"(the CPU wheel, torch==2.13.0)")
    if args.testbed is not None or args.device_count not in (None, 1) or args.parts:
        raise MoplaceError(f"{what}: --testbed, --device-count and --parts measure ops with "
                           f"TensorFlow; a PyTorch model's times are roofline estimates "
                           f"(--estimate KINDS) for now")
    if not hf and (args.seq_len is not None or args.dtype != "fp32"):
        raise MoplaceError(f"{what}: --seq-len and --dtype are for hf:NAME models (a model "
                           f"file sets its own shapes and dtypes)")
    if args.batch < 1:
        raise MoplaceError(f"--batch must be at least 1, got {args.batch}")
    from ..costs.devicespecs import DeviceSpecError, require_spec

    kinds = [k.strip() for k in (args.estimate or DEFAULT_KIND).split(",") if k.strip()]
    try:
        kinds = [require_spec(k).kind for k in kinds]
    except DeviceSpecError as exc:
        raise MoplaceError(f"--estimate: {exc}") from None
    if hf:  # a mistyped name or a bad config.json is refused before the output is checked
        from ..torch.hf import hf_config

        hf_config(str(path)[3:])
    from .output import check_output

    out_dir = Path(args.output).resolve().parent
    if not out_dir.is_dir():
        raise MoplaceError(f"-o {args.output}: folder {out_dir} does not exist")
    check_output(args.output, force=args.force, flag="-o")  # before tracing, not after
    from ..io import save_graph
    from ..torch.frontend import profile_torch_model
    from .progress import Display

    with Display("quiet" if args.quiet else "auto") as display:
        traced = profile_torch_model(path, args.batch, kinds, seq_len=args.seq_len,
                                     dtype=args.dtype,
                                     progress=display.job(f"trace {getattr(path, 'name', path)}"))
    g = traced.graph
    save_graph(g, args.output)
    steps = ", ".join(f"{k} {g.total_compute(k) * 1e3:.3f} ms" for k in kinds)
    kind = "a Hugging Face model (transformers, eager attention)" if hf else "a PyTorch model"
    print(f"{g.name}: {kind}, {traced.parameters:,} parameters; {len(g.ops)} ops, "
          f"{len(g.edges)} edges ({g.metadata['folded_views']} views folded); traced in "
          f"{traced.total_seconds:.1f} s without allocating it (fake tensors)")
    print(f"op times are roofline estimates, not measurements: one device's step {steps}")
    print(f"wrote {args.output} (search it on a cluster of {' or '.join(kinds)} devices: "
          f"`moplace clusters` lists the presets)")
    return 0
