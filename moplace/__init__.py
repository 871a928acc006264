"""moplace: multi-objective placement, ordering and splitting of one training step across GPUs.

Data flows one way, and the subpackages follow it (docs/architecture.md):

    core (OpGraph, Cluster, Strategy) + costs -> simulator (simulate -> Trace -> objectives
    -> Evaluation) -> optimize (Problem, searchers, search -> Pareto archive) -> review -> cli

The names below are the public API::

    import moplace
    problem = moplace.Problem(moplace.load_graph("pipedream:vgg16"),
                              moplace.load_cluster("4xV100-NVLink"))
    result = moplace.search(problem, moplace.make_searcher("nsga2"), budget=500)

Importing this package loads numpy, networkx and numba only; TensorFlow, mlflow, optuna and
pymoo are imported by the modules that use them.
"""

from .core.baselines import BASELINES, baseline
from .core.cluster import Cluster, Device
from .core.genome import GenomeSpace
from .core.graph import Edge, Op, OpGraph
from .core.presets import list_presets, load_cluster
from .core.strategy import Split, Strategy
from .costs.costmodel import CostModel
from .errors import ClusterError, FormatError, GraphError, MoplaceError, StrategyError
from .io import list_bundled, load_graph, save_graph
from .io.sources import GRAPH_SOURCES, add_source
from .io.strategies import load_strategy, save_strategy
from .optimize.driver import Budget, Callback, Point, SearchResult, search
from .optimize.plugins import SEARCHERS, make_searcher
from .optimize.problem import Limits, Problem
from .optimize.searcher import OneShot, Searcher
from .review.select import Front
from .simulator.engine import Trace, simulate
from .simulator.evaluation import Evaluation, evaluate

__version__ = "0.1.0"


def _zoo_graph(model: str, **options):
    """``zoo:MODEL``: a model of the zoo profiled with TensorFlow (`moplace.tf.graphsource`),
    imported only when such a graph is loaded."""
    from .tf.graphsource import zoo_graph

    return zoo_graph(model, **options)


# the front ends' graph sources, registered where every user of moplace gets them (the
# command line, the Python API, Dask workers) without importing a front end
if "zoo" not in GRAPH_SOURCES:
    add_source("zoo", _zoo_graph, "a model of `moplace zoo`, profiled with TensorFlow at batch 32")


__all__ = [
    "BASELINES", "Budget", "Callback", "Cluster", "ClusterError", "CostModel", "Device", "Edge",
    "Evaluation", "FormatError", "Front", "GenomeSpace", "GraphError", "Limits", "MoplaceError", "OneShot", "Op",
    "OpGraph", "Point", "Problem", "SEARCHERS", "SearchResult", "Searcher", "Split", "Strategy",
    "StrategyError", "Trace", "baseline", "evaluate", "list_bundled", "list_presets",
    "load_cluster", "load_graph", "load_strategy", "make_searcher", "save_graph", "save_strategy",
    "search", "simulate",
]
