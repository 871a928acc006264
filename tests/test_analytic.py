"""Analytical op costs: hand-computed FLOPs and bytes, the roofline, and the device table."""

from __future__ import annotations

import pytest

from moplace.core.cluster import KIND_SPEED, kind_speed
from moplace.costs.analytic import (
    OpShape,
    dtype_size,
    estimate_seconds,
    known_type,
    op_bytes,
    op_flops,
    roofline_seconds,
)
from moplace.costs.devicespecs import DEVICE_SPECS, DeviceSpecError, device_spec
from moplace.errors import GraphError, MoplaceError

F32, F16 = "float32", "float16"


def op(type_, inputs=(), outputs=(), **attrs):
    """An OpShape from ``[(shape, dtype)]`` lists."""
    return OpShape(type_, tuple(inputs), tuple(outputs), attrs)


# --- matmul ------------------------------------------------------------------------------------

@pytest.mark.parametrize("ta, tb, a, b", [
    (False, False, (64, 128), (128, 256)),
    (True, False, (128, 64), (128, 256)),
    (False, True, (64, 128), (256, 128)),
    (True, True, (128, 64), (256, 128)),
])
def test_matmul_transposes(ta, tb, a, b):
    m = op("MatMul", [(a, F32), (b, F32)], [((64, 256), F32)], transpose_a=ta, transpose_b=tb)
    assert op_flops(m) == 2 * 64 * 256 * 128


def test_matmul_inner_dims_must_match():
    with pytest.raises(GraphError, match="inner dims"):
        op_flops(op("MatMul", [((64, 128), F32), ((64, 256), F32)]))


def test_batch_matmul_broadcasts_batch_dims():
    # (2, 1) and (5,) broadcast to (2, 5): 10 products of (8x16) @ (16x4)
    m = op("BatchMatMulV2", [((2, 1, 8, 16), F32), ((5, 16, 4), F32)], [((2, 5, 8, 4), F32)])
    assert op_flops(m) == 2 * 10 * 8 * 4 * 16


def test_batch_matmul_adjoints():
    m = op("BatchMatMulV3", [((3, 16, 8), F32), ((3, 4, 16), F32)], adj_x=True, adj_y=True)
    assert op_flops(m) == 2 * 3 * 8 * 4 * 16
    with pytest.raises(GraphError, match="broadcast"):
        op_flops(op("BatchMatMul", [((2, 8, 16), F32), ((3, 16, 4), F32)]))


def test_einsum_with_ellipsis():
    e = op("Einsum", [((2, 3, 4), F32), ((4, 5), F32)], [((2, 3, 5), F32)],
           equation=b"...k,kn->...n")  # TF attrs may arrive as bytes
    assert op_flops(e) == 2 * 2 * 3 * 4 * 5
    attention = op("Einsum", [((8, 128, 12, 64), F32), ((8, 128, 12, 64), F32)],
                   equation="aecd,abcd->acbe")
    assert op_flops(attention) == 2 * 8 * 128 * 128 * 12 * 64


# --- convolutions ------------------------------------------------------------------------------

X_NHWC, X_NCHW, FILTER = ((8, 32, 32, 3), F32), ((8, 3, 32, 32), F32), ((3, 3, 3, 16), F32)
CONV_FLOPS_SAME_S2 = 2 * 8 * 16 * 16 * 16 * 3 * 3 * 3  # N*Ho*Wo*Cout * Kh*Kw*Cin, times 2


@pytest.mark.parametrize("x, y, fmt, padding, stride, expected", [
    (X_NHWC, (8, 16, 16, 16), "NHWC", "SAME", 2, CONV_FLOPS_SAME_S2),
    (X_NCHW, (8, 16, 16, 16), "NCHW", "SAME", 2, CONV_FLOPS_SAME_S2),
    (X_NHWC, (8, 30, 30, 16), "NHWC", "VALID", 1, 2 * 8 * 30 * 30 * 16 * 27),
    (X_NCHW, (8, 16, 15, 15), "NCHW", "VALID", 2, 2 * 8 * 15 * 15 * 16 * 27),
])
def test_conv2d(x, y, fmt, padding, stride, expected):
    strides = [1, stride, stride, 1] if fmt == "NHWC" else [1, 1, stride, stride]
    c = op("Conv2D", [x, FILTER], [(y, F32)], data_format=fmt, padding=padding, strides=strides)
    assert op_flops(c) == expected


def test_conv2d_grouped_and_layout_checked():
    # 4 groups: filter in-channels = 32 / 4
    g = op("Conv2D", [((1, 8, 8, 32), F32), ((3, 3, 8, 64), F32)], [((1, 8, 8, 64), F32)])
    assert op_flops(g) == 2 * 8 * 8 * 64 * 3 * 3 * 8
    with pytest.raises(GraphError, match="channels"):  # NCHW shapes under the NHWC default
        op_flops(op("Conv2D", [X_NCHW, FILTER], [((8, 16, 16, 16), F32)]))


def test_conv2d_backprops_cost_the_forward():
    sizes, dy = ((4,), "int32"), ((8, 16, 16, 16), F32)
    bi = op("Conv2DBackpropInput", [sizes, FILTER, dy], [X_NHWC], strides=[1, 2, 2, 1])
    bf = op("Conv2DBackpropFilter", [X_NHWC, sizes, dy], [FILTER], strides=[1, 2, 2, 1])
    assert op_flops(bi) == op_flops(bf) == CONV_FLOPS_SAME_S2


def test_depthwise_conv_and_backprops():
    x, f, y = ((4, 28, 28, 32), F32), ((3, 3, 32, 2), F32), ((4, 26, 26, 64), F32)
    expected = 2 * 4 * 26 * 26 * 64 * 3 * 3  # per output element: one 3x3 window, no Cin sum
    sizes = ((4,), "int32")
    assert op_flops(op("DepthwiseConv2dNative", [x, f], [y], padding="VALID")) == expected
    assert op_flops(op("DepthwiseConv2dNativeBackpropInput", [sizes, f, y], [x])) == expected
    assert op_flops(op("DepthwiseConv2dNativeBackpropFilter", [x, sizes, y], [f])) == expected


# --- pooling, normalization, elementwise ----------------------------------------------------------

def test_pooling_and_grads():
    x, y = ((8, 32, 32, 16), F32), ((8, 16, 16, 16), F32)
    k = dict(ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1])
    expected = 8 * 16 * 16 * 16 * 4  # one compare/add per window element per output
    assert op_flops(op("MaxPool", [x], [y], **k)) == expected
    assert op_flops(op("AvgPool", [x], [y], **k)) == expected
    assert op_flops(op("MaxPoolGrad", [x, y, y], [x], **k)) == expected
    assert op_flops(op("AvgPoolGrad", [((4,), "int32"), y], [x], **k)) == expected
    with pytest.raises(GraphError, match="ksize"):
        op_flops(op("MaxPool", [x], [y]))


def test_batch_norm_softmax_reductions():
    x = ((8, 4, 4, 16), F32)
    c = ((16,), F32)
    n = 8 * 4 * 4 * 16
    assert op_flops(op("FusedBatchNormV3", [x, c, c, c, c], [x, c, c])) == 5 * n
    assert op_flops(op("FusedBatchNormV3", [x, c, c, c, c], [x], is_training=False)) == 2 * n
    assert op_flops(op("FusedBatchNormGradV3", [x, x, c, c, c], [x, c, c])) == 9 * n
    assert op_flops(op("Softmax", [((32, 10), F32)], [((32, 10), F32)])) == 8 * 320
    assert op_flops(op("Sum", [x, ((1,), "int32")], [((8, 16), F32)])) == n
    assert op_flops(op("BiasAddGrad", [x], [c])) == n


def test_elementwise_per_output_element():
    a, bias, out = ((1024, 1024), F32), ((1024,), F32), ((1024, 1024), F32)
    assert op_flops(op("AddV2", [a, bias], [out])) == 1024 * 1024
    assert op_flops(op("Exp", [a], [out])) == 4 * 1024 * 1024
    assert op_flops(op("AddN", [a, a, a], [out])) == 2 * 1024 * 1024


def test_zero_cost_and_unknown_types():
    a = ((1000,), F32)
    for t in ("Reshape", "Identity", "Const", "ReadVariableOp", "Shape", "NoOp"):
        assert known_type(t) and op_flops(op(t, [a], [a])) == 0 and op_bytes(op(t, [a], [a])) == 0
    assert op_flops(op("Transpose", [a], [a])) == 0 and op_bytes(op("Transpose", [a], [a])) == 8000
    assert not known_type("MyCustomOp")
    assert op_flops(op("MyCustomOp", [a], [a, ((10,), F32)])) == 1010  # 1 per output element


# --- bytes -------------------------------------------------------------------------------------

def test_bytes():
    a, bias = ((1024, 1024), F32), ((1024,), F32)
    assert op_bytes(op("AddV2", [a, bias], [a])) == 4 * (2 * 1024 * 1024 + 1024)
    assert op_bytes(op("Cast", [((1000,), F32)], [((1000,), F16)])) == 4000 + 2000
    sl = op("StridedSlice", [a] + [((2,), "int32")] * 3, [((10, 1024), F32)])
    assert op_bytes(sl) == 2 * 10 * 1024 * 4  # reads only the slice it writes
    assert op_bytes(op("ZerosLike", [a], [a])) == 1024 * 1024 * 4


def test_optimizer_applies():
    var, scalar, grad = ((), "resource"), ((), F32), ((100,), F32)
    mom = op("ResourceApplyKerasMomentum", [var, var, scalar, grad, scalar])
    assert op_flops(mom) == 4 * 100
    assert op_bytes(mom) == 100 * 4 * (2 * 2 + 1)  # var, accum read+written; grad read
    adam = op("ResourceApplyAdam", [var, var, var] + [scalar] * 6 + [grad])
    assert op_flops(adam) == 12 * 100 and op_bytes(adam) == 100 * 4 * 7
    gd = op("ResourceApplyGradientDescent", [var, scalar, grad], param_elements=1000,
            param_dtype="float16")
    assert op_flops(gd) == 2 * 1000 and op_bytes(gd) == 1000 * 2 * 3


def test_dtype_sizes():
    assert dtype_size("float16") == dtype_size("bfloat16") == dtype_size("DT_HALF") == 2
    assert dtype_size("float32") == dtype_size("DT_FLOAT") == dtype_size("float32_ref") == 4
    assert dtype_size("int64") == dtype_size("float64") == 8
    assert dtype_size("int32") == 4 and dtype_size("bool") == dtype_size("uint8") == 1
    assert dtype_size("resource") == 0
    with pytest.raises(GraphError, match="unknown dtype"):
        dtype_size("float8_e4m3")


def test_opshape_needs_concrete_dims():
    with pytest.raises(GraphError, match="known dims"):
        OpShape("Add", (((None, 3), F32),))
    with pytest.raises(GraphError, match="known dims"):
        OpShape("Add", (((-1, 3), F32),))


# --- roofline ------------------------------------------------------------------------------------

V100 = DEVICE_SPECS["V100"]


def test_big_matmul_is_compute_bound_on_v100():
    n = 4096
    mm = op("MatMul", [((n, n), F32), ((n, n), F32)], [((n, n), F32)])
    flops, nbytes = 2 * n**3, 3 * n * n * 4
    assert op_flops(mm) == flops and op_bytes(mm) == nbytes
    expected = flops / (15.7e12 * 0.5)
    assert flops / (15.7e12 * 0.5) > nbytes / (900e9 * 0.7)
    assert estimate_seconds(mm, "V100") == pytest.approx(expected, rel=1e-12)
    half = op("MatMul", [((n, n), F16), ((n, n), F16)], [((n, n), F16)])
    assert estimate_seconds(half, "v100") == pytest.approx(flops / (125e12 * 0.5), rel=1e-12)


def test_big_add_is_memory_bound_on_v100():
    shape = ((1 << 24,), F32)
    add = op("AddV2", [shape, shape], [shape])
    nbytes = 3 * 4 * (1 << 24)
    expected = nbytes / (900e9 * 0.7)
    assert expected > (1 << 24) / (15.7e12 * 0.5)
    assert estimate_seconds(add, "V100") == pytest.approx(expected, rel=1e-12)
    assert roofline_seconds(1 << 24, nbytes, V100, memory_efficiency=1.0) == \
        pytest.approx(nbytes / 900e9, rel=1e-12)


def test_min_seconds_floor_and_no_work():
    tiny = op("AddV2", [((10,), F32)] * 2, [((10,), F32)])
    assert estimate_seconds(tiny, "V100") == 2e-6
    assert estimate_seconds(tiny, "V100", min_seconds=0) == pytest.approx(120 / (900e9 * 0.7))
    assert roofline_seconds(0, 0, V100) == 2e-6
    view = op("Reshape", [((1000,), F32), ((1,), "int32")], [((1000,), F32)])
    assert estimate_seconds(view, "V100") == 0.0  # no kernel launched


def test_dtype_fallback_and_tf32():
    assert V100.peak("bfloat16") == V100.peak("float32") == 15.7e12  # no bf16 on Volta
    assert roofline_seconds(15.7e12, 0, V100, "tfloat32", compute_efficiency=1.0) == 1.0
    assert roofline_seconds(125e12, 0, V100, "DT_HALF", compute_efficiency=1.0) == 1.0
    a100 = DEVICE_SPECS["A100"]
    assert roofline_seconds(156e12, 0, a100, "tfloat32", compute_efficiency=1.0) == \
        pytest.approx(1.0)


def test_bad_efficiency_and_unknown_kind():
    with pytest.raises(DeviceSpecError, match="compute_efficiency"):
        roofline_seconds(1, 1, V100, compute_efficiency=0)
    with pytest.raises(DeviceSpecError, match="memory_efficiency"):
        roofline_seconds(1, 1, V100, memory_efficiency=1.5)
    with pytest.raises(MoplaceError, match="known: V100, V100-PCIe"):
        estimate_seconds(op("AddV2", [((10,), F32)] * 2, [((10,), F32)]), "TPUv3")


# --- device table -----------------------------------------------------------------------------

def test_device_table():
    assert set(DEVICE_SPECS) == set(KIND_SPEED)
    for kind, spec in DEVICE_SPECS.items():
        assert spec.kind == kind and spec.source.strip()
        assert spec.mem_bandwidth_Bps > 0 and all(v > 0 for v in spec.peak_flops.values())
        # one rule with cluster.KIND_SPEED: FP32 peak relative to the V100's 15.7 TFLOPS
        assert spec.peak("float32") / 15.7e12 == pytest.approx(kind_speed(kind), rel=1e-9)
        assert spec.peak("float16") >= spec.peak("float32")


def test_device_spec_lookup():
    assert device_spec("v100-pcie") is DEVICE_SPECS["V100-PCIe"]
    assert device_spec("H100").mem_bandwidth_Bps == 3.35e12
    assert DEVICE_SPECS["A100"].peak_flops["float16"] == 312e12  # dense, not sparsity
    assert device_spec("TPUv3") is None
