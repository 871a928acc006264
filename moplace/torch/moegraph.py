"""Which ops of a traced step are each mixture-of-experts layer's (`moe_metadata`): what the
graph's ``metadata["moe"]`` says, so that a plan can place an MoE layer's experts apart from
its tokens (expert parallelism) and every result can state the routing assumed.

A layer traced by `moplace.torch.moe` is a chain of custom ops, each carrying the layer's
ordinal: ``moe_slots`` (the buffer slot of each token's choices), ``moe_dispatch`` (tokens
into per-expert buffers ``[E, C, H]``), the experts (grouped GEMMs: ``bmm`` over the stacked
weights, the activation and gate between), ``moe_combine`` (back to token order, weighted);
backward, ``moe_combine_backward`` (gradients into the buffers, and the router weights'),
the experts' backward (the GEMMs' input and weight gradients), ``moe_dispatch_backward``
(gradients back to token order). Per layer the metadata lists these ops by name:

- ``slots``, ``dispatch``, ``combine``, ``dispatch_backward``, ``combine_backward``: the
  custom ops (an all-to-all's place under expert parallelism: dispatch and combine forward,
  their backward ops backward);
- ``experts``: every op between dispatch and combine (forward), and between the combine's
  backward and the dispatch's backward (with the experts' weight gradients);
- ``gemms``: the ``bmm`` ops among them, and ``weights``: the stacked weights' ops (an
  ``[E, ...]`` tensor each, the experts on the first dimension);
- ``module``, ``class``, ``shared``: the experts module, its class and the shared experts'
  modules beside it (their ops are the model's own MLP's).

`expert_split` completes ``experts`` on the op graph (the ops on a path from one expert op to
another, such as the activation's backward reading its forward input, and their co-location
groups) and names the ops expert parallelism cuts by expert: those, the weights and their
update ops, each of which `moplace.torch.convert` marks splittable on ``expert``.
"""

from __future__ import annotations

from collections import deque


def moe_metadata(kept, names, rep, traced, forward) -> dict | None:
    """``metadata["moe"]`` of the traced step ``traced`` (module docstring), or None when it
    has no MoE layer: ``kept`` its ops' nodes in order, ``names`` their op names, ``rep``
    each node's kept op (views fold), ``forward`` the forward ops."""
    if not traced.moe:
        return None
    from .moe import OPS

    part_of = {op._opoverload: part for part, op in OPS.items()}
    readers: dict = {n: [] for n in kept}
    for n in kept:
        for i in n.all_input_nodes:
            src = rep.get(i)
            if src is not None and src is not n:
                readers[src].append(n)
    anchors: dict = {}  # layer -> part -> nodes
    for n in kept:
        part = part_of.get(n.target)
        if part is not None:
            anchors.setdefault(int(n.args[-1]), {}).setdefault(part, []).append(n)
    param_op = {traced.parameters[n.name]: n for n in kept
                if n.op == "placeholder" and n.name in traced.parameters}
    layers = []
    for k, record in enumerate(traced.moe):
        parts = anchors.get(k, {})
        weights = [param_op[w] for w in (f"{record['module']}.gate_up_proj",
                                         f"{record['module']}.down_proj") if w in param_op]
        fwd = _region(parts.get("dispatch", []), parts.get("combine", []), readers,
                      lambda n: n in forward)
        start = [u for c in parts.get("combine_backward", []) for u in _first_output_users(c)]
        bwd = _region([rep[u] for u in start if rep.get(u) is not None],
                      parts.get("dispatch_backward", []), readers,
                      lambda n: n not in forward, include_start=True)
        experts = [n for n in kept if n in fwd or n in bwd]
        layer = {key: record[key] for key in ("module", "class", "shared", "shared_experts")}
        layer.update({part: [names[n] for n in parts.get(part, [])] for part in OPS})
        layer.update(experts=[names[n] for n in experts],
                     gemms=[names[n] for n in experts if _op(n) == "bmm"],
                     weights=[names[n] for n in weights],
                     capacity=record["capacity"], tokens=record["tokens"])
        layers.append(layer)
    first = traced.moe[0]
    summary = {key: first[key] for key in ("experts", "top_k", "routing", "imbalance",
                                           "capacity_factor", "tokens", "capacity",
                                           "tokens_per_expert", "dropped")}
    return {**summary, "layers": len(layers), "shared_experts": first["shared_experts"],
            "classes": sorted({r["class"] for r in traced.moe}), "layer_ops": layers}


def _region(starts, stops, readers, keep, include_start: bool = False) -> set:
    """The ops reached from ``starts`` through readers that ``keep`` admits, not going past
    the ``stops`` (neither counted); ``starts`` counted with ``include_start``."""
    stops = set(stops)
    seen = set(starts) if include_start else set()
    todo = deque(starts)
    while todo:
        n = todo.popleft()
        for r in readers.get(n, ()):
            if r in seen or r in stops or not keep(r):
                continue
            seen.add(r)
            todo.append(r)
    return seen - stops


def _first_output_users(node) -> list:
    """The nodes reading the first output of the multi-output ``node`` (through its
    ``getitem``): the combine's backward's gradient of the buffers, not the router's."""
    import operator

    return [u for g in node.users if g.target is operator.getitem and g.args[1] == 0
            for u in g.users]


def _op(node) -> str:
    packet = getattr(node.target, "overloadpacket", None)
    return str(getattr(packet, "__name__", ""))


def expert_split(ops, edges, moe: dict) -> set[str]:
    """The names of the ops (`moplace.core.graph.Op`, their ``edges`` by name) that expert
    parallelism cuts by expert, each layer's of ``moe`` (``metadata["moe"]``): its listed
    experts and weights, every op on a path from one of them to another that does not pass
    through the layer's dispatch, combine and slots (forward or backward), the update ops
    reading the weights, and every op sharing a co-location group with one of these. Each
    ``layer_ops`` entry's ``experts`` is completed in place with the ops so found."""
    readers: dict = {}
    writers: dict = {}
    for e in edges:
        readers.setdefault(e.src, []).append(e.dst)
        writers.setdefault(e.dst, []).append(e.src)
    role = {op.name: op.role for op in ops}
    order = {op.name: k for k, op in enumerate(ops)}
    group = {op.name: op.colocation for op in ops}
    members: dict = {}
    for op in ops:
        members.setdefault(op.colocation, []).append(op.name)
    found: set = set()
    for layer in moe["layer_ops"]:
        stop = {n for part in ("slots", "dispatch", "combine", "dispatch_backward",
                               "combine_backward") for n in layer.get(part, [])}
        seeds = set(layer["experts"]) | set(layer["weights"])
        between = _reach(seeds, readers, stop) & _reach(seeds, writers, stop)
        updates = {r for w in layer["weights"] for r in readers.get(w, ()) if role[r] == "update"}
        cut = between | seeds | updates
        cut |= {m for n in cut if group[n] is not None for m in members[group[n]]}
        layer["experts"] = sorted(cut - set(layer["weights"]) - updates, key=order.get)
        found |= cut
    return found


def _reach(seeds, step, stop) -> set:
    """The ops reached from ``seeds`` along ``step`` (readers or writers), not through
    ``stop``; the seeds counted."""
    seen = set(seeds)
    todo = deque(seeds)
    while todo:
        for r in step.get(todo.popleft(), ()):
            if r not in seen and r not in stop:
                seen.add(r)
                todo.append(r)
    return seen
