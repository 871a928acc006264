"""One rank of a strategy applied for real: its `Program` (`moplace.torch.applyplan`) run over
the nodes of the traced step, tensors crossing ranks through torch.distributed's own calls
(``isend``/``recv`` between tasks; ``all_reduce``, ``reduce_scatter_tensor`` and
``all_gather_into_tensor`` for gradients and ZeRO's shards).

A task runs its op's nodes as the graph traced at the task's batch (the step's batch over the
micro-batches and the task's parts) has them, so a view's or an arange's sizes are the part's
(`moplace.torch.applyprep` traces each batch a plan needs). The weights are the rank's own
copy of the model's; an update runs the model's optimizer class with its settings on that
weight alone (or, under ZeRO, on this rank's shard of it, the shards then gathered).
"""

from __future__ import annotations

import time

from ._torch import torch
from .applytypes import Program, Reduction, Task
from .applyvalues import (as_traced, bind, cut_batch, input_shapes, join_batch, resolve_target,
                          rows_on_device)
from .channelsplit import channel_part, piece_sizes
from .tensorparts import TensorShards, join_shards, local_args
from .tensorprobe import run_indices, run_size

dist = torch.distributed


class RankRunner:
    """Runs ``program`` on this rank: ``graphs`` (batch -> the traced step's nodes at that
    batch as `moplace.torch.applyprep.Row`, by name), ``batch`` the traced batch, ``micro_batches``, ``real`` (the model,
    optimizer and batch built for real, `moplace.torch.realstep.RealStep`), ``params``
    (placeholder name -> parameter name), ``inputs`` (the batch's placeholder names),
    ``updates`` (update op index -> parameter name), ``loss`` (the loss node's name),
    ``groups`` (ranks -> process group), ``device`` (``cpu``, or this rank's GPU: the traced
    nodes' device arguments pointed at it, `rows_on_device`)."""

    def __init__(self, program: Program, graphs: dict, batch: int, micro_batches: int, real,
                 params: dict, inputs: list, updates: dict, loss: str, groups: dict,
                 device: str = "cpu"):
        self.device, self.cuda = torch.device(device), device.startswith("cuda")
        if self.cuda:
            graphs = {b: rows_on_device(rows, device) for b, rows in graphs.items()}
        self.program, self.graphs, self.batch, self.m = program, graphs, batch, micro_batches
        self.real, self.params, self.updates, self.loss = real, params, updates, loss
        self.groups = groups
        self.rank = program.rank
        self.targets = {row.target: resolve_target(row.target) for rows in graphs.values()
                        for row in rows.values() if row.op == "call_function"}
        self.weights = {}
        for name, p in real.model.named_parameters(remove_duplicate=False):
            self.weights[name] = p
        for name, b in real.model.named_buffers(remove_duplicate=False):
            self.weights.setdefault(name, b)
        data = (*real.x, real.y)
        self.inputs = {name: data[k] for k, name in enumerate(inputs)}
        opt = real.optimizer
        import inspect

        accepted = inspect.signature(type(opt).__init__).parameters
        self.opt_class = type(opt)
        self.opt_settings = {k: v for k, v in opt.defaults.items() if k in accepted}
        self.optimizers: dict = {}  # parameter (or its shard) -> its optimizer
        self.shards: dict = {}  # update op -> this rank's shard, a leaf tensor
        self.shard_of: dict = {}  # update op -> the index of this rank's shard
        #: op -> [seconds, runs] of its tasks and updates, when the steps are timed per op
        self.timing: dict | None = None
        self.tensor = TensorShards(self.weights)  # tensor-parallel shards of weights
        self.shapes: dict = {}  # update op -> its weight's shape (ZeRO-3: held in shards)
        self.weight_tasks: dict = {}  # ZeRO-3: a sharded weight's op -> its tasks here
        for u, (ranks, op) in program.sharded.items():
            self.shard(u, ranks)
            self.weight_tasks[op] = [s[1:] for s in program.steps
                                     if s[0] == "task" and s[1].op == op and not s[1].clone]

    # -- one step
    def step(self) -> tuple[float, list[float]]:
        """Runs one training step; its wall-clock seconds (from a barrier) and the losses of
        the micro-batches whose loss this rank computed."""
        self.env: dict = {}
        self.pending: list = []
        self.acc: dict = {}  # update op -> this rank's gradient sum
        self.reduced: dict = {}
        self.losses: list[float] = []
        if self.cuda:
            torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        timed = self.timing is not None
        with torch.no_grad():
            for step in self.program.steps:
                kind = step[0]
                if timed and self.cuda:
                    torch.cuda.synchronize()
                started = time.perf_counter()
                if kind == "task":
                    self.run_task(step[1], step[2])
                elif kind == "reduce":
                    self.reduce(step[1])
                elif kind == "update":
                    self.update(step[1])
                elif kind == "gather":
                    self.gather(step[1])
                elif kind == "regather":
                    self.regather(step[1])
                elif kind == "collect":
                    self.collect(step[1], step[2])
                elif kind == "tpsum":
                    self.tensor_sum(*step[1:])
                if timed and kind in ("task", "update"):
                    if self.cuda:
                        torch.cuda.synchronize()
                    held = self.timing.setdefault(step[1].op, [0.0, 0])
                    held[0] += time.perf_counter() - started
                    held[1] += 1
            for work, _ in self.pending:
                work.wait()
            self.release()
        if self.cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        self.env = self.pending = None
        return seconds, self.losses

    def run_task(self, t: Task, ran, send: bool = True) -> None:
        b = self.batch // (self.m * t.cut)
        nodes = self.graphs[b]
        for name, needs, lay in ran:
            node = nodes[name]
            if node.op == "placeholder":
                out = self.placeholder(name, t, b, lay)
            else:
                try:
                    out = self.call(node, t, b, needs, lay)
                except RuntimeError as e:  # which node of which task, for the testbed's report
                    raise RuntimeError(f"node {name} ({node.target}) of part {t.part + 1}/"
                                       f"{t.parts} of op {t.op}, micro-batch {t.mb}, reading "
                                       f"{input_shapes(needs, self.env)}: {e}") from e
            key = (name, t.mb, t.part)
            self.env[key] = out
            if t.clone or not send:
                continue
            for dst, tag in self.program.sends.get(key, ()):
                data = out.contiguous()
                self.pending.append((dist.isend(data, dst, tag=tag), data))
            update = self.program.grads.get(key)
            if update is not None:
                held = self.acc.get(update)
                self.acc[update] = out.clone() if held is None else held.add_(out)
            if name == self.loss:
                self.losses.append(float(out))

    def call(self, node, t: Task, b: int, needs, lay):
        values = {need.node: self.resolve(need, b) for need in needs}
        args, kwargs = bind(node.args, values), bind(node.kwargs, values)
        fn = self.targets[node.target]
        if t.dim == "channel" and t.parts > 1 and node.target != "operator.getitem":
            return channel_part(node.target, fn, args, kwargs, t.part, t.parts)
        if t.dim == "tensor" and t.parts > 1:
            args, kwargs = local_args(node.target, args, kwargs, node, lay, t.part,
                                      self.graphs[b])
        return fn(*args, **kwargs)

    def placeholder(self, name: str, t: Task, b: int, lay):
        param = self.params.get(name)
        if param is not None and lay.kind == "shard":  # a tensor-parallel part's own shard
            return self.tensor.weight(param, lay, t.part)
        if param is not None:
            return self.weights[param].detach()
        full = self.inputs[name]
        dim = lay.dim if lay.dim is not None else 0
        size = full.shape[dim] // self.m
        out = full.narrow(dim, t.mb * size, size)
        return out.narrow(dim, t.part * b, b) if t.cut > 1 else out

    def resolve(self, need, b: int):
        """The value ``need`` reads, for a task at batch ``b``, laid out as the trace at
        that batch has it (`as_traced`)."""
        value = as_traced(self._resolve(need), self.graphs[b].get(need.node))
        if need.select is not None:  # a tensor part's shard of the whole
            value = value.index_select(need.select_dim,
                                       run_indices(need.select).to(value.device))
        return value

    def row(self, b: int, name: str):
        """The traced node ``name`` at batch ``b`` (a tensor-parallel sum: the node's)."""
        return self.graphs[b][name.removesuffix("@sum")]

    def _resolve(self, need):
        pieces = []
        arriving = {q: (src, tag) for q, src, tag in need.recv}
        for q in need.pieces:
            key = (need.source, need.mb, q)
            if q in arriving:
                src, tag = arriving[q]
                row = self.row(need.batch, need.source)
                shape = list(row.shape)
                if need.runs is not None:  # a tensor-parallel shard
                    shape[need.cut_dim] = run_size(need.runs[q])
                elif need.cut_dim is not None:  # a channel piece
                    shape[need.cut_dim] = piece_sizes(shape[need.cut_dim], need.parts)[q]
                buf = torch.empty(shape, dtype=row.dtype, device=self.device)
                dist.recv(buf, src, tag=tag)
                self.env[key] = buf
            pieces.append(self.env[key])
        if need.combine == "cat" and need.cut_dim is not None:  # channel pieces, laid out
            value = as_traced(join_batch(pieces, need.dim, 1),  # as the kernel lays them out
                              self.row(need.batch, need.source))
        elif need.combine == "cat":
            value = join_batch(pieces, need.dim, need.outer)
        elif need.combine == "index":
            row = self.row(need.batch, need.source)
            value = join_shards(pieces, need.dim, need.runs, row.shape, row.dtype)
        elif need.combine == "sum":
            value = pieces[0].clone()
            for p in pieces[1:]:
                value.add_(p)
        else:
            value = pieces[0]
        if need.views:  # a view of a channel-split output, made from the joined output
            values, rows = {need.source: value}, self.graphs[need.batch]
            for v in need.views:
                row = rows[v]
                values[v] = value = self.targets[row.target](*bind(row.args, values),
                                                             **bind(row.kwargs, values))
        if need.how == "slice":
            dim = need.slice_dim if need.slice_dim is not None else need.dim
            value = cut_batch(value, dim, need.outer, need.index, need.count)
        return value

    # -- gradients and updates
    def collect(self, update: int, need) -> None:
        """A gradient computed in channel parts, joined here and added to the update's sum."""
        value = self.resolve(need, self.batch // self.m)
        held = self.acc.get(update)
        self.acc[update] = value.clone() if held is None else held.add_(value)

    def tensor_sum(self, node: str, mb: int, ranks: tuple) -> None:
        """A tensor-parallel partial sum all-reduced among its parts' ranks."""
        q = ranks.index(self.rank)
        total = self.env[(node, mb, q)].contiguous().clone()
        dist.all_reduce(total, group=self.groups[tuple(sorted(ranks))])
        self.env[(f"{node}@sum", mb, q)] = total

    def gradient(self, update: int):
        held = self.acc.get(update)
        if held is None:
            name = self.updates[update]
            shard = self.tensor.held.get(name)
            held = torch.zeros_like(shard[0] if shard else self.weights[name])
        return held.div_(self.m) if self.m > 1 else held

    def reduce(self, red: Reduction) -> None:
        g = self.gradient(red.update)
        if red.how == "send":
            if self.rank == red.ranks[0]:
                for src, tag in sorted(red.tags.items()):
                    buf = torch.empty_like(g)
                    dist.recv(buf, src, tag=tag)
                    g.add_(buf)
            elif self.rank in red.tags:
                dist.send(g.contiguous(), red.ranks[0], tag=red.tags[self.rank])
                return
        elif red.how == "allreduce":
            grads = [g] + [self.gradient(u) for u in red.updates[1:]]
            flat = torch.cat([x.reshape(-1) for x in grads]) if len(grads) > 1 else g
            dist.all_reduce(flat, group=self.groups[red.ranks])
            start = 0
            for u, x in zip(red.updates, grads):
                self.reduced[u] = flat[start:start + x.numel()].view_as(x)
                start += x.numel()
            return
        else:  # ZeRO: a bucket reduce-scattered as one tensor, each rank left its shards
            n, k = len(red.ranks), red.ranks.index(self.rank)
            grads = [g] + [self.gradient(u) for u in red.updates[1:]]
            rows = [self.padded(x.reshape(-1), n)[0].view(n, -1) for x in grads]
            flat = torch.cat(rows, 1) if len(rows) > 1 else rows[0]
            shard = torch.empty(flat.shape[1], dtype=g.dtype, device=g.device)
            dist.reduce_scatter_tensor(shard, flat.reshape(-1), group=self.groups[red.ranks])
            for u, piece in zip(red.updates, shard.split([r.shape[1] for r in rows])):
                self.shard_of[u], self.reduced[u] = k, piece
            return
        self.reduced[red.update] = g

    @staticmethod
    def padded(flat, n: int):
        size = -(-flat.numel() // n)
        if size * n != flat.numel():
            flat = torch.cat([flat, flat.new_zeros(size * n - flat.numel())])
        return flat, size

    def update(self, t: Task) -> None:
        name = self.updates[t.op]
        p = self.weights[name]
        g = self.reduced.get(t.op)
        if g is None:
            g = self.gradient(t.op)
        if name in self.tensor.held:  # a tensor-parallel part's own shard
            leaf = self.tensor.held[name][0]
            leaf.grad = g.to(leaf.dtype).reshape(leaf.shape)
            leaf.data = leaf.data.clone()  # later readers of this step keep the old one
            self.optimizer(("tensor", name), leaf).step()
            leaf.grad = None
            return
        if t.op in self.shard_of:  # this rank's shard (ZeRO): its own leaf and optimizer
            shard = self.shards.get(t.op)
            if shard is None:  # ZeRO-1: cut from the weight at its first update
                shard = self.cut_shard(t.op, self.shard_of[t.op], t.parts)
            shard.grad = g.to(shard.dtype)
            self.optimizer(("shard", t.op), shard).step()
            shard.grad = None
            return
        p.grad = g.to(p.dtype).reshape(p.shape)
        # the plan's order may update a weight before a later task of this step reads it
        # (the simulator's update does not wait for them): those read the old weight
        p.data = p.data.clone()
        self.optimizer(name, p).step()
        p.grad = None

    def gather(self, red: Reduction) -> None:
        """The shards of ``red``'s weights (a bucket under ZeRO-1/2: one all-gather) made
        whole again on each of its ranks."""
        shards = [self.shards[u].detach() for u in red.updates]
        local = torch.cat(shards) if len(shards) > 1 else shards[0]
        full = torch.empty(local.numel() * len(red.ranks), dtype=local.dtype, device=local.device)
        dist.all_gather_into_tensor(full, local, group=self.groups[red.ranks])
        rows = full.view(len(red.ranks), -1).split([s.numel() for s in shards], 1)
        for u, row in zip(red.updates, rows):
            p = self.weights[self.updates[u]]
            shape = self.shapes.get(u, p.shape)
            p.data = row.reshape(-1)[:shape.numel()].reshape(shape).clone()  # old one for readers

    # -- ZeRO-3: weights held in shards between uses
    def shard(self, update: int, ranks: tuple) -> None:
        """Keep this rank's shard of the weight ``update`` updates; free the weight."""
        p = self.weights[self.updates[update]]
        self.shard_of[update] = k = ranks.index(self.rank)
        self.cut_shard(update, k, len(ranks))
        self.shapes[update] = p.shape
        p.data = p.data.new_empty(0)

    def cut_shard(self, update: int, k: int, n: int):
        """Shard ``k`` of ``n`` of the weight ``update`` updates (padded to equal shards), kept
        as this rank's own leaf."""
        p = self.weights[self.updates[update]]
        flat, size = self.padded(p.detach().reshape(-1), n)
        shard = self.shards[update] = flat[k * size:(k + 1) * size].clone()
        return shard

    def regather(self, red: Reduction) -> None:
        """The weight gathered again for the backward, and its op's outputs made anew from it
        (the forward's copy is freed)."""
        self.gather(red)
        for t, ran in self.weight_tasks.get(self.program.sharded[red.update][1], ()):
            self.run_task(t, ran, send=False)

    def release(self) -> None:
        """Free the gathered weights at the end of a step: only the shards stay."""
        for u in self.program.sharded:
            p = self.weights[self.updates[u]]
            p.data = p.data.new_empty(0)

    def unshard(self) -> None:
        """Every sharded weight gathered whole (to report the trained weights)."""
        self.tensor.unshard(self.groups)
        for u, (ranks, _) in sorted(self.program.sharded.items()):
            self.gather(Reduction((u,), ranks, ranks, "gather"))

    def optimizer(self, key, tensor):
        opt = self.optimizers.get(key)
        if opt is None:
            opt = self.optimizers[key] = self.opt_class([tensor], **self.opt_settings)
        return opt
