"""The one place the PyTorch front end imports torch, with a clear error where it is missing."""

from ..errors import MoplaceError

try:
    import torch
except ImportError:  # pragma: no cover - the extra is installed in CI
    raise MoplaceError("the PyTorch front end needs torch: pip install 'moplace[torch]' (the "
                       "CPU wheel: torch==2.13.0)") from None

__all__ = ["quiet_logs", "torch"]


def quiet_logs():
    """A context in which torch's (and transformers') loggers print nothing: a shape error
    under fake tensors logs a traceback of PyTorch's own before it raises, and the error that
    follows is said in one line of ours."""
    import contextlib
    import logging

    @contextlib.contextmanager
    def quiet():
        family = ("torch", "transformers")
        loggers = [logging.getLogger(name) for name in family] + [
            v for k, v in logging.root.manager.loggerDict.items()
            if isinstance(v, logging.Logger) and k.split(".")[0] in family]
        kept = [(lg, lg.disabled, lg.level) for lg in loggers]
        for lg in loggers:  # those made later inherit the family's level
            lg.disabled = True
            lg.setLevel(logging.CRITICAL + 1)
        try:
            yield
        finally:
            for lg, disabled, level in kept:
                lg.disabled = disabled
                lg.setLevel(level)  # (clears the loggers' cached levels)

    return quiet()
