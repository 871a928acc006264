"""Time a benchmark on two checkouts, runs alternating, and compare the medians.

    python3 experiments/compare_checkouts.py --old /tmp/old --runs 5 --what search_speed
    python3 experiments/compare_checkouts.py --old /tmp/old --runs 5 --what simulator \\
        -- --sizes 1000 10000 --no-bundled --seconds 1

``--old`` is a checkout of an earlier commit (``git worktree add /tmp/old COMMIT``); the new
one is this file's checkout. Each run is a fresh process with ``PYTHONPATH`` set to one
checkout (old, new, old, new, ...), so both see the same machine state in turn; the benchmark
script run is the NEW checkout's for both (it uses the public API only). Per figure, the
median over the runs of each checkout and their ratio (new / old for seconds, old / new for
rates: above 1 is slower) are printed; ``--json FILE`` keeps every run's figures too.

``search_speed`` compares ``bench_search_speed.py``'s search seconds per (graph, searcher);
``simulator`` compares ``bench_simulator.py``'s evaluations per second (``simulate()``,
``Problem.evaluate`` one by one, and ``Problem.evaluate_batch``) per (ops, devices, strategy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

NEW = Path(__file__).resolve().parent.parent


def _run(checkout: Path, what: str, extra: list[str]) -> dict[str, float]:
    """One run of the benchmark on ``checkout``: figure name -> value (seconds: lower is
    better, names ending in ``/s``: higher is better)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        script = NEW / "experiments" / f"bench_{what}.py"
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        subprocess.run([sys.executable, str(script), *extra, "--json", str(out)], env=env,
                       check=True, cwd=tmp, stdout=subprocess.DEVNULL)
        data = json.loads(out.read_text())
    if what == "search_speed":
        return {f"{r['graph']} {r['searcher']} s": r["seconds"] for r in data}
    figures = {}
    for r in data["synthetic"]:
        key = f"{r['ops']} ops {r['devices']} dev {r['strategy']}"
        figures[f"{key} evals/s"] = r["evals_per_s"]
        figures[f"{key} evaluate evals/s"] = r["serial_evals_per_s"]
        figures[f"{key} batch evals/s"] = r["batch_evals_per_s"]
    return figures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, type=Path, help="the earlier checkout")
    ap.add_argument("--runs", type=int, default=5, help="runs of each checkout")
    ap.add_argument("--what", choices=("search_speed", "simulator"), default="search_speed")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("extra", nargs="*", help="arguments for the benchmark (after --)")
    args = ap.parse_args(argv)
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for k in range(args.runs):
        for label, checkout in (("old", args.old), ("new", NEW)):
            runs[label].append(_run(checkout, args.what, args.extra))
            print(f"run {k + 1}/{args.runs} {label} done", file=sys.stderr, flush=True)
    names = list(runs["new"][0])
    print(f"{'figure':56} {'old':>10} {'new':>10} {'slower by':>10}")
    rows = []
    for name in names:
        old = statistics.median(r[name] for r in runs["old"])
        new = statistics.median(r[name] for r in runs["new"])
        slower = new / old - 1 if not name.endswith("/s") else old / new - 1
        rows.append({"figure": name, "old": old, "new": new, "slower": slower})
        print(f"{name:56} {old:10.4g} {new:10.4g} {slower:+10.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "medians": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
