"""One device of a `moplace.tf.testbed.Testbed`: a TensorFlow server in its own process.

    python -m moplace.tf.testbed_worker TASK ADDRESSES_JSON [--cores 0,1] [--gpu K] [--threads 1]

The process pins itself to its cores before TensorFlow starts (so its thread pools live on
them), sees at most its own GPU, starts a ``tf.distribute.Server`` as task TASK of job
"worker", prints one JSON line describing its device, and serves until its standard input
closes (the testbed closed it, or the testbed's process died).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m moplace.tf.testbed_worker")
    p.add_argument("task", type=int)
    p.add_argument("addresses", help="JSON list of host:port, one per task")
    p.add_argument("--cores", default="", help="CPU cores to run on, e.g. 0,1")
    p.add_argument("--gpu", type=int, default=-1, help="the GPU this worker owns (-1: none)")
    p.add_argument("--threads", type=int, default=1, help="inter- and intra-op threads")
    args = p.parse_args(argv)
    if args.cores:
        os.sched_setaffinity(0, {int(c) for c in args.cores.split(",")})
    os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu) if args.gpu >= 0 else ""
    import moplace.tf  # noqa: F401  (TensorFlow's environment first)
    from moplace.tf._tf import tf

    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.threads,
                                      inter_op_parallelism_threads=args.threads)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.gpu_options.allow_growth = True
    addresses = json.loads(args.addresses)
    server = tf.distribute.Server(tf.train.ClusterSpec({"worker": addresses}), job_name="worker",
                                  task_index=args.task, config=config, start=True)
    kind, memory = "cpu", 0
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        from moplace.tf.devices import gpu_kind
        details = tf.config.experimental.get_device_details(gpus[0])
        kind = gpu_kind(details.get("device_name", "gpu"))
        with tf.compat.v1.Session(server.target) as sess:
            memory = max((int(d.memory_limit_bytes) for d in sess.list_devices()
                          if d.device_type == "GPU" and f"task:{args.task}/" in d.name), default=0)
    device = f"/job:worker/replica:0/task:{args.task}/device:{'GPU' if gpus else 'CPU'}:0"
    print(json.dumps({"task": args.task, "device": device, "kind": kind, "memory_bytes": memory,
                      "cores": sorted(os.sched_getaffinity(0)), "pid": os.getpid()}), flush=True)
    sys.stdin.read()  # EOF: the testbed is done with us (``server`` stays referenced until then)
    os._exit(0)  # no interpreter teardown: TensorFlow's server threads never join


if __name__ == "__main__":
    raise SystemExit(main())
