"""The records of a plan applied on the PyTorch testbed (`moplace.torch.applyplan` makes them,
`moplace.torch.applyrun` runs them): tasks, graph nodes, the layouts their outputs are held
in, what a task needs of an input, gradient reductions and each rank's program."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PlanRefused", "Task", "NodeInfo", "Layout", "Need", "Reduction", "Program"]


class PlanRefused(Exception):
    """The strategy asks for something the PyTorch testbed does not run (the reason names it)."""


@dataclass(frozen=True)
class Task:
    """Part ``part`` of ``parts`` of op ``op``'s copy for micro-batch ``mb``, on ``device``
    (``clone``: its recomputation before the backward); ``dim``: what the parts cut (``batch``
    or ``channel``)."""

    op: int
    mb: int
    part: int
    parts: int
    device: int
    clone: bool = False
    dim: str = "batch"

    @property
    def cut(self) -> int:
        """How many parts the batch is cut into (1 when the parts cut channels)."""
        return self.parts if self.dim == "batch" else 1


@dataclass(frozen=True)
class NodeInfo:
    """What the plan needs to know of one graph node: its name, the op it is folded into, the
    nodes it reads, its output's batch dimension (None: none, or not a tensor), its kind
    (``param``, ``input`` or ``call``), the batch dimension's outer factor
    (`moplace.torch.applyprep.batch_layouts`; None: the node mixes samples), its ``place`` in
    its op (``core``: the op's own call; ``item``: an output of a core that makes several;
    ``view``: a view folded into the op) and, for a core or item, the dimension a channel
    split cuts its output along (None: every channel part holds it whole;
    `moplace.torch.channelsplit`)."""

    name: str
    op: int
    inputs: tuple[str, ...]
    batch_dim: int | None
    kind: str = "call"
    outer: int | None = 1
    place: str = "core"
    channel: int | None = None


@dataclass(frozen=True)
class Layout:
    """How a node's output of one micro-batch is held: ``kind`` (whole, slice, partial,
    replica, channel, view: a view of a channel-split op's output, made by whoever reads it
    from the joined output, shard: part k holds index runs ``runs[k]`` along ``dim``, or
    tpartial: a tensor-parallel partial sum, `moplace.torch.tensorprobe`), its ``devices``
    (one per part), the dimension ``dim`` its parts cut (slices: the batch's; channel: the
    channel's) and what the parts ``split`` (batch, channel or tensor)."""

    kind: str
    devices: tuple[int, ...]
    dim: int | None = None
    outer: int | None = 1
    split: str = "batch"
    runs: tuple | None = None

    @property
    def parts(self) -> int:
        return len(self.devices)

    @property
    def cut(self) -> int:
        """How many parts the batch its pieces were computed at is cut into."""
        return self.parts if self.split == "batch" else 1


@dataclass(frozen=True)
class Need:
    """How a task reads input ``node`` of micro-batch ``mb``: ``how`` is ``full`` (the whole
    value: ``pieces`` concatenated along ``dim`` or added, or the one piece), ``slice`` (slice
    ``index`` of ``count`` along ``dim`` of the full value) or ``part`` (the one piece as it
    is); ``pieces`` are the producer's parts it is made of, ``combine`` ``cat``, ``sum`` or
    ``one``; ``recv`` the pieces (part, source rank, tag) that arrive from other ranks.
    ``base`` and ``views``: a view of a channel-split output is made from the pieces of node
    ``base``, joined, then the view nodes ``views`` run on it; ``cut_dim``: the dimension
    channel pieces and tensor shards are cut along (of ``parts``; shards: by ``runs``, and
    ``combine`` is ``index``), None for pieces computed at a part's batch; ``select``: the
    index runs along ``select_dim`` a tensor part takes of the whole value (its shard).
    """

    node: str
    mb: int
    how: str
    pieces: tuple[int, ...]
    combine: str
    dim: int | None = None
    index: int = 0
    count: int = 1
    recv: tuple[tuple[int, int, int], ...] = ()
    batch: int = 0  # the batch the producer's pieces were computed at (their shapes')
    outer: int = 1  # the batch dimension's outer factor (slices and concatenations)
    slice_dim: int | None = None  # the node's batch dimension, when ``how`` is slice
    base: str | None = None
    views: tuple[str, ...] = ()
    cut_dim: int | None = None
    parts: int = 1
    runs: tuple | None = None
    select: tuple | None = None
    select_dim: int | None = None

    @property
    def source(self) -> str:
        """The node whose pieces are fetched."""
        return self.base or self.node


@dataclass
class Reduction:
    """Weights' gradients brought to their updates: ``updates`` (the update ops' indices;
    several make a bucket, all-reduced as one tensor), the ranks that contribute to them, the
    updates' ranks, and ``how``: ``allreduce`` or ``reducescatter`` among the update's ranks,
    or ``send`` to its one rank (with each sender's tag)."""

    updates: tuple[int, ...]
    contributors: tuple[int, ...]
    ranks: tuple[int, ...]
    how: str
    tags: dict = field(default_factory=dict)  # sender rank -> tag (how == "send")

    @property
    def update(self) -> int:
        return self.updates[0]


@dataclass
class Program:
    """One rank's part of the plan: ``steps``, in order, each ``("task", Task, [(node name,
    [Need...], Layout)])``, ``("update", Task)``, ``("reduce", Reduction)``, ``("gather",
    Reduction)`` (ZeRO's shards gathered: after the update under ZeRO-1, before the weight's
    first use under ZeRO-3), ``("regather", Reduction)`` (ZeRO-3's gather for the backward:
    the weight's op run again on it), ``("tpsum", node, mb, ranks)`` (a tensor-parallel
    partial sum all-reduced among its parts' ranks, kept as node ``NODE@sum``) or
    ``("collect", update op, Need)`` (a gradient computed
    in channel parts joined on this rank, added to the update's sum); ``sends``: (node, mb,
    part) -> [(destination rank, tag)]; ``grads``: the gradient contributions this rank
    computes, (node, mb, part) -> the update op they go to; ``sharded``: under ZeRO-3, update
    op -> (the ranks sharing the weight, the weight's op), the weights this rank holds a shard
    of between uses."""

    rank: int
    steps: list = field(default_factory=list)
    sends: dict = field(default_factory=dict)
    grads: dict = field(default_factory=dict)
    sharded: dict = field(default_factory=dict)
