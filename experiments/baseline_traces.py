"""Record, or check, the traces every bundled graph's baselines give on a cluster.

The yardstick for changes to the simulator that must leave today's model alone where it
applies (issue 32: on 4xV100-NVLink, with one bucket per gradient, no sharding, no
recomputation, in-place off and the optimizer state as the graph gave it, every baseline's
trace is what it was). Per (graph, baseline): the makespan, each device's bytes sent and
received and peak memory, and a digest of every task's start and end times.

    python3 experiments/baseline_traces.py --write tests/data/baseline_traces.json
    python3 experiments/baseline_traces.py --check tests/data/baseline_traces.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import moplace  # noqa: E402
from moplace.core.baselines import BASELINES, baseline  # noqa: E402
from moplace.costs.costmodel import CostModel  # noqa: E402

CLUSTER = "4xV100-NVLink"
#: the options that keep today's model (the strategies', the cost model's, load_graph's)
TODAY: dict = {"bucket_bytes": 0, "inplace": False, "optimizer": None}


def digest(*arrays) -> str:
    h = hashlib.blake2b(digest_size=12)
    for a in arrays:
        h.update(np.ascontiguousarray(a, np.float64).tobytes())
    return h.hexdigest()


def record(graphs=None, cluster=CLUSTER, baselines=None, **options) -> dict:
    """{graph: {baseline: figures}} for the bundled graphs (all by default) and ``baselines``
    (all registered by default). In ``options``,
    ``inplace`` goes to the cost model (default on), ``optimizer`` to `load_graph` (default
    "auto"), the others to the baseline strategies (see `strategy_for`)."""
    c = moplace.load_cluster(cluster)
    inplace = options.pop("inplace", True)
    optimizer = options.pop("optimizer", "auto")
    out = {}
    for name in graphs or moplace.list_bundled():
        g = moplace.load_graph(name, optimizer=optimizer)
        costs = CostModel(g, c, inplace=inplace)
        rows = {}
        for b in sorted(BASELINES if baselines is None else baselines):
            s = strategy_for(b, g, c.n_devices, **options)
            t = moplace.simulate(g, c, s, costs=costs)
            rows[b] = {"makespan": t.makespan, "sent": t.sent.tolist(),
                       "received": t.received.tolist(), "peak_memory": t.peak_memory.tolist(),
                       "tasks": digest(t.task_start, t.task_end)}
        out[name] = rows
    return out


def strategy_for(name, graph, n_devices, **options):
    """The baseline ``name`` with the strategy options ``options`` (none: as it is)."""
    s = baseline(name, graph, n_devices)
    return s.with_options(**options) if options else s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", type=Path)
    p.add_argument("--check", type=Path)
    p.add_argument("--graphs", nargs="*")
    args = p.parse_args(argv)
    start = time.perf_counter()
    if args.write:
        data = {"cluster": CLUSTER, "traces": record(args.graphs, **TODAY)}  # as --check
        args.write.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.write}: {len(data['traces'])} graphs in "
              f"{time.perf_counter() - start:.1f} s")
        return 0
    if args.check:
        want = json.loads(args.check.read_text())
        got = record(args.graphs or list(want["traces"]), want["cluster"], **TODAY)
        bad = [(g, b) for g in got for b in got[g] if got[g][b] != want["traces"][g][b]]
        for g, b in bad:
            print(f"differs: {g} {b}")
        print(f"{sum(len(v) for v in got.values()) - len(bad)} of "
              f"{sum(len(v) for v in got.values())} traces as recorded "
              f"({time.perf_counter() - start:.1f} s)")
        return 1 if bad else 0
    p.error("give --write or --check")
    return 2


if __name__ == "__main__":
    sys.exit(main())
