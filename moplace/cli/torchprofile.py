"""``moplace profile MODEL.py`` for a PyTorch model file (one that imports torch): traced under
fake tensors, its times roofline estimates for ``--estimate``'s device kinds
(`moplace.torch.frontend`). A Keras model file goes to the TensorFlow front end as before."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import MoplaceError
from ..torch.modelfile import imports_torch

__all__ = ["imports_torch", "profile_torch"]
#: the device kind a PyTorch model is estimated for when --estimate names none
DEFAULT_KIND = "H100"


def profile_torch(args, path: Path) -> int:
    """Trace the PyTorch model file ``path`` and write its op graph to ``args.output``."""
    if importlib.util.find_spec("torch") is None:
        raise MoplaceError(f"{path} is a PyTorch model file, and torch is not installed: pip "
                           f"install 'moplace[torch]' (the CPU wheel, torch==2.13.0)")
    if args.testbed is not None or args.device_count not in (None, 1) or args.parts:
        raise MoplaceError(f"{path} is a PyTorch model file: --testbed, --device-count and "
                           f"--parts measure ops with TensorFlow; a PyTorch model's times are "
                           f"roofline estimates (--estimate KINDS) for now")
    if args.batch < 1:
        raise MoplaceError(f"--batch must be at least 1, got {args.batch}")
    from ..costs.devicespecs import DeviceSpecError, require_spec

    kinds = [k.strip() for k in (args.estimate or DEFAULT_KIND).split(",") if k.strip()]
    try:
        kinds = [require_spec(k).kind for k in kinds]
    except DeviceSpecError as exc:
        raise MoplaceError(f"--estimate: {exc}") from None
    from .output import check_output

    out_dir = Path(args.output).resolve().parent
    if not out_dir.is_dir():
        raise MoplaceError(f"-o {args.output}: folder {out_dir} does not exist")
    check_output(args.output, force=args.force, flag="-o")  # before tracing, not after
    from ..io import save_graph
    from ..torch.frontend import profile_torch_model
    from .progress import Display

    with Display("quiet" if args.quiet else "auto") as display:
        traced = profile_torch_model(path, args.batch, kinds,
                                     progress=display.job(f"trace {path.name}"))
    g = traced.graph
    save_graph(g, args.output)
    steps = ", ".join(f"{k} {g.total_compute(k) * 1e3:.3f} ms" for k in kinds)
    print(f"{g.name}: a PyTorch model, {traced.parameters:,} parameters; {len(g.ops)} ops, "
          f"{len(g.edges)} edges ({g.metadata['folded_views']} views folded); traced in "
          f"{traced.total_seconds:.1f} s without allocating it (fake tensors)")
    print(f"op times are roofline estimates, not measurements: one device's step {steps}")
    print(f"wrote {args.output} (search it on a cluster of {' or '.join(kinds)} devices: "
          f"`moplace clusters` lists the presets)")
    return 0
