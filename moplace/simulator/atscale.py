"""A regular plan evaluated at any scale: one replica simulated op by op, the collectives that
cross replicas modelled (what ``moplace evaluate --plan`` prints).

`evaluate_regular` takes a graph of one micro-batch, a pod (`moplace.core.pod.Pod`) or a
listed cluster, and a `moplace.core.regular.RegularPlan`:

1. **Simulated**: one pipeline replica (``tp x cp x pp`` GPUs, as they sit in the pod's
   servers, `moplace.simulator.replica`) runs one micro-batch op by op under the plan's
   recomputation and precision, its tensor- and context-parallel collectives, its pipeline's
   sends and its experts' all-to-alls on the compute stream, and the blocks of its stages are
   composed into the ``m`` micro-batches of the plan's schedule
   (`moplace.simulator.composedstep`); zero-bubble plans, and any with ``whole``, run all
   ``m`` op by op.
2. **Modelled**: each stage's data-parallel collectives over its ``dp`` replicas (the
   experts' over ``dp / ep``), timed by `moplace.simulator.nccl` and, with ``overlap``
   (Megatron's ``--overlap-grad-reduce --overlap-param-gather``), scheduled over each rank's
   composed actions as Megatron-Core runs them (`moplace.simulator.dpsync`); without, both
   exposed whole. The step ends when the latest rank's simulated work and the collectives
   past it have, after any wait of the forwards for the weights' gathers.

Memory is the replica's simulated peak (its graph already holds the EP and ZeRO shards).
Communication is the replica's busiest device's simulated traffic plus the bytes it sends
and receives in the modelled collectives and all-to-alls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from objectives import DEFAULT, evaluate_trace

from ..core.degrees import Degrees, regular_plan
from ..core.flops import TransformerShape, megatron_flops, traced_seq_len
from ..core.graph import OpGraph
from ..core.pod import Pod, pod_of_cluster
from ..core.presets import MAX_DEVICES
from ..core.runners import chunk_stages
from ..costs.costmodel import CostModel
from ..costs.devicespecs import device_spec
from ..errors import StrategyError
from .composedstep import composed_step
from .dpsync import data_parallel
from .engine import DeviceFigures, Trace, simulate
from .pipecompose import COMPOSED
from .replica import replica_cluster, replica_graph
from .tpoverlap import FREE, hidden_server_links, tensor_parallel_overlap


@dataclass(frozen=True, eq=False)
class ScaledTrace(DeviceFigures):
    """What the objectives read of a regular plan's step: per simulated device (the replica's)
    ``sent``, ``received``, ``peak_memory``, ``capacity``; the step's ``makespan``; and the
    replica's own `Trace`."""

    makespan: float
    sent: np.ndarray
    received: np.ndarray
    peak_memory: np.ndarray
    capacity: np.ndarray
    replica: Trace
    #: per simulated device, its compute seconds over the step
    busy: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: whether ``replica`` is one micro-batch whose blocks were composed into the step
    #: (`moplace.simulator.pipecompose`), else every micro-batch simulated
    composed: bool = False


@dataclass(frozen=True, eq=False)
class ScaledEvaluation:
    """A regular plan scored: objective ``values`` (``names`` order), memory ``violation``,
    the `ScaledTrace`, and ``parts``: seconds of the step by cause (``simulated_s``: the
    replica's makespan; ``grad_reduce_s`` / ``param_gather_s``: the slowest stage's
    data-parallel collectives, whole, and ``exposed_s`` what of them lengthens the step;
    ``all_to_all_s``: the expert all-to-alls inside the simulated step), the ``algorithms``
    NCCL would pick and ``tokens_per_s`` over the whole pod."""

    plan: object
    names: tuple[str, ...]
    values: np.ndarray
    violation: float
    trace: ScaledTrace
    parts: dict = field(default_factory=dict)
    algorithms: dict = field(default_factory=dict)
    gpus: int = 0
    tokens_per_step: int = 0
    #: the step's model FLOPs (`moplace.core.flops.megatron_flops`; None: not counted, and
    #: ``flops_note`` says why) and each GPU's dense BF16 peak (FLOP/s; 0: unknown)
    model_flops: float | None = None
    flops_note: str = ""
    peak_flops: float = 0.0
    #: the step's seconds on the last stage to finish by cause (`_losses`), in step order
    losses: dict = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return self.violation == 0.0

    @property
    def runtime_s(self) -> float:
        return float(self.trace.makespan)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_step / self.runtime_s / self.gpus if self.runtime_s else 0.0

    @property
    def tflops_per_gpu(self) -> float | None:
        """Model TFLOP/s per GPU (``flops_note`` says how they are counted)."""
        if self.model_flops is None or not self.runtime_s:
            return None
        return self.model_flops / self.runtime_s / self.gpus / 1e12

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilization: `tflops_per_gpu` over the GPUs' dense BF16 peak."""
        t = self.tflops_per_gpu
        return t * 1e12 / self.peak_flops if t is not None and self.peak_flops else None

    def summary(self) -> str:
        """The point in the words of the people who run it: ``TP8 PP16 DP128, 400 TFLOP/s/GPU,
        41% MFU``."""
        p = self.plan
        head = p.degrees_text()
        t = self.tflops_per_gpu
        if t is not None:
            rate = f"{t:,.0f} TFLOP/s/GPU" + (f", {self.mfu:.0%} MFU" if self.mfu else "")
        elif self.tokens_per_step:
            rate = f"{self.tokens_per_s_per_gpu:,.0f} tokens/s/GPU"
        else:  # a profile file's graph: no tokens to count
            rate = f"step {self.runtime_s * 1e3:,.1f} ms"
        return f"{head}, {rate}"

    def objectives(self) -> dict[str, float]:
        return dict(zip(self.names, self.values.tolist()))

    def how(self) -> str:
        """Which parts were simulated and which modelled, in words."""
        p = self.plan
        m = p.micro_batches
        many = f"{m} micro-batch{'es' if m != 1 else ''}"
        sim = (f"simulated op by op: one replica of {p.replica_gpus} GPUs "
               f"(TP{p.tp} x CP{p.cp} x PP{p.pp}), ")
        if self.trace.composed and m > 1:
            sim += (f"one micro-batch, its stages' blocks composed into {many} "
                    f"({p.schedule if p.pp > 1 else '1f1b'})")
        else:
            sim += many
        mod = [f"data-parallel {'reduce-scatter + all-gather' if p.zero else 'all-reduce'} "
               f"over {p.dp} replicas"]
        if p.ep > 1:
            mod.append(f"all-to-all over EP{p.ep}")
        if p.tp_overlap and p.tp > 1:
            mod.append("tensor-parallel collectives overlapped with their GEMMs (the "
                       "server's links sped up to leave what exceeds each GEMM)")
        return sim + "; modelled (NCCL's cost model): " + ", ".join(mod)


def evaluate_regular(graph: OpGraph, target, plan, *, objectives=DEFAULT,
                     memory_limit: float | None = None, whole: bool = False
                     ) -> ScaledEvaluation:
    """Score regular ``plan`` of ``graph`` (one micro-batch) on ``target``, a `Pod` or a
    listed `moplace.core.cluster.Cluster` (module docstring), each GPU's memory capped at
    ``memory_limit`` bytes when given; `StrategyError` naming what does not fit."""
    pod = target if isinstance(target, Pod) else pod_of_cluster(target)
    why = plan.misfit(graph, pod.gpus)
    if why:
        raise StrategyError(f"--plan ({plan.text()}): {why}")
    if plan.replica_gpus > MAX_DEVICES:
        raise StrategyError(f"--plan ({plan.text()}): its replica, TP{plan.tp} x CP{plan.cp} x "
                            f"PP{plan.pp} = {plan.replica_gpus:,} GPUs, is more than the "
                            f"{MAX_DEVICES} the simulator runs op by op")
    composed = not whole and composable(plan)
    m_sim = 1 if composed else plan.micro_batches  # the micro-batches simulated op by op
    rg = replica_graph(graph, plan, pod, m_sim)
    cluster = replica_cluster(target, pod, plan)
    if memory_limit:
        cluster = cluster.capped(memory_limit)
    strategy = replica_strategy(rg.graph, plan, m_sim)
    tp_comm = tp_left = 0.0
    if plan.tp_overlap and plan.tp > 1:
        compute = _costs(rg.graph, cluster, True).compute
        tp_comm, tp_left = tensor_parallel_overlap(rg.graph, plan, cluster, strategy, compute,
                                                   m_sim)
        cluster = hidden_server_links(cluster, tp_comm / tp_left if tp_left > 0 else FREE)
    costs = _costs(rg.graph, cluster, plan.tp * plan.cp > 1)
    w = plan.tp * plan.cp
    stage_of_device = np.arange(cluster.n_devices) // w
    stage_of_op = chunk_stages(rg.graph, plan.pp, plan.v,
                               _stage_layers(rg.graph, plan))[rg.graph.arrays.group]
    timeline = None
    if composed:
        trace, ends, step, peak, sent, received, busy, timeline = composed_step(
            rg.graph, cluster, strategy, costs, stage_of_op, plan.pp, plan.v, w,
            plan.schedule if plan.pp > 1 else "1f1b", plan.micro_batches)
    else:
        trace = simulate(rg.graph, cluster, strategy, costs=costs)
        ends = np.zeros(plan.pp)
        np.maximum.at(ends, stage_of_device[trace.task_device[trace.task_device >= 0]],
                      trace.task_end[trace.task_device >= 0])
        step, peak = trace.makespan, trace.peak_memory
        sent, received, busy = trace.sent, trace.received, trace.busy
    sync = data_parallel(rg, plan, pod, strategy, costs, stage_of_device,
                         stage_of_op // plan.pp, m_sim, timeline)
    stage_end = ends + sync["exposed"] + sync["stall"].max()
    makespan = float(max(stage_end.max(), step))
    moved = sync["moved"][stage_of_device] + rg.a2a_bytes * plan.micro_batches
    st = ScaledTrace(makespan, sent + moved, received + moved, peak, trace.capacity, trace,
                     busy, composed)
    slow = int(np.argmax(stage_end))
    parts = {"simulated_s": float(step),
             "grad_reduce_s": float(sync["reduce"][slow]),
             "param_gather_s": float(sync["gather"][slow]),
             "exposed_s": float(makespan - step),
             "tp_comm_s": tp_comm * plan.micro_batches / m_sim,
             "tp_left_s": tp_left * plan.micro_batches / m_sim,
             "all_to_all_s": float(rg.a2a_s * plan.micro_batches)}
    shares = _losses(st, plan, rg, makespan, float(step), slow * w)
    seq = traced_seq_len(graph) or 0
    flops, note = megatron_flops(TransformerShape.of(graph), plan.gbs, seq) if seq else \
        (None, "the graph records no sequence length")
    spec = device_spec(pod.kind)
    values = evaluate_trace(st, tuple(objectives))
    return ScaledEvaluation(plan, tuple(objectives), values,
                            float(st.memory_excess.sum()), st, parts, sync["algorithms"],
                            pod.gpus, plan.gbs * seq, flops, note,
                            spec.mfu_peak if spec else 0.0, shares)


def _losses(st: ScaledTrace, plan, rg, makespan: float, simulated: float, device: int
            ) -> dict:
    """Where the step goes on ``device`` (the first of the stage that ends last), in seconds:
    ``compute`` (its ops, the first run), ``recomputation`` (recomputed ops run again),
    ``expert all-to-all`` (its share of the replica's all-to-alls: each stage's layers', cut
    with its ops over the stage's tp x cp ranks), ``exposed data-parallel communication``
    and ``pipeline bubble and waits`` (the rest: idle while the pipeline fills and drains,
    waiting on tensor-, context- and pipeline-parallel transfers)."""
    trace = st.replica
    on = (trace.task_device == device) & trace.recomputed
    recomputed = float((trace.task_end[on] - trace.task_start[on]).sum())
    if st.composed:
        recomputed *= plan.micro_batches
    a2a = rg.a2a_s * plan.micro_batches / (plan.pp * plan.tp * plan.cp)
    busy = float(st.busy[device])
    exposed = makespan - simulated
    return {"compute": max(busy - recomputed - a2a, 0.0), "recomputation": recomputed,
            "expert all-to-all": a2a, "exposed data-parallel communication": exposed,
            "pipeline bubble and waits": max(makespan - busy - exposed, 0.0)}


def replica_strategy(graph: OpGraph, plan, micro_batches: int | None = None):
    """The replica's strategy: the plan's stages over ``pp`` groups of ``tp x cp`` devices
    (`moplace.core.degrees.regular_plan`), running ``micro_batches`` (the plan's when None)."""
    m = plan.micro_batches if micro_batches is None else micro_batches
    mode = ("tensor" if plan.tp > 1 else "data" if plan.cp == 1 else
            "context" if plan.cp_comm == "p2p" else "context-a2a")
    schedule = plan.schedule if plan.pp > 1 and m > 1 else "1f1b"
    d = Degrees(plan.replica_gpus, plan.pp, mode, m, schedule, plan.recompute,
                min(plan.zero, 1) if plan.cp > 1 else 0, plan.v, plan.fp8,
                expert_split_in_tensor_group(graph, plan))
    return _strategy(graph, d, _stage_layers(graph, plan))


@lru_cache(maxsize=8)
def _strategy(graph: OpGraph, d: Degrees, stage_layers):
    """Kept for the last few, as a search at scale asks for one twice (the plan's static
    memory, then its evaluation) and plans of other data-parallel degrees share it."""
    return regular_plan(graph, d, stage_layers=stage_layers)


def _stage_layers(graph: OpGraph, plan):
    return plan.stage_layers((graph.metadata.get("layers") or {}).get("count") or 0)


def composable(plan) -> bool:
    """Whether ``plan``'s step is composed from one micro-batch (`moplace.simulator
    .pipecompose`): its schedule runs F and B blocks (not zero-bubble's split backward)."""
    schedule = plan.schedule if plan.pp > 1 and plan.micro_batches > 1 else "1f1b"
    return schedule in COMPOSED


def expert_split_in_tensor_group(graph: OpGraph, plan) -> int:
    """How many ways the replica splits each MoE layer's experts inside a tensor-parallel
    group: ``tp`` where the experts divide by ``tp x ep`` (each rank its ``E / (tp ep)``
    experts, as Megatron-Core's expert tensor parallelism holds ``1 / (tp ep)`` of them; the
    tokens exchanged inside the server by all-to-all, simulated), else 1 (the experts' ops cut
    on the tokens, each rank holding its ``E / ep`` experts whole: ``tp`` times Megatron's
    expert weights)."""
    moe = graph.metadata.get("moe")
    experts = moe.get("experts") if isinstance(moe, dict) else None
    if plan.tp > 1 and isinstance(experts, int) and experts % (plan.tp * plan.ep) == 0:
        return plan.tp
    return 1


@lru_cache(maxsize=4)
def _costs(graph, cluster, split: bool) -> CostModel:
    """The replica's cost model: its micro-batch copies are the traced micro-batch's ops,
    whole, so no split overhead is added to them but where the replica cuts ops (tensor or
    context parallel parts: `moplace.costs.costmodel.DEFAULT_SPLIT_OVERHEAD_S` per part)."""
    return CostModel(graph, cluster, **({} if split else {"split_overhead_s": 0.0}))
