"""``moplace evaluate GRAPH --cluster POD_OR_CLUSTER --plan "tp=8,pp=16,dp=128,mbs=1,gbs=2048"``:
a regular plan given by its degrees, evaluated at any scale (`moplace.simulator.atscale`).

The graph is one micro-batch (traced at ``--batch`` = mbs); the cluster a pod
(``pod:H100:16384``, a file with a ``[pod]`` table) or any listed cluster of equal servers.
Prints the step, throughput, peak memory and traffic, where the time goes and which parts were
simulated and which modelled; ``--json`` one strict JSON object.
"""

from __future__ import annotations

from .. import strictjson
from ..errors import MoplaceError


def evaluate_plan(args) -> int:
    from objectives import DEFAULT, json_key

    from ..core.pod import Pod
    from ..core.pod import load_target
    from ..core.regular import parse_plan
    from ..costs.origin import estimated_notes
    from ..review.units import fmt
    from ..simulator.atscale import evaluate_regular
    from .problem import graph_arg

    for flag in ("strategy", "baseline", "micro_batches", "schedule", "fp8", "expert_parallel",
                 "context_parallel", "point"):
        if getattr(args, flag, None) not in (None, False):
            raise MoplaceError(f"--plan states the whole plan; drop --{flag.replace('_', '-')} "
                               f"(say it in the plan: schedule=, precision=, ep=, cp=)")
    if not args.cluster:
        raise MoplaceError("--plan needs --cluster: a pod (pod:H100:16384) or a cluster file")
    plan = parse_plan(args.plan)
    target = load_target(args.cluster)
    graph = graph_arg(args)
    ev = evaluate_regular(graph, target, plan, objectives=DEFAULT,
                          memory_limit=args.memory_limit or None)
    kind_cluster = target.servers(1) if isinstance(target, Pod) else target
    notes = estimated_notes(graph, kind_cluster)
    if plan.fp8 != "none":
        from ..costs.fp8 import FP8_NOTE
        notes.append(FP8_NOTE)
    name = target.name
    if args.json:
        out = {"graph": graph.name, "cluster": name, "gpus": ev.gpus, "plan": plan.spec(),
               "plan_text": plan.text(),
               **{json_key(n): v for n, v in zip(ev.names, ev.values.tolist())},
               "feasible": ev.feasible, "memory_excess_bytes": ev.violation,
               "micro_batches": plan.micro_batches, "tokens_per_step": ev.tokens_per_step,
               "tokens_per_s_per_gpu": ev.tokens_per_s_per_gpu,
               "model_flops": ev.model_flops, "tflops_per_gpu": ev.tflops_per_gpu,
               "mfu": ev.mfu, "flops_convention": ev.flops_note, "summary": ev.summary(),
               "time_parts_s": ev.parts, "step_shares_s": ev.losses,
               "algorithms": ev.algorithms, "how": ev.how(), "cost_notes": notes}
        print(strictjson.dumps(out))
        return 0
    t = ev.trace
    cap = float(t.capacity.min())
    mem = float(t.peak_memory.max())
    where = target.describe() if isinstance(target, Pod) else name
    print(f"graph {graph.name} (one micro-batch of {plan.mbs} sequence"
          f"{'s' if plan.mbs > 1 else ''}) on {where}")
    for note in notes:
        print(f"note: {note}")
    m = plan.micro_batches
    print(f"\n{ev.summary()}\nplan {plan.text()}: {m} micro-batch{'es' if m != 1 else ''} per "
          f"replica")
    rate = (f" ({ev.tokens_per_s_per_gpu:,.0f} tokens/s per GPU)" if ev.tokens_per_step else "")
    print(f"  step           {fmt(ev.runtime_s, 'time')}{rate}")
    if ev.tflops_per_gpu is not None:
        mfu = f", {ev.mfu:.1%} MFU" if ev.mfu else ""
        print(f"  throughput     {ev.tflops_per_gpu:,.1f} TFLOP/s per GPU{mfu} ({ev.flops_note})")
    else:
        print(f"  throughput     model FLOPs not counted: {ev.flops_note}")
    fits = "fits" if ev.feasible else f"over by {fmt(mem - cap, 'bytes')}"
    print(f"  peak memory    {fmt(mem, 'bytes')} of {fmt(cap, 'bytes')} ({fits})")
    print(f"  peak traffic   {fmt(float(t.traffic.max()), 'bytes')} per GPU per step")
    p = ev.parts
    print("  the step on its slowest stage:")
    for cause, seconds in ev.losses.items():
        if seconds > 1e-9 * ev.runtime_s:  # not float dust of a difference
            print(f"    {cause:<38} {fmt(seconds, 'time'):>10} {seconds / ev.runtime_s:>6.1%}")
    print("  simulated and modelled:")
    print(f"    simulated replica            {fmt(p['simulated_s'], 'time')}")
    if p["all_to_all_s"]:
        print(f"      of it expert all-to-alls   {fmt(p['all_to_all_s'], 'time')}")
    if p["grad_reduce_s"] or p["param_gather_s"]:
        algo = ", ".join(f"{k}: {v}" for k, v in ev.algorithms.items())
        print(f"    data-parallel collectives    {fmt(p['grad_reduce_s'], 'time')} gradients + "
              f"{fmt(p['param_gather_s'], 'time')} weights ({algo}); exposed "
              f"{fmt(p['exposed_s'], 'time')}")
    if p.get("tp_comm_s"):
        print(f"    tensor-parallel collectives  {fmt(p['tp_comm_s'], 'time')} on the server's "
              f"links, {fmt(p['tp_left_s'], 'time')} of it beyond their GEMMs (what the "
              f"overlap leaves; in the simulated replica)")
    print(f"  how: {ev.how()}")
    return 0
