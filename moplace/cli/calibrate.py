"""``moplace calibrate GRAPH... --kind KIND -o FILE [--kernels KERNELS.json]``: fit a
calibration file (`moplace.costs.calibration`) for a device kind from graphs whose op times
were measured on it, and kernel benchmarks.

A graph's measured times are read from the slot its ``metadata.measured.kind`` names (the
shared H200 graphs keep theirs under ``cpu``, the slot of that day), else from ``KIND``'s own
when the graph does not say they are estimates. Its cost features come from
``metadata.cost_features``; a graph traced before moplace recorded them is traced again from
its ``metadata.source`` (its attention as recorded, else eager, as moplace traced then) and
joined by op name.
"""

from __future__ import annotations

import json
import time

from ..errors import MoplaceError
from .args import file_arg

#: the kernel benchmark file's sections, each a list of calls but ``tiny_kernel``
KERNEL_SECTIONS = {"gemm": ("dtype", "m", "k", "n", "s"),
                   "sdpa_causal_bf16": ("b", "heads", "d", "s", "fwd_s", "fwd_bwd_s",
                                        "fwd_tflops", "bwd_tflops"),
                   "elementwise_bf16": ("op", "elements", "s", "gbps"),
                   "adamw": ("params", "dtype", "fused", "s")}


def add_commands(sub) -> None:
    """Register ``calibrate`` on the CLI's subparsers."""
    c = sub.add_parser("calibrate", help="fit a device kind's calibrated cost model from "
                       "measured graphs and kernel benchmarks")
    c.add_argument("graphs", nargs="+", type=file_arg, metavar="GRAPH",
                   help="op graphs with op times measured on KIND")
    c.add_argument("--kind", required=True, help="the device kind the times were measured on")
    c.add_argument("-o", "--output", required=True, type=file_arg, metavar="FILE",
                   help="the calibration file to write (refused if it exists, unless --force)")
    c.add_argument("--force", action="store_true", help="replace the -o file")
    c.add_argument("--json", action="store_true", help="print exactly one JSON object")
    c.add_argument("--kernels", type=file_arg, metavar="KERNELS_JSON",
                   help="kernel benchmarks measured on KIND (gemm, sdpa_causal_bf16, "
                        "elementwise_bf16, adamw), as ../shared/gpu-profiles/kernels-h200.json")
    c.set_defaults(run=_calibrate)


def _calibrate(args) -> int:
    from ..costs.devicespecs import DeviceSpecError, require_spec
    from .output import check_output

    try:
        spec = require_spec(args.kind)
    except DeviceSpecError as exc:
        raise MoplaceError(f"--kind: {exc}") from None
    out = check_output(args.output, force=args.force, flag="-o")
    kernels = _kernels(args.kernels) if args.kernels else None
    loaded = [_measured_graph(path, spec.kind) for path in args.graphs]  # all, before work
    from ..costs.calibfit import fit, fit_report, measured_samples

    sets, about, allsamples = [], [], []
    for path, graph, slot in loaded:
        features = graph.metadata.get("cost_features")
        traced = None
        if not isinstance(features, dict) or not features:
            t0 = time.perf_counter()
            features = _trace_features(path, graph)
            traced = time.perf_counter() - t0
        samples, missing = measured_samples(graph, slot, features)
        if not samples:
            raise MoplaceError(f"{path}: no measured op has cost features (none joined by name)")
        sets.append(samples)
        allsamples += samples
        about.append({"graph": str(path), "slot": slot, "ops": len(samples),
                      "unjoined": len(missing), "traced_s": traced})
    try:
        cal = fit(sets, spec.kind, spec.kind, kernels,
                  sources=[a["graph"] for a in about] + ([args.kernels] if args.kernels else []))
    except ValueError as exc:
        raise MoplaceError(f"calibrate: {exc}") from None
    report = fit_report(cal, allsamples, spec)
    cal = type(cal)(**{**cal.__dict__, "fit": report})
    cal.save(out)
    if args.json:
        from .. import strictjson

        print(strictjson.dumps({"kind": cal.kind, "output": str(out), "graphs": about,
                                "ops_measured": cal.ops_measured, "note": cal.note(),
                                "fit": report}))
        return 0
    for a in about:
        how = (f"; no cost features: traced its source again in {a['traced_s']:.1f} s and "
               f"joined by name" if a["traced_s"] is not None else "")
        print(f"{a['graph']}: {a['ops']} measured ops (times from slot {a['slot']!r}), "
              f"{a['unjoined']} timed ops left out{how}")
    print(f"estimate / measured per op, roofline ({spec.kind}'s datasheet) -> calibrated: "
          f"median [p10, p90], and the sums' ratio")
    for cls, r in report.items():
        b, a = r["before"], r["after"]
        print(f"  {cls:22s} {r['ops']:5d} ops {r['measured_s'] * 1e3:9.3f} ms  "
              f"{b['median']:6.2f} [{b['p10']:.2f}, {b['p90']:.2f}] sum {b['sum']:5.2f}  ->  "
              f"{a['median']:5.2f} [{a['p10']:.2f}, {a['p90']:.2f}] sum {a['sum']:5.2f}")
    print(f"wrote {out}: {cal.note()}")
    return 0


def _measured_graph(path, kind: str):
    """``(path, graph, slot)``: the graph at ``path`` and the compute slot holding its
    measured times (module docstring); a `MoplaceError` naming the file otherwise."""
    from ..io import load_graph

    try:
        graph = load_graph(str(path), optimizer=None)
    except MoplaceError:
        raise
    except Exception as exc:  # noqa: BLE001 - an importer's own error: one line, the file
        raise MoplaceError(f"{path}: not an op graph moplace reads ({exc})") from None
    measured = graph.metadata.get("measured")
    estimated = graph.metadata.get("estimated") or {}
    slot = measured.get("kind") if isinstance(measured, dict) else None
    if slot is None and kind not in estimated:
        slot = kind
    if slot is None or not any(slot in op.compute for op in graph.ops):
        raise MoplaceError(f"{path}: no measured op times (metadata.measured names no kind, "
                           f"and its {kind} times are estimates)")
    features = graph.metadata.get("cost_features")
    source = graph.metadata.get("source")
    if not features and not (isinstance(source, dict) and source.get("model")):
        raise MoplaceError(f"{path}: no cost features (metadata.cost_features) and no "
                           f"metadata.source to trace them from")
    return path, graph, slot


def _trace_features(path, graph) -> dict:
    """The cost features of ``graph``'s ops, from its source traced again (module docstring)."""
    from ..torch.convert import to_op_graph
    from ..torch.trace import trace_step

    src = graph.metadata["source"]
    att = graph.metadata.get("attention")
    attention = att.get("implementation") if isinstance(att, dict) else None
    model, batch = str(src["model"]), int(src.get("batch_size", 1))
    if model.startswith("hf:"):
        from ..torch.hf import load_hf_setup

        setup = load_hf_setup(model[3:], batch, src.get("seq_len"), src.get("dtype", "fp32"),
                              attention=attention or "eager")
    else:
        from ..torch.modelfile import load_setup

        setup = load_setup(model, batch)
    return to_op_graph(trace_step(setup), []).metadata["cost_features"]


def _kernels(path) -> dict:
    """The kernel benchmark file at ``path``, its sections' fields checked."""
    try:
        data = json.loads(open(path, encoding="utf-8").read())
    except (OSError, ValueError) as exc:
        raise MoplaceError(f"--kernels {path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or not any(k in data for k in KERNEL_SECTIONS):
        raise MoplaceError(f"--kernels {path}: no section of {', '.join(KERNEL_SECTIONS)}")
    for section, fields in KERNEL_SECTIONS.items():
        rows = data.get(section, [])
        if not isinstance(rows, list):
            raise MoplaceError(f"--kernels {path}: {section} must be a list")
        for i, row in enumerate(rows):
            for field in fields:
                v = row.get(field) if isinstance(row, dict) else None
                ok = isinstance(v, str) if field in ("dtype", "op") else (
                    isinstance(v, bool) if field == "fused" else
                    isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0)
                if not ok:
                    raise MoplaceError(f"--kernels {path}: {section}[{i}].{field} is missing "
                                       f"or of the wrong type")
    return data
