"""How well the simulator predicts a PyTorch model's real steps on one device.

`run_torch_fidelity` takes a PyTorch model file or ``hf:`` configuration and a grid of shapes
(batch sizes, and sequence lengths for ``hf:``). At each shape it traces the step for the
device's kind, measures every op on the device (`moplace.torch.measure`) and runs the
one-device plans that need no plan executor for real: the whole batch at once (``single``)
and the batch as 2, 4 and 8 micro-batches accumulating their gradients. Each plan is then
simulated on one device of the measured kind twice, and the two are never mixed:

- **measured costs**: the graph's op times measured on the device at this shape;
- **estimated**: the same trace costed by ``moplace profile --estimate KIND`` (the roofline,
  or a calibration where one ships for the kind: the graph's ``metadata.estimated`` says
  which); none for a kind without a datasheet.

Both are evaluated with the optimizer state as torch keeps it (`moplace.torch.onedevice`:
``adam`` for AdamW on bf16 weights, no FP32 master copy), which the real peak holds. Recomputed
plans wait for a plan executor. The report gives per row the measured step (median, p10-p90)
and peak beside both predictions, and per prediction the median and worst |relative error| and
Kendall's tau of the steps, and the median and worst |error| of the peaks (GPU only: a CPU has
no allocator peak to compare).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from ..errors import MoplaceError
from ..progress import Report, Ticker
from ..review.stats import kendall_tau, relative_errors
from ._torch import torch

#: micro-batches of the one-device plans run for real (1: the single plan)
PLANS = (1, 2, 4, 8)
PREDICTIONS = (("measured", "simulated on measured op costs"),
               ("estimated", "simulated on estimated op costs"))


@dataclasses.dataclass
class TorchFidelityRow:
    """One plan at one shape: the real step and peak, and each prediction of them."""

    batch: int
    seq_len: int | None
    micro_batches: int
    measured_s: float | None = None
    spread_s: tuple | None = None
    measured_peak_bytes: int | None = None
    simulated_s: float | None = None  # on the measured op costs
    simulated_peak_bytes: float | None = None
    estimated_s: float | None = None  # on the estimated op costs
    estimated_peak_bytes: float | None = None
    reason: str = ""  # why it was not run

    @property
    def plan(self) -> str:
        """``single`` or ``k micro-batches``."""
        return "single" if self.micro_batches == 1 else f"{self.micro_batches} micro-batches"

    @property
    def shape(self) -> str:
        """``b8 s512`` (``b8`` for a model file)."""
        return f"b{self.batch}" + (f" s{self.seq_len}" if self.seq_len else "")


@dataclasses.dataclass
class TorchFidelityReport:
    """Every row, and where and how they were measured."""

    model: str
    kind: str
    device: str
    dtype: str
    optimizer: str
    estimate: str  # what the estimated op costs are, in words ("" when there are none)
    steps: int
    torch_version: str
    rows: list
    seconds: float = 0.0

    @property
    def measured(self) -> list:
        """The rows that ran."""
        return [r for r in self.rows if r.measured_s]

    def summary(self) -> dict:
        """Per prediction: median and worst |relative error| and Kendall's tau of the steps,
        median and worst |relative error| of the peaks (NaN where nothing compares)."""
        rows = self.measured
        out = {"model": self.model, "kind": self.kind, "runs": len(rows),
               "not_run": len(self.rows) - len(rows)}
        for key, _ in PREDICTIONS:
            pairs = [(getattr(r, f"{_attr(key)}_s"), r.measured_s) for r in rows
                     if getattr(r, f"{_attr(key)}_s")]
            peaks = [(getattr(r, f"{_attr(key)}_peak_bytes"), r.measured_peak_bytes)
                     for r in rows if r.measured_peak_bytes and getattr(r, f"{_attr(key)}_s")]
            out[key] = {**_errors(pairs, "step"), **_errors(peaks, "peak"),
                        "kendall_tau": (kendall_tau(*zip(*pairs)) if len(pairs) > 1
                                        else math.nan)}
        return out

    def as_dict(self) -> dict:
        """The report as JSON takes it (``rows`` with each plan's and shape's names)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name != "rows"}
        return {**fields, "summary": self.summary(),
                "rows": [{**dataclasses.asdict(r), "plan": r.plan, "shape": r.shape}
                         for r in self.rows]}

    @classmethod
    def from_dict(cls, data: dict) -> "TorchFidelityReport":
        """A report from its `as_dict` (a saved JSON report), to tabulate or log again."""
        names = {f.name for f in dataclasses.fields(TorchFidelityRow)}
        rows = [TorchFidelityRow(**{k: v for k, v in r.items() if k in names})
                for r in data["rows"]]
        fields = {f.name for f in dataclasses.fields(cls)} - {"rows"}
        return cls(**{k: data[k] for k in fields if k in data}, rows=rows)


def _attr(key: str) -> str:
    return "simulated" if key == "measured" else "estimated"


def _errors(pairs, what: str) -> dict:
    if not pairs:
        return {f"{what}_median_abs_error": math.nan, f"{what}_worst_abs_error": math.nan}
    err = np.abs(relative_errors([p for p, _ in pairs], [m for _, m in pairs]))
    return {f"{what}_median_abs_error": float(np.median(err)),
            f"{what}_worst_abs_error": float(np.max(err))}


def run_torch_fidelity(model: str, batches, seq_lens=(None,), *, device: str = "cpu",
                       dtype: str = "fp32", steps: int = 10, profile_steps: int = 3,
                       plans=PLANS, progress: Report | None = None) -> TorchFidelityReport:
    """Measure and simulate ``model``'s one-device ``plans`` at every batch of ``batches`` and
    sequence length of ``seq_lens`` (``hf:`` models; None: a model file's own) on ``device``
    (see the module docstring); the real steps are medians of ``steps`` runs, the op costs
    means of ``profile_steps``. ``progress(stage, done, total)`` hears of each stage."""
    from .device import device_info

    t0 = time.perf_counter()
    info = device_info(device)
    shapes = [(b, s) for s in seq_lens for b in batches]
    ticker = Ticker(progress, len(shapes))
    rows, estimate, optimizer = [], "", ""
    for batch, seq_len in shapes:
        name = f"batch {batch}" + (f", {seq_len} tokens" if seq_len else "")
        ticker.prefix = f"{name}: "
        try:
            got, note, optimizer = _one_shape(model, batch, seq_len, dtype, info, steps,
                                              profile_steps, plans, ticker)
            estimate = estimate or note
        except MoplaceError as exc:  # does not fit the device, at this shape only
            got = [TorchFidelityRow(batch, seq_len, k, reason=str(exc)) for k in plans]
        rows += got
        ticker.tick()
    return TorchFidelityReport(model, info.kind, info.name, dtype, optimizer, estimate, steps,
                               torch.__version__, rows, time.perf_counter() - t0)


def _setup(model: str, batch: int, seq_len, dtype: str):
    if model.startswith("hf:"):
        from .hf import load_hf_setup

        return load_hf_setup(model[3:], batch, seq_len, dtype)
    from .modelfile import load_setup

    return load_setup(model, batch)


def _one_shape(model, batch, seq_len, dtype, info, steps, profile_steps, plans, ticker):
    """The rows of one shape, what the estimates are, and the optimizer the real step keeps."""
    from ..core.presets import parse_cluster
    from ..costs.devicespecs import device_spec
    from .convert import to_op_graph
    from .device import cluster_toml
    from .measure import measure
    from .onedevice import as_torch_keeps_it, one_device
    from .trace import trace_step

    ticker.stage("tracing the step")
    setup = _setup(model, batch, seq_len, dtype)
    traced = trace_step(setup, info.kind)
    twin = trace_step(_setup(model, 2 * batch, seq_len, dtype), info.kind)
    measured = measure(setup, batch, traced, device=info.device, steps=profile_steps,
                       ticker=ticker, micro_batches=[k for k in plans if k > 1],
                       step_runs=steps)
    cluster = parse_cluster(cluster_toml(traced.name, info))
    graphs = {"measured": to_op_graph(traced, [], twin, measured)}
    if device_spec(info.kind) is not None:  # a kind with a datasheet: its estimate too
        graphs["estimated"] = to_op_graph(traced, [info.kind], twin)
    note = str((graphs.get("estimated") and graphs["estimated"].metadata.get("estimated", {})
                .get(info.kind)) or "")
    optimizer = ""
    for key in graphs:
        graphs[key], optimizer = as_torch_keeps_it(graphs[key])
    rows = []
    for k in plans:
        row = TorchFidelityRow(batch, seq_len, k)
        real = measured.plans.get(k)
        if real is None or isinstance(real, str):
            row.reason = real or "not run"
        elif batch % k:
            row.reason = f"a batch of {batch} does not make {k} equal micro-batches"
        else:
            ticker.stage(f"simulating {row.plan}")
            row.measured_s, row.spread_s = real.step_s, tuple(real.spread_s)
            row.measured_peak_bytes = real.peak_bytes
            row.simulated_s, row.simulated_peak_bytes = one_device(graphs["measured"], cluster, k)
            if "estimated" in graphs:
                row.estimated_s, row.estimated_peak_bytes = one_device(graphs["estimated"],
                                                                       cluster, k)
        rows.append(row)
    return rows, note, optimizer


def report_table(report: TorchFidelityReport) -> str:
    """The report as a fixed-width text table (times in ms, peaks in MiB)."""
    gpu = report.kind != "cpu"
    lines = [f"{report.model} on {report.device} (kind {report.kind}), {report.dtype}, torch "
             f"{report.torch_version}; real steps: median of {report.steps} "
             f"({'CUDA events' if gpu else 'wall clock'}); simulated on one {report.kind} "
             f"device with the optimizer state as torch keeps it ({report.optimizer or '?'}: "
             f"no FP32 master copy)",
             f"estimated op costs: {report.estimate or f'none (no datasheet for {report.kind})'}",
             f"{'shape':<10} {'plan':<16} {'measured ms':>11} {'p10-p90 ms':>15} "
             f"{'sim ms':>9} {'err':>7} {'est ms':>9} {'err':>7}  "
             f"{'peak MiB meas/sim/est' if gpu else 'peak MiB sim/est (CPU: none measured)'}"]
    for r in report.rows:
        if not r.measured_s:
            lines.append(f"{r.shape:<10} {r.plan:<16} not run: {r.reason[:110]}")
            continue
        est = (f"{r.estimated_s * 1e3:>9.2f} {r.estimated_s / r.measured_s - 1:>+7.1%}"
               if r.estimated_s else f"{'-':>9} {'':>7}")
        peaks = [r.measured_peak_bytes] if gpu else []
        peaks += [r.simulated_peak_bytes, r.estimated_peak_bytes]
        lines.append(f"{r.shape:<10} {r.plan:<16} {r.measured_s * 1e3:>11.2f} "
                     f"{r.spread_s[0] * 1e3:>7.2f}-{r.spread_s[1] * 1e3:<7.2f} "
                     f"{r.simulated_s * 1e3:>9.2f} {r.simulated_s / r.measured_s - 1:>+7.1%} "
                     f"{est}  {'/'.join('-' if v is None else f'{v / 2**20:.1f}' for v in peaks)}")
    s = report.summary()
    for key, name in PREDICTIONS:
        v = s[key]
        if math.isnan(v["step_median_abs_error"]):
            lines.append(f"{name}: none")
            continue
        peak = (f"; peaks median |err| {v['peak_median_abs_error']:.1%}, worst "
                f"{v['peak_worst_abs_error']:.1%}" if gpu else "")
        lines.append(f"{name}: steps median |err| {v['step_median_abs_error']:.1%}, worst "
                     f"{v['step_worst_abs_error']:.1%}, Kendall tau {v['kendall_tau']:.2f} over "
                     f"{s['runs']} runs{peak}")
    return "\n".join(lines)


def scatter_rows(report: TorchFidelityReport) -> list[dict]:
    """The rows as `moplace.review.figures.fidelity.fidelity_scatter` draws them: each run's
    measured step against the step simulated on measured costs (``simulated_s``) and on
    estimated ones (``corrected_s``: the figure's second panel)."""
    return [{"strategy": f"{r.shape} {r.plan}", "source": r.plan, "measured_s": r.measured_s,
             "spread_s": r.spread_s, "simulated_s": r.simulated_s,
             "corrected_s": r.estimated_s or 0.0} for r in report.measured]


def figure_panels(report: TorchFidelityReport) -> tuple:
    """The scatter's panels: measured op costs, and estimated ones where there are any."""
    names = dict(PREDICTIONS)
    return (("simulated_s", names["measured"]),) + (
        (("corrected_s", names["estimated"]),) if any(r.estimated_s for r in report.measured)
        else ())


def draw(report: TorchFidelityReport, path):
    """The scatter of ``report`` (`moplace.review.figures.fidelity`) to ``path``."""
    from ..review.figures.fidelity import fidelity_scatter

    return fidelity_scatter(scatter_rows(report), path, panels=figure_panels(report),
                            annotate=False, title=f"{report.model} on one {report.kind}: "
                            f"simulated vs measured step")


def log_torch_fidelity(report: TorchFidelityReport, tracking_uri: str | None = None,
                       experiment: str = "moplace-fidelity") -> str:
    """Log ``report`` to MLflow as the Keras report is (`moplace.review.fidelitylog`);
    returns the run id."""
    from ..review.fidelitylog import flat_metrics, log_report

    data = report.as_dict()
    rows = report.measured
    table = {"shape": [r.shape for r in rows], "plan": [r.plan for r in rows],
             "measured_ms": [r.measured_s * 1e3 for r in rows],
             "simulated_ms": [r.simulated_s * 1e3 for r in rows],
             "estimated_ms": [r.estimated_s * 1e3 if r.estimated_s else None for r in rows],
             "measured_peak_mib": [r.measured_peak_bytes / 2**20 if r.measured_peak_bytes
                                   else None for r in rows],
             "simulated_peak_mib": [r.simulated_peak_bytes / 2**20 for r in rows]}
    params = {"model": report.model, "kind": report.kind, "device": report.device,
              "dtype": report.dtype, "optimizer": report.optimizer, "steps": report.steps,
              "torch": report.torch_version, "estimate": report.estimate or "none",
              "shapes": " ".join(dict.fromkeys(r.shape for r in report.rows))}
    summary = data["summary"]
    return log_report(run_name=f"fidelity {report.model} on one {report.kind}",
                      tags={"model": report.model, "framework": "pytorch"},
                      text=report_table(report), params=params,
                      metrics={**flat_metrics(summary, dict(PREDICTIONS)), "runs": summary["runs"]},
                      table=table, data=data, figure=lambda path: draw(report, path),
                      tracking_uri=tracking_uri, experiment=experiment)
