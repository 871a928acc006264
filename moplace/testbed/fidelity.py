"""A fidelity report, whichever front end's testbed ran it: per strategy the measured median
step and its spread, the simulated step as measured and corrected (`moplace.testbed.calibration`),
memory peaks per device; per model the median and worst relative error and Kendall's tau of
the ranking (`FidelityReport`). `candidate_strategies` are the strategies a report runs (the
baselines, recomputation, micro-batches, the list schedulers and points along an NSGA-II
front), and `run_strategies` runs them, and the calibration strategies before them, through a
front end's ``run(strategy) -> ApplyResult``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np

from ..core.baselines import BASELINES, baseline, partition_optimizer_state
from ..core.graph import ROLES
from ..core.recompute import recomputable_heads
from ..review.stats import kendall_tau, kendall_tau_resolved, relative_errors
from ..simulator.engine import simulate
from .calibration import calibration_strategies, corrected, corrected_peaks, fit, run_features

#: the list schedulers run for every model (FastT's and HEFT)
HEURISTICS = ("heft", "dpos", "m-etf", "os-dpos")
#: the micro-batches of the pipelined candidates (and a batch part the profile measures)
MICRO_BATCHES = 4


@dataclass
class FidelityRow:
    """One strategy: measured and simulated step (seconds), memory peaks per device (bytes)."""

    strategy: str
    source: str  # "baseline", "heuristic" or "nsga2"
    expressible: bool
    reason: str = ""
    splits: int = 0
    devices_used: int = 0
    steps: int = 0
    measured_s: float | None = None
    spread_s: tuple[float, float] | None = None
    simulated_s: float = 0.0
    corrected_s: float = 0.0
    measured_peak_bytes: list[int] = field(default_factory=list)
    simulated_peak_bytes: list[float] = field(default_factory=list)
    corrected_peak_bytes: list[float] = field(default_factory=list)
    scratch_bytes: list[int] = field(default_factory=list)
    same_as: list[str] = field(default_factory=list)  # other labels of the same strategy
    simulated_by_latency: list[float] = field(default_factory=list)  # calibration.LATENCY_GRID
    messages: int = 0  # transfers between devices, as simulated (calibration.run_features)
    collectives: int = 0
    #: how much slower the machine ran than when the ops were timed (a probe's ratio; the
    #: steps above are scaled by its inverse: the clock's median is ``measured_s`` times it;
    #: 1: not probed), see `moplace.testbed.result.ApplyResult.at_speed`
    machine_speed: float = 1.0


@dataclass
class FidelityReport:
    model: str
    batch: int
    testbed: str
    ops: int
    steps: int
    corrections: dict
    rows: list[FidelityRow]
    seconds: float = 0.0
    rounds: int = 1  # each strategy ran as many rounds (`run_strategies`)

    @property
    def measured(self) -> list[FidelityRow]:
        return [r for r in self.rows if r.expressible and r.measured_s]

    def summary(self) -> dict:
        """Median and worst |relative error| and Kendall tau, as measured and corrected; the
        median |relative error| of memory peaks (devices used)."""
        rows = self.measured
        meas = [r.measured_s for r in rows]
        out = {"model": self.model, "strategies": len(rows),
               "not_expressible": len(self.rows) - len(rows)}
        for key, attr in (("as_measured", "simulated_s"), ("corrected", "corrected_s")):
            pred = [getattr(r, attr) for r in rows]
            err = np.abs(relative_errors(pred, meas)) if rows else np.array([np.nan])
            tau, pairs = kendall_tau_resolved(pred, meas, [r.spread_s[0] for r in rows],
                                              [r.spread_s[1] for r in rows]) if rows else (np.nan, 0)
            out[key] = {"median_abs_error": float(np.median(err)), "worst_abs_error": float(np.max(err)),
                        "kendall_tau": kendall_tau(pred, meas) if len(rows) > 1 else float("nan"),
                        "kendall_tau_resolved": tau, "resolved_pairs": pairs}
        for key, attr in (("as_measured", "simulated_peak_bytes"), ("corrected", "corrected_peak_bytes")):
            mem = [(s, m) for r in rows for s, m in zip(getattr(r, attr), r.measured_peak_bytes)
                   if m > 0]
            out[key]["memory_median_abs_error"] = (float(np.median(np.abs(relative_errors(
                [s for s, _ in mem], [m for _, m in mem])))) if mem else float("nan"))
        spreads = [(r.spread_s[1] - r.spread_s[0]) / r.measured_s for r in rows if r.spread_s]
        out["median_spread"] = float(np.median(spreads)) if spreads else float("nan")
        out["data_parallel_speedup"] = _speedup(rows)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "FidelityReport":
        """A report from its `as_dict` (a saved JSON report), to tabulate or log again."""
        known = {f.name for f in fields(FidelityRow)}  # a field a report had once is left
        rows = [FidelityRow(**{**{k: v for k, v in r.items() if k in known},
                               "spread_s": tuple(r["spread_s"]) if r.get("spread_s") else None})
                for r in data["rows"]]
        return cls(data["model"], data["batch"], data["testbed"], data["ops"], data["steps"],
                   data["corrections"], rows, data.get("seconds", 0.0), data.get("rounds", 1))

    def refit(self) -> "FidelityReport":
        """This report with the corrections fitted again on its stored calibration runs (and
        every corrected step recomputed): after the fit itself changed."""
        k = self.corrections
        again = fit(k.get("runs", []), k["step_s"])
        if "as_measured_latency_s" in k:
            again["as_measured_latency_s"] = k["as_measured_latency_s"]
        rows = [replace(r, corrected_s=corrected(features(r), r.devices_used, again))
                if r.simulated_by_latency else r for r in self.rows]
        return replace(self, corrections=again, rows=rows)

    def as_dict(self) -> dict:
        return {"model": self.model, "batch": self.batch, "testbed": self.testbed, "ops": self.ops,
                "steps": self.steps, "corrections": self.corrections, "seconds": self.seconds,
                "rounds": self.rounds,
                "summary": self.summary(), "rows": [asdict(r) for r in self.rows]}


def features(row: FidelityRow) -> dict:
    """A row's `moplace.testbed.calibration.run_features`, as it keeps them."""
    return {"simulated_by_latency": row.simulated_by_latency, "messages": row.messages,
            "collectives": row.collectives}


def _speedup(rows) -> dict:
    """Single device over data parallel: measured, simulated as measured, and corrected."""
    by = {}
    for r in rows:
        for name in (r.strategy, *r.same_as):
            by.setdefault(name, r)
    one, dp = by.get("single"), by.get("data-parallel")
    if one is None or dp is None:
        return {}
    return {"measured": one.measured_s / dp.measured_s,
            "as_measured": one.simulated_s / dp.simulated_s,
            "corrected": one.corrected_s / dp.corrected_s}


def candidate_strategies(graph, cluster, *, front_points: int = 6, budget: int = 2000,
                         seed: int = 0, runnable=None) -> list[tuple[str, str, object]]:
    """``(label, source, strategy)``: every baseline, data parallelism with the optimizer state
    partitioned over the devices (`partition_optimizer_state`), single and layer-split with
    every other group recomputed (when any can be), single with `MICRO_BATCHES` micro-batches,
    data parallelism with as many (a hybrid pipeline), layer-split with as many under 1F1B
    and GPipe and under 1F1B with every other group recomputed, each list scheduler's result,
    and up to ``front_points`` points spread along an NSGA-II front (fastest to least
    memory) among those its testbed runs (``runnable(strategy)``, its front end's word;
    default `_runnable`)."""
    from ..optimize.driver import search
    from ..optimize.plugins import make_searcher
    from ..optimize.problem import Problem

    n = cluster.n_devices
    out = [(name, "baseline", baseline(name, graph, n)) for name in BASELINES]
    if n > 1 and np.any(graph.arrays.role == ROLES.index("update")):  # ZeRO-1, by parameter
        out.append(("data-parallel, optimizer state partitioned", "baseline",
                    partition_optimizer_state(graph, baseline("data-parallel", graph, n), n)))
    every_other = recomputable_heads(graph)[::2]
    if every_other.size:  # recomputation run for real (unsplit plans: the testbed's reach)
        out += [(f"{name}, every other group recomputed", "baseline",
                 baseline(name, graph, n).with_recompute(every_other))
                for name in ("single", "layer-split")]
    if np.any(np.isin(graph.arrays.role, (ROLES.index("forward"), ROLES.index("backward")))):
        # micro-batches run for real: gradient accumulation, pipelines and a hybrid (data
        # parallelism's batch parts cut into micro-batches)
        out += [("single, 4 micro-batches (gradient accumulation)", "baseline",
                 baseline("single", graph, n).with_options(micro_batches=MICRO_BATCHES))]
        if n > 1:
            out.append(("data-parallel, 4 micro-batches 1F1B (hybrid)", "baseline",
                        baseline("data-parallel", graph, n).with_options(
                            micro_batches=MICRO_BATCHES)))
        out += [(f"layer-split, 4 micro-batches {label}", "baseline",
                 baseline("layer-split", graph, n).with_options(micro_batches=MICRO_BATCHES,
                                                                schedule=k))
                for k, label in enumerate(("1F1B", "GPipe")) if n > 1]
        if n > 1 and every_other.size:  # the stash made smaller by recomputation
            out.append(("layer-split, 4 micro-batches 1F1B, every other group recomputed",
                        "baseline", baseline("layer-split", graph, n).with_options(
                            micro_batches=MICRO_BATCHES).with_recompute(every_other)))
    problem = Problem(graph, cluster)
    for name in HEURISTICS:
        result = search(problem, make_searcher(name), budget=50, seed=seed)
        if result.front:
            best = min(result.front, key=lambda p: p.values[0])
            out.append((name, "heuristic", best.strategy))
    if front_points > 0:
        result = search(problem, make_searcher("nsga2"), budget=budget, seed=seed)
        runs = runnable or (lambda strategy: _runnable(graph, strategy))
        front = sorted((p for p in result.front if runs(p.strategy)),
                       key=lambda p: tuple(p.values))
        picks = sorted({round(x) for x in np.linspace(0, len(front) - 1, min(front_points, len(front)))})
        out += [(f"nsga2-{k}", "nsga2", front[i].strategy) for k, i in enumerate(picks)]
    return out


def _runnable(graph, strategy) -> bool:
    """Whether the graph's testbed runs ``strategy``, where its front end says in advance
    (`moplace.core.runners.pytorch_refusal` for a PyTorch graph; a Keras graph runs any)."""
    from ..core.runners import pytorch_refusal

    return graph.metadata.get("format") != "pytorch" or pytorch_refusal(graph, strategy) is None


def run_strategies(graph, cluster, run, *, model: str, batch: int, testbed: str,
                   device_names: list, steps: int, step_s: float, calibration: int = 6,
                   front_points: int = 6, budget: int = 2000, seed: int = 0, rounds: int = 1,
                   zero_stages: tuple[int, ...] = (0,), runnable=None, say=None,
                   t0: float | None = None, round_pick: str = "least") -> FidelityReport:
    """Run ``calibration`` calibration strategies (`calibration_strategies`) and every
    candidate strategy (`candidate_strategies`) through ``run`` (a strategy ->
    `moplace.testbed.result.ApplyResult` of ``steps`` timed steps), fit the corrections on the
    calibration runs (``step_s``: the step's fixed cost measured when profiling) and simulate
    every candidate (``zero_stages``: the ZeRO stages the calibration strategies that split
    take in turn, `calibration_strategies`; ``runnable``: `candidate_strategies`');
    ``testbed`` says what ran them, ``device_names`` name the devices as the
    results' peaks do, ``say(stage, done, total)`` hears of each. With ``rounds`` > 1 every
    strategy runs once per round, the rounds one after the other over all of them, and keeps
    its least disturbed round (the least median step; ``round_pick="median"``: its median
    round, for steps scaled to the machine's speed, which are off either way): on a shared
    machine a burst of another job's load then falls on one round of many strategies, not on
    all of one's steps."""
    t0 = time.perf_counter() if t0 is None else t0
    say = say or (lambda *a: None)
    calib = calibration_strategies(graph, cluster.n_devices, calibration, seed, zero_stages)
    say("searching", 0, 1)
    candidates = candidate_strategies(graph, cluster, front_points=front_points, budget=budget,
                                      seed=seed, runnable=runnable)
    todo = [("calibration runs", s) for s in calib]
    keys: dict[bytes, int] = {}
    for label, _, strategy in candidates:  # the same strategy under another name runs once
        keys.setdefault(strategy.simulation_key, len(todo))
        if keys[strategy.simulation_key] == len(todo):
            todo.append((f"running {label}", strategy))
    results = _run_rounds(todo, run, rounds, say, round_pick)
    runs = [{"measured_s": results[k].measured_step_s, "devices_used": len(s.used_devices),
             **run_features(graph, cluster, s)}
            for k, (_, s) in enumerate(todo[:len(calib)]) if results[k].expressible]
    corrections = fit(runs, step_s)
    n = cluster.n_devices
    corrections["as_measured_latency_s"] = {f"{i}->{j}": float(cluster.latency[i, j])
                                            for i in range(n) for j in range(n) if i != j}
    rows: list[FidelityRow] = []
    seen: dict[bytes, FidelityRow] = {}
    for label, source, strategy in candidates:
        key = strategy.simulation_key
        if key in seen:
            seen[key].same_as.append(label)
            continue
        used = strategy.used_devices
        trace = simulate(graph, cluster, strategy)
        features = run_features(graph, cluster, strategy, trace)
        row = FidelityRow(label, source, True, splits=len(strategy.splits), devices_used=len(used),
                          steps=steps, simulated_s=trace.makespan,
                          corrected_s=corrected(features, len(used), corrections),
                          simulated_peak_bytes=[float(trace.peak_memory[d]) for d in used],
                          corrected_peak_bytes=corrected_peaks(graph, strategy, trace, used),
                          **features)
        result = results[keys[key]]
        if not result.expressible:
            row.expressible, row.reason = False, result.reason
        else:
            row.measured_s, row.spread_s = result.measured_step_s, result.spread_s
            row.machine_speed = result.machine_speed
            row.measured_peak_bytes = [result.peak_memory_bytes.get(device_names[d], 0)
                                       for d in used]
            row.scratch_bytes = [result.scratch_bytes.get(device_names[d], 0) for d in used]
        rows.append(row)
        seen[key] = row
    say("done", len(candidates), len(candidates))
    return FidelityReport(model, batch, testbed, len(graph.ops), steps, corrections, rows,
                          time.perf_counter() - t0, rounds)


def _run_rounds(todo, run, rounds: int, say, pick: str = "least") -> list:
    """Each strategy of ``todo`` (``(stage, strategy)``) run ``rounds`` times, round after round
    over all of them; per strategy the result of its least median step (``pick="median"``:
    its median round, the lower of the middle two of an even count); one that cannot run runs
    no more."""
    if pick not in ("least", "median"):
        raise ValueError(f"pick is 'least' or 'median', got {pick!r}")
    kept: list[list] = [[] for _ in todo]
    for r in range(max(rounds, 1)):
        for k, (stage, strategy) in enumerate(todo):
            if kept[k] and not kept[k][0].expressible:
                continue
            say(stage + (f" (round {r + 1} of {rounds})" if rounds > 1 else ""), k, len(todo))
            result = run(strategy)
            if result.expressible or not kept[k]:  # a round that fails later keeps the others
                kept[k].append(result)
    out = []
    for results in kept:
        ranked = sorted(results, key=lambda x: x.measured_step_s)
        out.append(ranked[0] if pick == "least" or not ranked[0].expressible
                   else ranked[(len(ranked) - 1) // 2])
    return out


def report_table(report: FidelityReport) -> str:
    """The report as a fixed-width text table (times in ms, memory in MiB)."""
    lines = [f"{report.model} (batch {report.batch}, {report.ops} ops) on {report.testbed}; "
             f"median of {report.steps} steps per strategy",
             f"{'strategy':<16} {'source':<9} {'splits':>6} {'dev':>3} {'measured ms':>11} "
             f"{'p10-p90 ms':>13} {'sim ms':>8} {'err':>7} {'corr ms':>8} {'err':>7} "
             f"{'mem MiB meas/sim/corr':>22}"]
    for r in report.rows:
        name = r.strategy + (f" (={','.join(r.same_as)})" if r.same_as else "")
        if not r.measured_s:
            lines.append(f"{name:<16} {r.source:<9} {r.splits:>6} {r.devices_used:>3} "
                         f"not run: {r.reason[:90]}")
            continue
        err = (r.simulated_s - r.measured_s) / r.measured_s
        cerr = (r.corrected_s - r.measured_s) / r.measured_s
        mem = "/".join(f"{max(v) / 2**20:.1f}" for v in (r.measured_peak_bytes, r.simulated_peak_bytes,
                                                          r.corrected_peak_bytes))
        lines.append(f"{name:<16} {r.source:<9} {r.splits:>6} {r.devices_used:>3} "
                     f"{r.measured_s * 1e3:>11.2f} {r.spread_s[0] * 1e3:>6.2f}-{r.spread_s[1] * 1e3:<6.2f} "
                     f"{r.simulated_s * 1e3:>8.2f} {err:>+7.1%} {r.corrected_s * 1e3:>8.2f} {cerr:>+7.1%} "
                     f"{mem:>22}")
    s = report.summary()
    a, c = s["as_measured"], s["corrected"]
    for name, v in (("as measured", a), ("corrected", c)):
        lines.append(f"{name}: median |err| {v['median_abs_error']:.1%}, worst {v['worst_abs_error']:.1%}, "
                     f"Kendall tau {v['kendall_tau']:.2f} ({v['kendall_tau_resolved']:.2f} over the "
                     f"{v['resolved_pairs']} pairs whose p10-p90 spreads do not overlap); memory "
                     f"peaks median |err| {v['memory_median_abs_error']:.1%}")
    dp = s["data_parallel_speedup"]
    if dp:
        lines.append(f"data-parallel speed-up over one device: measured {dp['measured']:.2f}x, "
                     f"simulated {dp['as_measured']:.2f}x as measured, {dp['corrected']:.2f}x corrected")
    k = report.corrections
    lines.append(f"corrections (fitted on {k.get('calibration_strategies', 0)} random strategies): "
                 f"link latency {(k['latency_s'] or 0) * 1e6:.0f} us, each extra worker "
                 f"{k['worker_s'] * 1e3:.2f} ms, each message {k.get('messages_s', 0) * 1e3:.2f} "
                 f"ms, each collective {k.get('collectives_s', 0) * 1e3:.2f} ms, each step "
                 f"{k['step_s'] * 1e3:.2f} ms; median "
                 f"p10-p90 spread of the measured steps {s['median_spread']:.1%}")
    speeds = [r.machine_speed for r in report.measured if r.machine_speed != 1.0]
    if speeds:
        lines.append(f"measured steps scaled to the machine's speed when the ops were timed (a "
                     f"probe, the one-device plan, run between strategies; each scaled by the two "
                     f"around it): the machine "
                     f"ran {np.median(speeds):.2f}x as slow at the median, {min(speeds):.2f}x "
                     f"to {max(speeds):.2f}x (a row's clock: its measured_s times its machine_speed)")
    return "\n".join(lines)


def summary_table(reports: list[FidelityReport]) -> str:
    """One line per model: median and worst |error|, Kendall tau (all pairs, and the pairs the
    measurement tells apart) and the memory peaks' median |error|, as measured and corrected,
    and the data-parallel speed-up; then the errors pooled over every model's runs."""
    lines = [f"{'':<14} {'':>5} {'':>5} {'':>4} | {'as measured':^34} | {'corrected':^34} | "
             f"{'data-parallel speed-up':^23} |",
             f"{'model':<14} {'batch':>5} {'ops':>5} {'runs':>4} | {'med':>6} {'worst':>7} {'tau':>5} "
             f"{'tau*':>5} {'mem':>6} | {'med':>6} {'worst':>7} {'tau':>5} {'tau*':>5} {'mem':>6} | "
             f"{'meas':>5} {'sim':>5} {'corr':>5} {'pairs*':>6} | {'spread':>6}"]
    for r in reports:
        s = r.summary()
        cells = []
        for key in ("as_measured", "corrected"):
            v = s[key]
            cells.append(f"{v['median_abs_error']:>6.1%} {v['worst_abs_error']:>7.1%} "
                         f"{v['kendall_tau']:>5.2f} {v['kendall_tau_resolved']:>5.2f} "
                         f"{v['memory_median_abs_error']:>6.1%}")
        dp = s["data_parallel_speedup"] or {"measured": np.nan, "as_measured": np.nan,
                                             "corrected": np.nan}
        lines.append(f"{r.model:<14} {r.batch:>5} {r.ops:>5} {s['strategies']:>4} | {cells[0]} | "
                     f"{cells[1]} | {dp['measured']:>5.2f} {dp['as_measured']:>5.2f} "
                     f"{dp['corrected']:>5.2f} {s['corrected']['resolved_pairs']:>6} | "
                     f"{s['median_spread']:>6.1%}")
    lines.append("tau*: Kendall tau over the pairs whose measured p10-p90 spreads do not overlap "
                 "(pairs*); speed-up: single device over data parallel")
    rows = [row for r in reports for row in r.measured]
    if rows:
        meas = [row.measured_s for row in rows]
        for name, key, attr in (("as measured", "as_measured", "simulated_s"),
                                ("corrected", "corrected", "corrected_s")):
            err = np.abs(relative_errors([getattr(row, attr) for row in rows], meas))
            taus = [r.summary()[key]["kendall_tau"] for r in reports]
            lines.append(f"all models, {name}: median |err| {np.median(err):.1%} over {len(rows)} "
                         f"runs, worst {np.max(err):.1%}; Kendall tau per model: median "
                         f"{np.nanmedian(taus):.2f}, lowest {np.nanmin(taus):.2f}")
    return "\n".join(lines)
