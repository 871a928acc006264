"""One replica of a regular plan, as the simulator runs it: the graph of its step and the
devices it runs on (`moplace.simulator.atscale` evaluates it and adds what crosses replicas).

A regular plan (`moplace.core.regular.RegularPlan`) on ``tp x cp x pp x dp`` GPUs runs ``dp``
identical pipelines. One of them, ``tp x cp x pp`` GPUs, is simulated op by op, as any plan
is; what its ranks share with the other replicas is folded into its graph here, exactly where
balanced routing and identical replicas make it exact, and stated where it is modelled:

- **Micro-batches.** The traced graph is one micro-batch (``mbs`` sequences); the replica
  runs ``m = gbs / (dp mbs)`` of them. Its graph is the traced one with every forward and
  backward op's time, activations and activation edges ``m`` times over (weight gradients
  kept), which the simulator's micro-batching (`moplace.simulator.microbatch`) cuts back into
  ``m`` copies of the traced micro-batch.
- **Expert parallelism** (``ep``). Each rank of an expert group holds ``E / ep`` experts of a
  layer and computes them for the tokens of all ``ep`` ranks: under balanced routing the same
  tokens x top-k it computes without EP, so the experts' ops keep their time while their
  weights, gradients and optimizer state are ``1 / ep``. Each MoE layer's four all-to-alls per
  micro-batch (dispatch and combine, forward and backward) run on the compute stream (as
  Megatron-Core's all-to-all dispatcher runs them), so their time, from `moplace.simulator.nccl`
  over the expert group's ranks in the pod, is added to the op that starts or ends each.
- **Data parallelism and ZeRO.** With ``zero`` >= 1 the optimizer state and the update's work
  are sharded over the ``dp`` replicas (the experts' over ``dp / ep``): each update op keeps
  ``1 / dp`` of its state and takes ``1 / dp`` of its time. The gradients' reduction and the
  weights' gather are not in the replica's graph: `moplace.simulator.atscale` times them.

- **FP32 gradients** (``grad_fp32``, Megatron-LM's rule for BF16 training: ``arguments.py``
  at f2e5db4 sets ``accumulate_allreduce_grads_in_fp32`` whenever ``--bf16``): each weight
  gradient is held, accumulated over the micro-batches and reduced in FP32, twice the bytes
  of the traced 16-bit gradient.

- **The vocabulary over the tensor-parallel ranks** (``tp`` > 1): Megatron-LM's
  ``VocabParallelEmbedding`` and output ``ColumnParallelLinear`` with its vocab-parallel
  cross-entropy, torchtitan's row-wise embedding and column-wise output with
  ``loss_parallel``, hold ``1 / tp`` of the embedding's and the output layer's weights,
  gradients and optimizer state per rank (`vocab_ops`): so does the replica. Their compute
  is already cut ``tp`` ways (the replica splits them on tokens); what is left out: the
  cross-entropy's three all-reduces of 4 bytes a token (the logits' maximum, the sum of
  their exponentials, the target's logit), and the replica still all-reduces the cut
  gradients among the ranks of a stage (an NVLink all-reduce of ``1 / tp`` of them, which
  Megatron does not run).

Context parallelism runs inside the replica (its ranks are simulated), as the plan's ``cp``
ranks of each stage; tensor parallelism likewise.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np

from ..core.derived import derived, rescaled
from ..core.graph import ROLES, SPLIT_DIMS, OpGraph
from ..core.pod import Pod, sub_cluster
from .nccl import ALL_TO_ALL, collective_time

_FORWARD, _BACKWARD, _UPDATE = (ROLES.index(r) for r in ("forward", "backward", "update"))
_EXPERT = SPLIT_DIMS.index("expert")
#: the metadata names of each MoE layer's ops that start an all-to-all (their output is sent)
#: and that end one (their input was received)
A2A_STARTS, A2A_ENDS = ("dispatch", "combine_backward"), ("combine", "dispatch_backward")


def stride_of(plan, what: str) -> int:
    """How far apart in rank order the ranks of ``what``'s groups are, in Megatron-Core's
    order (tensor, context, expert, data, pipeline: tensor fastest)."""
    return {"tp": 1, "cp": plan.tp, "ep": plan.tp * plan.cp, "dp": plan.tp * plan.cp,
            "expert-dp": plan.tp * plan.cp * plan.ep,
            "pp": plan.tp * plan.cp * plan.dp}[what]


def replica_devices(plan) -> list[int]:
    """The pod's ranks of the first replica, stage by stage (each stage's tp x cp ranks)."""
    w, step = plan.tp * plan.cp, stride_of(plan, "pp")
    return [s * step + k for s in range(plan.pp) for k in range(w)]


def replica_cluster(target, pod: Pod, plan):
    """The cluster the first replica runs on: its ranks as they sit in ``target``'s servers
    (a `Pod`: servers made for them, each holding the ranks the plan puts there; a listed
    cluster: those devices of it)."""
    ranks = replica_devices(plan)
    if not isinstance(target, Pod):
        return sub_cluster(target, ranks, f"{target.name}: one replica of {plan.text()}")
    return _pod_replica(target, tuple(ranks))


@lru_cache(maxsize=32)
def _pod_replica(pod: Pod, ranks: tuple[int, ...]):
    """The servers the replica's ``ranks`` sit in, each with as many GPUs (and NICs) as the
    replica has there, in rank order (a stage narrower than a server may share one with the
    next: 2 ranks of TP2 x 3 data-parallel replicas sit 6 apart, so a server of 8 holds two
    stages' ranks and the next one stage's)."""
    from ..core.presets import parse_cluster_doc

    servers = [r // pod.per_server for r in ranks]
    _, counts = np.unique(servers, return_counts=True)
    runs: list[list[int]] = []  # [GPUs in the server, servers in a row]
    for c in counts.tolist():
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    doc = dict(pod.server)
    template = doc["servers"][0]
    doc["servers"] = []
    for c, repeat in runs:
        entry = dict(template, count=c, nics=c, repeat=repeat)
        if c == 1:
            entry.pop("interconnect", None)
        doc["servers"].append(entry)
    doc["name"] = f"{pod.name}: one replica ({len(ranks)} GPUs in {len(counts)} servers)"
    return parse_cluster_doc(doc, pod.name)


@dataclasses.dataclass(frozen=True, eq=False)
class ReplicaGraph:
    """The replica's graph (module docstring), and what was folded into it: ``a2a_s``, the
    all-to-all seconds per micro-batch added to the ops (all layers, forward and backward),
    ``a2a_bytes`` the bytes each rank sends in them per micro-batch; per op of the graph
    ``expert`` (an op of the experts: its gradients are reduced over the expert-data-parallel
    ranks, the others' over all data-parallel ranks) and ``expert_update`` (an update of the
    experts' weights)."""

    graph: OpGraph
    a2a_s: float
    a2a_bytes: float
    expert: np.ndarray
    expert_update: np.ndarray


def replica_graph(graph: OpGraph, plan, pod: Pod, micro_batches: int | None = None
                  ) -> ReplicaGraph:
    """The graph one replica of ``plan`` runs (module docstring), with ``micro_batches`` in
    it (the plan's when None; 1: the traced micro-batch, whose step
    `moplace.simulator.pipecompose` composes into the plan's)."""
    m = plan.micro_batches if micro_batches is None else micro_batches
    return _replica_graph(graph, m, plan.ep, plan.dp if plan.zero else 1,
                          pod, stride_of(plan, "ep"), 2 if plan.grad_fp32 else 1, plan.tp)


@lru_cache(maxsize=4)
def _replica_graph(graph: OpGraph, m: int, ep: int, shard: int, pod: Pod,
                   ep_stride: int, grad_scale: int = 1, vocab: int = 1) -> ReplicaGraph:
    a = graph.arrays
    role = a.role
    # the vocabulary's weights, their gradients and updates: cut over the tensor-parallel
    # ranks (module docstring)
    vocab_cut = vocab_ops(graph) if vocab > 1 else np.zeros(role.size, bool)
    copied = (role == _FORWARD) | (role == _BACKWARD)
    expert = (((a.split_mask >> _EXPERT) & 1) == 1) if ep > 1 else np.zeros(role.size, bool)
    expert_update = np.zeros(role.size, bool)
    upd = (role[a.dst] == _UPDATE) & expert[a.src]
    expert_update[a.dst[upd]] = True
    extra = np.zeros(role.size)
    a2a_s = a2a_bytes = 0.0
    if ep > 1:
        extra, a2a_s, a2a_bytes = _all_to_alls(graph, expert, ep, pod, ep_stride)
    ops = []
    for i, op in enumerate(graph.ops):
        changes: dict = {}
        if copied[i] and (m > 1 or extra[i]):
            grad = min(op.grad_bytes, op.output_bytes)
            out = (op.output_bytes - grad) * m + grad
            changes.update(compute={k: t * m + extra[i] * m for k, t in op.compute.items()},
                           output_bytes=int(out), scratch_bytes=int(op.scratch_bytes * m),
                           part_compute={n: {k: t * m for k, t in ts.items()}
                                         for n, ts in op.part_compute.items()})
        wgrad = op.grad_bytes  # its weight gradient's bytes in the replica
        if grad_scale > 1 and wgrad > 0:  # 16-bit weight gradients kept in FP32
            changes.update(grad_bytes=wgrad * grad_scale, output_bytes=int(changes.get(
                "output_bytes", op.output_bytes) + wgrad * (grad_scale - 1)))
            wgrad *= grad_scale
        if vocab_cut[i]:
            g = wgrad // vocab
            now = changes.get("output_bytes", op.output_bytes)  # the gradient in it, cut
            changes.update(param_bytes=op.param_bytes // vocab, grad_bytes=g,
                           output_bytes=int(now - min(wgrad, now) + g))
            if role[i] == _UPDATE:
                changes["compute"] = {k: t / vocab for k, t in op.compute.items()}
            wgrad = g
        if expert[i]:
            g = wgrad // ep
            changes.update(param_bytes=op.param_bytes // ep, grad_bytes=g,
                           output_bytes=int(changes.get("output_bytes", op.output_bytes)
                                            - wgrad + g))
        if role[i] == _UPDATE:
            cut = (ep * max(1, shard // ep)) if expert_update[i] else shard
            if cut > 1:
                changes.update(param_bytes=op.param_bytes // cut,
                               compute={k: t / cut for k, t in op.compute.items()})
        ops.append(rescaled(op, **changes) if changes else op)
    src, dst = a.src, a.dst
    b = a.edge_bytes.astype(np.int64)
    if grad_scale > 1:  # FP32 weight gradients to their updates
        b = np.where((a.grad_bytes[src] > 0) & (role[dst] == _UPDATE), b * grad_scale, b)
    weights = (a.param_bytes[src] > 0) & (a.output_bytes[src] == 0)
    both = copied[src] & copied[dst]
    b = np.where(both, np.where(weights & expert[src], b * m // ep, b * m),
                 np.where(expert[src] | expert_update[dst], b // ep, b))
    if vocab > 1:  # a vocabulary gradient to its update, and the update's state
        b = np.where(vocab_cut[src] & vocab_cut[dst], b // vocab, b)
    meta = dict(graph.metadata)
    if isinstance(meta.get("batch_size"), int):
        meta["batch_size"] = meta["batch_size"] * m
    out = derived(graph, ops, b, metadata=meta)
    return ReplicaGraph(out, a2a_s, a2a_bytes, expert, expert_update)


@lru_cache(maxsize=8)
def vocab_ops(graph: OpGraph) -> np.ndarray:
    """Per op of ``graph``, whether it holds, makes or updates a weight with the vocabulary
    as a dimension (``metadata["transformer"]``'s vocab x hidden elements: the token
    embedding, an untied output layer): the members of such a weight's co-location group and
    the ops that make its gradient for its update."""
    a = graph.arrays
    out = np.zeros(a.role.size, bool)
    shape = graph.metadata.get("transformer")
    if not isinstance(shape, dict) or not shape.get("vocab") or not shape.get("hidden"):
        return out
    size = int(shape["vocab"]) * int(shape["hidden"])
    weights = np.flatnonzero((a.param_bytes > 0) & (a.role != _UPDATE)
                             & np.isin(a.param_bytes, (size, 2 * size, 4 * size)))
    groups = np.unique(a.group[weights])
    out[np.isin(a.group, groups)] = True
    updates = np.flatnonzero(out & (a.role == _UPDATE))
    feeds = np.isin(a.dst, updates) & (a.grad_bytes[a.src] > 0)
    out[a.src[feeds]] = True
    return out


def _all_to_alls(graph: OpGraph, expert: np.ndarray, ep: int, pod: Pod, stride: int):
    """Per op the all-to-all seconds (per micro-batch) it carries, their sum and the bytes
    each rank sends per micro-batch over its expert group of ``ep`` ranks ``stride`` apart
    (module docstring): each MoE layer's dispatch and
    combine ops, forward and backward, as ``metadata["moe"]["layer_ops"]`` names them, each
    moving its largest edge to or from the experts' ops."""
    a = graph.arrays
    extra = np.zeros(len(graph.ops))
    moe = graph.metadata.get("moe") or {}
    total_s = total_b = 0.0
    for layer in moe.get("layer_ops") or ():
        for key in A2A_STARTS + A2A_ENDS:
            for name in layer.get(key) or ():
                i = graph.index.get(name)
                if i is None:
                    continue
                start = key in A2A_STARTS
                mask = (a.src == i) & expert[a.dst] if start else (a.dst == i) & expert[a.src]
                same_role = a.role[a.dst if start else a.src] == a.role[i]
                sizes = a.edge_bytes[mask & same_role]
                if not sizes.size:
                    continue
                nbytes = float(sizes.max())
                t, _ = collective_time(pod, ALL_TO_ALL, nbytes, ep, stride)
                extra[i] += t
                total_s += t
                total_b += nbytes * (ep - 1) / ep
    return extra, total_s, total_b
