"""Measure FastT's communication cost model: transfer seconds by size for each device pair.

Method: one `tf.compat.v1.Session` graph holds, on every device, a float32 variable of each
size (created and filled before any timing). A "transfer" target reads the variable on device
i and consumes it on device j (Identity, then a one-element slice, so almost no compute);
TensorFlow partitions that graph and inserts the same _Send/_Recv pair a placed training step
uses. A "local" target does the same with source and consumer both on j. The transfer cost is
the wall time of the transfer run minus that of the local run, timed back to back, median over
repeats: the subtraction removes the session's fixed per-run cost (about 100 us here), which
is no part of a transfer. A session run returns only when every device has finished (GPUs are
synchronised), so the whole copy is inside the timing. Grappler is off so Identity is kept, and
soft placement is off and each pair's partition graphs are checked for a _Recv on j, so no op
is quietly moved.

Logical CPUs of one process share one address space, and TensorFlow's in-process rendezvous
passes host tensors between them by reference: such a "transfer" copies no bytes, so its time
does not grow with size. `fit_transfers` reports that as a size-independent link whose
bandwidth is only a lower bound, rather than inventing a per-byte cost.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings

from ..core.cluster import Cluster
from ..core.presets import MAX_RATE
from ..costs.linkfit import LinkFit, LinkFitError, fit_link
from ..progress import Ticker
from ._tf import tf
from .devices import DeviceSetupError, host_cluster
from .memory import device_index

__all__ = ["DEFAULT_SIZES", "fit_transfers", "measure_transfers", "profile_cluster"]

#: 8 sizes from 1 KiB to 64 MiB, geometric, rounded to whole float32 elements.
DEFAULT_SIZES = tuple(int(2 ** (10 + 16 * k / 7)) // 4 * 4 for k in range(8))

Pair = tuple[int, int]


def measure_transfers(devices: list[str], sizes=DEFAULT_SIZES, repeats: int = 5,
                      pairs: list[Pair] | None = None, *, inner: int = 10,
                      subtract_local: bool = True, ticker: Ticker | None = None,
                      target: str = "") -> dict[Pair, list[tuple[int, float]]]:
    """``(bytes, seconds)`` per size for copying a float32 tensor from ``devices[i]`` to ``[j]``.

    ``pairs`` defaults to every ordered pair. Each of ``repeats`` timings averages ``inner``
    runs (one run is too short for the timer's and scheduler's noise); the sample is the
    median over repeats of transfer minus local time, floored at 0, or the raw transfer run
    time when ``subtract_local`` is False. ``ticker`` counts one unit per pair measured.
    ``target``: measure in a session there (a testbed's devices).
    """
    n = len(devices)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j] if pairs is None else pairs
    for i, j in pairs:
        if not (0 <= i < n and 0 <= j < n) or i == j:
            raise DeviceSetupError(f"bad device pair ({i}, {j}) for {n} devices")
    if repeats < 1 or inner < 1:
        raise DeviceSetupError("repeats and inner must be >= 1")
    elems = sorted({max(1, int(s) // 4) for s in sizes})
    graph = tf.Graph()
    with graph.as_default():
        used = sorted({d for p in pairs for d in p})
        src = {(d, e): _variable(devices[d], e) for d in used for e in elems}
        move = {(i, j, e): _consume(src[i, e], devices[j]) for i, j in pairs for e in elems}
        local = {(j, e): _consume(src[j, e], devices[j]) for j in used for e in elems}
        init = tf.compat.v1.global_variables_initializer()
    out: dict[Pair, list[tuple[int, float]]] = {}
    with tf.compat.v1.Session(target, graph=graph, config=_config()) as sess:
        sess.run(init)
        for i, j in pairs:
            if ticker is not None:
                ticker.stage(f"link {i} -> {j}")
            _check_placement(sess, move[i, j, elems[-1]], devices[j])
            out[i, j] = []
            for e in elems:
                a, b = move[i, j, e], local[j, e]
                sess.run(a), sess.run(b)  # warm-up: builds and caches both executors
                diffs = []
                for _ in range(repeats):
                    ta = _time(sess, a, inner)
                    diffs.append(ta - _time(sess, b, inner) if subtract_local else ta)
                out[i, j].append((4 * e, max(0.0, statistics.median(diffs))))
            if ticker is not None:
                ticker.tick()
    return out


def fit_transfers(samples: dict[Pair, list[tuple[int, float]]]) -> dict[Pair, LinkFit]:
    """`fit_link` per pair, on relative errors (small transfers decide the latency, large ones the
    bandwidth); a pair whose time does not grow with size (a zero-copy pass)
    gets latency = median sample and bandwidth = a lower bound, with a warning.

    The bound is the largest size over the samples' spread (or 1 us when flatter): a link any
    slower would have made the largest transfer visibly slower than the smallest.
    """
    fits = {}
    for pair, data in samples.items():
        try:
            if _flat(data):
                raise LinkFitError("time does not grow with size")
            fits[pair] = fit_link(data, relative=True)
        except LinkFitError as exc:
            # samples fit_link accepts except for their slope; anything else stays an error
            try:
                data = [(float(b), float(s)) for b, s in data]
                usable = len({b for b, _ in data}) >= 2 and all(
                    math.isfinite(v) and v >= 0 for row in data for v in row)
            except (TypeError, ValueError):
                usable = False
            if not usable:
                raise LinkFitError(f"pair {pair}: {exc}") from None
            secs = [s for _, s in data]
            spread = max(max(secs) - min(secs), 1e-6)
            latency = statistics.median(secs)
            rmse = statistics.fmean((s - latency) ** 2 for s in secs) ** 0.5
            bound = min(max(b for b, _ in data) / spread, MAX_RATE)
            fits[pair] = LinkFit(latency, bound, rmse, len(data))
            warnings.warn(f"pair {pair}: transfer time does not grow with size (zero-copy?); "
                          f"bandwidth {fits[pair].bandwidth_Bps:.3g} B/s is a lower bound",
                          stacklevel=2)
    return fits


def _flat(data) -> bool:
    """True when the largest transfer took at most 1.5x the smallest although it is at least
    100x larger: a zero-copy pass, whatever small slope a fit would find in the noise."""
    try:
        rows = sorted((float(b), float(s)) for b, s in data)
    except (TypeError, ValueError):
        return False
    (b0, s0), (b1, s1) = rows[0], rows[-1]
    return b1 >= 100 * max(b0, 1.0) and s1 <= 1.5 * s0


def profile_cluster(devices: list[str], *, memory_bytes: int | None = None,
                    base: Cluster | None = None, **kw) -> tuple[Cluster, dict[Pair, LinkFit]]:
    """``base`` (default: `host_cluster` of ``devices``) with every measured pair's link fitted
    from `measure_transfers` (``kw`` goes there); returns the cluster and the fits."""
    fits = fit_transfers(measure_transfers(devices, **kw))
    if kw.get("target"):
        tf.compat.v1.Session.reset(kw["target"])  # free the workers' test tensors
    return (base or host_cluster(devices, memory_bytes)).with_links(fits), fits


def _variable(device: str, elems: int):
    """The value of a ones-filled float32 variable of ``elems`` elements, read on ``device``."""
    with tf.device(device):
        var = tf.compat.v1.Variable(tf.ones([elems], tf.float32), use_resource=True)
        return var.read_value()


def _consume(value, device: str):
    # Identity on `device` is where _Recv delivers the tensor; the one-element slice makes the
    # run depend on it at almost no cost, and a NoOp target means nothing returns to the client
    with tf.device(device):
        head = tf.identity(value)[:1]
        return tf.group(head)


def _config():
    cfg = tf.compat.v1.ConfigProto()
    # start from the eager context's config: it carries the logical device split
    from tensorflow.python.eager import context
    cfg.CopyFrom(context.context().config)
    cfg.allow_soft_placement = False
    cfg.graph_options.rewrite_options.disable_meta_optimizer = True
    return cfg


def _check_placement(sess, target, device: str) -> None:
    meta = tf.compat.v1.RunMetadata()
    sess.run(target, options=tf.compat.v1.RunOptions(output_partition_graphs=True),
             run_metadata=meta)
    for g in meta.partition_graphs:
        for node in g.node:
            if node.op == "_Recv" and node.attr["tensor_type"].type == tf.float32.as_datatype_enum \
                    and device_index(node.device, [device]) == 0:
                return
    raise DeviceSetupError(f"no _Recv on {device}: the transfer was not placed as asked")


def _time(sess, target, inner: int) -> float:
    t = time.perf_counter()
    for _ in range(inner):
        sess.run(target)
    return (time.perf_counter() - t) / inner
