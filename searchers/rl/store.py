"""Policy files: a trained policy's weights and the sizes they fit, in one ``.npz``.

``--set save_policy=FILE`` writes one when a search ends; ``--set policy=FILE`` starts a search
from one, on the same graph or another (zero-shot, or fine-tuned by searching on). The file
holds the policy's `config` (groups, devices, heads, layer sizes, vocabulary) as JSON and its
weights in order; a policy fits a problem with the same number of devices and the same heads.
Writes are atomic (a temporary file, then ``os.replace``).
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from moplace.errors import MoplaceError

FORMAT = "moplace-policy/1"


def check_writable(path) -> Path:
    """``path`` as a Path, or a `MoplaceError` if its folder is missing or not writable (checked
    before a search starts, so that its result is never lost at the end)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise MoplaceError(f"policy file {path} is a directory")
    if not folder.is_dir():
        raise MoplaceError(f"cannot write policy file {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise MoplaceError(f"cannot write policy file {path}: folder {folder} is not writable")
    return path


def save(path, config: dict, weights: list[np.ndarray], meta: dict | None = None) -> None:
    """Write ``weights`` with their ``config`` (and free-form ``meta``: what it was trained on)."""
    path = check_writable(path)
    header = json.dumps({"format": FORMAT, "config": config, "meta": meta or {}})
    arrays = {f"w{i:04d}": np.asarray(w) for i, w in enumerate(weights)}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                               dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, header=np.array(header), **arrays)
        os.chmod(tmp, 0o644)  # as a file the user writes, not mkstemp's private 0600
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise MoplaceError(f"cannot write policy file {path}: {exc.strerror or exc}") from None


def load(path) -> tuple[dict, list[np.ndarray], dict]:
    """(config, weights, meta) of policy file ``path``; a `MoplaceError` names the file when it
    is missing, not a policy file, or damaged."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(str(data["header"]))
            names = sorted(k for k in data.files if k.startswith("w"))
            weights = [data[k] for k in names]
    except FileNotFoundError:
        raise MoplaceError(f"policy file {path} does not exist") from None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise MoplaceError(f"{path} is not a moplace policy file ({type(exc).__name__}: "
                           f"{exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT \
            or not isinstance(header.get("config"), dict):
        raise MoplaceError(f"{path} is not a moplace policy file (format "
                           f"{header.get('format') if isinstance(header, dict) else None!r}, "
                           f"expected {FORMAT!r})")
    return header["config"], weights, header.get("meta") or {}


def check_fits(path, have: dict, want: dict) -> None:
    """A `MoplaceError` naming ``path`` and the first size where the file's config ``have``
    differs from what the problem and settings need, ``want``."""
    for key, value in want.items():
        if have.get(key) != value:
            raise MoplaceError(f"policy file {path} does not fit this search: {key} is "
                               f"{have.get(key)!r} in the file, {value!r} here")
