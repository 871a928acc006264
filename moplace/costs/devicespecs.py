"""Peak compute and memory bandwidth of device kinds, for analytical op costs (`moplace.costs.analytic`).

Every figure comes from the vendor datasheet named in the entry's ``source``. Conventions:

* ``float32`` is the CUDA-core (non-tensor-core) peak: the same figure `cluster.KIND_SPEED` is
  derived from, so ``peak_flops["float32"] / 15.7e12`` equals ``kind_speed(kind)``.
* ``float16`` and ``bfloat16`` are **dense** tensor-core peaks, never the "with sparsity" figures
  (datasheets mark those with ``*``; dense is half of them). They apply to matmul/conv; other ops
  are memory bound, so using the tensor-core peak for them changes little. P100 has no tensor
  cores: its float16 figure is the packed-half2 CUDA-core peak.
* ``float8`` is the Hopper/Blackwell FP8 tensor-core dense peak (E4M3 and E5M2 alike), on the
  kinds that have one; `moplace.costs.fp8` scales matmuls by it.
* ``tfloat32`` is the Ampere/Hopper TF32 tensor-core dense peak. TensorFlow >= 2.4 runs float32
  matmul/conv in TF32 on those GPUs by default; pass ``dtype="tfloat32"`` to assume it.
* A dtype absent from a kind's table (bfloat16 on V100/P100, which have no bf16 arithmetic) falls
  back to the ``float32`` peak: the values are computed in float32 after conversion.
* ``mem_bandwidth_Bps`` is the peak device-memory bandwidth, bytes/s (1 GB/s = 1e9 B/s).

Also here: bytes per element of each dtype (`dtype_size`) and `roofline_seconds`, the time a
device kind needs for given FLOPs and bytes; `moplace.costs.analytic` counts those per op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..errors import ClusterError, GraphError

T = 1e12  # TFLOPS -> FLOP/s
G = 1e9   # GB/s -> B/s

#: Bytes per element by dtype name; resource/variant handles move no tensor data themselves.
#: "tfloat32" is float32 in memory; the name only selects the TF32 tensor-core peak.
DTYPE_BYTES: Mapping[str, int] = MappingProxyType({
    "bool": 1, "int8": 1, "uint8": 1, "qint8": 1, "quint8": 1, "int16": 2, "uint16": 2,
    "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4, "float32": 4, "tfloat32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "complex64": 8, "complex128": 16, "resource": 0,
    "variant": 0})
# TF's enum spellings (DT_FLOAT, DT_HALF...) lower-cased without "dt_", and "_ref" (TF1 variables)
_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64"}

# ASSUMPTIONS, not measurements; override per call. Large cuBLAS/cuDNN GEMMs reach 60-90% of peak,
# but the small and odd shapes of per-layer training ops far less: one half is a middle guess.
DEFAULT_COMPUTE_EFFICIENCY = 0.5
# Streaming kernels reach ~80-85% of datasheet bandwidth (Jia et al. 2018, "Dissecting the NVIDIA
# Volta GPU Architecture via Microbenchmarking": ~750 of 900 GB/s on V100); TF's elementwise
# kernels with broadcasting or strided layouts less.
DEFAULT_MEMORY_EFFICIENCY = 0.7
# A CUDA kernel launch plus TF executor dispatch costs microseconds: no kernel is faster.
DEFAULT_MIN_SECONDS = 2e-6


class DeviceSpecError(ClusterError):
    """A device kind has no `DeviceSpec`, or a roofline parameter is out of range."""


@dataclass(frozen=True)
class DeviceSpec:
    """Peak FLOP/s per dtype name and peak memory bandwidth (B/s) of one device kind."""

    kind: str
    peak_flops: Mapping[str, float] = field(hash=False)
    mem_bandwidth_Bps: float
    source: str

    def __post_init__(self):
        object.__setattr__(self, "peak_flops", MappingProxyType(dict(self.peak_flops)))
        if "float32" not in self.peak_flops:
            raise DeviceSpecError(f"device spec {self.kind!r}: needs a float32 peak")
        figures = [*self.peak_flops.values(), self.mem_bandwidth_Bps]
        if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in figures):
            raise DeviceSpecError(f"device spec {self.kind!r}: figures must be finite and > 0")

    def peak(self, dtype: str = "float32") -> float:
        """Peak FLOP/s for ``dtype``; the float32 peak when the kind lists no figure for it."""
        return self.peak_flops.get(dtype, self.peak_flops["float32"])

    @property
    def mfu_peak(self) -> float:
        """The dense 16-bit peak model FLOPs utilization is counted against, as the published
        tables count it: BF16's, else FP16's (0.0: the kind lists neither)."""
        return self.peak_flops.get("bfloat16") or self.peak_flops.get("float16") or 0.0


def _spec(kind: str, source: str, bandwidth_GBps: float, **tflops: float) -> DeviceSpec:
    return DeviceSpec(kind, {k: v * T for k, v in tflops.items()}, bandwidth_GBps * G, source)


#: Device kinds, named as in `cluster.KIND_SPEED`.
DEVICE_SPECS: Mapping[str, DeviceSpec] = MappingProxyType({s.kind: s for s in (
    _spec("V100", "NVIDIA Tesla V100 datasheet (SXM2 16GB): FP64 7.8, FP32 15.7, "
          "tensor 125 TFLOPS (Volta has no sparsity); HBM2 900 GB/s",
          900, float64=7.8, float32=15.7, float16=125),
    _spec("V100-PCIe", "NVIDIA Tesla V100 datasheet (PCIe): FP64 7, FP32 14, tensor 112 TFLOPS; "
          "HBM2 900 GB/s", 900, float64=7.0, float32=14.0, float16=112),
    _spec("P100", "NVIDIA Tesla P100 datasheet (SXM2/NVLink): FP64 5.3, FP32 10.6, FP16 21.2 "
          "TFLOPS (no tensor cores); CoWoS HBM2 732 GB/s",
          732, float64=5.3, float32=10.6, float16=21.2),
    _spec("P100-PCIe", "NVIDIA Tesla P100 datasheet (PCIe, 16GB): FP64 4.7, FP32 9.3, FP16 18.7 "
          "TFLOPS (no tensor cores); HBM2 732 GB/s (549 GB/s for the 12GB card)",
          732, float64=4.7, float32=9.3, float16=18.7),
    _spec("A100", "NVIDIA A100 Tensor Core GPU datasheet (40GB SXM4): FP64 9.7, FP32 19.5, "
          "TF32 156, BF16 312, FP16 312 TFLOPS dense; HBM2 1,555 GB/s",
          1555, float64=9.7, float32=19.5, tfloat32=156, bfloat16=312, float16=312),
    # The 80GB SXM4 A100 computes as the 40GB one; only its memory (HBM2e) is faster.
    _spec("A100-80GB", "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM4): FP64 9.7, FP32 19.5, "
          "TF32 156, BF16 312, FP16 312 TFLOPS dense; HBM2e 2,039 GB/s",
          2039, float64=9.7, float32=19.5, tfloat32=156, bfloat16=312, float16=312),
    _spec("H100", "NVIDIA H100 Tensor Core GPU datasheet (SXM5 80GB): FP64 34, FP32 67 TFLOPS; "
          "TF32 989, BF16/FP16 1,979, FP8 3,958 TFLOPS with sparsity, halved here for dense; "
          "HBM3 3.35 TB/s", 3350, float64=34, float32=67, tfloat32=494.5, bfloat16=989.5,
          float16=989.5, float8=1979),
    _spec("H100-PCIe", "NVIDIA H100 Tensor Core GPU datasheet (PCIe 80GB): FP64 26, FP32 51 "
          "TFLOPS; TF32 756, BF16/FP16 1,513, FP8 3,026 TFLOPS with sparsity, halved here for "
          "dense; HBM2e 2 TB/s", 2000, float64=26, float32=51, tfloat32=378, bfloat16=756.5,
          float16=756.5, float8=1513),
    # H200 is the H100's GH100 die with HBM3e: the same compute figures, more and faster memory.
    _spec("H200", "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM 141GB): FP64 34, FP32 67 "
          "TFLOPS; TF32 989, BF16/FP16 1,979, FP8 3,958 TFLOPS with sparsity, halved here for "
          "dense; HBM3e 4.8 TB/s", 4800, float64=34, float32=67, tfloat32=494.5, bfloat16=989.5,
          float16=989.5, float8=1979),
    # NVIDIA's current HGX B200 per-GPU column (1,000 W); early 2024 revisions of the same
    # table said FP64 40 and FP32 80 TFLOPS. The DGX B200 datasheet gives 64 TB/s HBM3e for its
    # eight GPUs (8 TB/s each); we keep the per-GPU 7.7 TB/s of the table the FLOPs come from.
    _spec("B200", "NVIDIA HGX B200 specifications (nvidia.com HGX platform page, per GPU): "
          "FP64 37, FP32 75 TFLOPS; TF32 2.2, FP16/BF16 4.5, FP8 9 PFLOPS with sparsity, "
          "halved here for dense; 180GB HBM3e 7.7 TB/s", 7700, float64=37, float32=75,
          tfloat32=1100, bfloat16=2250, float16=2250, float8=4500),
    # An ASSUMPTION for host-side ops, not a datasheet device: one Xeon Gold 6148 socket (Intel
    # ARK): 20 cores x 2.2 GHz x 32 FP32 FLOP/cycle (2 AVX-512 FMA units) = 1.41 TFLOPS, as in
    # KIND_SPEED; 6 channels of DDR4-2666 x 8 bytes = 128 GB/s. Skylake has no fp16/bf16
    # arithmetic, so those dtypes use the float32 peak.
    _spec("cpu", "generic assumption: one Intel Xeon Gold 6148 socket (Intel ARK: 20 cores, "
          "2.2 GHz AVX-512, 6x DDR4-2666), 1.41 TFLOPS FP32, 128 GB/s",
          128, float64=0.705, float32=1.41),
)})
_BY_LOWER = {k.lower(): v for k, v in DEVICE_SPECS.items()}


def device_spec(kind: str) -> DeviceSpec | None:
    """The `DeviceSpec` of device kind ``kind`` (case-insensitive), or None when unknown."""
    return _BY_LOWER.get(str(kind).lower())


def require_spec(kind: str) -> DeviceSpec:
    """The `DeviceSpec` of ``kind``; raises `DeviceSpecError` listing the known kinds."""
    spec = device_spec(kind)
    if spec is None:
        raise DeviceSpecError(f"no device spec for kind {kind!r} "
                              f"(known: {', '.join(DEVICE_SPECS)})")
    return spec


def normalize_dtype(name) -> str:
    """The canonical dtype name ("DT_FLOAT" -> "float32"); GraphError when unknown."""
    key = str(name).lower().removeprefix("dt_").removesuffix("_ref")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise GraphError(f"unknown dtype {name!r} (known: {', '.join(DTYPE_BYTES)})")
    return key


def dtype_size(name: str) -> int:
    """Bytes per element of dtype ``name`` ("float32", "DT_HALF", "float32_ref"...)."""
    return DTYPE_BYTES[normalize_dtype(name)]


def tensor_bytes(tensors) -> int:
    """Bytes of ``(shape, dtype)`` pairs (dtype names already canonical)."""
    return sum(math.prod(shape) * DTYPE_BYTES[dtype] for shape, dtype in tensors)


def roofline_seconds(flops: float, nbytes: float, spec: DeviceSpec, dtype: str = "float32", *,
                     compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY,
                     memory_efficiency: float = DEFAULT_MEMORY_EFFICIENCY,
                     min_seconds: float = DEFAULT_MIN_SECONDS) -> float:
    """Seconds for ``flops`` and ``nbytes`` on ``spec``: ``max(flops / (peak(dtype) * ce),
    nbytes / (bandwidth * me), min_seconds)``. ``ce`` and ``me`` are the achieved fractions of
    peak compute and bandwidth, assumptions (see the DEFAULT_* constants); ``min_seconds``
    models kernel launch overhead. Raises `DeviceSpecError` for out-of-range arguments.
    """
    for name, v in (("compute_efficiency", compute_efficiency),
                    ("memory_efficiency", memory_efficiency)):
        if not 0 < v <= 1:
            raise DeviceSpecError(f"{name} must be in (0, 1], got {v!r}")
    if not (min_seconds >= 0 and flops >= 0 and nbytes >= 0):
        raise DeviceSpecError("flops, nbytes and min_seconds must be >= 0")
    peak = spec.peak(normalize_dtype(dtype))
    return max(flops / (peak * compute_efficiency),
               nbytes / (spec.mem_bandwidth_Bps * memory_efficiency), min_seconds)


def kind_of_gpu(name: str, memory_bytes: int | None = None) -> str:
    """The device kind of a GPU from the name its driver gives (``torch.cuda.get_device_name``,
    TensorFlow's ``device_name``) and, where known, its memory: ``"NVIDIA H100 80GB HBM3"`` ->
    ``H100``, ``"NVIDIA H100 PCIe"`` -> ``H100-PCIe``, ``"NVIDIA A100-SXM4-40GB"`` -> ``A100``,
    ``"NVIDIA A100-SXM4-80GB"`` or an A100 with over 48 GB -> ``A100-80GB``, ``"NVIDIA H200"``
    -> ``H200``, ``"NVIDIA B200"`` -> ``B200``, ``"Tesla V100-PCIE-32GB"`` -> ``V100-PCIe``.

    A GPU none of `DEVICE_SPECS` describes is a kind of its own, its name less a leading
    "NVIDIA"/"Tesla" (``"NVIDIA GeForce RTX 4090"`` -> ``GeForce RTX 4090``; the H100 NVL,
    whose figures are neither the SXM's nor the PCIe card's, -> ``H100 NVL``): its measured
    times stand as they are, and no roofline estimate is made for it."""
    import re

    text = re.sub(r"^(NVIDIA|Tesla)\s+", "", str(name).strip(), flags=re.I) or "gpu"
    upper = text.upper()
    words = set(re.split(r"[^A-Z0-9]+", upper))
    if "H100" in words and "NVL" in words:
        return text
    if "H200" in words:  # the H200 NVL card too: the same die and HBM3e, a lower power limit
        return "H200"
    if "B200" in words and not upper.startswith("GB"):  # GB200's GPU is no HGX B200
        return "B200"
    if "A100" in words:
        big = "80GB" in words or (memory_bytes is not None and memory_bytes > 48 * 2**30)
        return "A100-80GB" if big else "A100"
    for family in ("H100", "V100", "P100"):
        if family in words:
            return f"{family}-PCIe" if "PCIE" in words else family
    return text
