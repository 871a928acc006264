"""Search algorithms that propose strategies, registered by name in `moplace.searcher.SEARCHERS`.

Searchers only propose strategies and learn from their evaluations; the driver
(`moplace.search`) owns the budget, the archive and the logging. Importing this package
registers the built-in searchers. Those that need pymoo or optuna are registered by module and
class name and imported when first made, so importing this package stays light.
"""

from functools import partial
from importlib import import_module

from moplace.baselines import BASELINES
from moplace.searcher import SEARCHERS

from .baselines import BaselineSearcher
from .listsched import DposSearcher, HeftSearcher, MetfSearcher
from .osdpos import OsDposSearcher
from .random_search import RandomSearcher

for _name in BASELINES:
    SEARCHERS.add(_name, partial(BaselineSearcher, _name))
SEARCHERS.add("heft", HeftSearcher)
SEARCHERS.add("dpos", DposSearcher)
SEARCHERS.add("m-etf", MetfSearcher)
SEARCHERS.add("os-dpos", OsDposSearcher)
SEARCHERS.add("random", RandomSearcher)


def _lazy(module: str, cls: str, **defaults):
    """A factory that imports ``searchers.<module>`` only when the searcher is made."""
    def make(**settings):
        return getattr(import_module(f"searchers.{module}"), cls)(**{**defaults, **settings})
    make.__doc__ = f"searchers.{module}.{cls}"
    make.target = lambda: getattr(import_module(f"searchers.{module}"), cls)  # for its signature
    make.fixed = tuple(defaults)  # settings the registered name fixes
    return make


SEARCHERS.add("nsga2", _lazy("nsga2", "Nsga2Searcher"))
SEARCHERS.add("mcmc", _lazy("mcmc", "McmcSearcher"))
SEARCHERS.add("optuna-nsga2", _lazy("optuna_search", "OptunaSearcher", sampler="nsga2"))
SEARCHERS.add("optuna-tpe", _lazy("optuna_search", "OptunaSearcher", sampler="tpe"))

__all__ = ["BaselineSearcher", "DposSearcher", "HeftSearcher", "MetfSearcher", "OsDposSearcher",
           "RandomSearcher"]
