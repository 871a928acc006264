"""A strategy in the terms a user trains with (`plan_shape`): the devices it uses, its pipeline
stages (co-location groups, not model layers, grouped by the devices they run on, in the order data
flows through them), each stage's data-parallel degree (its groups split on ``batch``: one
replica per part), tensor-parallel degree (split on ``channel``) and expert-parallel degree
(a mixture of experts' experts split on ``expert`` over a data-parallel stage's devices, the
rest of it on ``batch``), context-parallel degree (every group split on ``sequence``: ring
attention; or the attention kernels' groups on ``channel``, by heads, and the rest on
``sequence``: Ulysses' all-to-all, `moplace.core.context`), the micro-batches and
their schedule, the ZeRO stage, the recomputed groups and the bucket size; and whether the plan
has the regular shape that Megatron-style and torchtitan-style configurations state with a few
numbers: every stage with the same data- and tensor-parallel degree, stages on disjoint devices,
data flowing from each stage only to later ones, and ``pp * dp * tp`` the devices used
(`PlanShape.regular`; `PlanShape.why` says in words what breaks it).
`moplace.io.export` writes the shape as flags, TOML or per-op JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._topo import lexicographic_topo_order
from .baselines import group_order
from .context import context_of
from .graph import ROLES, OpGraph
from .recompute import attention_cores, layer_checkpoints, recomputable_heads
from .virtual import round_robin, stage_depths
from .strategy import Strategy

#: roles whose edges give the direction data flows between stages (backward edges run back)
_FLOW_ROLES = (ROLES.index("forward"), ROLES.index("other"))


@dataclass(frozen=True)
class Stage:
    """One stage: co-location groups (by their first op) on one set of devices, in data-flow
    order; ``dp``/``tp`` its data- and tensor-parallel degrees (None where its groups mix
    batch and channel splits); ``ep`` its expert-parallel degree (its width when it splits
    experts on ``expert`` beside groups on ``batch``, else 1); ``cp`` its context-parallel
    degree (its width when its groups are on ``sequence``, dp and tp then 1) and ``cp_comm``
    how (`moplace.core.context.CP_COMMS`: "p2p", ring attention, or "a2a", Ulysses, where the
    attention kernels' groups are on ``channel``); ``first``/``last`` the names of its first
    and last group's first op, ``first_group``/``last_group`` their positions (from 0) among all the graph's
    groups in data-flow order: the stages of a shape cover disjoint runs of them."""

    devices: tuple[int, ...]
    heads: tuple[int, ...]
    ops: int
    dims: tuple[str, ...]
    dp: int | None
    tp: int | None
    first: str
    last: str
    first_group: int
    last_group: int
    ep: int = 1
    cp: int = 1
    cp_comm: str = "p2p"


@dataclass(frozen=True)
class PlanShape:
    """A strategy's shape on its graph (see the module docstring). ``dp``, ``tp`` and ``pp``
    are None unless the plan is regular; ``stages`` are its pipeline stages when it is
    regular, else the runs of consecutive groups (in data-flow order) on one device set, in
    that order, so that they never overlap; ``groups`` counts the graph's co-location groups;
    ``why`` lists what keeps it from being regular; ``recompute_mode`` is ``"none"``,
    ``"full"`` (every group that can be is recomputed),
    ``"selective"`` (each attention's core: Megatron-LM's selective recomputation) or
    ``"partial"``; ``sequence_parallel``: tensor-parallel blocks with the ops between them
    split on batch over the same devices; ``batch_size`` is the graph's (its metadata), when
    it says; ``vp``, the virtual stages (chunks) of each stage, and ``chunks``, when ``vp > 1``,
    the heads of the groups with forward ops of each of the ``pp * vp`` virtual stages in
    data-flow order (virtual stage j on stage ``j mod pp``: Megatron's interleaved layout,
    `_virtual`); ``ep``, the expert-parallel degree of a regular plan (`Stage.ep`: the
    experts of a mixture-of-experts layer split on ``expert`` over each stage's ``dp``
    devices, each expert on one of them; 1 without); ``cp`` and ``cp_comm``, its
    context-parallel degree and way (`Stage.cp`; 1 and "p2p" without)."""

    devices: tuple[int, ...]
    stages: tuple[Stage, ...]
    dp: int | None
    tp: int | None
    pp: int | None
    micro_batches: int
    schedule: str
    zero_stage: int
    bucket_bytes: float
    recompute: tuple[str, ...]
    recompute_mode: str
    recomputable: int
    batch_size: int | None
    why: tuple[str, ...]
    groups: int
    sequence_parallel: bool = False
    vp: int = 1
    chunks: tuple[tuple[int, ...], ...] = ()
    ep: int = 1
    cp: int = 1
    cp_comm: str = "p2p"

    @property
    def regular(self) -> bool:
        return not self.why

    def why_text(self) -> str:
        """One paragraph: why no degrees and flags state this plan (empty when they do)."""
        if not self.why:
            return ""
        return ("Not expressible as data/tensor/pipeline-parallel flags: " + "; ".join(self.why)
                + ". Megatron-style and torchtitan-style configurations give every pipeline "
                "stage the same data- and tensor-parallel degree on its own devices, with "
                "pipeline x data x tensor = the devices used; this plan needs its per-op "
                "placement.")


def plan_shape(graph: OpGraph, strategy: Strategy) -> PlanShape:
    """The shape of ``strategy`` (validated for ``graph``) on ``graph``."""
    order = group_order(graph)
    heads = np.asarray([graph.groups[g][0] for g in order.tolist()], np.int64)
    sets, dims = [], []
    for h in heads.tolist():
        split = strategy.splits.get(h)
        sets.append(tuple(sorted(split.devices)) if split else (int(strategy.placement[h]),))
        dims.append(split.dim if split else None)
    _replicate_unsplittable(graph, order, sets, dims)
    keys = sorted(set(sets), key=sets.index)
    why: list[str] = []
    ordered = _stage_order(graph, strategy, keys, sets, why)
    chunks = _virtual(graph, strategy, order, sets, len(keys)) if why else []
    if chunks:  # stages laid round-robin: the device sets in the order of the first chunks
        why.clear()
        ordered = [sets[chunks[k][0]] for k in range(len(keys))]
    sizes = np.bincount(graph.arrays.group, minlength=graph.arrays.n_groups)
    context = context_of(graph)
    attention = context.attention_groups if context else frozenset()

    def stage(key, where) -> Stage:
        used = sorted({d for d in (dims[i] for i in where) if d is not None})
        n = len(key)
        # Megatron's tensor parallelism: blocks on tensor, the norms between them on batch
        # (sequence parallelism) or whole; a channel split is a tensor-parallel op too
        tensor = "tensor" in used and set(used) <= {"tensor", "batch"}
        # expert parallelism: the experts on expert, the rest of a data-parallel stage on batch
        experts = n > 1 and used == ["batch", "expert"]
        # context parallelism: all on sequence (ring), or the attention kernels' groups on
        # channel (heads) and the rest on sequence (Ulysses)
        ulysses = used == ["channel", "sequence"] and all(
            int(order[i]) in attention for i in where if dims[i] == "channel")
        cp = n if n > 1 and (used == ["sequence"] or ulysses) else 1
        dp = n if used == ["batch"] or n == 1 or experts else (
            1 if used == ["channel"] or tensor or cp > 1 else None)
        tp = n if used == ["channel"] or tensor else (1 if dp is not None else None)
        return Stage(
            devices=key, heads=tuple(int(heads[i]) for i in where),
            ops=int(sum(int(sizes[order[i]]) for i in where)), dims=tuple(used), dp=dp, tp=tp,
            first=graph.ops[int(heads[where[0]])].name, last=graph.ops[int(heads[where[-1]])].name,
            first_group=where[0], last_group=where[-1], ep=n if experts else 1, cp=cp,
            cp_comm="a2a" if cp > 1 and ulysses else "p2p")

    stages = [stage(key, [i for i, s in enumerate(sets) if s == key]) for key in ordered]
    _check_stages(stages, len(strategy.used_devices), why)
    regular = not why
    if not regular:  # device sets, not stages: listed as the runs they hold
        stages = [stage(sets[run[0]], run) for run in _runs(sets)]
    heads_all = recomputable_heads(graph)
    recomputed = strategy.recompute
    cores = set(attention_cores(graph).tolist())
    mode = ("none" if not recomputed else
            "full" if set(recomputed) >= set(layer_checkpoints(graph).tolist()) else
            "selective" if cores and set(recomputed) == cores else "partial")
    batch = graph.metadata.get("batch_size")
    return PlanShape(
        devices=tuple(strategy.used_devices), stages=tuple(stages),
        dp=stages[0].dp if regular else None, tp=stages[0].tp if regular else None,
        pp=len(stages) if regular else None, micro_batches=int(strategy.micro_batches),
        schedule=strategy.schedule_name, zero_stage=int(strategy.zero_stage),
        bucket_bytes=float(strategy.bucket_bytes),
        recompute=tuple(graph.ops[h].name for h in recomputed), recompute_mode=mode,
        recomputable=int(heads_all.size),
        sequence_parallel=regular and any(set(st.dims) == {"tensor", "batch"} for st in stages),
        batch_size=batch if isinstance(batch, int) and not isinstance(batch, bool)
        and batch > 0 else None,
        why=tuple(why), groups=len(heads),
        vp=len(chunks) // len(stages) if regular and chunks else 1,
        ep=stages[0].ep if regular else 1,
        cp=stages[0].cp if regular else 1, cp_comm=stages[0].cp_comm if regular else "p2p",
        chunks=tuple(tuple(int(heads[i]) for i in c) for c in chunks) if regular else ())


def _virtual(graph, strategy, order, sets, n_sets: int) -> list[list[int]]:
    """The positions (in ``order``) of the groups with forward ops (that read something) cut
    into virtual stages, when the forward runs through ``v * n_sets`` stages for some v > 1
    (`stage_depths`: a group's stage is its forward ops' deepest), stage j's groups on the
    device set of stage ``j mod n_sets`` (`round_robin`): Megatron's interleaved layout; else
    empty."""
    a = graph.arrays
    # forward ops that read something (a weight sits with its reader, wherever it is)
    fwd = (a.role == ROLES.index("forward")) & (np.diff(a.in_ptr) > 0)
    fst, _ = stage_depths(graph, strategy.placement)
    stage_of = np.full(a.n_groups, -1, np.int64)
    np.maximum.at(stage_of, a.group[fwd], fst[fwd])
    S = int(stage_of.max()) + 1
    if n_sets < 1 or S <= n_sets or S % n_sets:
        return []
    chunks: list[list[int]] = [[] for _ in range(S)]
    for i, g in enumerate(order.tolist()):
        if stage_of[g] >= 0:
            chunks[stage_of[g]].append(i)
    held = [{sets[i] for i in c} for c in chunks]
    if any(len(h) != 1 for h in held):
        return []
    return chunks if round_robin(next(iter(h)) for h in held) == n_sets else []


def _runs(sets) -> list[list[int]]:
    """The positions of ``sets`` cut into runs of equal consecutive device sets."""
    out: list[list[int]] = []
    for i, s in enumerate(sets):
        if out and sets[out[-1][-1]] == s:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _replicate_unsplittable(graph, order, sets, dims) -> None:
    """A group left whole that cannot be split on any dimension its device's split set uses
    (a loss under data parallelism, an index computation), placed on a device of exactly one
    split device set, belongs to that set's stage: trainers run it on every rank of the
    stage, as they do what they cannot shard."""
    used: dict = {}  # split device set -> the dimensions its groups are split on
    for s, d in zip(sets, dims):
        if d is not None:
            used.setdefault(s, set()).add(d)
    for i, g in enumerate(order.tolist()):
        if dims[i] is not None:
            continue
        holding = [s for s in used if sets[i][0] in s]
        if len(holding) == 1 and not any(d in graph.ops[op].splittable
                                         for op in graph.groups[g] for d in used[holding[0]]):
            sets[i] = holding[0]


def _stage_order(graph, strategy, keys, sets, why) -> list:
    """The device sets in the order data flows through them (the lexicographic topological
    order of the graph of device sets that forward data flows between: ties by first
    appearance); where that graph has a cycle, the sets in first-appearance order, and a
    reason in ``why``."""
    a = graph.arrays
    index = {k: i for i, k in enumerate(keys)}
    of_group = np.empty(a.n_groups, np.int64)
    order = group_order(graph)
    of_group[order] = [index[s] for s in sets]
    of_op = of_group[a.group]
    flow = np.isin(a.role[a.src], _FLOW_ROLES) & np.isin(a.role[a.dst], _FLOW_ROLES)
    u, v = of_op[a.src[flow]], of_op[a.dst[flow]]
    between = u != v
    out = lexicographic_topo_order(len(keys), u[between].astype(np.int64),
                                   v[between].astype(np.int64)).tolist()
    if len(out) < len(keys):
        stuck = [keys[i] for i in range(len(keys)) if i not in out]
        why.append(f"data flows back and forth between devices {_devs(stuck[0])} and others "
                   f"({len(stuck)} device sets on a cycle): the groups do not form a pipeline "
                   f"of stages")
        return keys
    return [keys[i] for i in out]


def _check_stages(stages, n_used: int, why: list) -> None:
    seen: dict[int, int] = {}
    for k, stage in enumerate(stages):
        for d in stage.devices:
            if d in seen and not why:
                why.append(f"stages {seen[d]} and {k} share device {d} (a device set that "
                           f"holds some groups whole and others split, or overlapping splits)")
            seen.setdefault(d, k)
    mixed = [k for k, stage in enumerate(stages) if stage.dp is None]
    if mixed:
        listed = ", ".join(map(str, mixed[:4])) + (", ..." if len(mixed) > 4 else "")
        what = f"stage {mixed[0]}" if len(mixed) == 1 else f"{len(mixed)} stages ({listed})"
        dims = stages[mixed[0]].dims
        on = (f"some groups on {dims[0]} and others on {' and '.join(dims[1:])}"
              if len(dims) > 1 else f"groups on {dims[0]}")
        why.append(f"{what} split {on} over the same devices (a stage of two degrees would "
                   f"split every group both ways)")
    for name, of in (("expert", lambda s: s.ep), ("context", lambda s: (s.cp, s.cp_comm))):
        if not mixed and len({of(s) for s in stages}) > 1:
            why.append(f"the stages differ in {name} parallelism ("
                       + ", ".join(f"stage {k}: {_degree(of(s))}" for k, s in enumerate(stages))
                       + ")")
    degrees = [(s.dp, s.tp) for s in stages]
    if len(set(degrees)) > 1 and all(d is not None for d, _ in degrees):
        shown = ", ".join(f"stage {k} has {_replicas(s)}" for k, s in enumerate(stages))
        why.append(f"the stages differ in width: {shown}" if len(stages) <= 6 else
                   f"the {len(stages)} stages differ in width ("
                   f"{len(set(degrees))} different widths)")
    if not why and sum(len(s.devices) for s in stages) != n_used:  # pragma: no cover (defensive)
        why.append(f"pipeline x data x tensor degrees cover {sum(len(s.devices) for s in stages)}"
                   f" devices, the plan uses {n_used}")


def _degree(value) -> str:
    return f"{value[0]} ({value[1]})" if isinstance(value, tuple) else str(value)


def _replicas(stage: Stage) -> str:
    if stage.cp > 1:
        return f"{stage.cp}-way context parallel"
    if stage.tp and stage.tp > 1:
        return f"{stage.tp}-way tensor parallel"
    return f"{stage.dp} replica{'s' if stage.dp != 1 else ''}"


def _devs(devices) -> str:
    return "{" + ", ".join(map(str, devices)) + "}"
