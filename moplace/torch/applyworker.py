"""One rank of the PyTorch testbed: ``python -m moplace.torch.applyworker RANK WORLD PORT
CORES [DEVICE]``.

Pins itself to its cores (one thread per core), joins the others with ``torch.distributed``
(DEVICE ``cpu``, the default: gloo; ``cuda``: GPU RANK, NCCL) and says ``ready``. Then each
line of its standard input names a job's folder (`moplace.torch.apply` writes ``job.pkl``
there: every rank's program, the traced step's nodes at every batch its tasks run at, the
model's source, the steps to run): it builds the model for real (the same seed on every rank:
the same weights and batch), runs the warm-up and timed steps (`moplace.torch.applyrun`),
writes ``rank-K.json`` (seconds per step, the losses it computed; with ``time_ops`` each op's
median seconds per step; on a GPU, the peak memory) and ``rank-K.pt`` (the weights whose
update it ran first) there and says ``done``. Progress goes to stdout as ``step I/N`` lines.
It exits when its standard input closes.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import statistics
import sys


def run_job(job_dir: str, rank: int, dist) -> None:
    import torch

    from .applyprep import load_setup
    from .applyrun import RankRunner
    from .realstep import build_real

    with open(os.path.join(job_dir, "job.pkl"), "rb") as f:
        job = pickle.load(f)
    groups = {}
    for ranks in job["groups"]:  # every rank makes every group, in the same order
        groups[ranks] = dist.new_group(list(ranks))
    source, batch = job["source"], job["batch"]
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    torch.manual_seed(job["seed"])
    real = build_real(load_setup(source, batch), batch, device)
    runner = RankRunner(job["programs"][rank], job["rows"], batch, job["micro_batches"], real,
                        job["parameters"], job["inputs"], job["updates"], job["loss"], groups,
                        device=device)
    seconds, losses, op_steps = [], [], []
    total = job["warmup"] + job["steps"]
    for k in range(total):
        if k >= job["warmup"] and job.get("time_ops"):
            runner.timing = {}
        if k == job["warmup"] and runner.cuda:
            torch.cuda.reset_peak_memory_stats()
        s, lost = runner.step()
        if k >= job["warmup"]:
            seconds.append(s)
            if runner.timing is not None:  # op -> its tasks' mean in this step
                op_steps.append({op: t / n for op, (t, n) in runner.timing.items()})
        losses.append(lost)
        print(f"step {k + 1}/{total}", flush=True)
    if job.get("weights"):
        runner.unshard()
        mine = {name: runner.weights[name].detach().clone()
                for name in job["owned"].get(rank, ())}
        torch.save(mine, os.path.join(job_dir, f"rank-{rank}.pt"))
    with open(os.path.join(job_dir, f"rank-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "seconds": seconds, "losses": losses,
                   "op_seconds": op_medians(op_steps),
                   "peak_bytes": int(torch.cuda.max_memory_allocated()) if runner.cuda else 0},
                  f)
    for group in groups.values():
        dist.destroy_process_group(group)


def op_medians(op_steps: list[dict]) -> dict:
    """Op -> the median over the timed steps of its tasks' mean seconds in a step (a step
    another job disturbed moves a median less than a mean)."""
    ops = sorted({op for step in op_steps for op in step})
    return {str(op): statistics.median(step[op] for step in op_steps if op in step)
            for op in ops}


#: message sizes (bytes) the links are timed at, and round trips per size
LINK_SIZES, LINK_TRIPS = (4 << 10, 256 << 10, 4 << 20, 16 << 20), 20


def ping_pong(out_dir: str, rank: int, world: int, dist) -> None:
    """Rank 0 and rank 1 send each size back and forth (on their GPUs under NCCL); rank 0
    writes ``links.json``: per size, the median one-way seconds (half a round trip)."""
    import time

    import torch

    times = {}
    cuda = dist.get_backend() == "nccl"
    if rank < 2 and world > 1:
        peer = 1 - rank
        for size in LINK_SIZES:
            buf = torch.zeros(size // 4, device="cuda" if cuda else "cpu")
            trips = []
            for k in range(LINK_TRIPS + 1):
                t0 = time.perf_counter()
                if rank == 0:
                    dist.send(buf, peer)
                    dist.recv(buf, peer)
                else:
                    dist.recv(buf, peer)
                    dist.send(buf, peer)
                if cuda:
                    torch.cuda.synchronize()
                if k:  # the first trip sets up the connection
                    trips.append((time.perf_counter() - t0) / 2)
            times[size] = statistics.median(trips)
    if rank == 0:
        with open(os.path.join(out_dir, "links.json"), "w") as f:
            json.dump({str(k): v for k, v in times.items()}, f)


def main(argv=None) -> int:
    args = (argv or sys.argv[1:])
    rank, world, port, cores = args[:4]
    device = args[4] if len(args) > 4 else "cpu"
    rank, world = int(rank), int(world)
    cores = [int(c) for c in cores.split(",")]
    os.sched_setaffinity(0, cores)
    import torch

    torch.set_num_threads(len(cores))
    import torch.distributed as dist

    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo",
                            init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    print("ready", flush=True)
    for line in sys.stdin:
        job_dir = line.strip()
        if not job_dir:
            continue
        if job_dir.startswith("links "):
            ping_pong(job_dir[6:], rank, world, dist)
        else:
            run_job(job_dir, rank, dist)
        dist.barrier()
        print("done", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
