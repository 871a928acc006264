"""Op times as the PyTorch testbed runs them (`testbed_op_times`): the graph's whole plan run on
one of the testbed's processes, each task timed by the wall clock (the aten call and what the
testbed pays around it: reading its inputs, keeping its output), an op's time the median over
10 steps (as a strategy's step is), at the traced batch and at
each micro-batch the batch cuts into (2, 4, 8, 16: what a part split that many ways on batch,
or a micro-batch of a pipeline, runs), kept as the ``cpu`` kind's ``compute`` and
``part_compute``.

The profiler's time of an op measured alone (`moplace.torch.measure`) leaves out that a
testbed task costs about the same fixed time whatever its size: a part of a small op is not
half its time. Measured at each part's size, the simulator's parts and micro-batch copies take
the time the testbed takes (`moplace.simulator.microbatch`: one of ``n m`` parts where the
graph has one). With ``repeats`` > 1 each batch is timed so many times, the repeats one after
the other over all the batches, and keeps its least disturbed repeat (the least sum of its op
times): another job's burst of load on a shared machine then falls on one repeat, not on the
op times the whole report is simulated with.
"""

from __future__ import annotations

import dataclasses

from ..core.graph import OpGraph

#: the part counts (and micro-batches) measured, where the batch cuts into them
PART_COUNTS = (2, 4, 8, 16)


def testbed_op_times(graph: OpGraph, testbed, *, steps: int = 10, warmup: int = 1,
                     repeats: int = 1, progress=None) -> OpGraph:
    """``graph`` with its ``cpu`` op times measured on ``testbed`` (a
    `moplace.torch.testbed.TorchTestbed`) as the module docstring says; ``progress(stage,
    done, total)`` hears of each batch timed."""
    return timed_ops(graph, testbed, steps=steps, warmup=warmup, repeats=repeats,
                     progress=progress)[0]


def timed_ops(graph: OpGraph, testbed, *, steps: int = 10, warmup: int = 1, repeats: int = 1,
              progress=None) -> tuple[OpGraph, float | None]:
    """`testbed_op_times`, and the one-device step the op times kept at the traced batch were
    measured in (the machine's speed when they were taken; None if that batch did not run)."""
    from ..core.baselines import single
    from .apply import apply_torch
    from .testbed import TorchTestbed

    say = progress or (lambda *a: None)
    source = graph.metadata.get("source")
    batch = int(source["batch_size"]) if isinstance(source, dict) else 1
    counts = [1] + [k for k in PART_COUNTS if batch % k == 0]
    cluster = TorchTestbed.placeholder_cluster(testbed.count)
    times, step_s = {}, None
    for r in range(max(repeats, 1)):
        for done, k in enumerate(counts):
            say(f"timing each op on the testbed at batch {batch // k}"
                + (f" (repeat {r + 1} of {repeats})" if repeats > 1 else ""), done, len(counts))
            plan = single(graph, testbed.count).with_options(micro_batches=k)
            result, _ = apply_torch(graph, plan, cluster, steps=steps, warmup=warmup,
                                    testbed=testbed, time_ops=True)
            if result.expressible and (k not in times or sum(result.op_seconds.values())
                                       < sum(times[k].values())):
                times[k] = result.op_seconds
                if k == 1:
                    step_s = result.measured_step_s
    said = [batch // k for k in times]
    whole = times.get(1, {})
    ops = []
    for i, op in enumerate(graph.ops):
        compute = {**op.compute, "cpu": float(whole.get(i, 0.0))}
        parts = {k: {"cpu": float(t[i])} for k, t in times.items()
                 if k > 1 and i in t and op.role in ("forward", "backward")}
        ops.append(dataclasses.replace(op, compute=compute,
                                       part_compute={**op.part_compute, **parts}))
    measured = {**(graph.metadata.get("measured") or {}),
                "testbed_op_times": {"batches": said, "steps": steps, "repeats": repeats,
                                     "how": "each task's wall clock on one testbed process"}}
    return OpGraph(ops, graph.edges, name=graph.name,
                   metadata={**graph.metadata, "measured": measured}), step_s
