"""Join the shared H200 measurements (``../shared/gpu-profiles``) with cost features, once.

The shared graphs hold every op's kernel time measured on an H200 (under device kind ``cpu``,
the slot of that day) but no cost features (`moplace.torch.features`). This script traces
each graph's spec again here (eager attention, as they were traced: the same op names), and
writes per case the measured ops with their features, compactly, to
``tests/data/calibration/CASE.json.gz`` (what the tests and `calibration_crossval.py` fit on,
so that neither needs ``../shared`` nor a trace), and copies ``kernels-h200.json`` beside them.

    python3 experiments/calibration_join.py [--shared ../shared/gpu-profiles]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "tests" / "data" / "calibration"


def join(graph_path: Path) -> dict:
    """One shared graph's measured ops with the features of the same ops traced here."""
    from moplace.costs.calibfit import measured_samples
    from moplace.io import load_graph
    from moplace.torch.convert import to_op_graph
    from moplace.torch.hf import load_hf_setup
    from moplace.torch.trace import trace_step

    measured = load_graph(str(graph_path))
    src = measured.metadata["source"]
    t0 = time.perf_counter()
    setup = load_hf_setup(src["model"][3:], src["batch_size"], src["seq_len"], src["dtype"],
                          attention="eager")
    traced = to_op_graph(trace_step(setup), [])
    features = traced.metadata["cost_features"]
    samples, missing = measured_samples(measured, "cpu", features)
    step = json.loads(graph_path.with_name(
        graph_path.name.replace(".graph.json", ".step.json")).read_text())
    print(f"{measured.name}: traced in {time.perf_counter() - t0:.1f} s; {len(samples)} ops "
          f"joined, {len(missing)} timed ops without features ({', '.join(missing[:5])})")
    return {"case": measured.name, "source": src, "measured_on": step["gpu"],
            "torch": step["torch"], "attention": "eager", "real": step["real"],
            "parameters": step["parameters"], "missing": missing,
            "ops": [[name, seconds, f] for name, seconds, f in samples]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "gpu-profiles"))
    args = ap.parse_args()
    shared = Path(args.shared)
    OUT.mkdir(parents=True, exist_ok=True)
    for path in sorted(shared.glob("*.graph.json")):
        data = join(path)
        target = OUT / f"{data['case']}.json.gz"
        with gzip.GzipFile(target, "wb", mtime=0) as f:  # mtime 0: same input, same bytes
            f.write(json.dumps(data, separators=(",", ":"), sort_keys=True).encode())
        print(f"wrote {target.relative_to(ROOT)} ({target.stat().st_size:,} bytes)")
    shutil.copyfile(shared / "kernels-h200.json", OUT / "kernels-h200.json")


if __name__ == "__main__":
    main()
