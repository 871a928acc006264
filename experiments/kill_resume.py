"""SIGKILL (or Ctrl-C) a checkpointed search at random moments, resume it, count what was lost.

    python3 experiments/kill_resume.py [--kills 20] [--signal KILL|INT]
        [--searchers mcmc nsga2 random] [--graph pipedream:resnet50] [--cluster 4xV100-NVLink]
        [--budget 6000] [--seed 0] [--json FILE]

Each kill starts a worker process that runs the search with ``--checkpoint``'s defaults (a
write every 500 evaluations or 30 s) and counts its evaluations in a shared file, sends it
the signal after a random delay (SIGKILL: nothing runs after it; SIGINT: Ctrl-C, the search
stops at the next safe point and writes its state, and must print no traceback), and then
resumes the search from the checkpoint in this process. Per kill it prints the evaluations done when killed, those the checkpoint held, the
difference (lost, to be done again), whether the resumed search evaluated exactly the rest of
the budget (nothing counted twice) and whether its front and hypervolume history equal the
uninterrupted search's with the same seed. Also the cost of one checkpoint write (ms) and its
share of the search time at the default interval. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def problem_of(graph: str, cluster: str):
    from moplace.core.presets import load_cluster
    from moplace.io import load_graph
    from moplace.optimize.problem import Problem

    return Problem(load_graph(graph), load_cluster(cluster))


def counted(problem, counter_path: str | None):
    """``problem.evaluate`` replaced by one that counts its calls (in a file, when given)."""
    evaluate, calls = problem.evaluate, [0]
    fd = os.open(counter_path, os.O_RDWR | os.O_CREAT) if counter_path else None

    def counting(strategy, parent=None):
        ev = evaluate(strategy, parent)
        calls[0] += 1
        if fd is not None:
            os.pwrite(fd, struct.pack("<q", calls[0]), 0)
        return ev

    problem.evaluate = counting
    return calls


def worker(args) -> None:
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher

    problem = problem_of(args.graph, args.cluster)
    problem.reference  # noqa: B018 - the baselines' evaluations are not the search's
    counted(problem, args.counter)
    search(problem, make_searcher(args.searcher), budget=args.budget, seed=args.seed,
           checkpoint=args.checkpoint)


def kill_once(args, searcher: str, delay: float, folder: Path, whole) -> dict:
    from moplace.optimize.checkpoint import read_meta
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher

    ck, counter = folder / f"{searcher}.ckpt", folder / f"{searcher}.count"
    for path in (ck, counter):
        path.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, __file__, "--worker", "--searchers", searcher,
                             "--graph", args.graph, "--cluster", args.cluster,
                             "--budget", str(args.budget), "--seed", str(args.seed),
                             "--checkpoint", str(ck), "--counter", str(counter)],
                            stderr=subprocess.PIPE, text=True)
    started = time.perf_counter()
    while not counter.exists() and proc.poll() is None:  # setup done, the search is running
        time.sleep(0.01)
    time.sleep(delay)
    proc.send_signal(getattr(signal, f"SIG{args.signal}"))
    _, err = proc.communicate(timeout=120)
    done = struct.unpack("<q", counter.read_bytes()[:8])[0] if counter.exists() else 0
    saved = read_meta(ck)["n_evaluations"] if ck.exists() else 0
    problem = problem_of(args.graph, args.cluster)
    problem.reference  # noqa: B018
    calls = counted(problem, None)
    resumed = search(problem, make_searcher(searcher), budget=args.budget, seed=args.seed,
                     checkpoint=ck if ck.exists() else None)
    return {"searcher": searcher, "signal": args.signal, "traceback": "Traceback" in err,
            "killed_after_s": round(time.perf_counter() - started, 2),
            "done_when_killed": done, "checkpoint_held": saved, "lost": done - saved,
            "resumed_evaluated": calls[0], "total": resumed.n_evaluations,
            "counted_once": calls[0] == args.budget - saved and resumed.n_evaluations == args.budget,
            "identical": [p.strategy for p in resumed.front] == [p.strategy for p in whole.front]
            and resumed.hypervolume_history == whole.hypervolume_history}


def write_cost(args, searcher: str, folder: Path) -> dict:
    """Milliseconds per checkpoint write, and their share of a search writing at the default
    interval (every 500 evaluations or 30 s)."""
    from moplace.optimize import driver
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher

    problem = problem_of(args.graph, args.cluster)
    problem.reference  # noqa: B018
    times, save = [], driver._Run._save

    def timed(self, status):
        t0 = time.perf_counter()
        save(self, status)
        times.append(time.perf_counter() - t0)

    driver._Run._save = timed
    try:
        t0 = time.perf_counter()
        search(problem, make_searcher(searcher), budget=args.budget, seed=args.seed,
               checkpoint=folder / f"{searcher}-cost.ckpt")
        total = time.perf_counter() - t0
    finally:
        driver._Run._save = save
    return {"searcher": searcher, "writes": len(times),
            "ms_per_write": 1e3 * sum(times) / len(times), "share": sum(times) / total,
            "search_s": total, "bytes": (folder / f"{searcher}-cost.ckpt").stat().st_size}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--signal", choices=["KILL", "INT"], default="KILL")
    ap.add_argument("--searchers", nargs="+", default=["mcmc", "nsga2", "random"])
    ap.add_argument("--graph", default="pipedream:resnet50")
    ap.add_argument("--cluster", default="4xV100-NVLink")
    ap.add_argument("--budget", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-delay", type=float, default=None,
                    help="latest kill, seconds after the search starts (default: 80%% of an "
                         "uninterrupted search's time)")
    ap.add_argument("--json", default=None, help="write the rows to this file ('-': stdout)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", help=argparse.SUPPRESS)
    ap.add_argument("--counter", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.searcher = args.searchers[0]
        worker(args)
        return 0
    from moplace.optimize.driver import search
    from moplace.optimize.plugins import make_searcher

    rng = random.Random(args.seed)
    out = sys.stderr if args.json == "-" else sys.stdout
    rows, costs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in args.searchers:
            problem = problem_of(args.graph, args.cluster)
            problem.reference  # noqa: B018
            t0 = time.perf_counter()
            whole = search(problem, make_searcher(name), budget=args.budget, seed=args.seed)
            longest = args.max_delay or 0.8 * (time.perf_counter() - t0)
            costs.append(write_cost(args, name, folder))
            c = costs[-1]
            print(f"{name}: uninterrupted {c['search_s']:.1f} s; a checkpoint write takes "
                  f"{c['ms_per_write']:.1f} ms ({c['bytes'] / 2**20:.2f} MiB), {c['writes']} "
                  f"writes = {c['share']:.2%} of the search", file=out, flush=True)
            for k in range(len(rows), args.kills * (args.searchers.index(name) + 1)
                           // len(args.searchers)):
                row = kill_once(args, name, rng.uniform(0.05, longest), folder, whole)
                rows.append(row)
                print(f"  SIG{args.signal} {k + 1}: {row['searcher']} after {row['killed_after_s']} s"
                      f"{' (TRACEBACK)' if row['traceback'] else ''}: done "
                      f"{row['done_when_killed']}, checkpoint {row['checkpoint_held']}, lost "
                      f"{row['lost']}; resumed to {row['total']} evaluating "
                      f"{row['resumed_evaluated']} (counted once: {row['counted_once']}), "
                      f"identical to uninterrupted: {row['identical']}", file=out, flush=True)
    lost = [r["lost"] for r in rows]
    most = 500 if args.signal == "KILL" else 0  # Ctrl-C writes everything done
    bad = [r for r in rows if not (r["counted_once"] and r["identical"] and r["lost"] <= most
                                   and not r["traceback"])]
    print(f"{len(rows)} SIG{args.signal}s: lost evaluations max {max(lost, default=0)}, mean "
          f"{sum(lost) / max(len(lost), 1):.0f}; {len(bad)} failed checks", file=out)
    report = {"rows": rows, "write_cost": costs, "failed": len(bad)}
    if args.json == "-":
        print(json.dumps(report))
    elif args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
