"""How well the simulator's one-device step on `moplace profile --measure`'s CPU op times
matches a real training step of the same PyTorch model, on this machine (issue 35).

    python3 experiments/torch_cpu_fidelity.py [--sizes 64,256,512] [--batch 8] [--steps 3]

For the GPT of experiments/models/gpt.py at each hidden size (2 layers, 4 heads, sequence
128, a 1,000-token vocabulary): parameters, ops, the real step (median), the simulated step
and their ratio. Per-op profiling overhead weighs on small models, whose ops take microseconds.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

GPT = Path(__file__).resolve().parent / "models" / "gpt.py"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="64,256,512")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    from moplace.core.baselines import baseline
    from moplace.core.presets import parse_cluster
    from moplace.simulator.evaluation import evaluate
    from moplace.torch.frontend import profile_torch_model

    cpu = parse_cluster('name = "cpu"\n[[servers]]\ncount = 1\nkind = "cpu"\n'
                        'memory = "64GiB"\n', "cpu.toml")
    print(f"{'hidden':>6} {'parameters':>11} {'ops':>5} {'real ms':>9} {'simulated ms':>13} "
          f"{'ratio':>6}")
    for h in (int(v) for v in args.sizes.split(",")):
        os.environ["GPT_DIMS"] = f"{h},4,2,128,1000"
        t = profile_torch_model(GPT, args.batch, ["H100"], measure_steps=args.steps)
        simulated = evaluate(t.graph, cpu, baseline("single", t.graph, 1)).objectives()["runtime"]
        real = t.measured.step_seconds
        print(f"{h:>6} {t.parameters:>11,} {len(t.graph.ops):>5} {real * 1e3:>9.2f} "
              f"{simulated * 1e3:>13.2f} {simulated / real:>6.2f}")


if __name__ == "__main__":
    main()
