"""Who can run a plan (`runners`): torchtitan, Megatron-LM, ``moplace apply``, by one rule
(`misfit`) that the export (`moplace.io.export`) writes its configurations by, so a plan
listed as running on a framework always exports as that framework's configuration.

A plan runs on **torchtitan** (0.2.2) or **Megatron-LM** (megatron-core 0.16.1) when its shape
(`moplace.core.planshape`) is regular (every stage the same data- or tensor-parallel degree on
its own devices, ``pp * dp * tp`` the devices used) and each of its levers is one the
framework's configuration names:

- equal pipeline stages: with ``pp > 1`` every stage holds the same number of the model's
  layers, whole (`stage_layers`; a graph that names no layers cannot say, and is excluded);
  torchtitan's ``pipeline_parallel_layers_per_stage``, Megatron's ``num_layers / pp``;
- recomputation: none, every layer checkpointed (``full``: torchtitan's
  ``activation_checkpoint.mode = "full"``, Megatron's ``--recompute-granularity full``) or each
  attention's core (``selective``); a set of groups of its own (``partial``) neither;
- ZeRO as each names it: torchtitan's FSDP (``data_parallel_shard_degree``; ZeRO-3 reshards
  the weights after the forward, ZeRO-1/2 keeps them, ``fsdp_reshard_after_forward =
  "never"``, which is ZeRO-2 and what the simulator runs for ZeRO-1); Megatron's distributed
  optimizer (ZeRO-1/2, ``use_distributed_optimizer``), no ZeRO-3;
- the schedule: torchtitan runs 1F1B, GPipe, interleaved 1F1B and zero-bubble (its
  ``Interleaved1F1B`` and ``InterleavedZeroBubble``, both with at least two virtual stages
  per rank, as torchtitan requires of a multi-stage schedule); Megatron 1F1B and interleaved
  1F1B (virtual stages, the micro-batches a multiple of ``pp``), no zero-bubble; virtual
  stages (`PlanShape.vp`) need one of the interleaved schedules, each holding the same whole
  layers;
- micro-batches: the graph's batch (when it names it) must divide into ``dp`` replicas of
  ``micro_batches`` micro-batches;
- tensor parallelism: its degree must divide the attention heads (where the graph's cost
  features give them, `attention_heads`), as both frameworks shard heads;
- expert parallelism (`PlanShape.ep`, a data-parallel stage's experts split on ``expert``):
  its degree must divide each layer's experts (the graph's ``metadata["moe"]``); Megatron's
  ``--expert-model-parallel-size``, torchtitan's ``expert_parallel_degree``, which torchtitan
  carves from FSDP's shard degree (its expert mesh is ``efsdp x ep`` of the
  ``data_parallel_shard_degree``): only with FSDP (ZeRO 1 to 3), not with DDP's replicas;
- context parallelism (`PlanShape.cp`, a stage's groups on ``sequence``): Megatron's
  ``--context-parallel-size`` with ``--cp-comm-type p2p`` (ring) or ``a2a`` (Ulysses: the
  heads and key/value heads must divide by it); torchtitan's ``context_parallel_degree``,
  ring only (its ``context_parallel_rotate_method`` "alltoall" passes ring attention's
  key/value shards, it is no Ulysses), and only under FSDP: torchtitan 0.2.2's
  ``ParallelDims.fsdp_enabled`` is ``dp_shard > 1 or cp > 1``, so it shards the weights over
  the CP ranks whatever the plan says (ZeRO 1 to 3, not DDP's replicas). Both cut each
  sequence into ``2 * cp`` slices for their load-balanced causal split (Megatron's
  ``get_batch_on_this_cp_rank``, torchtitan's ``seq_len_divisor``): the graph's sequence
  length, where it names one, must divide so.

A plan runs on **moplace-apply** when its graph came from a front end that ``moplace apply``
runs (`APPLY_FORMATS`, read from the graph's ``metadata["format"]``): any plan of a Keras
graph; a plan of a PyTorch graph that the PyTorch testbed runs (`pytorch_refusal`: the batch
cutting into its micro-batches and batch parts; what the testbed finds only in the traced
step, it refuses when it plans).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .context import context_of, sequence_misfit
from .derived import structure_of
from .graph import ROLES, OpGraph
from .options import VIRTUAL_SCHEDULES
from .planshape import PlanShape, plan_shape

#: the runners, in the order they are listed
RUNNERS = ("torchtitan", "megatron", "moplace-apply")
#: the training frameworks of `RUNNERS` (configurations written by `moplace export`)
FRAMEWORKS = ("torchtitan", "megatron")
#: the graph formats (``metadata["format"]``) whose plans ``moplace apply`` runs: Keras
#: graphs (the TensorFlow testbed) and PyTorch graphs (the PyTorch testbed)
APPLY_FORMATS = ("tensorflow", "pytorch")
#: the ZeRO stages each framework names (see the module docstring)
ZERO_STAGES = {"torchtitan": (0, 1, 2, 3), "megatron": (0, 1, 2)}
#: the pipeline schedules each framework runs
SCHEDULES = {"torchtitan": ("1f1b", "gpipe", "interleaved", "zero-bubble"),
             "megatron": ("1f1b", "interleaved")}

#: the recomputation modes each framework names
RECOMPUTE = {"torchtitan": ("none", "selective", "full"),
             "megatron": ("none", "selective", "full")}


def applies(graph: OpGraph, strategy=None) -> bool:
    """Does ``moplace apply`` run plans of ``graph`` (its front end's format), and
    ``strategy`` among them?"""
    fmt = graph.metadata.get("format")
    if fmt == "pytorch" and strategy is not None:
        return pytorch_refusal(graph, strategy) is None
    return fmt in APPLY_FORMATS


def pytorch_refusal(graph: OpGraph, strategy) -> str | None:
    """Why the PyTorch testbed (`moplace.torch.apply`) cannot run ``strategy``, or None: the
    batch must cut into the micro-batches and each batch split's parts evenly (what it finds
    only in the traced step is refused when it plans, `moplace.torch.applyprep.prepare`)."""
    if strategy.fp8:
        return "FP8 matmuls: the PyTorch testbed runs on CPUs, which have no FP8 matmul"
    for dim, what in (("expert", "expert"), ("sequence", "context")):
        if any(s.dim == dim for s in strategy.splits.values()):
            return f"{what} parallelism: the PyTorch testbed runs no split on {dim}"
    source = graph.metadata.get("source")
    batch = source.get("batch_size") if isinstance(source, dict) else None
    m = int(strategy.micro_batches)
    if isinstance(batch, int):
        cuts = {s.parts for s in strategy.splits.values() if s.dim == "batch"}
        for parts in sorted({1, *cuts}):
            if batch % (m * parts):
                return (f"a batch of {batch} does not cut into {m} micro-batches of {parts} "
                        "equal parts")
    return None


def batch_sizes(shape: PlanShape) -> dict:
    """The global, per-replica and micro-batch sizes where the graph names its batch and they
    divide evenly (a size that does not is None)."""
    b, dp, m = shape.batch_size, shape.dp or 1, shape.micro_batches
    local = b // dp if b and b % dp == 0 else None
    micro = local // m if local and local % m == 0 else None
    return {"global": b, "per_replica": local, "micro": micro}


def stage_layers(graph: OpGraph, shape: PlanShape) -> list[int] | None:
    """The model's layers each stage of ``shape`` holds whole, in stage order (a layer is
    counted to the stage of its last boundary, `moplace.torch.layers`); None when the graph
    names no layers or a layer's boundaries lie on two stages."""
    layers = graph.metadata.get("layers")
    if not isinstance(layers, dict):
        return None
    names, period, count = layers.get("boundaries"), layers.get("period"), layers.get("count")
    if not (isinstance(names, list) and isinstance(period, int) and isinstance(count, int)
            and period >= 1 and count >= 1 and len(names) > period * count):
        return None
    if shape.vp > 1:  # per virtual stage
        stage_of = {h: j for j, heads in enumerate(shape.chunks) for h in heads}
    else:
        stage_of = {h: k for k, st in enumerate(shape.stages) for h in st.heads}
    head = graph.group_head
    out = [0] * (len(shape.chunks) if shape.vp > 1 else len(shape.stages))
    for j in range(count):
        at = {stage_of.get(int(head[graph.index[n]])) if n in graph.index else None
              for n in names[j * period + 1:(j + 1) * period + 1]}
        if len(at) != 1 or None in at:
            return None
        out[at.pop()] += 1
    return out


def attention_heads(graph: OpGraph) -> int | None:
    """The attention heads of ``graph``'s model, where its cost features say (a fused
    attention's batch x heads over the graph's batch); None where they do not."""
    batch = graph.metadata.get("batch_size")
    features = graph.metadata.get("cost_features")
    if not (isinstance(batch, int) and batch > 0 and isinstance(features, dict)):
        return None
    for f in features.values():
        if isinstance(f, dict) and f.get("cls") == "attention" and not f.get("bwd"):
            bh = f.get("bh")
            return bh // batch if isinstance(bh, int) and bh % batch == 0 else None
    return None


def misfit(graph: OpGraph, shape: PlanShape, framework: str) -> tuple[str, ...]:
    """Why ``framework`` (one of `FRAMEWORKS`) cannot run the plan of ``shape`` on ``graph``
    (empty: it can); see the module docstring."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")
    if not shape.regular:
        return ("irregular: " + "; ".join(shape.why),)
    why = []
    if shape.pp > 1:
        counts = stage_layers(graph, shape)
        if counts is None:
            why.append("pipeline stages need the model's layers, whole on each stage "
                       "(the graph names none, or a layer lies on two stages)")
        elif len(set(counts)) > 1 or 0 in counts:
            why.append(f"pipeline stages of unequal layers ({', '.join(map(str, counts))})")
    if shape.zero_stage not in ZERO_STAGES[framework]:
        why.append(f"ZeRO-{shape.zero_stage}: {framework} names ZeRO "
                   + "/".join(map(str, ZERO_STAGES[framework][1:])) + " only")
    why += _schedule_misfit(shape, framework)
    if shape.recompute_mode not in RECOMPUTE[framework]:
        why.append(f"{len(shape.recompute)} of {shape.recomputable} groups recomputed: no "
                   f"{framework} option names that set")
    heads = attention_heads(graph)
    if shape.tp > 1 and heads and heads % shape.tp:
        why.append(f"tensor parallel over {shape.tp} devices: the {heads} attention heads do "
                   f"not divide among them")
    why += _expert_misfit(graph, shape, framework)
    why += _context_misfit(graph, shape, framework)
    sizes = batch_sizes(shape)
    if sizes["global"] and not sizes["micro"]:
        why.append(f"batch {sizes['global']} does not divide into {shape.dp} replicas x "
                   f"{shape.micro_batches} micro-batches")
    return tuple(why)


def _expert_misfit(graph: OpGraph, shape: PlanShape, framework: str) -> list[str]:
    """Why ``framework`` cannot run the expert parallelism of ``shape``."""
    if shape.ep <= 1:
        return []
    why = []
    moe = graph.metadata.get("moe")
    experts = moe.get("experts") if isinstance(moe, dict) else None
    if not isinstance(experts, int) or experts % shape.ep:
        why.append(f"expert parallel over {shape.ep} devices: the {experts or 'unnamed'} experts "
                   f"of each layer do not divide among them")
    if framework == "torchtitan" and shape.zero_stage == 0:
        why.append("torchtitan carves expert parallelism from FSDP's shard degree: it needs "
                   "ZeRO 1 to 3 (FSDP), not DDP's replicas")
    return why


def _context_misfit(graph: OpGraph, shape: PlanShape, framework: str) -> list[str]:
    """Why ``framework`` cannot run the context parallelism of ``shape`` (module docstring)."""
    if shape.cp <= 1:
        return []
    info = context_of(graph)
    if info is None:  # pragma: no cover (a sequence split needs the graph's context)
        return ["context parallelism: the graph names no fused attention (metadata.context)"]
    why = [w for w in (sequence_misfit(info, shape.cp, per=2),) if w]
    if shape.cp_comm == "a2a":
        if framework == "torchtitan":
            why.append("torchtitan runs no all-to-all (Ulysses) context parallelism: its "
                       "context_parallel_degree is ring attention")
        elif info.ulysses_misfit(shape.cp):
            why.append(info.ulysses_misfit(shape.cp))
    if framework == "torchtitan" and shape.zero_stage == 0:
        why.append("torchtitan shards the weights over the context-parallel ranks by FSDP "
                   "whenever context_parallel_degree > 1: it needs ZeRO 1 to 3, not DDP's "
                   "replicas")
    return why


def _schedule_misfit(shape: PlanShape, framework: str) -> list[str]:
    """Why ``framework`` cannot run the schedule and virtual stages of ``shape``."""
    if shape.pp <= 1 or shape.micro_batches <= 1:
        return []
    name, vp = shape.schedule, shape.vp
    if name not in SCHEDULES[framework]:
        return [f"{framework} runs no {name} pipeline schedule"]
    if vp > 1 and name not in VIRTUAL_SCHEDULES:
        return [f"{vp} virtual stages per device need the interleaved or zero-bubble schedule, "
                f"not {name}"]
    if name in VIRTUAL_SCHEDULES and vp < 2:
        what = ("a multi-stage schedule (Interleaved1F1B, InterleavedZeroBubble) with at least "
                "2 virtual stages per rank" if framework == "torchtitan" else
                "virtual stages (--num-layers-per-virtual-pipeline-stage)")
        return [f"{framework} runs {name} as {what}; this plan has one stage per device"]
    if framework == "megatron" and name == "interleaved" and shape.micro_batches % shape.pp:
        return [f"Megatron's interleaved schedule needs the micro-batches a multiple of "
                f"pp {shape.pp}, got {shape.micro_batches}"]
    return []


def runners(graph: OpGraph, strategy, shape: PlanShape | None = None) -> list[str]:
    """The runners of `RUNNERS` able to run ``strategy`` on ``graph``, in that order."""
    shape = shape if shape is not None else plan_shape(graph, strategy)
    out = [f for f in FRAMEWORKS if not misfit(graph, shape, f)]
    return out + (["moplace-apply"] if applies(graph, strategy) else [])


def stage_of_groups(graph: OpGraph, cuts: np.ndarray) -> np.ndarray:
    """Per co-location group, its pipeline stage when the forward is cut after the ops of
    depth ``cuts`` (ascending: stage k holds the forward ops deeper than ``cuts[k - 1]`` up to
    ``cuts[k]``): a forward op by its depth, any other op by the forward values it reads
    (`_read_stages`: a backward op with its layer's activations, an update with its
    gradient), a group by the median over its ops with inputs (its forward ops, when it has
    some): a layer's weights sit with what reads them."""
    a = graph.arrays
    forward = a.role == ROLES.index("forward")
    cuts = np.asarray(cuts, np.float64)
    key = _read_stages(graph, tuple(cuts.tolist()))
    inputs = np.diff(a.in_ptr) > 0
    fwd_groups = np.bincount(a.group, weights=forward & inputs, minlength=a.n_groups) > 0
    use = inputs & np.where(fwd_groups[a.group], forward, True)
    # each group's median, all groups at once: its chosen ops' keys sorted, the middle two
    chosen = use | (np.bincount(a.group, weights=use, minlength=a.n_groups) == 0)[a.group]
    ops = np.flatnonzero(chosen)
    order = ops[np.lexsort((key[ops], a.group[ops]))]
    counts = np.bincount(a.group[order], minlength=a.n_groups)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    x = key[order]
    middle = (x[first + (counts - 1) // 2] + x[first + counts // 2]) / 2
    return np.floor(middle).astype(np.int64)


@lru_cache(maxsize=8)  # a search asks a few cuts of one graph, again and again
def _read_stages(graph: OpGraph, cuts: tuple) -> np.ndarray:
    """Per op, its stage under ``cuts`` (`stage_of_groups`): a forward op by its depth; any
    other op (in topological order) by the deepest forward value it reads that is its
    stage's alone (an op with inputs whose forward readers, if any, lie on its stage: a
    layer's activations, not the rotary tables every layer reads nor a boundary's output,
    which the next stage reads), else the least stage of its other inputs (a gradient
    flowing back, an update's gradient), else by its depth mirrored about the loss's.
    Mirroring alone drifts where a layer's backward is longer than its forward (a mixture of
    experts' is), putting a layer's backward ops, and an update's weights, on another stage
    than its forward's."""
    a = graph.arrays
    depth = graph.depth.astype(np.float64)
    edges = np.asarray(cuts, np.float64)
    stage = np.searchsorted(edges, depth, side="left").astype(np.float64)
    forward = a.role == ROLES.index("forward")
    inputs = np.diff(a.in_ptr) > 0
    # per forward op, the stage of its deepest forward reader (-1: none)
    fwd_edge = forward[a.src] & forward[a.dst]
    last = np.full(depth.size, -1.0)
    np.maximum.at(last, a.src[fwd_edge], stage[a.dst[fwd_edge]])
    own = forward & inputs & ((last < 0) | (last == stage))
    loss = depth[forward].max() if forward.any() else 0.0
    key = np.where(forward, stage, np.searchsorted(edges, 2 * loss - depth, side="left"))
    key = key.astype(np.float64)
    src = a.src[a.in_edge]  # each op's inputs' producers, by ``a.in_ptr``
    for v in a.topo.tolist():
        if forward[v]:
            continue
        u = src[a.in_ptr[v]:a.in_ptr[v + 1]]
        read = u[own[u]]
        if read.size:
            key[v] = stage[read[depth[read].argmax()]]
            continue
        u = u[inputs[u] & ~forward[u]]
        if u.size:
            key[v] = key[u].min()
    key.flags.writeable = False
    return key


def chunk_stages(graph: OpGraph, pp: int, vp: int = 1,
                 stage_layers: tuple[int, ...] | None = None) -> np.ndarray:
    """Per co-location group of ``graph``, its stage of the ``pp * vp`` a regular plan cuts
    the layers into (`regular_plan`; stage k runs on pipeline rank ``k mod pp``, as its
    virtual stage ``k // pp``): all 0 when ``pp`` is 1. Kept per structure (a graph derived
    from another has its stages: `moplace.core.derived.structure_of`)."""
    return _chunk_stages(structure_of(graph), pp, vp, stage_layers)


@lru_cache(maxsize=32)
def _chunk_stages(graph: OpGraph, pp: int, vp: int, stage_layers) -> np.ndarray:
    if pp <= 1:
        out = np.zeros(graph.arrays.n_groups, np.int64)
        out.flags.writeable = False
        return out
    layers, n_stages = graph.metadata["layers"], pp * vp
    names, period = layers["boundaries"], layers["period"]
    counts = stage_layers or (layers["count"] // n_stages,) * n_stages
    starts = np.cumsum(counts)[:-1]
    depth = graph.depth
    cuts = np.array([depth[graph.index[names[int(k) * period]]] for k in starts], np.float64)
    out = stage_of_groups(graph, cuts)
    out.flags.writeable = False
    return out
