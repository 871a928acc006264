"""Where modules and classes were before the subpackage layout (moplace 0.1, issue 13), so that
files written before it (search checkpoints, which pickle class paths) still load.

`current_module` maps an old module path to today's; `find_class` resolves an old
``(module, name)`` pair, looking into the submodules of a module that became a package;
`current_searcher_class` maps the searcher class a checkpoint's key names. Nothing else in
moplace should need this table: new code uses today's paths.
"""

from __future__ import annotations

import importlib
import pkgutil

_MODULES = {
    **{f"moplace.{m}": f"moplace.core.{m}"
       for m in ("graph", "cluster", "strategy", "genome", "baselines", "synthetic")},
    "moplace.presets": "moplace.core.presets",
    "moplace.presets.export": "moplace.core.presets.export",
    **{f"moplace.{m}": f"moplace.costs.{m}"
       for m in ("costmodel", "linkfit", "analytic", "devicespecs")},
    "moplace.front_io": "moplace.io.fronts",
    "moplace.strategy_io": "moplace.io.strategies",
    **{f"moplace.{m}": f"moplace.simulator.{m}" for m in ("taskgraph", "_simcore", "delta")},
    "moplace.simulator": "moplace.simulator.engine",
    "moplace.evaluate": "moplace.simulator.evaluation",
    **{f"moplace.{m}": f"moplace.optimize.{m}"
       for m in ("problem", "searcher", "archive", "hypervolume", "checkpoint", "exact", "tiny",
                 "known")},
    "moplace.search": "moplace.optimize.driver",
    **{f"moplace.{m}": f"moplace.review.{m}" for m in ("tracking", "report", "stats")},
    "moplace.cli_search": "moplace.cli.search",
    "moplace.cli_tf": "moplace.cli.tf",
    "searchers._operators": "searchers.nsga2.operators",
    "searchers._listsched": "searchers.listsched.schedule",
    "searchers._listsched_core": "searchers.listsched.kernels",
    "searchers._metf": "searchers.listsched.metf",
    "searchers.osdpos": "searchers.listsched.osdpos",
}

# a class whose module became a package, or that was split in variants (by searcher name)
_SEARCHER_CLASSES = {
    ("searchers.optuna_search.OptunaSearcher", "optuna-tpe"):
        "searchers.optuna_search.searcher.OptunaTpeSearcher",
    ("searchers.optuna_search.OptunaSearcher", "optuna-nsga2"):
        "searchers.optuna_search.searcher.OptunaNsga2Searcher",
}


def current_module(module: str) -> str:
    """Today's path of ``module`` (itself when it did not move)."""
    return _MODULES.get(module, module)


def find_class(module: str, name: str):
    """The object an old pickle calls ``module.name``: in the moved module, else (a module that
    became a package) in the first of the package's submodules that defines it."""
    mod = importlib.import_module(current_module(module))
    for owner in [mod] + [importlib.import_module(f"{mod.__name__}.{info.name}")
                          for info in pkgutil.iter_modules(getattr(mod, "__path__", ()))]:
        obj = owner
        for part in name.split("."):  # a nested class's qualname
            obj = getattr(obj, part, None)
        if obj is not None:
            return obj
    raise AttributeError(f"module {module!r} (now {mod.__name__!r}) has no attribute {name!r}")


def current_searcher_class(path: str, searcher: str) -> str:
    """Today's ``module.qualname`` of the searcher class a checkpoint's key calls ``path``
    (``searcher``: its registered name)."""
    if (path, searcher) in _SEARCHER_CLASSES:
        return _SEARCHER_CLASSES[path, searcher]
    module, _, qualname = path.rpartition(".")
    if not module:
        return path
    try:
        cls = find_class(module, qualname)
    except (ImportError, AttributeError):
        return path
    return f"{cls.__module__}.{cls.__qualname__}"
