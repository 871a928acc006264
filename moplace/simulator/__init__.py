"""A strategy becomes a trace, and a trace a score.

`taskgraph` expands splits into parts, transfers and all-reduces; `_simcore` is the
numba-compiled event loop; `engine` has `simulate` and `Trace`; `delta` patches a neighbour's
task graph instead of building it; `evaluation` scores a trace on the objectives.
"""

from .engine import Trace, simulate
from .evaluation import Evaluation, evaluate

__all__ = ["Evaluation", "Trace", "evaluate", "simulate"]
