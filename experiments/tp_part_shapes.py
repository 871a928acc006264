"""How much a tensor-parallel part's own shape would change the Megatron rows' op times.

moplace times a part of an op split ``t`` ways on tensor as ``1/t`` of the whole op (plus
the split overhead). This script costs each traced op of `published_runs`' GPT models (one
micro-batch, ``--cache`` as `published_runs` fills it) at the shape one of ``t`` tensor-
parallel ranks runs, by the shipped H100 calibration: a matmul with its larger dimension
other than the tokens cut ``t`` ways (a column-parallel linear's output, a row-parallel one's
input, the vocabulary of the head), a fused attention with ``t`` times fewer heads, a
memory-bound op with ``t`` times fewer bytes (sequence parallelism); and prints, per class and
in all, the parts' seconds over ``1/t`` of the whole ops'. A check of the cost model's
interpolation, not a measurement.

    python3 experiments/tp_part_shapes.py [--cache DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from published_runs import MEGATRON_TABLE, SEQ, emit  # noqa: E402


def part_ratios(graph, t: int, cal) -> dict:
    """Per class (matmul, attention, memory) and ``all``: the parts' seconds at their own
    shapes over ``1/t`` of the whole ops'."""
    features = graph.metadata["cost_features"]
    tokens = graph.metadata["batch_size"] * SEQ
    sums: dict = {}
    for op in graph.ops:
        f = features.get(op.name)
        if not f or f.get("cls") not in ("matmul", "attention", "memory"):
            continue
        if f["cls"] == "matmul":
            dims = {d: int(f[d]) for d in "mnk"}
            cut = max((d for d in "mnk" if dims[d] != tokens), key=dims.get, default=None)
            part = {**f, cut: max(1, dims[cut] // t)} if cut else f
        elif f["cls"] == "attention":
            part = {**f, "bh": max(1, f["bh"] // t)}
        else:
            part = {**f, "bytes": f["bytes"] / t}
        got = sums.setdefault(f["cls"], [0.0, 0.0])
        got[0] += cal.seconds(f) / t
        got[1] += cal.seconds(part)
    out = {k: v[1] / v[0] for k, v in sums.items()}
    out["all"] = sum(v[1] for v in sums.values()) / sum(v[0] for v in sums.values())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "moplace-published")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    from moplace.costs.calibration import shipped
    from moplace.io.native import load_native

    cal = shipped("H100")
    lines = ["Tensor-parallel parts at their own shapes over 1/TP of the whole op (shipped H100 "
             "calibration; Megatron-LM's table's GPT models, one micro-batch of one sequence)",
             "", f"{'size':>5} {'TP':>3} {'matmul':>7} {'attention':>9} {'memory':>7} {'all':>7}"]
    for size, _, _, _, tp, *_ in MEGATRON_TABLE:
        path = args.cache / f"megatron-gpt-{size}.json"
        if not path.exists():
            print(f"{path}: not traced; run experiments/published_runs.py --cache "
                  f"{args.cache} first", file=sys.stderr)
            return 2
        r = part_ratios(load_native(path), tp, cal)
        lines.append(f"{size:>5} {tp:>3} {r['matmul']:>7.3f} {r['attention']:>9.3f} "
                     f"{r['memory']:>7.3f} {r['all']:>7.3f}")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
