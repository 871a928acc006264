"""A cost model calibrated on measured kernels: per device kind, achieved rather than datasheet
throughput, applied to an op's cost features (`moplace.torch.features`).

- matmuls: achieved TFLOP/s by shape and dtype, interpolated among measured GEMMs (inverse
  distance over the four nearest, in log2 of the sorted dimensions and the batch: a weight
  gradient's ``768 × 8192 × 2304`` is near a forward ``8192 × 768 × 2304``; `_interpolate`);
- fused attention: forward and backward TFLOP/s by FlashAttention's FLOP convention
  (``4·b·h·s_q·s_kv·d``, halved when causal; the backward 2.5 times that), interpolated in
  log2 of (batch × heads, sequence, head size);
- memory-bound ops: achieved bandwidth by bytes, per aten op and dtype measured often enough,
  else per aten op, else per family (`moplace.torch.features.SUBCLASSES`), interpolated in
  log2 bytes;
- every kernel: at least ``floor_s``;
- the optimizer's update: ``t0 + state bytes / bandwidth`` over all trained parameters (PyTorch
  runs it as a few multi-tensor kernels), each update op its parameters' share.

A calibration file is strict JSON (`FORMAT`, `VERSION`): the kind, whether it is ``derived``
from another kind's (and how), how many measured ops it was fitted on, and
``split_overhead_s``, the cost of one part of a split op when it was measured (None: the
cost model's `DEFAULT_SPLIT_OVERHEAD_S`). `moplace calibrate` writes them (`calibfit`); the
ones shipped for a kind (`shipped`) are what ``moplace profile --estimate KIND`` uses.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import FormatError
from ..strictjson import dumps

FORMAT, VERSION = "moplace-calibration", 1
#: where the calibrations that ship with moplace live, one ``KIND.json`` each
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "calibration"
#: tensors an update reads and writes per element of its parameter (weight, gradient, state)
STATE_TENSORS = {"sgd": 3, "momentum": 5, "adam": 7}
#: neighbours an interpolated throughput is averaged over
NEIGHBOURS = 4
#: a GEMM with a dimension not a multiple of 8 (GPT-2's 50,257-word vocabulary) misses the
#: tensor cores' fast paths (95-148 TFLOP/s on the H200 where aligned neighbours reach 600):
#: in the interpolation it is this many squared octaves from aligned shapes
MISALIGNED = 16.0
#: the largest log2 of a size a calibration table may hold (a file's sizes are log2 values)
MAX_LOG2 = 64
#: log2 bytes from which a memory-bound kernel runs at about its plateau bandwidth (16 MiB)
PLATEAU_LOG2_BYTES = 24
#: H100 SXM's HBM3 bandwidth over H200's HBM3e (3.35 / 4.8 TB/s): what a derived H100 scales
H100_FROM_H200 = 3.35 / 4.8
_KEYS = {"format", "version", "kind", "derived", "measured_on", "ops_measured", "sources",
         "floor_s", "matmul", "attention", "memory", "optimizer", "split_overhead_s", "fit"}


@dataclass(frozen=True)
class Calibration:
    """A device kind's calibrated costs (module docstring); `seconds` costs an op."""

    kind: str
    measured_on: str
    ops_measured: int
    floor_s: float
    matmul: dict  # dtype -> [[log2 m, log2 n, log2 k, log2 batch, misaligned, TFLOP/s], ...]
    attention: dict  # "fwd"/"bwd" -> [[log2 bh, log2 s, log2 d, TFLOP/s], ...]
    memory: dict  # family, "op:NAME" or "op:NAME:DTYPE" -> [[log2 bytes, GB/s], ...]
    optimizer: dict  # {"t0_s": ..., "gbps": ...} over the state bytes of all parameters
    derived: dict | None = None  # {"from": kind, "bandwidth_scale": x, "compute_scale": y}
    sources: tuple = ()
    split_overhead_s: float | None = None
    fit: dict | None = None  # per class, estimate/measured before and after (calibfit)

    def note(self) -> str:
        """What estimates on this calibration are, in words (the graph's
        ``metadata.estimated``)."""
        if self.derived:
            return (f"calibrated estimate derived from {self.derived['from']}'s "
                    f"({self.ops_measured} ops measured on {self.measured_on}; bandwidth × "
                    f"{self.derived['bandwidth_scale']:.3f})")
        return f"calibrated estimate ({self.ops_measured} ops measured on {self.measured_on})"

    def seconds(self, f: dict) -> float:
        """Seconds of the op with cost features ``f`` on this kind (never NaN, never below
        zero; a kernel at least ``floor_s``)."""
        cls = f.get("cls")
        if cls == "optimizer":
            total = max(int(f.get("total") or f["numel"]), 1)
            tensors = STATE_TENSORS.get(str(f.get("op", "")).removesuffix("_update"), 7)
            state = tensors * f.get("element_size", 4) * total
            whole = self.optimizer["t0_s"] + state / (self.optimizer["gbps"] * 1e9)
            return float(whole * f["numel"] / total)
        if cls == "matmul":
            dims = [max(int(f[d]), 1) for d in ("m", "n", "k")]
            batch = max(int(f.get("batch", 1)), 1)
            flops = 2.0 * batch * dims[0] * dims[1] * dims[2]
            tflops = _interpolate(self._matmul_table(f.get("dtype", "float32")),
                                  [*np.log2(dims), math.log2(batch), misaligned(dims)],
                                  matmul=True)
            return max(self.floor_s, flops / (tflops * 1e12))
        if cls == "attention":
            flops = attention_flops(f)
            point = [math.log2(max(f["bh"], 1)), math.log2(max(f["s_q"], 1)),
                     math.log2(max(f["d"], 1))]
            table = self.attention.get("bwd" if f.get("bwd") else "fwd") or []
            if table:  # measured in bf16 (the SDPA benchmarks): FP32 at its datasheet ratio
                rate = _interpolate(table, point) * self._peak_ratio(f.get("dtype", "bfloat16"),
                                                                     "bfloat16")
                return max(self.floor_s, flops / (rate * 1e12))
            big = [12.0] * 3 + [0.0, 0.0]  # no attention measured: a large GEMM's rate
            return max(self.floor_s, flops / (_interpolate(self._matmul_table("bfloat16"), big,
                                                           matmul=True) * 1e12))
        nbytes = float(f.get("bytes", 0))
        return max(self.floor_s, _memory_seconds(self._memory_table(f, nbytes), nbytes,
                                                 self.floor_s))

    def _memory_table(self, f: dict, nbytes: float):
        """The most specific bandwidth table measured up to ``nbytes`` (within a factor of 4,
        or up to 16 MiB, where bandwidth has about reached its plateau): the op's in its
        dtype, the op's, its family's, element-wise ops'. A table measured on small tensors
        only says nothing of large ones: the factory ops of GPT-2 reached 8 KiB, and a Llama
        MLP's 1.9 GB ``fill`` at their 8 GB/s took 0.24 s instead of 0.6 ms."""
        names = (f"op:{f.get('op')}:{f.get('dtype')}", f"op:{f.get('op')}", f.get("sub", ""))
        tables = [self.memory[n] for n in names if self.memory.get(n)]
        reach = min(math.log2(max(nbytes, 1.0)) - 2, PLATEAU_LOG2_BYTES)
        fallback = self.memory["elementwise"]
        return next((t for t in tables if t[-1][0] >= reach), fallback)

    def _matmul_table(self, dtype: str) -> list:
        """The GEMM points of ``dtype``; for a dtype not measured, another's (a 16-bit one's
        for a 16-bit dtype, same tensor cores) scaled by the two dtypes' datasheet peaks on
        the measured kind (bf16's points for FP32 would be 15 times too fast on an H200)."""
        if dtype in self.matmul:
            return self.matmul[dtype]
        prefer = ("bfloat16", "float16") if dtype in ("float16", "bfloat16") else ("float32",)
        alt = next((a for a in prefer + tuple(sorted(self.matmul)) if a in self.matmul), None)
        if alt is None:
            raise FormatError(f"calibration for {self.kind}", "no matmul measurements")
        ratio = self._peak_ratio(dtype, alt)
        return [[*p[:-1], p[-1] * ratio] for p in self.matmul[alt]]

    def _peak_ratio(self, dtype: str, measured: str) -> float:
        """The datasheet peak of ``dtype`` over that of ``measured`` on the measured kind (1
        for two 16-bit dtypes, which share the tensor cores, or a kind without a spec)."""
        from .devicespecs import device_spec

        spec = device_spec(self.measured_on)
        if spec is None or {dtype, measured} <= {"bfloat16", "float16"}:
            return 1.0
        return spec.peak(dtype) / spec.peak(measured)

    def derive(self, kind: str, bandwidth_scale: float, compute_scale: float = 1.0,
               ) -> Calibration:
        """This calibration carried to ``kind``: throughputs × ``compute_scale``, bandwidths
        × ``bandwidth_scale`` (floor and fixed costs kept), labelled derived."""
        scale = lambda table: [[*p[:-1], p[-1] * compute_scale] for p in table]  # noqa: E731
        return Calibration(
            kind, self.measured_on, self.ops_measured, self.floor_s,
            {d: scale(t) for d, t in self.matmul.items()},
            {d: scale(t) for d, t in self.attention.items()},
            {s: [[x, bw * bandwidth_scale] for x, bw in t] for s, t in self.memory.items()},
            {**self.optimizer, "gbps": self.optimizer["gbps"] * bandwidth_scale},
            {"from": self.kind, "bandwidth_scale": bandwidth_scale,
             "compute_scale": compute_scale}, self.sources, None, None)

    def as_dict(self) -> dict:
        """The calibration file's content."""
        return {"format": FORMAT, "version": VERSION, "kind": self.kind,
                "derived": self.derived, "measured_on": self.measured_on,
                "ops_measured": self.ops_measured, "sources": list(self.sources),
                "floor_s": self.floor_s, "matmul": self.matmul, "attention": self.attention,
                "memory": self.memory, "optimizer": self.optimizer,
                "split_overhead_s": self.split_overhead_s, "fit": self.fit}

    def save(self, path) -> None:
        """Write the calibration file (strict JSON) to ``path``."""
        Path(path).write_text(dumps(self.as_dict(), indent=1, sort_keys=True) + "\n")


def misaligned(dims) -> int:
    """1 when a GEMM dimension is not a multiple of 8 elements (`MISALIGNED`), else 0."""
    return int(any(int(d) % 8 for d in dims))


def attention_flops(f: dict) -> float:
    """FLOPs of a fused attention call by FlashAttention's convention (module docstring)."""
    fwd = 4.0 * f["bh"] * f["s_q"] * f["s_kv"] * f["d"] / (2 if f.get("causal") else 1)
    return 2.5 * fwd if f.get("bwd") else fwd


def _memory_seconds(table, nbytes: float, floor: float) -> float:
    """Seconds to move ``nbytes`` by a bandwidth table (``[[log2 bytes, GB/s], ...]``,
    ascending): the bandwidth interpolated in log2 bytes; above the table the largest
    entry's bandwidth; below it a straight line from ``floor`` at no bytes to the smallest
    entry's time (a kernel's fixed cost plus its bytes at the rate that entry leaves)."""
    arr = np.asarray(table, dtype=float)
    x = math.log2(max(nbytes, 1.0))
    if x <= arr[0, 0]:
        first = float(2.0 ** arr[0, 0] / (arr[0, 1] * 1e9))
        fixed = min(floor, first)
        return fixed + (first - fixed) * max(nbytes, 0.0) / 2.0 ** arr[0, 0]
    gbps = math.exp(float(np.interp(x, arr[:, 0], np.log(arr[:, 1]))))
    return nbytes / (gbps * 1e9)


def _interpolate(table, point, matmul: bool = False) -> float:
    """Inverse-distance average of log TFLOP/s over the `NEIGHBOURS` nearest points of
    ``table`` to ``point`` (the point's own value where measured): within the measured range,
    so no extrapolation runs away. With ``matmul`` (points ``m, n, k, batch, misaligned``) the
    distance is taken between the sorted ``m, n, k``, plus a tenth of the unsorted one (the
    same shape read another way is near, the very shape nearest), plus `MISALIGNED` octaves
    squared between aligned and misaligned shapes."""
    arr = np.asarray(table, dtype=float)
    coords, values = arr[:, :len(point)], np.log(arr[:, -1])
    diff = coords - np.asarray(point)
    dist = (diff ** 2).sum(axis=1)
    if matmul:
        ordered = np.sort(coords[:, :3], axis=1) - np.sort(np.asarray(point[:3]))
        dist = ((ordered ** 2).sum(axis=1) + diff[:, 3] ** 2 + MISALIGNED * diff[:, 4] ** 2
                + 0.1 * (diff[:, :3] ** 2).sum(axis=1))
    dist = np.sqrt(dist)
    near = np.argsort(dist, kind="stable")[:NEIGHBOURS]
    if dist[near[0]] < 1e-9:
        return float(np.exp(values[near[0]]))
    w = 1.0 / dist[near] ** 2
    return float(np.exp((w * values[near]).sum() / w.sum()))


def load_calibration(path) -> Calibration:
    """The calibration file at ``path``; `FormatError` naming the file and field when it is
    not one."""
    try:
        data = json.loads(Path(path).read_text(), parse_constant=_no_constant)
    except (OSError, ValueError) as exc:
        raise FormatError(path, f"not a readable JSON file ({exc})") from None
    except RecursionError:  # json's decoder recurses per level of nesting
        raise FormatError(path, "nested too deeply to be a calibration file") from None
    return from_dict(data, str(path))


def _no_constant(name):
    raise ValueError(f"{name} is not a number of strict JSON")


def from_dict(data, where: str) -> Calibration:
    """A `Calibration` from a file's content, checked (`FormatError` naming ``where``)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise FormatError(where, f"not a moplace calibration file (format {FORMAT!r})")
    if data.get("version") != VERSION:
        raise FormatError(where, f"version {data.get('version')!r}, this moplace reads "
                          f"{VERSION}")
    unknown = set(data) - _KEYS
    if unknown:
        raise FormatError(where, f"unknown field {sorted(unknown)[0]!r}")
    for key in ("kind", "measured_on"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise FormatError(where, f"field {key!r} must be a device kind's name")
    _positive(data, "floor_s", where)
    _dict(data, "memory", where)
    if "elementwise" not in data["memory"]:
        raise FormatError(where, f"field 'memory' needs an 'elementwise' family")
    _positive(_dict(data, "optimizer", where), "t0_s", f"{where}: optimizer", zero=True)
    _positive(data["optimizer"], "gbps", f"{where}: optimizer")
    for field, width in (("matmul", 6), ("attention", 4), ("memory", 2)):
        for name, table in _dict(data, field, where).items():
            if not isinstance(table, list) or not table or not all(
                    isinstance(p, list) and len(p) == width
                    and all(isinstance(v, (int, float)) and math.isfinite(v) for v in p)
                    and all(abs(v) <= MAX_LOG2 for v in p[:-1]) and p[-1] > 0 for p in table):
                raise FormatError(where, f"{field}.{name} must be a non-empty list of "
                                  f"{width}-number points (log2 sizes within ±{MAX_LOG2}) with "
                                  f"a positive throughput last")
            if field == "memory" and any(a[0] >= b[0] for a, b in zip(table, table[1:])):
                raise FormatError(where, f"memory.{name} must be in ascending log2 bytes")
    if not data["matmul"]:
        raise FormatError(where, f"field 'matmul' has no dtype")
    split = data.get("split_overhead_s")
    if split is not None:
        _positive(data, "split_overhead_s", where, zero=True)
    derived = data.get("derived")
    if derived is not None and not (isinstance(derived, dict) and isinstance(
            derived.get("from"), str) and isinstance(derived.get("bandwidth_scale"), (int, float))):
        raise FormatError(where, f"field 'derived' must be null or say 'from' which kind "
                          f"and its 'bandwidth_scale'")
    ops = data.get("ops_measured")
    if not isinstance(ops, int) or ops < 0:
        raise FormatError(where, f"field 'ops_measured' must be a count")
    return Calibration(data["kind"], data["measured_on"], ops, float(data["floor_s"]),
                       data["matmul"], data["attention"], data["memory"], data["optimizer"],
                       derived, tuple(data.get("sources") or ()), split, data.get("fit"))


def _dict(data, key, where) -> dict:
    if not isinstance(data.get(key), dict):
        raise FormatError(where, f"field {key!r} must be an object")
    return data[key]


def _positive(data, key, where, zero: bool = False) -> None:
    v = data.get(key) if isinstance(data, dict) else None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or (
            v < 0 if zero else v <= 0):
        raise FormatError(where, f"field {key!r} must be a {'non-negative' if zero else 'positive'}"
                          f" number, got {v!r}")


@lru_cache(maxsize=None)
def shipped(kind: str) -> Calibration | None:
    """The calibration that ships with moplace for device kind ``kind``, or None."""
    path = SHIPPED / f"{kind}.json"
    return load_calibration(path) if path.is_file() else None
