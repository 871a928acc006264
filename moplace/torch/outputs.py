"""The outputs of a multi-output forward op that live apart (`separate_outputs`).

An op's output is held, in the simulator, until its last reader has run. A forward op with
several outputs read by different ops would then hold them all as long as the one kept
longest: a dropout's output, read by the next forward op, as long as its mask, which the
backward reads; a layer norm's output as long as its mean and reciprocal deviation. Autograd
frees each tensor on its own, so each such output other than the first becomes an op of its
own (type ``Output``, no compute, the producer's co-location group and splits) that takes
the tensor from its producer and holds it for its readers.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import estimate as est


@dataclass(frozen=True)
class Separate:
    """One output that lives apart: its producer (a kept node), its index, its bytes and the
    name of the op holding it."""

    producer: object
    index: int
    nbytes: int
    name: str


def separate_outputs(kept, rep, tensor, forward) -> dict:
    """``{(producer, index): Separate}`` for the outputs of forward multi-output ops, other
    than output 0, whose readers are not those of output 0 (module docstring). ``tensor``:
    each node's tensor identity, (producer, output index)."""
    kept_set = set(kept)
    readers: dict = {}
    sizes: dict = {}
    for n in kept:
        for i in n.all_input_nodes:
            src = rep.get(i)
            if src is None or src is n or src not in kept_set or tensor.get(i) is None:
                continue
            readers.setdefault(tensor[i], set()).add(n)
            sizes[tensor[i]] = max(sizes.get(tensor[i], 0), est.nbytes(i.meta.get("val")))
    out = {}
    for (producer, index), who in readers.items():
        if (index == 0 or producer not in forward or producer.op != "call_function"
                or who == readers.get((producer, 0))):
            continue
        out[(producer, index)] = Separate(producer, index, sizes[(producer, index)],
                                          f"{producer.name}.output{index}")
    return out
