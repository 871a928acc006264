"""Command-line arguments checked as they are read: whole numbers within the range the option
accepts, file names the system can take, and parse errors as one line (argparse's default
adds the whole usage text)."""

from __future__ import annotations

import argparse
import os
import re
import sys

from ..errors import error_line, shown


#: what a parser reads as a negative value, not an option: a number with an optional unit
NEGATIVE = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*[A-Za-z/]*$")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the command and the way to help."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a negative size ("--memory-limit -4GB") reaches its option's check, which names it,
        # instead of reading as an unknown option (argparse takes only "-4" and "-.5" so)
        self._negative_number_matcher = NEGATIVE

    def error(self, message: str):
        text = error_line(Exception(message))  # an argument of 5,000 characters is cut
        print(f"{self.prog}: error: {text} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def integer(low: int, high: int):
    """An argparse ``type``: a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not a number, or one of over 4300 digits
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}, "
                                             f"got {shown(text)}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {shown(value)}")
        return value

    parse.__name__ = "integer"  # argparse names the type in some messages
    return parse


def memory_size(text: str) -> float:
    """An argparse ``type``: a memory size, ``8GiB``, ``512MiB``, ``16GB`` or bytes."""
    from ..core.presets import parse_size

    value = parse_size(text.lstrip("-")) if isinstance(text, str) else None
    if value is not None and text.lstrip().startswith("-") and value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive memory size, e.g. 8GiB or 512MiB, "
                                         f"got {shown(text)}")
    if value is None or not 1 <= value <= 2.0**50:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a memory size from 1 B to 1 PiB, e.g. 8GiB or "
                                         f"512MiB, got {shown(text)}")
    return Size(value, text.strip())


class Size(float):
    """A size in bytes that remembers how the user wrote it (``text``), for messages."""

    def __new__(cls, value: float, text: str):
        out = super().__new__(cls, value)
        out.text = text
        return out

    def __reduce__(self):  # pickled (a checkpoint) as the plain number it is
        return float, (float(self),)


memory_size.__name__ = "memory size"


#: what file systems take: one name of at most 255 bytes, a path of at most 4096
NAME_MAX, PATH_MAX = 255, 4096


def file_arg(text: str) -> str:
    """An argparse ``type`` for a file, folder, bundled name or URI: no NUL byte, no name part
    over 255 bytes, no path over 4096 bytes (the system would refuse them later, after work)."""
    if "\x00" in text:
        raise argparse.ArgumentTypeError(f"contains a NUL byte: {shown(text)}")
    raw = os.fsencode(text)
    if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise argparse.ArgumentTypeError(
            f"is too long for a file name ({NAME_MAX} bytes a name, {PATH_MAX} a path): "
            f"{shown(text)}")
    return text


def logged_run_options(p, experiment_help: str = "MLflow experiment (default: moplace)",
                       experiment: str | None = None) -> None:
    """The options of a command whose runs are logged to MLflow (search, sweep, fidelity):
    ``--json``, ``--quiet``, ``--no-mlflow``, ``--tracking-uri`` and ``--experiment`` (default
    ``experiment``, described by ``experiment_help``)."""
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress display on stderr")
    p.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    tracking_uri_option(p)
    p.add_argument("--experiment", default=experiment, help=experiment_help)


def tracking_uri_option(p) -> None:
    """``--tracking-uri``: the MLflow tracking URI a command logs to or reads."""
    p.add_argument("--tracking-uri", type=file_arg, help="MLflow tracking URI (default: "
                   "$MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)")
