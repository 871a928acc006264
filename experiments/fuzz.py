"""The long fuzz: many mutated inputs per format through moplace's CLI, in process.

    python3 experiments/fuzz.py --n 10000 [--formats pipedream,cluster] [--seed 0]
                                [--time-limit 10] [--workdir DIR] [--json FILE]

Per format it prints the inputs tried, the failures by kind and the failure classes (exception
type + innermost moplace frame) with a count, one example's message, argv and saved input
(``WORKDIR/failures/<format>/<id>.*``; the sidecar ``<id>.txt`` has the command to reproduce
it). Exit status 1 if any input failed. See tests/fuzz/harness.py for what counts as a failure.
"""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from moplace.cli.progress import Display
from tests.fuzz.formats import FORMATS
from tests.fuzz.harness import fuzz, group_failures, shorten


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1000, help="inputs per format (default 1000)")
    p.add_argument("--formats", default=",".join(FORMATS),
                   help=f"comma-separated, of: {', '.join(FORMATS)} (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=10.0, help="seconds per input")
    p.add_argument("--memory-mb", type=int, default=4096,
                   help="address space allowed above the start (MemoryError past it; 0: no cap)")
    p.add_argument("--workdir", help="where inputs and failures go (default: a new temp dir)")
    p.add_argument("--json", help="write the per-format summary and classes to this file")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    args.formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    bad = [f for f in args.formats if f not in FORMATS]
    if bad:
        p.error(f"unknown formats {bad}; formats: {', '.join(FORMATS)}")
    return args


def _counter(display, name: str, n: int):
    """The ``progress(outcome)`` of one format: a bar (or plain lines) on moplace's display,
    with the failures so far in its stage text."""
    job, done, failed = display.job(name), [0], [0]

    def step(outcome):
        done[0] += 1
        failed[0] += not outcome.ok
        job(f"{failed[0]} failed", done[0], n)
    return step


def _summary(fmt: str, results, seconds: float) -> dict:
    kinds = collections.Counter(o.kind for _, o in results)
    classes = []
    for klass, items in group_failures(results).items():
        input_id, o = items[0]
        inner = collections.Counter(o.where for _, o in items)
        classes.append({"class": klass, "count": len(items), "example": input_id,
                        "innermost": dict(inner.most_common()),
                        "detail": o.detail, "argv": shorten(shlex.join(o.argv)),
                        "argv_json": list(o.argv), "saved": o.repro,
                        "mutations": list(o.mutations),
                        "examples": [i for i, _ in items[:5]]})
    return {"format": fmt, "inputs": len(results), "seconds": round(seconds, 1),
            "kinds": dict(kinds), "failures": sum(not o.ok for _, o in results),
            "classes": classes}


def _print(s: dict) -> None:
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(s["kinds"].items()))
    print(f"\n== {s['format']}: {s['inputs']} inputs in {s['seconds']} s; {kinds}; "
          f"{s['failures']} failures in {len(s['classes'])} classes")
    for c in s["classes"]:
        print(f"  {c['count']:>5}  {c['class']}")
        if len(c["innermost"]) > 1:
            print("         innermost frames: " + ", ".join(f"{w} x{k}" for w, k
                                                          in c["innermost"].items()))
        print(f"         e.g. {c['example']}: {c['detail'][:600]}")
        print(f"         mutations: {', '.join(c['mutations'])}")
        print(f"         input: {c['saved']}")
        print(f"         argv: {c['argv'][:400]}".encode("ascii", "backslashreplace").decode())


def _revision() -> str:
    """The checkout's commit (and whether moplace's code differs from it): fixes land often."""
    import subprocess

    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "moplace", "searchers", "objectives")
    return head + (" + uncommitted changes" if dirty else "")


def main(argv=None) -> int:
    args = _args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="moplace-fuzz-")).resolve()
    revision = _revision()
    print(f"fuzzing {', '.join(args.formats)} at {revision}: {args.n} inputs each, seed "
          f"{args.seed}, {args.time_limit:g} s per input; inputs and failures under {workdir}",
          flush=True)
    summaries = []
    # the harness captures stdout/stderr around each input: the display writes to the real one
    with Display("quiet" if args.no_progress else "auto", stream=sys.__stderr__) as display:
        for fmt in args.formats:
            t0 = time.perf_counter()
            results = fuzz(fmt, args.n, args.seed, workdir, time_limit=args.time_limit,
                           memory_mb=args.memory_mb or None,
                           progress=_counter(display, fmt, args.n))
            summaries.append(_summary(fmt, results, time.perf_counter() - t0))
    for s in summaries:
        _print(s)
    total = sum(s["failures"] for s in summaries)
    print(f"\n{sum(s['inputs'] for s in summaries)} inputs, {total} failures, "
          f"{sum(len(s['classes']) for s in summaries)} classes")
    if args.json:
        Path(args.json).write_text(json.dumps({"revision": revision, "seed": args.seed, "n": args.n,
                                               "time_limit": args.time_limit,
                                               "workdir": str(workdir), "formats": summaries},
                                              indent=1) + "\n")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
