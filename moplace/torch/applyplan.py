"""A strategy applied to a traced PyTorch step, decided once and the same on every rank: the
compute tasks in the order the simulator started them, what each graph node reads and in which
layout, and every transfer and collective between ranks (`plan_program`).

The unit of work is a **task**: one part of one micro-batch's copy of an op (`Task`), run by
the rank of its device. An op's task runs the graph nodes folded into the op (the op's own
aten call and the views of its output), in graph order. Each node's output is kept per
micro-batch and part, in a **layout** (`Layout`): ``whole`` (an unsplit op's), or one part of
``k``: a ``slice`` of the batch along the node's batch dimension, a ``partial`` sum (an output
with no batch dimension computed from slices: a weight gradient of a batch part), a
``replica`` (the same on every part: a weight), a ``channel`` slice (an op split on channel,
`moplace.torch.channelsplit`), a ``view`` of a channel-split output, which its parts do not
make (its sizes are the whole's) but each reader makes from the joined output, or, in a
tensor-parallel block, a ``shard`` (index runs along one dimension) or a ``tpartial`` sum
(`moplace.torch.tensorprobe`), all-reduced among the parts' ranks where a node outside the
block reads it. What a node needs of an input it reads
(`Need`): all of it (parts concatenated, partial sums added), its slice ``p`` of ``k``, or its
own part ``p`` (a partial sum or replica of a producer split as it is). Pieces held by another
rank travel point to point: the producer sends once it has run, the reader receives when it
needs them, each transfer tagged by its place in the one order.

Gradients are not read by graph nodes but by the update ops: every rank that computed part of
a weight's gradient adds it up over its micro-batches, and the sums meet where the update runs
(`Reduction`): an all-reduce among the update's replicas (a reduce-scatter under ZeRO), or, for
an update on one device, point-to-point sends to it; a gradient made in channel parts is
joined where the update runs. Under ZeRO-3 each replica holds its shard of a weight between
uses, gathered before the weight's op first runs and again before its group's first backward
op that computes its gradient. Each reduction and each gather is an event placed in the one
order just after the last task it waits for, so that every rank meets the collectives in the
same order and no rank waits for one that waits for it: each rank's program is the one order,
its own tasks and its collectives kept.
"""

from __future__ import annotations

from dataclasses import replace

from ..core.graph import OpGraph
from ..core.strategy import Strategy
from .applytypes import Layout, Need, NodeInfo, PlanRefused, Program, Reduction, Task

__all__ = ["Task", "NodeInfo", "Layout", "Need", "Reduction", "Program", "plan_program",
           "PlanRefused"]


class _Planner:
    def __init__(self, nodes: list[NodeInfo], graph: OpGraph, strategy: Strategy,
                 gradients: dict, batch: int, n_ranks: int, tensor: dict | None = None):
        self.nodes = {n.name: n for n in nodes}
        self.by_op: dict[int, list[NodeInfo]] = {}
        for n in nodes:
            self.by_op.setdefault(n.op, []).append(n)
        self.graph, self.strategy, self.batch = graph, strategy, batch
        self.m = int(strategy.micro_batches)
        self.gradients = gradients  # gradient node -> update op index
        self.programs = [Program(r) for r in range(n_ranks)]
        self.layout: dict = {}  # (node, mb) -> Layout
        self.have: dict = {}  # (node, mb, part) -> ranks holding it
        self.tag = 0
        # per update op: ranks contributing to its gradient, and the last task position
        self.contrib: dict[int, set] = {}
        self.last_grad: dict[int, int] = {}
        self.views: dict = {}  # view of a channel-split output -> (its base, the views)
        self.joined: dict = {}  # update op -> [(gradient node, mb)] computed in channel parts
        self.first_at: dict = {}  # op -> the position of its first task (not a clone)
        self.tensor = tensor or {}  # parts -> node -> its spec (`moplace.torch.tensorprobe`)
        self.done_at: dict = {}  # (node, mb) -> the position of the last task making it
        self.events: list = []  # events planned with the tasks (tensor partial sums)

    def next_tag(self) -> int:
        self.tag += 1
        return self.tag

    def split_of(self, op: int):
        return self.strategy.splits.get(op)

    def run(self, tasks: list[Task]) -> list[Program]:
        # a batch that does not cut into the parts is refused before (runners.pytorch_refusal)
        events: list[tuple[int, int, object]] = []  # (position, order, event)
        updates = {}
        for pos, t in enumerate(tasks):
            op = self.graph.ops[t.op]
            if op.role == "update":
                updates.setdefault(t.op, []).append((pos, t))
                continue
            self.plan_task(pos, t)
        shared = []  # (ready position, first update, reduction): reductions to bucket
        last_update = {u: max(p for p, _ in parts) for u, parts in updates.items()}
        for u, parts in sorted(updates.items()):
            first = min(p for p, _ in parts)
            ranks = tuple(dict.fromkeys(t.device for _, t in sorted(parts, key=lambda x: x[1].part)))
            for node, mb in self.joined.get(u, ()):  # joined where the first part updates
                reader = Task(u, mb, 0, 1, ranks[0])
                events.append((self.last_grad[u], 1, ("collect", ranks[0], u,
                                                       self.full(node, mb, reader))))
                self.contrib.setdefault(u, set()).add(ranks[0])
            red = self.reduction(u, ranks)
            if red is not None:
                at = self.last_grad.get(u, -1)
                if at >= first:
                    raise PlanRefused(f"update {self.graph.ops[u].name!r} runs before its "
                                      "gradient is complete")
                if red.how == "send":
                    events.append((at, 2, ("reduce", red)))
                else:
                    shared.append((at, first, red))
            for pos, t in parts:
                events.append((pos, 0, ("update", t)))
            if red is not None and red.how == "reducescatter" and self.strategy.zero_stage >= 3:
                events += self.weight_gathers(u, replace(red))  # a bucket grows ``red``
        for at, red in self.buckets(shared):
            events.append((at, 2, ("reduce", red)))
            if red.how == "reducescatter" and self.strategy.zero_stage < 3:
                # ZeRO-1/2: the bucket's updated shards gathered after its last update
                events.append((max(last_update[u] for u in red.updates), 3, ("gather", red)))
        return self.programs, events + self.events

    def weight_gathers(self, u: int, red: Reduction) -> list:
        """ZeRO-3: the weight update ``u`` updates is held in shards between uses, gathered
        just before its op's first task, and again before the first task of a backward op of
        its group that computes its gradient, as `moplace.simulator.gathers` gathers it."""
        g = self.graph
        p = g.index.get(g.ops[u].name.replace("update/", "param/", 1))
        if p is None or p not in self.first_at:
            return []
        for r in red.ranks:
            self.programs[r].sharded[u] = (red.ranks, p)
        out = [(self.first_at[p] - 1, 9, ("gather", red))]
        again = [self.first_at[i] for i in g.groups[int(g.arrays.group[p])]
                 if g.ops[i].role == "backward" and g.ops[i].grad_bytes > 0
                 and i in self.first_at]
        if again:
            out.append((min(again) - 1, 9, ("regather", red)))
        return out

    def buckets(self, shared) -> list:
        """The reductions of ``shared`` in buckets, as the simulator makes them
        (`moplace.simulator.buckets`): per ring and kind (all-reduce, or ZeRO's
        reduce-scatter), the gradients in the order they are complete until the bucket holds
        the strategy's bucket size (0: one gradient op's each); a bucket is also closed before
        a gradient completed after one of its updates would run. (position, reduction) each."""
        limit = float(self.strategy.bucket_bytes)
        out, open_ = [], {}  # (ranks, how) -> [at, first update, bytes, its index in out]
        for at, first, red in sorted(shared, key=lambda x: (x[0], x[2].update)):
            size, key = self.grad_bytes(red.update), (red.ranks, red.how)
            cur = open_.get(key)
            # a gradient op's gradients share a bucket (the same last task makes them)
            if cur is not None and (at == cur[0] or cur[2] < limit) and at < cur[1]:
                merged = out[cur[3]][1]
                merged.updates += red.updates
                merged.contributors = tuple(sorted(set(merged.contributors)
                                                   | set(red.contributors)))
                cur[:3] = [at, min(cur[1], first), cur[2] + size]
                out[cur[3]] = (at, merged)
                continue
            open_[key] = [at, first, size, len(out)]
            out.append((at, red))
        return out

    def grad_bytes(self, update: int) -> float:
        name = self.graph.ops[update].name.replace("update/", "param/", 1)
        i = self.graph.index.get(name)
        return float(self.graph.ops[i].param_bytes) if i is not None else 0.0

    # -- tasks
    def plan_task(self, pos: int, t: Task) -> None:
        prog = self.programs[t.device]
        if not t.clone:
            self.first_at.setdefault(t.op, pos)
        ran = []
        local = set()
        for n in self.by_op.get(t.op, ()):
            if t.dim == "channel" and n.place == "view":
                self.plan_view(n, t, pos)
                continue
            needs, used_parts = [], False
            for a in n.inputs:
                if a in local:  # made by this task: its own part
                    needs.append(Need(a, t.mb, "part", (t.part,), "one"))
                    lay = self.layout[(a, t.mb)]
                    used_parts |= lay.kind in ("slice", "partial")
                    continue
                need, sliced = self.need(a, t)
                needs.append(need)
                used_parts |= sliced
            lay = self.made(n, t, used_parts)
            if t.clone:
                lay = self.layout.get((n.name, t.mb), lay)
            else:
                self.layout[(n.name, t.mb)] = lay
            self.have.setdefault((n.name, t.mb, t.part), set()).add(t.device)
            if not t.clone:
                self.done_at[(n.name, t.mb)] = pos
            local.add(n.name)
            ran.append((n.name, needs, lay))
            self.gradient_made(n.name, lay, t, pos)
        prog.steps.append(("task", t, ran))

    def made(self, n: NodeInfo, t: Task, used_parts: bool) -> Layout:
        """The layout of node ``n``'s output made by task ``t``'s part."""
        if t.parts == 1:
            return Layout("whole", (t.device,), n.batch_dim, n.outer)
        devices = self.split_of(t.op).devices
        if t.dim == "channel":
            if n.channel is None:
                return Layout("replica", devices, split="channel")
            return Layout("channel", devices, n.channel, split="channel")
        if t.dim == "tensor":
            spec = self.tensor[t.parts][n.name]
            if spec[0] == "shard":
                return Layout("shard", devices, spec[1], split="tensor", runs=spec[2])
            return Layout("tpartial" if spec[0] == "partial" else "replica", devices,
                          split="tensor")
        kind = "slice" if n.batch_dim is not None else "partial" if used_parts else "replica"
        if n.kind == "input":
            kind = "slice" if n.batch_dim is not None else "replica"
        return Layout(kind, devices, n.batch_dim, n.outer)

    def plan_view(self, n: NodeInfo, t: Task, pos: int) -> None:
        """A view of a channel-split op's output: not made by the parts, but by each reader
        from the joined output (its sizes are the whole's)."""
        if t.clone:
            return
        if (n.name, t.mb) in self.views:  # planned with the first part that ran
            self.gradient_made(n.name, self.layout[(n.name, t.mb)], t, pos)
            return
        src = [a for a in n.inputs if (a, t.mb) in self.layout]
        if len(n.inputs) != 1 or len(src) != 1:
            raise PlanRefused(f"view {n.name!r} of op {self.graph.ops[t.op].name!r} reads "
                              f"{len(n.inputs)} nodes: it cannot follow a channel split")
        base, views = self.views.get((src[0], t.mb), (src[0], ()))
        self.views[(n.name, t.mb)] = (base, views + (n.name,))
        lay = Layout("view", self.split_of(t.op).devices, split="channel")
        self.layout[(n.name, t.mb)] = lay
        self.gradient_made(n.name, lay, t, pos)

    def gradient_made(self, name: str, lay: Layout, t: Task, pos: int) -> None:
        """Node ``name``'s part made by ``t``, when it is (part of) a weight's gradient: added
        up on its rank, or, cut into channels, joined where the update runs."""
        upd = self.gradients.get(name)
        if upd is None or t.clone:
            return
        if lay.kind in ("channel", "view"):
            joined = self.joined.setdefault(upd, [])
            if (name, t.mb) not in joined:
                joined.append((name, t.mb))
        elif not (lay.kind == "replica" and t.part > 0):
            self.programs[t.device].grads[(name, t.mb, t.part)] = upd
            self.contrib.setdefault(upd, set()).add(t.device)
        self.last_grad[upd] = max(self.last_grad.get(upd, -1), pos)

    def need(self, a: str, t: Task) -> tuple[Need, bool]:
        """How task ``t`` reads node ``a``, with the receives it takes; and whether it reads
        a slice or a partial sum of it."""
        info = self.nodes[a]
        mb = t.mb
        lay = self.layout.get((a, mb))
        if lay is None:
            raise PlanRefused(f"node {a!r} is read before it is computed (op "
                              f"{self.graph.ops[t.op].name!r})")
        split = self.split_of(t.op)
        if t.dim == "tensor" and t.parts > 1:
            return self.tensor_need(a, t, lay, split), False
        if t.dim == "batch" and t.parts > 1 and info.batch_dim is not None:
            if lay.kind == "slice" and lay.parts == t.parts:
                return self.fetch(a, mb, "part", (t.part,), "one", t), True
            whole = self.full(a, mb, t)
            return replace(whole, how="slice", index=t.part, count=t.parts,
                           slice_dim=info.batch_dim, outer=self.outer(info)), True
        if t.dim == "batch" and t.parts > 1 and lay.kind in ("partial", "replica") and \
                split is not None and lay.devices == split.devices:
            return self.fetch(a, mb, "part", (t.part,), "one", t), lay.kind == "partial"
        return self.full(a, mb, t), False

    def tensor_need(self, a: str, t: Task, lay: Layout, split) -> Need:
        """How tensor part ``t`` reads node ``a``: its own shard, partial sum (an add of
        partial sums) or replica where ``a``'s parts are on its devices, else the whole value
        (and of it its shard, where its block holds ``a`` in shards)."""
        spec = self.tensor[t.parts].get(a)
        if lay.split == "tensor" and lay.devices == split.devices:
            if lay.kind in ("shard", "replica") or (
                    lay.kind == "tpartial" and self.graph.ops[t.op].partial_sums):
                return self.fetch(a, t.mb, "part", (t.part,), "one", t)
        whole = self.full(a, t.mb, t)
        if spec is not None and spec[0] == "shard":
            return replace(whole, select=spec[2][t.part], select_dim=spec[1])
        return whole

    def full(self, a: str, mb: int, t: Task) -> Need:
        """Task ``t`` reads all of node ``a``."""
        lay = self.layout[(a, mb)]
        if lay.kind == "tpartial":  # all-reduced among its parts, once, after the last
            total = f"{a}@sum"
            if (total, mb) not in self.layout:
                self.events.append((self.done_at[(a, mb)], 1, ("tpsum", a, mb, lay.devices)))
                self.layout[(total, mb)] = Layout("replica", lay.devices, split="tensor")
                for q, d in enumerate(lay.devices):
                    self.have.setdefault((total, mb, q), set()).add(d)
            return replace(self.full(total, mb, t), node=a, base=total)
        if lay.kind == "shard":
            return replace(self.fetch(a, mb, "full", tuple(range(lay.parts)), "index", t,
                                      lay.dim), runs=lay.runs)
        if lay.kind == "view":
            base, views = self.views[(a, mb)]
            whole = self.full(base, mb, t)
            return replace(whole, node=a, base=base, views=views)
        if lay.kind == "whole":
            return self.fetch(a, mb, "full", (0,), "one", t)
        if lay.kind == "replica":
            q = lay.devices.index(t.device) if t.device in lay.devices else 0
            return self.fetch(a, mb, "full", (q,), "one", t)
        if lay.kind == "channel":
            return self.fetch(a, mb, "full", tuple(range(lay.parts)), "cat", t, lay.dim)
        return self.fetch(a, mb, "full", tuple(range(lay.parts)),
                          "cat" if lay.kind == "slice" else "sum", t, lay.dim,
                          self.outer(self.nodes[a]) if lay.kind == "slice" else 1)

    def outer(self, info: NodeInfo) -> int:
        if info.outer is None:
            raise PlanRefused(f"node {info.name!r} (op {self.graph.ops[info.op].name!r}) mixes "
                              "the samples of its batch: its parts cannot be cut or joined")
        return info.outer

    def fetch(self, a, mb, how, pieces, combine, t: Task, dim=None, outer=1) -> Need:
        lay = self.layout[(a, mb)]
        recv = []
        for q in pieces:
            holders = self.have.setdefault((a, mb, q), set())
            if t.device in holders:
                continue
            src = lay.devices[q]
            tag = self.next_tag()
            self.programs[src].sends.setdefault((a, mb, q), []).append((t.device, tag))
            recv.append((q, src, tag))
            holders.add(t.device)
        return Need(a, mb, how, tuple(pieces), combine, dim, recv=tuple(recv),
                    batch=self.batch // (self.m * lay.cut), outer=outer,
                    cut_dim=lay.dim if lay.kind in ("channel", "shard") else None,
                    parts=lay.parts)

    # -- gradients
    def reduction(self, u: int, ranks: tuple[int, ...]) -> Reduction | None:
        contributors = tuple(sorted(self.contrib.get(u, ())))
        if not contributors:
            raise PlanRefused(f"no task computes the gradient {self.graph.ops[u].name!r} "
                              "updates with")
        split = self.split_of(u)
        if split is not None and split.dim == "tensor":  # each part updates its own shard
            return None
        if len(ranks) == 1:
            others = tuple(c for c in contributors if c != ranks[0])
            if not others:
                return None
            return Reduction((u,), contributors, ranks, "send",
                             {c: self.next_tag() for c in others})
        if not set(contributors) <= set(ranks):
            raise PlanRefused(f"the gradient of {self.graph.ops[u].name!r} is computed on "
                              f"devices {list(contributors)} but its replicas are on "
                              f"{list(ranks)}")
        how = "reducescatter" if self.strategy.zero_stage >= 1 else "allreduce"
        return Reduction((u,), contributors, tuple(sorted(ranks)), how)


def plan_program(nodes: list[NodeInfo], graph: OpGraph, strategy: Strategy, tasks: list[Task],
                 gradients: dict, batch: int, n_ranks: int,
                 tensor: dict | None = None) -> list[Program]:
    """Every rank's `Program` for ``tasks`` (`moplace.torch.applyprep.ordered_tasks`) over
    the graph ``nodes`` (`NodeInfo`, in graph order); ``gradients``: gradient node -> the
    update op it goes to; ``batch``: the traced batch; ``tensor``: parts -> node -> its spec
    in a tensor-parallel block cut so (`moplace.torch.tensorprobe`). `PlanRefused` says what
    cannot run."""
    planner = _Planner(nodes, graph, strategy, gradients, batch, n_ranks, tensor)
    programs, events = planner.run(tasks)
    # merge: each rank's tasks (already in order) with the events placed after positions
    position = {}
    for pos, t in enumerate(tasks):
        position[(t.op, t.mb, t.part, t.clone)] = pos
    for prog in programs:
        merged = [(position[(s[1].op, s[1].mb, s[1].part, s[1].clone)], 0, k, s)
                  for k, s in enumerate(prog.steps)]
        prog.steps = merged
    for at, order, event in events:
        kind = event[0]
        if kind == "update":
            t = event[1]
            programs[t.device].steps.append((at, 0, -1, ("update", t)))
        elif kind == "collect":
            programs[event[1]].steps.append((at, order, -1, ("collect", *event[2:])))
        elif kind == "tpsum":
            for r in event[3]:
                programs[r].steps.append((at, order, -1, event))
        else:
            red = event[1]
            for r in sorted(set(red.ranks) | set(red.contributors)):
                programs[r].steps.append((at, order, -1, (kind, red)))
    for prog in programs:
        prog.steps.sort(key=lambda s: (s[0], s[1], s[2]))
        prog.steps = [s[3] for s in prog.steps]
    return programs
