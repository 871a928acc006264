"""moplace: multi-objective placement, ordering and splitting of one training step across GPUs.

Data flows one way: `OpGraph` + `Cluster` + `Strategy` -> `simulate()` -> `Trace` ->
objectives. Importing this package loads numpy, networkx and numba only; TensorFlow, mlflow and
optuna are imported by the modules that use them.
"""

from .baselines import BASELINES, baseline
from .cluster import Cluster, Device
from .costmodel import CostModel
from .errors import ClusterError, FormatError, GraphError, MoplaceError, StrategyError
from .evaluate import Evaluation, evaluate
from .genome import GenomeSpace
from .graph import Edge, Op, OpGraph
from .io import list_bundled, load_graph, save_graph
from .presets import list_presets, load_cluster
from .simulator import Trace, simulate
from .strategy import Split, Strategy
from .strategy_io import load_strategy, save_strategy

__version__ = "0.1.0"
