"""A regular plan, as a search at scale found it (`moplace.io.regularfronts`), in the terms a
training script takes: Megatron-LM's flags and torchtitan's job-config keys, straight from its
degrees and levers (what ``moplace export FRONT --point K`` prints for such a front).

Megatron-LM: ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size`` (with
``--num-layers-per-virtual-pipeline-stage`` or ``--decoder-first/last-pipeline-num-layers``),
``--context-parallel-size``, ``--expert-model-parallel-size``, the batch sizes,
``--sequence-parallel`` with tensor parallelism, recomputation, ``--use-distributed-optimizer``
with ``--overlap-grad-reduce --overlap-param-gather`` where the plan overlaps them,
``--tp-comm-overlap``, ``--bf16`` or FP8. torchtitan: ``[parallelism]`` degrees and schedule,
``[training]`` batch sizes, ``[activation_checkpoint]``; data parallelism as FSDP's shard
degree (its ZeRO-1 of the search space).
"""

from __future__ import annotations

import shlex

from ..core.regular import RegularPlan
from .export import TORCHTITAN_SCHEDULES, _toml_value


def pipeline_layout(counts) -> str:
    """Megatron-Core's ``--pipeline-model-parallel-layout`` of stages of ``counts`` layers
    each (in virtual-stage order): the embedding on the first, the loss on the last,
    repeated stages multiplied (``Et*3|(t*4|)*30t*3L``)."""
    stages = [f"t*{c}" if c > 1 else "t" * c for c in counts]
    stages[0], stages[-1] = "E" + stages[0], stages[-1] + "L"
    out, k = [], 0
    while k < len(stages):
        run = 1
        while k + run < len(stages) and stages[k + run] == stages[k]:
            run += 1
        out.append(f"({stages[k]}|)*{run}" if run > 1 else stages[k] + "|")
        k += run
    return "".join(out).rstrip("|")


def regular_megatron(plan: RegularPlan, layers: int | None) -> dict:
    """``args`` (a command line's flags) and ``notes`` of ``plan`` for Megatron-LM; ``layers``
    the model's (for the virtual stages' size)."""
    args = ["--tensor-model-parallel-size", str(plan.tp),
            "--pipeline-model-parallel-size", str(plan.pp),
            "--micro-batch-size", str(plan.mbs), "--global-batch-size", str(plan.gbs)]
    notes = [f"data parallel is implied: {plan.gpus:,} ranks / (tensor {plan.tp} x context "
             f"{plan.cp} x pipeline {plan.pp}) = {plan.dp}"]
    if plan.tp > 1:
        args.append("--sequence-parallel")
    if plan.v > 1 and (plan.first or plan.last) and layers:
        # uneven first and last virtual stages: Megatron-Core's layout, stage by stage in
        # virtual-stage order (its --decoder-first/last-pipeline-num-layers cut a rank's)
        args += ["--pipeline-model-parallel-layout", pipeline_layout(plan.stage_layers(layers))]
    elif plan.v > 1:
        per = layers // (plan.pp * plan.v) if layers else None
        if per:
            args += ["--num-layers-per-virtual-pipeline-stage", str(per)]
        else:
            notes.append(f"{plan.v} virtual stages per rank: set "
                         f"--num-layers-per-virtual-pipeline-stage to layers / {plan.pp * plan.v}")
    else:
        if plan.first:
            args += ["--decoder-first-pipeline-num-layers", str(plan.first)]
        if plan.last:
            args += ["--decoder-last-pipeline-num-layers", str(plan.last)]
    if plan.cp > 1:
        args += ["--context-parallel-size", str(plan.cp), "--cp-comm-type", plan.cp_comm]
    if plan.ep > 1:
        args += ["--expert-model-parallel-size", str(plan.ep),
                 "--moe-token-dispatcher-type", "alltoall"]
    if plan.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform",
                 "--recompute-num-layers", "1"]
    elif plan.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    if plan.zero:
        args.append("--use-distributed-optimizer")
        if plan.overlap:
            args += ["--overlap-grad-reduce", "--overlap-param-gather"]
    elif plan.overlap and plan.dp > 1:
        args.append("--overlap-grad-reduce")
    if plan.tp_overlap and plan.tp > 1:
        args.append("--tp-comm-overlap")
    if plan.precision == "fp16":
        args.append("--fp16")
        if plan.grad_fp32:
            args.append("--accumulate-allreduce-grads-in-fp32")
    elif plan.precision == "bf16":
        args.append("--bf16")
        if not plan.grad_fp32:
            notes.append("BF16 gradients: Megatron reduces BF16 training's gradients in FP32 "
                         "by itself; the plan was evaluated with them in BF16")
    else:
        args += ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]
        if plan.precision == "fp8-inner":
            args.append("--first-last-layers-bf16")
        notes.append("FP8 (Transformer Engine): the matmuls were timed at the FP8 peak, none "
                     "measured")
    return {"args": args, "notes": notes}


def regular_torchtitan(plan: RegularPlan, layers: int | None) -> dict:
    """``tables``, ``toml`` and ``notes`` of ``plan`` for torchtitan's job config."""
    par = {"data_parallel_replicate_degree": 1 if plan.zero else plan.dp,
           "data_parallel_shard_degree": plan.dp if plan.zero else 1,
           "tensor_parallel_degree": plan.tp, "pipeline_parallel_degree": plan.pp,
           "context_parallel_degree": plan.cp,
           "pipeline_parallel_schedule": TORCHTITAN_SCHEDULES[plan.schedule]}
    notes = []
    if plan.ep > 1:
        par["expert_parallel_degree"] = plan.ep
    if plan.pp > 1:
        par["pipeline_parallel_microbatch_size"] = plan.mbs
        if layers and not (plan.first or plan.last):
            par["pipeline_parallel_layers_per_stage"] = layers // (plan.pp * plan.v)
        elif plan.first or plan.last:
            notes.append(f"uneven stages ({plan.first} first, {plan.last} last layers): "
                         f"torchtitan's module_fqns_per_model_part sets them")
    tables = {"parallelism": par,
              "training": {"local_batch_size": plan.gbs // plan.dp, "global_batch_size": plan.gbs},
              "activation_checkpoint": {"mode": plan.recompute if plan.recompute != "none"
                                        else "none"}}
    if plan.recompute == "selective":
        tables["activation_checkpoint"]["selective_ac_option"] = "op"
    if plan.fp8 != "none":
        tables["model"] = {"converters": ["quantize.linear.float8"]}
    elif plan.precision == "fp16":
        notes.append("FP16: torchtitan trains in BF16 or FP32 (its mixed_precision_param); "
                     "the plan was evaluated in FP16, as fast and as large")
    if plan.tp_overlap and plan.tp > 1:
        notes.append("the plan overlaps tensor-parallel communication (Megatron's "
                     "--tp-comm-overlap); torchtitan's is [parallelism] "
                     "enable_async_tensor_parallel, with torch.compile")
    text = "".join(f"[{table}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in keys.items())
                   + "\n" for table, keys in tables.items())
    return {"tables": tables, "toml": text.rstrip("\n") + "\n", "notes": notes}


def regular_text(point: dict, title: str, megatron: dict, torchtitan: dict,
                 graph: str | None = None, cluster: str | None = None) -> str:
    """The summary ``export`` prints of a regular front point (``graph`` and ``cluster``: where
    the front says they came from)."""
    r = point["regular"]
    lines = [title, f"plan: {r['text']}", f"summary: {r['summary']}",
             "megatron: " + shlex.join(megatron["args"])]  # quoted: a layout holds | ( *
    lines += [f"  note: {n}" for n in megatron["notes"]]
    tt = torchtitan["tables"]["parallelism"]
    lines.append("torchtitan: " + ", ".join(f"{k}={v}" for k, v in tt.items()))
    lines += [f"  note: {n}" for n in torchtitan["notes"]]
    lines.append(f"evaluate it again: moplace evaluate {graph or 'GRAPH'} --cluster "
                 f"{cluster or 'POD'} --plan \"{r['spec']}\"")
    return "\n".join(lines)
