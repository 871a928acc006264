"""A traced PyTorch step (`moplace.torch.trace`) as an `OpGraph`.

- Every aten call is an op, except those that only view a tensor (`estimate.ALIASES`: a
  transpose, a reshape, a detach...), which are folded into the op whose tensor they view.
- A parameter or buffer (type ``Parameter``, ``Buffer``) is an op of its own holding its
  bytes (``param_bytes``; role ``forward``, as the weights of PipeDream's profiles are; tied
  weights are one op), and each trained parameter gets an update op (the optimizer's step,
  which is not traced) reading the parameter and its gradient; the two share a co-location
  group, and the update keeps the optimizer's state (`moplace.core.optimizer`: 16-bit weights
  mean mixed precision, FP32 master weights and state). The first op producing a parameter's
  gradient has it as ``grad_bytes``.
- Roles: the ops the loss depends on are forward, the rest of the joint graph backward.
- An edge carries each distinct tensor its consumer reads once, at its dtype's size.
- Matmuls, attention and convolutions, forward and backward, may be split on batch or
  channel; any other op the batch flows into whose output's first dimension holds it, on batch;
  parameters and buffers on batch (replicas), their updates with them.
- Tensor parallelism as Megatron-LM runs it (`moplace.torch.megatron`): the forward and
  backward ops of each block (column-parallel linears, the per-head or per-feature ops after
  them, a row-parallel linear), its weights and their updates are one co-location group that
  may be split on ``tensor``; the row-parallel linear and the gradient of the block's input
  are partial sums (`Op.partial_sums`).
- Compute: roofline estimates per device kind (`moplace.torch.estimate`), marked as such.
- Mixture-of-experts layers (`moplace.torch.moe`): the routing assumed and each layer's
  dispatch, experts and combine ops, by name, in ``metadata["moe"]`` (`moplace.torch.moegraph`);
  the experts, their weights and updates splittable on ``expert`` too (expert parallelism).
- Attention all fused (SDPA's flash or memory-efficient kernels): every op splittable on batch
  is splittable on ``sequence`` too (context parallelism), and ``metadata["context"]`` names
  the kernels and the edges of their keys, values and their gradients (`moplace.torch.context`).
"""

from __future__ import annotations

import operator
from dataclasses import replace

from ..core.graph import Edge, Op, OpGraph
from ..core.optimizer import with_optimizer
from ..core.recompute import CORE_SUFFIX
from . import estimate as est
from ._torch import torch
from .features import node_features, update_features
from .layers import find_layers
from .megatron import PARTIAL, megatron_blocks
from .context import context_metadata
from .moegraph import expert_split, moe_metadata
from .outputs import separate_outputs
from .trace import TracedTorchStep
from .twin import node_shapes

aten = torch.ops.aten
SPLITTABLE = frozenset({
    aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
    aten.convolution.default, aten.convolution_backward.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention_backward.default,
    aten._scaled_dot_product_flash_attention_backward.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default})
#: FLOPs and bytes per element of an update, per optimizer: (flops, tensors read and written)
UPDATE_WORK = {"sgd": (2, 3), "momentum": (4, 5), "adam": (12, 7)}


def to_op_graph(traced: TracedTorchStep, kinds, twin: TracedTorchStep | None = None,
                measured=None, calibrations=None) -> OpGraph:
    """The op graph of ``traced``, its compute estimated on each device kind of ``kinds``;
    ``twin``: the same step traced at twice the batch (or its `twin.node_shapes`), which tells
    each op's batch dimension (`_splittable`); ``measured`` (`moplace.torch.measure.Measured`): each op's time measured
    on a GPU or this machine's CPU, as that device's kind (``measured.kind``);
    ``calibrations``: kind -> `moplace.costs.calibration.Calibration`, a user's own (``profile
    --calibration``) in place of the one shipped for the kind."""
    nodes = [n for n in traced.graph.nodes if n.op in ("placeholder", "call_function")]
    rep, tensor = _fold(nodes, traced)
    kept = [n for n in nodes if rep[n] is n]
    names = {n: _op_name(n, traced) for n in kept}
    loss = rep[next(n for n in nodes if n.name == traced.loss)]
    forward = _ancestors(loss, rep)
    batched = _batched(kept, traced, twin)
    batched[loss] = True  # its parts each their samples' (tokens') loss: no logits gathered
    constants = _constants(kept, traced)
    block_of, status = {}, {}  # kept op -> its tensor-parallel block's name; shard or partial
    for block in megatron_blocks(kept, traced, rep, forward):
        for n, how in block.status.items():
            block_of[n], status[n] = f"tensor:{block.name}", how
        for n in block.core:  # a group of its own: recomputed selectively
            block_of[n] = f"tensor:{block.name}{CORE_SUFFIX}"
    apart = separate_outputs(kept, rep, tensor, forward)
    held_apart: dict = {}  # producer -> bytes of its outputs held by ops of their own
    for sep in apart.values():
        held_apart[sep.producer] = held_apart.get(sep.producer, 0) + sep.nbytes
    producers = set(held_apart)
    grads: dict = {}  # parameter -> [(the op producing (part of) its gradient, bytes)]
    for n in nodes:
        if n.name in traced.gradients:
            param = traced.gradients[n.name]
            grads.setdefault(traced.tied.get(param, param), []).append(
                (rep[n], est.nbytes(n.meta.get("val"))))
    grad_bytes: dict = {}  # a gradient counted once, on its first producer
    for parts in grads.values():
        grad_bytes[parts[0][0]] = grad_bytes.get(parts[0][0], 0) + parts[0][1]
    timed: dict = {}  # kept op -> measured seconds of the nodes folded into it
    if measured is not None:
        for n in nodes:
            if rep[n] is not None and n.name in measured.node_seconds:
                timed[rep[n]] = timed.get(rep[n], 0.0) + measured.node_seconds[n.name]
    ops, feats = [], {}
    for n in kept:
        value = n.meta.get("val")
        param = traced.parameters.get(n.name) if n.op == "placeholder" else None
        if n.op == "placeholder":
            compute = {k: 0.0 for k in kinds}
        else:  # features kept for calibrated estimates and `moplace calibrate`
            feats[names[n]] = f = node_features(n)
            compute = est.estimate(f["flops"], f["bytes"], f["dtype"], kinds, f, calibrations)
        if measured is not None:
            compute = {**compute, measured.kind: timed.get(n, 0.0)}
        ops.append(Op(names[n], _type(n, param, traced), compute,
                      output_bytes=0 if param or n in constants
                      else est.nbytes(value) - held_apart.get(n, 0),
                      param_bytes=est.nbytes(value) if param or n in constants else 0,
                      grad_bytes=grad_bytes.get(n, 0),
                      colocation=block_of.get(n, f"param:{param}" if param else
                                              f"op:{n.name}" if n in producers else None),
                      splittable=_splittable(n, batched.get(n, False), n in grad_bytes,
                                             param is not None or n in constants,
                                             n in block_of),
                      role="forward" if param or n in forward else "backward",
                      partial_sums=status.get(n) == PARTIAL))
    ops = _with_outputs_apart(ops, kept, apart)
    edges = _edges(kept, names, rep, tensor, apart)
    param_of = {p: n for n, p in traced.parameters.items()}
    by_name = {n.name: n for n in kept}
    mixed = False
    total = sum(est.nbytes(by_name[param_of[p]].meta.get("val")) for p in grads) or 1
    trained = sum(by_name[param_of[p]].meta["val"].numel() for p in grads)
    for param, parts in grads.items():
        node = by_name[param_of[param]]
        value = node.meta.get("val")
        mixed |= est.dtype_name(value) in ("float16", "bfloat16")
        flops, tensors = UPDATE_WORK[traced.optimizer]
        numel = value.numel()
        name = f"update/{param}"
        feats[name] = f = update_features(value, trained, traced.optimizer)
        compute = est.estimate(flops * numel, tensors * est.nbytes(value), "float32", kinds, f,
                               calibrations)
        if measured is not None:  # the optimizer's step, shared by the weights' bytes
            compute[measured.kind] = measured.optimizer_seconds * est.nbytes(value) / total
        group = block_of.get(node, f"param:{param}")
        ops.append(Op(name, f"{traced.optimizer}_update", compute, colocation=group,
                      splittable=("batch", "tensor") if node in block_of else ("batch",),
                      role="update"))
        edges += [Edge(names[producer], name, size) for producer, size in parts]
        edges.append(Edge(names[node], name, est.nbytes(value)))
    meta = {"format": "pytorch", "torch_version": torch.__version__,
            "batch_size": traced.batch_size, "source": traced.source,
            "trace_seconds": traced.seconds, "optimizer": traced.optimizer,
            "estimated": est.estimate_notes(kinds, calibrations), "cost_features": feats,
            "folded_views": len(nodes) - len(kept), "attention": traced.attention,
            "loss": [names[loss], *(sep.name for sep in apart.values() if sep.producer is loss)],
            **({"profiled_on": measured.kind, "measured": measured.metadata()}
               if measured is not None else {})}
    moe = moe_metadata(kept, names, rep, traced, forward)
    if moe is not None:
        meta["moe"] = moe
        cut = expert_split(ops, edges, moe)  # expert parallelism cuts these by expert
        ops = [replace(op, splittable=(*op.splittable, "expert")) if op.name in cut else op
               for op in ops]
    context = context_metadata(kept, names, rep, tensor, traced)
    if context is not None:  # context parallelism cuts the token-wise ops by sequence
        meta["context"] = context
        ops = [replace(op, splittable=(*op.splittable, "sequence"))
               if "batch" in op.splittable else op for op in ops]
    graph = OpGraph(ops, edges, name=traced.name, metadata=meta)
    layers = find_layers(graph, [names[n] for n in kept if n.name in traced.inputs],
                         names[loss])
    if layers is not None:
        graph = OpGraph(ops, edges, name=traced.name, metadata={**meta, "layers": layers})
    return with_optimizer(graph, traced.optimizer + ("-mixed" if mixed else ""))


def _with_outputs_apart(ops, kept, apart) -> list[Op]:
    """``ops`` (one per kept node) with the op holding each output that lives apart
    (`moplace.torch.outputs`) right after its producer's, so that it runs right after it in
    the graph's topological order: no compute, the producer's group and splits."""
    after: dict = {}
    for sep in apart.values():
        after.setdefault(sep.producer, []).append(sep)
    out = []
    for n, op in zip(kept, ops):
        out.append(op)
        out += [Op(sep.name, "Output", {k: 0.0 for k in op.compute}, output_bytes=sep.nbytes,
                   colocation=op.colocation, splittable=op.splittable, role="forward")
                for sep in after.get(n, ())]
    return out


def _fold(nodes, traced):
    """(each node's kept op, each node's tensor identity): views fold into what they view, and
    a tied parameter's placeholder into its first name's."""
    rep, tensor = {}, {}
    placeholder = {traced.parameters[n.name]: n for n in nodes
                   if n.op == "placeholder" and n.name in traced.parameters}
    for n in nodes:
        tied = traced.tied.get(traced.parameters.get(n.name)) if n.op == "placeholder" else None
        if tied in placeholder:
            rep[n], tensor[n] = placeholder[tied], (placeholder[tied], 0)
            continue
        if n.op == "call_function" and n.target in est.ALIASES:
            src = n.all_input_nodes[0] if n.all_input_nodes else None
            rep[n] = rep.get(src)
            if n.target is operator.getitem and src is not None and rep[src] is src:
                tensor[n] = (src, n.args[1])  # one output of a multi-output op
            else:
                tensor[n] = tensor.get(src)
        else:
            rep[n], tensor[n] = n, (n, 0)
    return rep, tensor


def _splittable(n, batched: bool, gradient: bool, weights: bool,
                in_block: bool) -> tuple[str, ...]:
    """Matmuls, attention and convolutions: batch or channel. Another op: batch when its
    output has a batch dimension or it is the loss (each part its samples' loss, as each
    data-parallel rank computes its own: no logits gathered; the testbed runs such a cut
    whole, `moplace.torch.apply.testbed_strategy`), or when it sums a weight's gradient over
    the batch (its parts' sums are then all-reduced, as data parallelism does). A parameter
    or buffer:
    batch, its replicas each holding all of it. An op of a tensor-parallel block
    (`moplace.torch.megatron`): tensor too."""
    if n.target in SPLITTABLE:
        dims = ("batch", "channel")
    elif batched or weights or (gradient and n.op == "call_function"):
        dims = ("batch",)
    else:
        dims = ()
    return dims + ("tensor",) if in_block else dims


def _constants(kept, traced) -> set:
    """The ops whose value no input or trained parameter decides (a causal mask, rotary
    angles: made from shapes and buffers) and that an op the batch flows into reads. Each is
    held like a weight (its bytes kept for the step, no activation), so a batch split of it
    is a replica that every device makes for itself, as trainers make such tensors on every
    rank, instead of one device sending it to every tensor-parallel part of every layer."""
    sources = [n for n in kept if n.name in traced.inputs
               or traced.parameters.get(n.name) in traced.trainable]
    decided = _descendants(sources, kept)
    kept_set = set(kept)
    out = set()
    for m in decided:  # what decided ops read (through the views they read) that is not
        out.update(i for i in _kept_inputs(m, kept_set)
                   if i not in decided and i.op == "call_function")
    return out


def _batched(kept, traced, twin) -> dict:
    """Per kept op: whether its output has a batch dimension. With ``twin`` (the step at twice
    the batch) a dimension that doubled says so; else the ops the batch flows into whose
    output's first dimension is a multiple of the batch."""
    flows = _descendants([n for n in kept if n.name in traced.inputs], kept)
    shapes = {}
    if twin is not None:  # a traced step, or its node shapes (moplace.torch.twin)
        shapes = twin if isinstance(twin, dict) else node_shapes(twin)
    out = {}
    for n in kept:
        mine = [tuple(t.shape) for t in est.tensors(n.meta.get("val"))]
        if twin is not None and n.name in shapes and len(shapes[n.name]) == len(mine):
            out[n] = n in flows and any(a != b for a, b in zip(mine, shapes[n.name]))
        else:
            b = traced.batch_size
            out[n] = n in flows and bool(mine) and bool(mine[0]) and mine[0][0] >= b \
                and mine[0][0] % b == 0
    return out


def _descendants(roots, kept) -> set:
    """The kept ops that depend on any of ``roots`` (themselves included)."""
    kept_set, out = set(kept), set(roots)
    for n in kept:  # kept is in graph (topological) order
        if n in out:
            continue
        if any(i in out for i in _kept_inputs(n, kept_set)):
            out.add(n)
    return out


def _kept_inputs(n, kept_set):
    """The kept ops ``n`` reads, through the views it reads."""
    stack, out = list(n.all_input_nodes), []
    while stack:
        i = stack.pop()
        if i in kept_set:
            out.append(i)
        else:
            stack.extend(i.all_input_nodes)
    return out


def _ancestors(loss, rep) -> set:
    """The kept ops the loss depends on (itself included)."""
    seen, stack = set(), [loss]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return {rep[n] for n in seen if rep.get(n) is not None}


def _edges(kept, names, rep, tensor, apart) -> list[Edge]:
    """Per reader and producer an edge carrying each distinct tensor it reads once; a tensor
    that lives apart (`moplace.torch.outputs`) comes from the op holding it, which takes it
    from its producer."""
    out = [Edge(names[sep.producer], sep.name, sep.nbytes) for sep in apart.values()]
    for n in kept:
        reads: dict = {}  # producer's name -> {tensor: bytes}
        for i in n.all_input_nodes:
            src = rep.get(i)
            if src is None or src is n:
                continue
            sep = apart.get(tensor[i])
            key = sep.name if sep is not None else names[src]
            reads.setdefault(key, {})[tensor[i]] = max(
                reads.get(key, {}).get(tensor[i], 0), est.nbytes(i.meta.get("val")))
        out += [Edge(src, names[n], int(sum(t.values()))) for src, t in reads.items()]
    return out


def _op_name(n, traced: TracedTorchStep) -> str:
    if n.op == "placeholder":
        param = traced.parameters.get(n.name)
        return f"param/{param}" if param else f"input/{n.name}"
    return n.name


def _type(n, param, traced) -> str:
    if n.op == "placeholder":
        if param:
            return "Parameter" if param in traced.trainable else "Buffer"
        return "Input"
    return str(getattr(n.target, "__name__", n.target))
