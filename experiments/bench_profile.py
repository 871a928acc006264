"""How the profiled step compares with the real step: the sum of a profile's op times against
the wall time of the traced tf.function, on the CPU.

    python3 experiments/bench_profile.py [--models cnn mlp] [--batch 8] [--steps 3] [--repeats 10]

Per zoo model: the profile's op times summed (what the simulator adds up for one device), the
profile's own untraced step (median), the tracing correction, and the median wall time of
``--repeats`` calls of the traced ``tf.function`` made afterwards, with the ratio of the
profiled sum to that wall time. The ops' sum leaves out what a call costs beyond its ops
(feeding, fetching; the profile records it as ``step_overhead_s``), so on a small model (mlp:
0.1 ms of ops) the ratio is well below 1; a ratio off by orders of magnitude means profiling
misreads the step (a unit off, nested nodes counted twice). On a busy machine
the two measurements, taken seconds apart, can differ several-fold, which is why this is a
benchmark and not a test; ``tests/test_tf_frontend.py`` checks what holds on any machine (the
op times fit in the profile's own step, and step stats are read in seconds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # before TensorFlow loads (as the tests)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def one(model: str, batch: int, steps: int, repeats: int) -> dict:
    from moplace.tf.frontend import profile_model

    pm = profile_model(model, batch, device_count=1, steps=steps)
    x, y = pm.traced.feeds["x"], pm.traced.feeds["y"]
    fn = pm.traced.function
    for _ in range(3):  # warm-up
        fn(x, y)
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(x, y).numpy()
        walls.append(time.perf_counter() - t0)
    measured = pm.graph.metadata["measured"]
    profiled = pm.graph.total_compute(measured["kind"])
    wall = statistics.median(walls)
    return {"model": model, "ops": len(pm.graph.ops), "profiled_s": profiled,
            "step_s": measured["step_median_s"], "correction": measured["tracing_correction"],
            "wall_s": wall, "ratio": profiled / wall if wall > 0 else float("nan")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["cnn", "mlp"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args(argv)
    import moplace.tf  # noqa: F401  (sets TensorFlow's environment before keras loads)

    print(f"{'model':8} {'ops':>5} {'profiled ms':>12} {'profile step ms':>16} "
          f"{'correction':>10} {'tf.function ms':>15} {'ratio':>6}")
    for model in args.models:
        r = one(model, args.batch, args.steps, args.repeats)
        print(f"{r['model']:8} {r['ops']:5d} {r['profiled_s'] * 1e3:12.3f} "
              f"{r['step_s'] * 1e3:16.3f} {r['correction']:10.3f} {r['wall_s'] * 1e3:15.3f} "
              f"{r['ratio']:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
