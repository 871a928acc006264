"""The one place the PyTorch front end imports torch, with a clear error where it is missing."""

from ..errors import MoplaceError

try:
    import torch
except ImportError:  # pragma: no cover - the extra is installed in CI
    raise MoplaceError("the PyTorch front end needs torch: pip install 'moplace[torch]' (the "
                       "CPU wheel: torch==2.13.0)") from None

__all__ = ["torch"]
