"""Files a command will write, checked before its work starts: a long search or profile must
not end in "cannot write" or silently replace what the user made."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import MoplaceError


def check_output(path, *, force: bool, flag: str, replaceable: bool = False) -> Path:
    """Refuse ``path`` (named by option ``flag``) unless it can be written: its folder is
    created if missing and must take a file; an existing file is refused unless ``force``
    (or ``replaceable``: the command's own earlier output, such as a resumed search's)."""
    path = Path(path)
    if path.is_dir():
        raise MoplaceError(f"{flag} {path}: is a folder, not a file")
    if path.exists() and not (force or replaceable):
        raise MoplaceError(f"{flag}: {path} exists; pass --force to replace it, or write "
                           f"elsewhere")
    check_folder(path.parent, flag=flag)
    return path


def check_folder(folder, *, flag: str) -> Path:
    """Create ``folder`` if needed and make sure a file can be written in it."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".moplace-write-test-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise MoplaceError(f"{flag} {folder}: cannot write there ({exc.strerror or exc})") from None
    return folder
