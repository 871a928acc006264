"""Files a command will write, checked before its work starts: a long search or profile must
not end in "cannot write" or silently replace what the user made."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
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
    """Create ``folder`` if needed and make sure a file can be written in it. The folders made
    here are removed again, if still empty, when the command then fails (`undone_on_failure`):
    a refused command leaves nothing behind."""
    folder = Path(folder)
    top = next((f for f in [folder, *folder.parents] if f.parent.exists() or f == f.parent),
               folder) if not folder.exists() else None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if top is not None:
            _MADE.append(top)
        fd, probe = tempfile.mkstemp(prefix=".moplace-write-test-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise MoplaceError(f"{flag} {folder}: cannot write there ({exc.strerror or exc})") from None
    return folder


#: the outermost folders `check_folder` made, not yet kept by a command that ended well
_MADE: list[Path] = []


@contextmanager
def undone_on_failure():
    """Run a command: if it fails (any exception, a refusal included), the folders
    `check_folder` made for it are removed again where they are still empty."""
    start = len(_MADE)
    try:
        yield
    except BaseException:
        for top in reversed(_MADE[start:]):
            _remove_empty(top)
        raise
    finally:
        del _MADE[start:]


def _remove_empty(top: Path) -> None:
    """Remove ``top`` and the folders under it, deepest first, where they hold nothing."""
    if not top.is_dir():
        return
    for root, _, _ in sorted(os.walk(top), key=lambda w: -len(Path(w[0]).parts)):
        try:
            os.rmdir(root)
        except OSError:  # not empty (the command wrote something), or not ours to remove
            pass
