"""Search checkpoints: a search's state in one file, to continue it after Ctrl-C.

`moplace.search(..., checkpoint=PATH)` writes the file and, when it exists, continues
from it. The file holds::

    moplace-checkpoint\\n
    {"version": 1, "key": {...}, "n_evaluations": N, "elapsed": s, "status": ..., "bytes": B,
     "sha256": ...}\\n                                  (one JSON line: what the state is for)
    B bytes of pickle                                   (the state)

**The key** says what the state belongs to: the graph (name, number of ops, a fingerprint of
its arrays, op names and compute times), the cluster (name, devices, a fingerprint of its
memory, speeds, links and routes), the objectives, the limits, the searcher (name, class and
settings) and the seed. A checkpoint is only continued with an equal key; `check` names the
first field that differs.

**The state** (`state_bytes` / `load_state`) is the searcher's instance state (its internals
and random generator included), the Pareto archive, the hypervolume history and the elapsed
seconds. The problem is not in it: the problem, its graph, cluster, cost model and genome
space are pickled as references and the loading side substitutes its own (equal by the key),
so a restored searcher works on the problem it is given, never on a stale copy. The searcher
object passed in is restored in place (its ``__dict__``, or ``__setstate__``), so references
the caller holds see the restored searcher.

Pickle runs code while loading: continue only checkpoints you wrote. A file that is not a
checkpoint, is truncated or corrupt (checked by length and SHA-256 before unpickling), or was
written by another version, gives a `MoplaceError` naming it. Writes are atomic (`write`:
a temporary file in the same directory, fsync, ``os.replace``, fsync of the directory): a
crash leaves the old file or the new one, never a mix.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import tempfile
from pathlib import Path

from ..errors import MoplaceError
from ..io.fronts import hash_arrays, hash_graph
from . import moved, wire

MAGIC = b"moplace-checkpoint\n"
#: the format version written: 2 since searchers hold their settings as one declared object and
#: MCMC its chains as parts of its own (issue 31); a version-1 file's searcher state cannot be
#: read into today's searchers, so it is refused with both versions named
#: 3 since strategies carry strategy-wide options (gradient buckets, issue 32), 4 since
#: they shard (ZeRO) and recompute groups, and 5 since they run micro-batches (issue 33): the
#: genome grew a gene each time, and a searcher's
#: state (MCMC's chains, NSGA-II's population) holds genomes of its version's layout, which
#: today's searchers cannot continue, so versions 2 to 4 are refused with both versions named
#: (resuming one crashed inside MCMC's moves); a reader of an older version refuses this one;
#: 6 since the genome of a framework's degrees (`search --space`) has virtual stages and FP8
#: (issue 49), 7 since it has expert parallelism
VERSION = 7
#: the versions this moplace reads
READS = (7,)
#: what each older version was written by, for the message that refuses it
WRITTEN_BY = {1: "moplace 0.1 before its searcher settings were declared (issue 31)",
              2: "moplace before strategies had options (issue 32), whose searcher state "
                 "holds genomes of another layout",
              3: "moplace before strategies sharded and recomputed (issue 32), whose searcher "
                 "state holds genomes of another layout",
              4: "moplace before strategies ran micro-batches (issue 33), whose searcher "
                 "state holds genomes of another layout",
              5: "moplace before the degree space had virtual stages and FP8 (issue 49), whose "
                 "searcher state holds genomes of another layout",
              6: "moplace before the degree space had expert parallelism (issue 49), whose "
                 "searcher state holds genomes of another layout"}
_MAX_HEADER = 1 << 24  # bytes of the JSON line at most


# -- the key ----------------------------------------------------------------------------------

def run_key(problem, searcher, seed: int) -> dict:
    """What a checkpoint belongs to (see module docstring): JSON-ready, compared field by field."""
    g, c = problem.graph, problem.cluster
    limits = problem.limits
    return {
        "graph": g.name, "n_ops": len(g.ops), "graph_fingerprint": _graph_fingerprint(problem),
        "cluster": c.name, "devices": [f"{d.name}:{d.kind}" for d in c.devices],
        "cluster_fingerprint": _cluster_fingerprint(c),
        "objectives": list(problem.objectives),
        "limits": [limits.peak_comm_bytes, limits.peak_mem_bytes],
        "inplace": problem.costs.inplace,
        "searcher": getattr(searcher, "name", type(searcher).__name__),
        "searcher_class": f"{type(searcher).__module__}.{type(searcher).__qualname__}",
        "settings": _plain(searcher.settings()),
        "seed": int(seed),
    }


def _plain(value):
    """``value`` as JSON would give it back (tuples become lists, odd objects their repr)."""
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


def _graph_fingerprint(problem) -> str:
    h = hashlib.sha256()
    hash_graph(h, problem.graph)
    h.update(repr(problem.costs.split_overhead_s).encode())
    return h.hexdigest()[:16]


def _cluster_fingerprint(c) -> str:
    h = hashlib.sha256()
    hash_arrays(h, c.memory, c.speed, c.bandwidth, c.latency, c.route_ptr, c.route_res,
                c.resource_bandwidth)
    return h.hexdigest()[:16]


def check(meta: dict, key: dict, path) -> None:
    """Raise `MoplaceError` naming ``path`` and the first field where ``meta``'s key and ``key``
    differ."""
    have = dict(meta.get("key") or {})
    have.setdefault("inplace", False)  # written before ops ran in place (version 2)
    if isinstance(have.get("searcher_class"), str):  # written before a class moved
        have["searcher_class"] = moved.current_searcher_class(have["searcher_class"],
                                                              str(have.get("searcher")))
    for field, want in key.items():
        if have.get(field) != want:
            if field.endswith("fingerprint"):
                what = field.split("_")[0]
                detail = f"same {what} name {key[what]!r}, other contents"
            elif field == "inplace":
                detail = ("its search ran ops in place: leave out --no-inplace to continue it"
                          if have[field] else "its search ran no op in place (written before "
                          "moplace modelled in-place ops, or with --no-inplace): pass "
                          "--no-inplace to continue it")
            else:
                detail = f"{have.get(field)!r} in the checkpoint, {want!r} now"
            raise MoplaceError(f"checkpoint {path} belongs to another search: {field} differs "
                               f"({detail}); use another checkpoint file, or delete this one")


# -- the file ---------------------------------------------------------------------------------

class _Pickler(wire.Pickler):
    """Pickles the problem's objects (and the searcher itself) as references; read-only mapping
    proxies (used by strategies) as dicts."""


class _Unpickler(wire.Unpickler):
    """Resolves the references `_Pickler` wrote to the objects of the loading side."""

    def __init__(self, file, problem, searcher):
        resolve = wire.problem_resolver(problem)
        super().__init__(file, lambda pid: searcher if pid == "searcher" else resolve(pid))


def _refs(problem, searcher) -> dict:
    return {**wire.problem_refs(problem), "searcher": searcher}


def state_bytes(problem, searcher, state: dict) -> bytes:
    """Pickle ``state`` (a dict); ``searcher`` in it is stored as its instance state."""
    getstate = getattr(searcher, "__getstate__", None)  # object has one from Python 3.11 on
    state = {**state, "searcher": getstate() if getstate is not None else dict(vars(searcher))}
    buf = io.BytesIO()
    try:
        _Pickler(buf, _refs(problem, searcher)).dump(state)
    except (pickle.PicklingError, TypeError, AttributeError, ValueError) as exc:
        raise MoplaceError(f"cannot checkpoint searcher {getattr(searcher, 'name', searcher)!r}: "
                           f"its state cannot be pickled ({exc})") from exc
    return buf.getvalue()


def write(path, meta: dict, payload: bytes) -> None:
    """Write a checkpoint atomically: ``meta`` (JSON-ready) and the pickled state ``payload``."""
    path = Path(path)
    header = {"version": VERSION, **meta, "bytes": len(payload),
              "sha256": hashlib.sha256(payload).hexdigest()}
    line = json.dumps(header).encode() + b"\n"
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC)
            f.write(line)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_folder(directory)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _fsync_folder(directory) -> None:
    """Make the rename durable (the folder's entry), where the system allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder: the rename still happened
        pass
    finally:
        os.close(fd)


def _header(f, path) -> dict:
    if f.readline(len(MAGIC) + 1) != MAGIC:
        raise MoplaceError(f"{path} is not a moplace checkpoint")
    line = f.readline(_MAX_HEADER)
    try:
        meta = json.loads(line)
        version = meta["version"]
    except (ValueError, KeyError, TypeError):
        raise MoplaceError(f"checkpoint {path} is corrupt or truncated (bad header)") from None
    if version not in READS:
        by = f", written by {WRITTEN_BY[version]}" if version in WRITTEN_BY else ""
        newer = (" (newer than this moplace: update it, or " if isinstance(version, int)
                 and not isinstance(version, bool) and version > VERSION else " (")
        raise MoplaceError(f"checkpoint {path} has format version {version!r}{by}; this moplace "
                           f"reads versions {', '.join(map(str, READS))}{newer}start the search "
                           "again with another checkpoint file)")
    return meta


def read_meta(path) -> dict:
    """The header of checkpoint ``path``: key, n_evaluations, elapsed, status (no unpickling)."""
    try:
        with open(path, "rb") as f:
            return _header(f, path)
    except OSError as exc:
        raise MoplaceError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None


def load_state(path, problem, searcher) -> tuple[dict, dict]:
    """Read checkpoint ``path``: (meta, state). ``searcher`` (a fresh one of the saved class) is
    restored in place and is ``state["searcher"]``; the saved problem's objects become
    ``problem``'s. Check the key (`check`) before calling this."""
    try:
        with open(path, "rb") as f:
            meta = _header(f, path)
            payload = f.read(int(meta.get("bytes", -1)) + 1)
    except OSError as exc:
        raise MoplaceError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    if len(payload) != meta.get("bytes") or hashlib.sha256(payload).hexdigest() != meta.get("sha256"):
        raise MoplaceError(f"checkpoint {path} is corrupt or truncated "
                           f"({len(payload)} bytes of state, the header says {meta.get('bytes')})")
    try:
        state = _Unpickler(io.BytesIO(payload), problem, searcher).load()
        searcher_state = state["searcher"]
    except Exception as exc:  # a class that moved or changed since the file was written
        raise MoplaceError(f"checkpoint {path} cannot be read by this moplace "
                           f"({type(exc).__name__}: {exc})") from None
    setstate = getattr(searcher, "__setstate__", None)
    if setstate is not None:
        setstate(searcher_state)
    else:
        vars(searcher).clear()
        vars(searcher).update(searcher_state)
    state["searcher"] = searcher
    _refreeze(state.get("archive"))
    return meta, state


def _refreeze(archive) -> None:
    """Archive entries' values are read-only; unpickled arrays come back writeable."""
    for entry in list(getattr(archive, "_entries", ())) + list(getattr(archive, "_inf_entries", ())):
        entry.values.flags.writeable = False
