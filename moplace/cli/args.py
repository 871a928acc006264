"""Command-line arguments checked as they are read: whole numbers within the range the option
accepts, and parse errors as one line (argparse's default adds the whole usage text)."""

from __future__ import annotations

import argparse
import sys

from ..errors import shown


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the command and the way to help."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
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
