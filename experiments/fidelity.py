"""How well does the simulator predict real TensorFlow training steps on this machine?

    python3 experiments/fidelity.py [--models cnn mlp ...] [--batch 4] [--devices 2]
                                    [--steps 8] [--random 3] [--json FILE]

For each zoo model: trace and profile its training step (one op at a time on device 0),
measure the links between the devices, then run several strategies for real — single device,
data parallel (reported as not expressible while splits cannot be applied), round-robin,
layer split and a few random placements — and compare the measured median step time with
the simulator's prediction on the measured cluster. Reports per model the median absolute
relative error and Kendall's tau between measured and simulated times (does the simulator
order strategies as reality does?), and the same over all models.

Anchors: FlexFlow's simulator is within 30% of real time and preserves the order of
strategies; Trinity reports about +-0.05 s.

Without GPUs the devices are logical CPUs of one process: they share the machine's cores and
memory, and a "transfer" between them passes a pointer (see moplace.tf.commprofile) but costs
a send/receive rendezvous on those same cores. The report first measures how independent the
devices really are (two matmul chains on two devices vs one); the simulator assumes fully
independent devices and transfers that overlap compute, as on GPUs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import moplace.tf  # noqa: F401  (TensorFlow's environment before anything imports it)

DEFAULT_MODELS = ["mlp", "cnn", "transformer", "gnmt", "mobilenet_v2", "resnet50",
                  "inception_v3", "vgg19", "nasnet_mobile"]


def strategies(graph, n_devices: int, n_random: int, seed: int = 0) -> dict:
    import numpy as np

    from moplace import BASELINES, baseline
    from moplace.core.baselines import topological_priority
    from moplace.core.strategy import spread_groups

    out = {name: baseline(name, graph, n_devices) for name in BASELINES}
    rng = np.random.default_rng(seed)
    for k in range(n_random):
        devices = rng.integers(0, n_devices, graph.arrays.n_groups)
        out[f"random-{k}"] = spread_groups(graph, devices, None, topological_priority(graph))
    return out


def parallel_speedup(devices, size: int = 384, chain: int = 40) -> float:
    """How much faster two independent matmul chains finish on two devices than one chain on
    one, per chain (2.0 = the devices compute independently, as the simulator assumes)."""
    import numpy as np
    import tensorflow as tf

    import moplace.tf  # noqa: F401  (before TensorFlow: switches off oneDNN's rewrites)
    from moplace.tf.session import session_config

    g = tf.Graph()
    with g.as_default():
        outs = []
        for d in devices[:2]:
            with tf.device(d):
                a = tf.constant(np.random.default_rng(0).random((size, size), np.float32))
                x = a
                for _ in range(chain):
                    x = tf.matmul(x, a) * 1e-3
                outs.append(tf.reduce_sum(x))
    with tf.compat.v1.Session(graph=g, config=session_config(inter_op_threads=2)) as sess:
        def best(fetch):
            sess.run(fetch)
            times = []
            for _ in range(7):
                t0 = time.perf_counter()
                sess.run(fetch)
                times.append(time.perf_counter() - t0)
            return statistics.median(times)
        return 2 * best(outs[0]) / best(outs)


def run_model(name: str, batch: int, n_devices: int, steps: int, n_random: int) -> dict:
    from moplace.review.stats import kendall_tau, median_abs_relative_error
    from moplace.tf.frontend import apply_to_model, profile_model

    pm = profile_model(name, batch, device_count=n_devices, steps=5)
    g = pm.graph
    overhead = g.metadata["measured"]["step_overhead_s"]
    print(f"\n{name}: {len(g.ops)} ops, {len(g.edges)} edges; traced in {pm.trace_seconds:.2f} s, "
          f"profiled in {pm.profile_seconds:.2f} s; profiled step "
          f"{g.metadata['measured']['step_median_s'] * 1e3:.2f} ms (ops sum to "
          f"{g.total_compute('cpu') * 1e3:.2f} ms)", flush=True)
    rows = []
    for sname, s in strategies(g, n_devices, n_random).items():
        t0 = time.perf_counter()
        result, simulated = apply_to_model(g, s, pm.cluster, steps=steps, traced=pm.traced)
        row = {"strategy": sname, "expressible": result.expressible,
               "simulated_s": simulated, "measured_s": result.measured_step_s,
               "trained": result.trained if result.expressible else None,
               "seconds": time.perf_counter() - t0}
        rows.append(row)
        if result.expressible:
            err = (simulated - result.measured_step_s) / result.measured_step_s
            print(f"  {sname:<14} measured {result.measured_step_s * 1e3:9.2f} ms  simulated "
                  f"{simulated * 1e3:9.2f} ms  error {err:+7.1%}  trained {result.trained}", flush=True)
        else:
            print(f"  {sname:<14} not expressible ({result.reason.split(':')[0]}); simulated "
                  f"{simulated * 1e3:.2f} ms", flush=True)
    ok = [r for r in rows if r["expressible"]]
    sim = [r["simulated_s"] for r in ok]
    meas = [r["measured_s"] for r in ok]
    summary = {"model": name, "ops": len(g.ops), "edges": len(g.edges),
               "trace_s": pm.trace_seconds, "profile_s": pm.profile_seconds,
               "median_abs_error": median_abs_relative_error(sim, meas),
               "median_abs_error_with_overhead": median_abs_relative_error(
                   [s + overhead for s in sim], meas),
               "kendall_tau": kendall_tau(sim, meas), "rows": rows}
    print(f"  -> median |error| {summary['median_abs_error']:.1%} (adding the measured fixed "
          f"per-step overhead of {overhead * 1e3:.2f} ms: "
          f"{summary['median_abs_error_with_overhead']:.1%}), Kendall tau "
          f"{summary['kendall_tau']:.2f}", flush=True)
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--steps", type=int, default=8, help="timed steps per strategy")
    p.add_argument("--random", type=int, default=3, help="random placements per model")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    from moplace.review.stats import kendall_tau, median_abs_relative_error
    from moplace.tf.devices import available_devices

    devices = available_devices(args.devices)
    print("devices:", ", ".join(devices))
    if len(devices) > 1:
        print(f"parallel speed-up of two matmul chains on two devices: "
              f"{parallel_speedup(devices):.2f}x (2.00 = independent devices, as simulated)")
    results = [run_model(m, args.batch, args.devices, args.steps, args.random) for m in args.models]
    ok = [r for res in results for r in res["rows"] if r["expressible"]]
    overall = median_abs_relative_error([r["simulated_s"] for r in ok], [r["measured_s"] for r in ok])
    taus = [r["kendall_tau"] for r in results]
    print(f"\n{'model':<14} {'ops':>6} {'edges':>6} {'trace s':>8} {'profile s':>9} "
          f"{'median |err|':>12} {'+overhead':>10} {'tau':>6}")
    for r in results:
        print(f"{r['model']:<14} {r['ops']:>6} {r['edges']:>6} {r['trace_s']:>8.2f} "
              f"{r['profile_s']:>9.2f} {r['median_abs_error']:>12.1%} "
              f"{r['median_abs_error_with_overhead']:>10.1%} {r['kendall_tau']:>6.2f}")
    print(f"all models: median |error| {overall:.1%} over {len(ok)} runs; Kendall tau median "
          f"{statistics.median(taus):.2f}, pooled "
          f"{kendall_tau([r['simulated_s'] for r in ok], [r['measured_s'] for r in ok]):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "models": results, "median_abs_error": overall}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
