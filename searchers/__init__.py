"""Search algorithms that propose strategies, registered by name in `moplace.searcher.SEARCHERS`.

Searchers only propose strategies and learn from their evaluations; the driver
(`moplace.search`) owns the budget, the archive and the logging. Importing this package
registers the built-in searchers; none of them imports pymoo, optuna or TensorFlow here.
"""

from functools import partial

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

__all__ = ["BaselineSearcher", "DposSearcher", "HeftSearcher", "MetfSearcher", "OsDposSearcher",
           "RandomSearcher"]
