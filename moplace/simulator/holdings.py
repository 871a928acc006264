"""What each task of a task graph holds (`moplace.simulator.taskgraph`): the codes of what a
split op's part holds and what a reader's part needs, and per task the bytes of its output, its
parameters and its scratch."""

from __future__ import annotations

import numpy as np

from ..core.graph import ROLES, SPLIT_DIMS

_UPDATE = ROLES.index("update")
_DIM_CODE = {None: -1, **{d: i for i, d in enumerate(SPLIT_DIMS)}}  # batch 0 ... expert 3
_BATCH, _CHANNEL, _TENSOR = _DIM_CODE["batch"], _DIM_CODE["channel"], _DIM_CODE["tensor"]
#: a part of an expert split holds its experts' slice, as a channel slice of the unit square
#: (the ``[E, C, H]`` buffers' E is its channel axis); it is held as `_CHANNEL` (`held_codes`)
_EXPERT = _DIM_CODE["expert"]
#: a part of a sequence split (context parallelism) holds its tokens' slice: the unit square's
#: third axis (`_SEQ_HELD`); it is a batch split in all else (replicated weights, all-reduced
#: gradients, ZeRO: the simulator's collectives see it as `_BATCH`)
_SEQUENCE = _DIM_CODE["sequence"]
#: what a producer's part holds beyond its split dimension's code: a replica of weights (a
#: batch split of an op that holds weights and makes no activation: each part the whole), a
#: partial sum (of the whole output, `Op.partial_sums`) and its slice of the tokens
_REPLICA, _PARTIAL, _SEQ_HELD = 3, 4, 5
#: what a consumer's part needs beyond whole (-1), its batch slice (0) and its channel slice
#: (1): the partial sum of its own index, which it adds to its own (a partial sum of partials),
#: and its slice of the tokens
_OWN, _SEQ_NEED = 2, 3
_HELD, _NEED = 7, 5  # how many codes each takes (from -1)


def held_codes(a, g, orig, dims) -> np.ndarray:
    """Per op of ``a``'s graph (the plan's, whose ops run ``orig`` of graph ``g``): what each
    of its parts holds, as its dimension's code, `_REPLICA` or `_PARTIAL` (an expert part
    holds its channel slice: `_CHANNEL`, never the expert code, which is `_REPLICA`'s; a
    sequence part its tokens: `_SEQ_HELD`)."""
    held = np.where(dims == _EXPERT, _CHANNEL, np.where(dims == _SEQUENCE, _SEQ_HELD, dims))
    weights = (g.param_bytes[orig] > 0) & (g.output_bytes[orig] == 0) & (a.role != _UPDATE)
    held[((dims == _BATCH) | (dims == _SEQUENCE)) & weights] = _REPLICA
    held[(dims == _TENSOR) & a.partial_sums] = _PARTIAL
    return held


def task_memory(a, task_op, parts, held, sharded) -> tuple[np.ndarray, np.ndarray]:
    """Per task its output's and its parameters' bytes; ``sharded`` ops' replicas keep 1/n
    of the parameters (ZeRO); a partial sum is as large as the whole output; a batch or a
    sequence part holds its slice of the activations and a whole weight gradient."""
    n = parts[task_op].astype(np.float64)
    h = held[task_op]
    batch = (h == _BATCH) | (h == _REPLICA) | (h == _SEQ_HELD)
    grad = a.grad_bytes[task_op]
    out = a.output_bytes[task_op]
    # a batch part holds its slice of activations but a full weight gradient
    out_b = np.where(batch, (out - np.minimum(grad, out)) / n + np.minimum(grad, out),
                     np.where(h == _PARTIAL, out, out / n))
    par = a.param_bytes[task_op]
    par_b = np.where(batch & ~sharded[task_op], par, par / n)
    return out_b, par_b


def task_scratch(g, task_op, vop, parts, held, in_time, n_coll) -> np.ndarray:
    """Per task its scratch bytes (`TaskGraph.scratch`): those of the op of graph ``g`` it
    runs (``task_op``), shared among the parts (``parts``, per op of the plan's graph; a
    partial sum's part holds it whole: ``held``) and the micro-batches (``in_time``) that cut
    it; ``vop``: each compute task's op of the plan's graph. Empty when ``g`` has none."""
    s = g.scratch_bytes
    if s is None:
        return np.zeros(0)
    cut = np.where(held == _PARTIAL, 1, parts) * in_time
    return np.concatenate([s[task_op] / cut[vop], np.zeros(n_coll)])
