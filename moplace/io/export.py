"""A chosen plan written in the terms a user trains with (`plan_document`, the JSON of
``moplace export``): its degrees, stages, levers and per-op placement; and, where the plan has
the regular shape (`moplace.core.planshape`), the matching Megatron-LM command-line flags
(`megatron_flags`, with the fields of megatron-core's ``TransformerConfig`` they set) and a
torchtitan job-config TOML (`torchtitan_toml`, the ``[parallelism]``, ``[training]`` and
``[activation_checkpoint]`` tables its ``ConfigManager`` reads with ``--job.config_file``).
`plan_text` is the short summary a person reads.
"""

from __future__ import annotations

from ..core.coarsen import expand_names
from ..core.context import CP_COMM_WORDS, context_of
from ..core.graph import OpGraph
from ..core.planshape import PlanShape
from ..core.runners import FRAMEWORKS, batch_sizes, misfit, runners, stage_layers
from ..core.strategy import SCHEDULE_LABELS, Strategy

PLAN_FORMAT = "moplace-plan"
PLAN_VERSION = 1
#: torchtitan's names of moplace's schedules (torch.distributed.pipelining's schedule names)
TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B",
                        "zero-bubble": "InterleavedZeroBubble"}


def megatron_flags(shape: PlanShape, graph: OpGraph, fp8: str = "none") -> dict | None:
    """Megatron-LM's flags for a plan Megatron runs (`moplace.core.runners.misfit`; None
    otherwise): ``args`` (a list for a command line), ``config`` (the megatron-core
    ``TransformerConfig`` fields they set), ``ddp`` (the ``DistributedDataParallelConfig``
    and ``OptimizerConfig`` field: ``use_distributed_optimizer``) and ``notes`` (what the
    flags leave out or approximate). ``fp8``: the plan's FP8 mode
    (`moplace.core.strategy.FP8_MODES`)."""
    if misfit(graph, shape, "megatron"):
        return None
    args = ["--tensor-model-parallel-size", str(shape.tp),
            "--pipeline-model-parallel-size", str(shape.pp)]
    config = {"tensor_model_parallel_size": shape.tp,
              "pipeline_model_parallel_size": shape.pp}
    cp = f" x context {shape.cp}" if shape.cp > 1 else ""
    notes = [f"data parallel is implied: {len(shape.devices)} ranks / (tensor {shape.tp} x "
             f"pipeline {shape.pp}{cp}) = {shape.dp}"]
    sizes = batch_sizes(shape)
    if sizes["micro"]:
        args += ["--micro-batch-size", str(sizes["micro"]),
                 "--global-batch-size", str(sizes["global"])]
    elif sizes["global"]:
        notes.append(f"batch {sizes['global']} does not divide into {shape.dp} replicas x "
                     f"{shape.micro_batches} micro-batches: set the batch sizes by hand")
    else:
        notes.append(f"the graph does not name its batch size: set --micro-batch-size and "
                     f"--global-batch-size for {shape.micro_batches} micro-batches per replica")
    if shape.sequence_parallel:
        args.append("--sequence-parallel")
        config["sequence_parallel"] = True
    if shape.ep > 1:
        args += ["--expert-model-parallel-size", str(shape.ep),
                 "--moe-token-dispatcher-type", "alltoall"]
        config.update(expert_model_parallel_size=shape.ep, moe_token_dispatcher_type="alltoall")
        notes.append(_experts_note(graph, shape) + " (the model's --num-experts)")
    if shape.cp > 1:
        args += ["--context-parallel-size", str(shape.cp), "--cp-comm-type", shape.cp_comm]
        config.update(context_parallel_size=shape.cp, cp_comm_type=shape.cp_comm)
        notes.append(_context_note(graph, shape))
    if shape.vp > 1:
        per = stage_layers(graph, shape)[0]
        args += ["--num-layers-per-virtual-pipeline-stage", str(per)]
        config["virtual_pipeline_model_parallel_size"] = shape.vp
        notes.append(f"interleaved 1F1B: {shape.vp} virtual stages of {per} layers per "
                     f"pipeline rank")
    if fp8 != "none":
        args += ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]
        config.update(fp8="hybrid", fp8_recipe="tensorwise")
        notes.append("FP8 (Transformer Engine): E4M3 forward, E5M2 gradients, tensorwise "
                     "scaling; the simulator timed the matmuls at the FP8 peak, none measured")
        if fp8 == "inner":
            args.append("--first-last-layers-bf16")
            config.update(first_last_layers_bf16=True, num_layers_at_start_in_bf16=1,
                          num_layers_at_end_in_bf16=1)
    if shape.recompute_mode == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform",
                 "--recompute-num-layers", "1"]
        config.update(recompute_granularity="full", recompute_method="uniform",
                      recompute_num_layers=1)
    elif shape.recompute_mode == "selective":
        args += ["--recompute-granularity", "selective"]
        config.update(recompute_granularity="selective")
    ddp = {"use_distributed_optimizer": shape.zero_stage in (1, 2)}
    if shape.zero_stage in (1, 2):
        args.append("--use-distributed-optimizer")
        notes.append(f"ZeRO-{shape.zero_stage}: Megatron's distributed optimizer shards the "
                     f"optimizer state and reduce-scatters the gradients")
    if shape.bucket_bytes:
        notes.append(f"gradient buckets of {shape.bucket_bytes:.0f} bytes "
                     f"(--ddp-bucket-size counts elements: bytes / element size)")
    return {"args": args, "config": config, "ddp": ddp, "notes": notes}


def torchtitan_toml(shape: PlanShape, graph: OpGraph, fp8: str = "none") -> dict | None:
    """torchtitan's job config for a plan torchtitan runs (`moplace.core.runners.misfit`;
    None otherwise): ``tables`` (table -> key -> value), ``toml`` (the text) and ``notes``;
    ``fp8``: the plan's FP8 mode (torchao's float8 linear converter)."""
    if misfit(graph, shape, "torchtitan"):
        return None
    sharded = shape.zero_stage > 0
    par = {"data_parallel_replicate_degree": 1 if sharded else shape.dp,
           "data_parallel_shard_degree": shape.dp if sharded else 1,
           "tensor_parallel_degree": shape.tp, "pipeline_parallel_degree": shape.pp,
           "pipeline_parallel_schedule": TORCHTITAN_SCHEDULES[shape.schedule]}
    notes = []
    if shape.zero_stage == 3:
        par["fsdp_reshard_after_forward"] = "always"
    elif shape.zero_stage in (1, 2):
        par["fsdp_reshard_after_forward"] = "never"
        notes.append(f"ZeRO-{shape.zero_stage} as FSDP that keeps the weights gathered "
                     f"between forward and backward (reshard never: ZeRO-2)")
    if shape.pp > 1:
        par["pipeline_parallel_layers_per_stage"] = stage_layers(graph, shape)[0]
    if shape.ep > 1:
        par["expert_parallel_degree"] = shape.ep
        notes.append(_experts_note(graph, shape) + ", carved from FSDP's shard degree")
    if shape.cp > 1:
        par["context_parallel_degree"] = shape.cp
        notes.append(_context_note(graph, shape) + "; FSDP shards the weights over the "
                     "context-parallel ranks")
    if shape.vp > 1:
        notes.append(f"{shape.vp} virtual stages per pipeline rank "
                     f"({TORCHTITAN_SCHEDULES[shape.schedule]})")
    sizes = batch_sizes(shape)
    tables = {"parallelism": par}
    if sizes["micro"] and shape.pp > 1:
        par["pipeline_parallel_microbatch_size"] = sizes["micro"]
        tables["training"] = {"local_batch_size": sizes["per_replica"],
                              "global_batch_size": sizes["global"]}
    elif sizes["micro"]:  # micro-batches without a pipeline: gradient accumulation
        tables["training"] = {"local_batch_size": sizes["micro"],
                              "global_batch_size": sizes["global"]}
    else:
        notes.append("set [training] local_batch_size and pipeline_parallel_microbatch_size "
                     f"for {shape.micro_batches} micro-batches per replica")
    seq = context_of(graph).seq_len if shape.cp > 1 and context_of(graph) else None
    if seq:  # the traced sequence, which CP cuts
        tables.setdefault("training", {})["seq_len"] = seq
    mode = shape.recompute_mode if shape.recompute_mode in ("full", "selective") else "none"
    tables["activation_checkpoint"] = {"mode": mode}
    if mode == "selective":
        tables["activation_checkpoint"]["selective_ac_option"] = "op"
        notes.append("selective: torchtitan's per-op option saves matmul outputs and "
                     "recomputes the rest, close to (not the same as) recomputing each "
                     "attention's core")
    if shape.sequence_parallel:
        notes.append("sequence parallelism: torchtitan shards the norms' activations on the "
                     "sequence under tensor parallelism by itself")
    if fp8 != "none":
        tables["model"] = {"converters": ["quantize.linear.float8"]}
        count = (graph.metadata.get("layers") or {}).get("count")
        skip = ["output"] + (["layers.0.", f"layers.{count - 1}."]
                             if fp8 == "inner" and count else [])
        tables["quantize.linear.float8"] = {"recipe_name": "tensorwise", "filter_fqns": skip}
        notes.append("FP8: torchao's float8 linears, tensorwise scaling, the output head (and "
                     + ("the first and last layers, " if fp8 == "inner" else "")
                     + "by filter_fqns) in BF16; the simulator timed the matmuls at the FP8 "
                     "peak, none measured")
    text = "".join(f"[{table}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in keys.items())
                   + "\n" for table, keys in tables.items())
    return {"tables": tables, "toml": text.rstrip("\n") + "\n", "notes": notes}


def _experts_note(graph: OpGraph, shape: PlanShape) -> str:
    experts = graph.metadata["moe"]["experts"]
    return (f"expert parallel over {shape.ep} ranks: {experts // shape.ep} of each layer's "
            f"{experts} experts per rank, tokens sent to them and back by all-to-all")


def _context_note(graph: OpGraph, shape: PlanShape) -> str:
    info = context_of(graph)
    seq = info.seq_len if info else None
    tokens = (f"{seq // shape.cp} of each sequence's {seq} tokens" if seq else
              f"1/{shape.cp} of each sequence's tokens")
    how = ("attention heads and tokens swapped by all-to-all around each attention (Ulysses)"
           if shape.cp_comm == "a2a" else "keys and values passed round a ring (ring attention)")
    return f"context parallel over {shape.cp} ranks: {tokens} per rank, {how}"


def _toml_value(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def plan_document(graph: OpGraph, strategy: Strategy, shape: PlanShape, device_names,
                  **where) -> dict:
    """The plan as JSON-ready data: ``where`` (e.g. source file, point, cluster) first, then
    degrees, stages (`_stages`: each with its ``groups``, first and last position counted
    from 1 among the graph's co-location groups in data-flow order, and its ``layers``),
    levers, the flags of each framework that runs it
    (None where it does not: ``why_not`` says why, ``why_no_flags`` for an irregular plan),
    ``runs`` (`moplace.core.runners.runners`), and the per-op placement and splits by device
    name (``ranks`` gives each used device's rank)."""
    names = list(device_names)
    ops = [op.name for op in graph.ops]
    return {
        "format": PLAN_FORMAT, "version": PLAN_VERSION, **where, "graph": graph.name,
        "devices": [names[d] for d in shape.devices],
        "ranks": {names[d]: r for r, d in enumerate(shape.devices)},
        "regular": shape.regular,
        "degrees": ({"data": shape.dp, "tensor": shape.tp, "pipeline": shape.pp,
                     "virtual": shape.vp, "expert": shape.ep, "context": shape.cp,
                     **({"context_comm": shape.cp_comm} if shape.cp > 1 else {})}
                    if shape.regular else None),
        "stages": _stages(graph, shape, names),
        "groups": shape.groups,
        "micro_batches": shape.micro_batches, "schedule": shape.schedule,
        "zero_stage": shape.zero_stage, "bucket_bytes": shape.bucket_bytes,
        "recompute": {"mode": shape.recompute_mode, "groups": list(shape.recompute)},
        "batch_size": batch_sizes(shape),
        "fp8": strategy.fp8_mode,
        "megatron": megatron_flags(shape, graph, strategy.fp8_mode),
        "torchtitan": torchtitan_toml(shape, graph, strategy.fp8_mode),
        "runs": runners(graph, strategy, shape),
        "why_not": {f: list(misfit(graph, shape, f)) for f in FRAMEWORKS},
        "why_no_flags": shape.why_text() or None, "irregular": list(shape.why),
        "placement": {m: names[int(d)] for n, d in zip(ops, strategy.placement.tolist())
                      for m in expand_names(graph, n)},
        "splits": {m: {"dim": s.dim, "devices": [names[d] for d in s.devices]}
                   for i, s in strategy.splits.items() for m in expand_names(graph, ops[i])},
    }


def _stages(graph: OpGraph, shape: PlanShape, names: list) -> list[dict]:
    """The stages as `plan_document` lists them: ``groups`` is the span of positions (from 1)
    where the stages' spans do not overlap (None where they do: a pipeline of a traced joint
    graph, each stage's backward after every stage's forward), ``layers`` the model's layers
    (from 1) each stage holds, where the graph names them."""
    stages = shape.stages
    spans = sorted((s.first_group, s.last_group) for s in stages)
    disjoint = all(b[0] > a[1] for a, b in zip(spans, spans[1:]))
    counts = stage_layers(graph, shape) if shape.regular else None
    firsts = [sum(counts[:k]) + 1 for k in range(len(counts))] if counts else None
    spans = [[firsts[j], firsts[j] + counts[j] - 1] for j in range(len(counts))] if counts else None
    pp = len(stages)
    return [{"devices": [names[d] for d in s.devices], "data": s.dp, "tensor": s.tp,
             "context": s.cp,
             "first_op": s.first, "last_op": s.last,
             "groups": [s.first_group + 1, s.last_group + 1] if disjoint else None,
             "group_count": len(s.heads), "ops": s.ops,
             "layers": spans[k] if spans and shape.vp == 1 else None,
             "virtual_layers": spans[k::pp] if spans and shape.vp > 1 else None}
            for k, s in enumerate(stages)]


def plan_text(doc: dict, *, title: str) -> str:
    """The short summary of `plan_document`'s ``doc`` a person reads."""
    devices = doc["devices"]
    lines = [title, f"devices: {len(devices)} ({_listed(devices)})"]
    deg = doc["degrees"]
    virtual = (f" ({deg['virtual']} virtual stages each)" if deg and deg.get("virtual", 1) > 1
               else "")
    experts = (f" (expert parallel x{deg['expert']})" if deg and deg.get("expert", 1) > 1
               else "")
    context = (f" x context {deg['context']} ({CP_COMM_WORDS.get(deg.get('context_comm'), '?')})"
               if deg and deg.get("context", 1) > 1 else "")
    lines.append(f"shape: data {deg['data']}{experts} x tensor {deg['tensor']}{context} x "
                 f"pipeline {deg['pipeline']}{virtual}" if deg else
                 "shape: irregular (per-op placement only)")
    stages = doc["stages"]
    what = "stages" if deg else "runs of groups on one device set"
    lines.append(f"{what} ({len(stages)}, in data-flow order, of {doc['groups']} groups):")
    for k, s in enumerate(stages[:8]):
        width = (f"{s['context']}-way context parallel" if s.get("context", 1) > 1 else
                 f"{s['tensor']}-way tensor parallel" if (s["tensor"] or 1) > 1 else
                 f"{s['data']} replica{'s' if s['data'] != 1 else ''}" if s["data"] else
                 "batch and channel splits")
        chunks = s.get("virtual_layers")
        held = (f"layers {s['layers'][0]}-{s['layers'][1]}, {s['group_count']} groups"
                if s["layers"] else
                "layers " + ", ".join(f"{a}-{b}" for a, b in chunks)
                + f" ({len(chunks)} virtual stages), {s['group_count']} groups" if chunks else f"groups {s['groups'][0]}-{s['groups'][1]} "
                f"({s['group_count']}), {s['first_op']} .. {s['last_op']}" if s["groups"]
                else f"{s['group_count']} groups")
        lines.append(f"  {k}: {held}, {s['ops']} ops on {_listed(s['devices'])}: {width}")
    if len(stages) > 8:
        lines.append(f"  ... {len(stages) - 8} more (--format json lists them)")
    m = doc["micro_batches"]
    rec = doc["recompute"]
    lever = [f"{m} micro-batches {SCHEDULE_LABELS.get(doc['schedule'], doc['schedule'])}"
             if m > 1 else "1 micro-batch", f"ZeRO-{doc['zero_stage']}",
             f"{doc['bucket_bytes'] / 2**20:.2f} MiB buckets" if doc["bucket_bytes"]
             else "no gradient buckets",
             f"recompute {rec['mode']}" + (f" ({_count(len(rec['groups']), 'group')})"
                                           if rec["groups"] else "")]
    if doc.get("fp8", "none") != "none":
        lever.append("FP8 matmuls" + (" (first and last layers BF16)"
                                      if doc["fp8"] == "inner" else ""))
    lines.append("levers: " + ", ".join(lever))
    lines.append("runs on: " + (", ".join(doc["runs"]) or "none of torchtitan, megatron, "
                                "moplace-apply"))
    if not deg:
        lines.append("why no flags: " + doc["why_no_flags"])
        return "\n".join(lines)
    if doc["megatron"]:
        lines.append("megatron: " + " ".join(doc["megatron"]["args"]))
    if doc["torchtitan"]:
        tt = doc["torchtitan"]["tables"]["parallelism"]
        lines.append("torchtitan: " + ", ".join(f"{k}={v}" for k, v in tt.items()))
    for f in ("megatron", "torchtitan"):
        notes = doc[f]["notes"] if doc[f] else [f"no {f} flags: " + "; ".join(doc["why_not"][f])]
        lines += [f"  note: {note}" for note in notes]
    return "\n".join(lines)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _listed(names) -> str:
    names = list(names)
    return ", ".join(names) if len(names) <= 4 else f"{names[0]} .. {names[-1]}"
