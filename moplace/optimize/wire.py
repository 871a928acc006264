"""Pickling a search's objects to another place: a checkpoint file, or a Dask worker.

Strategies and graphs hold read-only mapping proxies (`types.MappingProxyType`), which plain
pickle refuses; `Pickler` writes them as dicts and they load as proxies again. A searcher's
library may hold a thread lock (Optuna 5.1's genetic samplers do), which plain pickle refuses
too: it is written as a new lock, unheld, as every lock is between a search's batches, where
its state is written. The problem and
its big parts (graph, cluster, cost model, genome space) can be written as *references*
(``refs``: name -> object, written by name) that the loading side resolves to its own copy
(`Unpickler`'s ``resolve``), so a batch of strategies sent to a worker, or a searcher's
state in a checkpoint, does not carry the graph again. Classes are looked up where they are
today or where they were before they moved (`moplace.optimize.moved`).
"""

from __future__ import annotations

import copyreg
import io
import pickle
import threading
from types import MappingProxyType
from typing import Callable

from . import moved

#: the parts of a `Problem` written as references (the problem itself is ``"problem"``)
PROBLEM_PARTS = ("graph", "cluster", "costs", "genome")


def mappingproxy(d):
    """A read-only view of ``d`` (how a pickled mapping proxy is made again)."""
    return MappingProxyType(d)


class Pickler(pickle.Pickler):
    """Pickles the objects of ``refs`` (name -> object) as references by name, and read-only
    mapping proxies as dicts."""

    dispatch_table = {**copyreg.dispatch_table,
                      MappingProxyType: lambda m: (mappingproxy, (dict(m),)),
                      type(threading.Lock()): lambda _: (threading.Lock, ()),
                      type(threading.RLock()): lambda _: (threading.RLock, ())}

    def __init__(self, file, refs: dict | None = None):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._refs = {id(obj): name for name, obj in (refs or {}).items()}

    def persistent_id(self, obj):
        return self._refs.get(id(obj)) if self._refs else None


class Unpickler(pickle.Unpickler):
    """Resolves the references `Pickler` wrote with ``resolve(name)``."""

    def __init__(self, file, resolve: Callable[[str], object] | None = None):
        super().__init__(file)
        self._resolve = resolve

    def persistent_load(self, pid):
        if self._resolve is None:
            raise pickle.UnpicklingError(f"unknown reference {pid!r}")
        return self._resolve(pid)

    def find_class(self, module, name):
        if module.startswith(("moplace.", "searchers.")):
            return moved.find_class(module, name)  # also where it was before it moved
        return super().find_class(module, name)


def problem_refs(problem) -> dict:
    """The problem and its parts as references (the genome space only once computed)."""
    refs = {"problem": problem, "graph": problem.graph, "cluster": problem.cluster,
            "costs": problem.costs}
    if "genome" in vars(problem):  # a cached_property: only once computed
        refs["genome"] = problem.genome
    return refs


def problem_resolver(problem) -> Callable[[str], object]:
    """``resolve`` for `Unpickler`: the loading side's problem and its parts."""
    def resolve(pid):
        if pid == "problem":
            return problem
        if pid in PROBLEM_PARTS:
            return getattr(problem, pid)  # the genome is computed here if need be
        raise pickle.UnpicklingError(f"unknown reference {pid!r}")
    return resolve


def dumps(obj, refs: dict | None = None) -> bytes:
    buf = io.BytesIO()
    Pickler(buf, refs).dump(obj)
    return buf.getvalue()


def loads(data: bytes, resolve: Callable[[str], object] | None = None):
    return Unpickler(io.BytesIO(data), resolve).load()
