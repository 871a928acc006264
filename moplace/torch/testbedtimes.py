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
    return op_timer(graph, testbed, steps=steps, warmup=warmup, repeats=repeats,
                    progress=progress).graph()


def op_timer(graph: OpGraph, testbed, *, steps: int = 10, warmup: int = 1, repeats: int = 1,
             progress=None) -> "OpTimer":
    """An `OpTimer` that has timed the ops ``repeats`` times, one after the other."""
    timer = OpTimer(graph, testbed, steps=steps, warmup=warmup, progress=progress)
    for r in range(max(repeats, 1)):
        timer.repeat(f" (repeat {r + 1} of {repeats})" if repeats > 1 else "")
    return timer


class OpTimer:
    """The op times of ``graph`` on ``testbed`` (`testbed_op_times`), one `repeat` at a time:
    each batch keeps its least disturbed repeat so far (`graph`), and the one-device step
    that repeat measured (``step_s``: batch parts -> seconds; at 1, the machine's speed when
    its op times were taken)."""

    def __init__(self, graph: OpGraph, testbed, *, steps: int = 10, warmup: int = 1,
                 progress=None):
        source = graph.metadata.get("source")
        self.batch = int(source["batch_size"]) if isinstance(source, dict) else 1
        self.counts = [1] + [k for k in PART_COUNTS if self.batch % k == 0]
        self.graph0, self.testbed, self.steps, self.warmup = graph, testbed, steps, warmup
        self.say = progress or (lambda *a: None)
        self.times: dict = {}  # parts -> op index -> seconds
        self.step_s: dict = {}  # parts -> the measured step of the repeat kept
        self.repeats = 0

    def repeat(self, label: str = "") -> None:
        """Time every op once more at each batch; keep each batch's least sum of op times."""
        from ..core.baselines import single
        from .apply import apply_torch
        from .testbed import TorchTestbed

        cluster = TorchTestbed.placeholder_cluster(self.testbed.count)
        for done, k in enumerate(self.counts):
            self.say(f"timing each op on the testbed at batch {self.batch // k}{label}", done,
                     len(self.counts))
            plan = single(self.graph0, self.testbed.count).with_options(micro_batches=k)
            result, _ = apply_torch(self.graph0, plan, cluster, steps=self.steps,
                                    warmup=self.warmup, testbed=self.testbed, time_ops=True)
            if result.expressible and (k not in self.times or sum(result.op_seconds.values())
                                       < sum(self.times[k].values())):
                self.times[k] = result.op_seconds
                self.step_s[k] = result.measured_step_s
        self.repeats += 1

    def graph(self) -> OpGraph:
        """The graph with the least disturbed op times so far."""
        graph, times = self.graph0, self.times
        whole = times.get(1, {})
        ops = []
        for i, op in enumerate(graph.ops):
            compute = {**op.compute, "cpu": float(whole.get(i, 0.0))}
            parts = {k: {"cpu": float(t[i])} for k, t in times.items()
                     if k > 1 and i in t and op.role in ("forward", "backward")}
            ops.append(dataclasses.replace(op, compute=compute,
                                           part_compute={**op.part_compute, **parts}))
        measured = {**(graph.metadata.get("measured") or {}),
                    "testbed_op_times": {"batches": [self.batch // k for k in times],
                                         "steps": self.steps, "repeats": self.repeats,
                                         "how": "each task's wall clock on one testbed "
                                                "process"}}
        return OpGraph(ops, graph.edges, name=graph.name,
                       metadata={**graph.metadata, "measured": measured})
