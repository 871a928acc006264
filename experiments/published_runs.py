"""moplace's predicted throughput beside published training runs, with the error.

**Megatron-LM's weak-scaling table** (NVIDIA/Megatron-LM, ``images/model_table.png``, added
in commit f2e5db4, 15 July 2024, "New scaling figures on H100 GPUs"; the same image went into
the core_r0.8.0 branch as 937571c, and its figures' legend reads "Megatron-Core r0.8.0"):
GPT models of 1.7 B to 462 B parameters on 48 to 6,144 H100s, vocabulary 131,072, sequence
4,096, in TFLOP/s per GPU counted by ``num_floating_point_operations`` of
``megatron/training/training.py`` at that commit (`moplace.core.flops.megatron_flops`).

What the table leaves open, and what is taken here (no script of that commit or release sets
up these models; README.md lines 65-76 at f2e5db4 name only the overlap flags):

- **The model** (Megatron's defaults, ``megatron/training/arguments.py`` at f2e5db4):
  multi-head attention (``--group-query-attention`` is off by default), FFN 4 x hidden, GeLU
  (``--swiglu`` off), LayerNorm, learned absolute positions, untied embeddings (the
  parameter counts 12 L h^2 + 13 L h + 2 V h give the table's sizes, 1.75 ... 461.5 B; tied
  ones do not). Traced as a Hugging Face GPT-2 of those sizes (``hf:PATH/config.json``).
- **Stated in the README:** ``--overlap-grad-reduce --overlap-param-gather`` (so the
  distributed optimizer, which they assert: ``zero=1,overlap=1``), ``--tp-comm-overlap``
  (so sequence parallelism, which it asserts; moplace's tensor parallelism is Megatron's with
  sequence parallelism), pipeline-parallel communication overlapped "by default" (which the
  code turns on only with virtual stages: the interleaved schedule).
- **How moplace models the overlaps:** the data-parallel collectives as Megatron-Core r0.8.0
  schedules them (`moplace.simulator.dpsync`: buckets on pipeline rank 0's first chunk only,
  gradients reduced as the last backward makes them or after it, the weights gathered one
  bucket after another as the next step's first forward reaches them);
  the tensor-parallel collectives under their GEMMs (``tp_overlap=1``,
  `moplace.simulator.tpoverlap`: what exceeds each GEMM is left to the simulated step).
- **From the example script of that commit** (``examples/gpt3/train_gpt3_175b_distributed.sh``,
  Megatron's GPT-3 175B on TP8 PP16): ``--micro-batch-size 1`` (GBS / DP is 4 x PP in every
  row: 4 PP micro-batches), no ``--num-layers-per-virtual-pipeline-stage`` (v = 1: plain
  1F1B; two rows' stages hold 23 and 7 layers, prime, which interleaving could cut only into
  single layers), no recomputation flag (none; the least of selective, full where none
  does not fit in 80 GB) and ``--fp16`` (``precision=fp16``: FP16 runs the H100's tensor
  cores as fast as BF16 and takes as many bytes, so the MFU column's 989 TFLOP/s peak is the
  same; but ``arguments.py`` lines 289-307 at f2e5db4 force the gradients into FP32 for
  ``--bf16`` only, so FP16 training holds and reduces them in FP16: half the data-parallel
  traffic of BF16's; the dynamic loss scale's unscaling and overflow check, one pass over a
  rank's 1/DP shard of the gradients and a one-number all-reduce, are left out). The other
  example of that release, ``examples/gpt3/gpt_config.yaml``, sets BF16 and micro-batch 2;
  ``--bf16`` evaluates the rows so (FP32 gradients, as Megatron forces them).
- **Searched** with ``--search`` (what the table leaves open): the micro-batch size (1, 2 or
  4 where it divides a replica's GBS / DP into at least PP micro-batches), the virtual stages
  per device (each dividing a stage's layers; interleaved 1F1B) and recomputation: the
  fastest plan that fits, beside the row's.

Each model is traced once (per micro-batch size searched) at sequences of 4,096 tokens with
calibrated H100 estimates (``moplace profile ... --estimate H100``) into ``--cache`` (a 462 B
trace takes minutes); a cached trace is costed again from its ops' cost features by the
calibration moplace ships now (`recosted`), so a new calibration needs no new trace.

    python3 experiments/published_runs.py [--only 1.7B,7.1B] [--search [--mbs 1,2]]
        [--cache DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

#: (size, heads, hidden, layers, TP, PP, DP, GPUs, global batch, published TFLOP/s per GPU)
MEGATRON_TABLE = (
    ("1.7B", 16, 2048, 24, 1, 1, 48, 48, 192, 408.8),
    ("7.1B", 32, 4096, 30, 2, 1, 48, 96, 192, 465.9),
    ("16B", 48, 6144, 32, 4, 1, 48, 192, 192, 489.1),
    ("32B", 56, 7168, 48, 8, 1, 48, 384, 192, 459.6),
    ("70B", 64, 8192, 84, 8, 2, 48, 768, 384, 419.7),
    ("119B", 80, 10240, 92, 8, 4, 48, 1536, 768, 420.5),
    ("177B", 96, 12288, 96, 8, 6, 48, 2304, 1152, 432.8),
    ("314B", 128, 16384, 96, 8, 8, 48, 3072, 1536, 474.4),
    ("462B", 144, 18432, 112, 8, 16, 48, 6144, 3072, 459.9),
)
SOURCE = ("NVIDIA/Megatron-LM README, images/model_table.png (commit f2e5db4, July 2024, "
          "Megatron-Core r0.8.0)")
VOCAB, SEQ = 131072, 4096
#: the micro-batch sizes searched (each a trace; those that divide a replica's share of the
#: global batch)
MBS = (1, 2, 4)
RECOMPUTE = ("none", "selective", "full")


def gpt_config(heads: int, hidden: int, layers: int) -> dict:
    """A Hugging Face GPT-2 configuration of Megatron's default GPT of these sizes."""
    return {"model_type": "gpt2", "n_embd": hidden, "n_layer": layers, "n_head": heads,
            "n_inner": 4 * hidden, "n_positions": SEQ, "vocab_size": VOCAB,
            "activation_function": "gelu", "tie_word_embeddings": False}


def traced(size: str, heads: int, hidden: int, layers: int, cache: Path, mbs: int = 1) -> Path:
    """The graph of one micro-batch of ``mbs`` sequences of the model, traced once into
    ``cache``."""
    out = cache / f"megatron-gpt-{size}{'' if mbs == 1 else f'-mbs{mbs}'}.json"
    if out.exists():
        return recosted(out)
    cfg = cache / f"megatron-gpt-{size}" / "config.json"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(json.dumps(gpt_config(heads, hidden, layers), indent=1))
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "moplace", "profile", f"hf:{cfg}", "--batch", str(mbs),
           "--seq-len", str(SEQ), "--dtype", "bf16", "--estimate", "H100", "-o", str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print(f"  traced {size} (micro-batch {mbs}) in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr, flush=True)
    return out


def recosted(path: Path) -> Path:
    """``path``'s trace costed again by the H100 calibration moplace ships now (from its ops'
    cost features; rewritten when a cost changed), so a cache outlives a new calibration."""
    from moplace.costs.calibfit import calibrated_graph
    from moplace.costs.calibration import shipped
    from moplace.io.native import load_native, save_graph

    graph = load_native(path)
    again = calibrated_graph(graph, "H100", shipped("H100"), graph.metadata["cost_features"])
    if any(a.compute != b.compute for a, b in zip(graph.ops, again.ops)):
        save_graph(again, path)
        print(f"  {path.name}: costed again by the shipped H100 calibration", file=sys.stderr)
    return path


def micro_batch_sizes(pp: int, dp: int, gbs: int) -> list[int]:
    """The searched micro-batch sizes that divide a replica's ``gbs / dp`` sequences into at
    least ``pp`` micro-batches (1F1B fills its pipeline)."""
    return [b for b in MBS if (gbs // dp) % b == 0 and gbs // (dp * b) >= pp]


def candidate_plans(tp: int, pp: int, dp: int, gbs: int, layers: int,
                    recompute=RECOMPUTE, tp_overlap: bool = True,
                    bf16: bool = False, mbs: int = 1, virtual: bool = True) -> list[str]:
    """The plans of the row at micro-batch ``mbs``: its degrees, with every virtual-stage
    count (only v = 1 without ``virtual``) and each of the ``recompute`` modes; the
    distributed optimizer and the data-parallel overlap, and the tensor-parallel overlap where
    there is tensor parallelism (the README's flags; not with ``tp_overlap`` False), in FP16
    (the example script's; with ``bf16``, BF16 and its FP32 gradients)."""
    per_stage = layers // pp
    m = gbs // (dp * mbs)
    vs = [1] + ([v for v in range(2, per_stage + 1) if per_stage % v == 0 and m % pp == 0]
                if pp > 1 and virtual else [])
    return [f"tp={tp},pp={pp},v={v},dp={dp},mbs={mbs},gbs={gbs},zero=1,overlap=1,"
            f"tp_overlap={int(tp > 1 and tp_overlap)},precision={'bf16' if bf16 else 'fp16'},"
            f"grad_fp32={int(bf16)},recompute={r}"
            for v in vs for r in recompute]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="sizes to run, comma separated (default: all)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "moplace-published")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--no-tp-overlap", action="store_true",
                    help="leave the tensor-parallel collectives unhidden (to see what the "
                         "overlap moves)")
    ap.add_argument("--bf16", action="store_true",
                    help="train in BF16, the gradients held and reduced in FP32 as Megatron "
                         "forces them (gpt_config.yaml's precision) instead of the script's "
                         "FP16")
    ap.add_argument("--figure", type=Path, help="draw published and predicted TFLOP/s per GPU "
                                                "against GPUs into this PNG")
    ap.add_argument("--fronts", action="store_true",
                    help="also walk each row's whole Megatron space on its pod (a search at "
                         "scale with a budget past the space: exact, so seeds change nothing) "
                         "and say where the row's plan stands on the front")
    ap.add_argument("--workers", type=int, default=2, help="processes for --fronts")
    ap.add_argument("--search", action="store_true",
                    help="also search what the table leaves open (micro-batch size, virtual "
                         "stages, recomputation) and print the fastest plan found")
    ap.add_argument("--mbs", default=",".join(map(str, MBS)),
                    help="micro-batch sizes --search takes, comma separated (default: 1,2,4)")
    args = ap.parse_args(argv)
    from moplace.core.pod import load_target
    from moplace.core.regularspace import RegularSpace
    from moplace.io import load_graph

    try:
        args.mbs = {int(b) for b in args.mbs.split(",") if b.strip()}
    except ValueError:
        args.mbs = set()
    if not args.mbs or not args.mbs <= set(MBS):
        print(f"--mbs: give sizes among {', '.join(map(str, MBS))}, comma separated",
              file=sys.stderr)
        return 2
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    rows = [r for r in MEGATRON_TABLE if not only or r[0] in only]
    if only - {r[0] for r in rows}:
        print(f"--only: unknown size(s) {', '.join(sorted(only - {r[0] for r in rows}))}; "
              f"sizes: {', '.join(r[0] for r in MEGATRON_TABLE)}", file=sys.stderr)
        return 2
    args.cache.mkdir(parents=True, exist_ok=True)
    lines = [f"Megatron-LM's weak-scaling table ({SOURCE}) against moplace, pod:H100:N",
             "(calibrated H100 estimates; TFLOP/s per GPU as Megatron's "
             "num_floating_point_operations at f2e5db4 counts them)"
             + ("; without the TP overlap" if args.no_tp_overlap else "")
             + ("; BF16, FP32 gradients" if args.bf16 else "; FP16"), "",
             (f"{'size':>5} {'GPUs':>5} {'published':>9} {'moplace':>8} {'error':>7}  "
              f"{'step':>8} {'memory':>9}  recomputation"
              + ("; the fastest plan searched" if args.search else "") + "; seconds")]
    errors, drawn = [], []
    for size, heads, hidden, layers, tp, pp, dp, gpus, gbs, published in rows:
        pod = load_target(f"pod:H100:{gpus}")
        t0 = time.perf_counter()
        path = traced(size, heads, hidden, layers, args.cache)
        graph = load_graph(str(path))
        modes = RegularSpace(graph, gpus, gbs).recompute_modes()
        # the example script's plan: micro-batch 1, no virtual stages, the least recomputation
        # that fits
        best = None
        for mode in modes:
            best, _ = best_of(candidate_plans(tp, pp, dp, gbs, layers, (mode,),
                                              not args.no_tp_overlap, args.bf16,
                                              1, virtual=False), graph, pod, size)
            if best is not None:
                break
        if best is None:
            lines.append(f"{size:>5} {gpus:>5} {published:>9.1f} {'-':>8} {'-':>7}  no plan "
                         f"fits in 80 GB")
            continue
        tf = best.tflops_per_gpu
        err = (tf - published) / published
        errors.append(err)
        drawn.append((size, gpus, published, tf))
        peak = float(best.trace.peak_memory.max())
        line = (f"{size:>5} {gpus:>5} {published:>9.1f} {tf:>8.1f} {err:>+7.1%}  "
                f"{best.runtime_s:>7.3f}s {peak / 2**30:>6.1f} GiB  {best.plan.recompute}")
        if args.search:
            found, tried = None, 0
            for mbs in [b for b in micro_batch_sizes(pp, dp, gbs) if b in args.mbs]:
                g = load_graph(str(traced(size, heads, hidden, layers, args.cache, mbs)))
                ev, n = best_of(candidate_plans(tp, pp, dp, gbs, layers, modes,
                                                not args.no_tp_overlap, args.bf16,
                                                mbs), g, pod, size)
                tried += n
                if ev is not None and (found is None or ev.runtime_s < found.runtime_s):
                    found = ev
            if found is not None:
                p = found.plan
                line += (f"; searched: {found.tflops_per_gpu:.1f} "
                         f"({(found.tflops_per_gpu - published) / published:+.1%}) at mbs "
                         f"{p.mbs}, v{p.v}, {p.recompute}, of {tried} plans")
        lines.append(line + f"; {time.perf_counter() - t0:.0f} s")
        print(lines[-1], file=sys.stderr, flush=True)
        if args.fronts:
            lines.append("      " + front_standing(graph, pod, gbs, best, path, args.workers,
                                                   "bf16" if args.bf16 else "fp16"))
            print(lines[-1], file=sys.stderr, flush=True)
    if errors:
        lines.append("")
        lines.append(f"mean |error| {sum(abs(e) for e in errors) / len(errors):.1%}, largest "
                     f"{max(errors, key=abs):+.1%}; within 10%: "
                     f"{sum(abs(e) <= 0.10 for e in errors)} of {len(errors)}")
    emit(lines, args.out)
    if args.figure and drawn:
        draw(drawn, args.figure)
        print(f"figure: {args.figure}")
    return 0


def emit(lines: list, out: Path | None) -> None:
    """Print the report ``lines`` and write them to ``out`` where given."""
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        out.write_text(text)


def best_of(specs, graph, pod, size: str):
    """(the fastest of the plans ``specs`` of ``graph`` on ``pod`` that fits, or None; how
    many were evaluated)."""
    from moplace.core.regular import parse_plan
    from moplace.errors import MoplaceError
    from moplace.simulator.atscale import evaluate_regular

    best, tried = None, 0
    for spec in specs:
        try:
            ev = evaluate_regular(graph, pod, parse_plan(spec))
        except MoplaceError as exc:
            print(f"  {size} {spec}: {exc}", file=sys.stderr)
            continue
        tried += 1
        if ev.feasible and (best is None or ev.runtime_s < best.runtime_s):
            best = ev
    return best, tried


def front_standing(graph, pod, gbs: int, best, path: Path, workers: int,
                   precision: str = "fp16") -> str:
    """Where ``best``'s plan stands on the exact front of the Megatron space of ``graph`` on
    ``pod`` at ``gbs`` in ``precision`` (`moplace.optimize.regularsearch.search_regular`,
    every plan evaluated)."""
    from moplace.optimize.archive import no_worse
    from moplace.optimize.regularsearch import search_regular

    t0 = time.perf_counter()
    result = search_regular(graph, pod, gbs, graph_spec=str(path), pod_spec=pod.name,
                            method="random", budget=10**9, seed=0, workers=workers,
                            precisions=(precision,))
    took = time.perf_counter() - t0
    front = [result.points[k] for k in result.front]
    mine = next((p for p in result.points if p.plan == best.plan), None)
    head = (f"space: {result.n_plans} plans, {len(result.points)} evaluated ({result.unfit} "
            f"cannot hold their state), {len(front)} on the front, {took:.0f} s; the row's plan ")
    if mine is None:
        return head + "is not in the space"
    if any(p.plan == best.plan for p in front):
        rank = 1 + sum(p.evaluation.runtime_s < mine.evaluation.runtime_s for p in front)
        return head + f"is on the front, {rank} of {len(front)} by step time"
    over = [p for p in front if no_worse(p.values, mine.values).all()]
    return head + (f"is dominated by {len(over)} front plan(s), e.g. {over[0].plan.text()}"
                   if over else "is equal to a front plan")


def draw(rows, path: Path) -> None:
    """Published and predicted TFLOP/s per GPU against the GPUs of each row (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    gpus = [r[1] for r in rows]
    ax.plot(gpus, [r[2] for r in rows], "o-", label="published (Megatron-LM, f2e5db4)")
    ax.plot(gpus, [r[3] for r in rows], "s--", label="moplace (calibrated H100 estimates)")
    for size, g, pub, _ in rows:
        ax.annotate(size, (g, pub), textcoords="offset points", xytext=(0, 7), ha="center",
                    fontsize=8)
    ax.fill_between(gpus, [0.9 * r[2] for r in rows], [1.1 * r[2] for r in rows],
                    color="C0", alpha=0.12, label="published +-10%")
    ax.set_xscale("log", base=2)
    ax.set_xticks(gpus, [f"{g:,}" for g in gpus], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("H100 GPUs (weak scaling: the model grows with them)")
    ax.set_ylabel("model TFLOP/s per GPU")
    ax.set_ylim(0, 1100)
    ax.axhline(989.5, color="grey", lw=0.5)
    ax.text(gpus[0], 1005, "dense FP16 / BF16 peak, 989.5 TFLOP/s", fontsize=8, color="grey")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Megatron-LM's weak-scaling table: published and predicted throughput",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
