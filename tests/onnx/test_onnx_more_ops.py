"""CumProd, BitCast, Det and MaxUnpool: graphrt against ONNX Runtime (and ONNX's reference
evaluator where ONNX Runtime departs from the conformance tests: MaxUnpool with
``output_shape``) on cpu and sim; the standard ops behind them (``cumprod``, ``bitcast``,
``det``, ``max_unpool``) on their own; and the clear errors a bad model gets, naming its node.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_harness import node_model, run_graphrt, run_ort, run_reference, typed
from ops_harness import run_op
from ort_compat import ort_ir_version

import graphrt
from graphrt.errors import ConversionError
from graphrt.ops import OpError, TensorType, get_op

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

RNG = np.random.default_rng(26)
DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def check(model: Any, data: dict[str, np.ndarray], device: graphrt.Device,
          oracle: Any = run_ort, rtol: float = 0.0) -> list[np.ndarray]:
    """graphrt's outputs on ``device`` equal the oracle's: same dtype and shape, values exact
    (bit for bit where ``rtol`` is 0) or within ``rtol``."""
    got, want = run_graphrt(model, data, device), oracle(model, data)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), (g.dtype, g.shape, w.dtype, w.shape)
        if rtol:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=rtol)
        else:
            np.testing.assert_array_equal(g.reshape(-1).view(np.uint8),
                                          w.reshape(-1).view(np.uint8))
    return list(got)


# ---------------------------------------------------------------------------------------------
# CumProd (opset 26)

POSITIVE = (RNG.uniform(0.5, 1.5, (3, 4, 5))).astype(np.float32)
INTS = RNG.integers(-3, 4, (4, 6)).astype(np.int32)

CUMPROD_CASES = [
    ("axis0", {"x": POSITIVE}, i64(0), {}),
    ("axis1-exclusive", {"x": POSITIVE}, i64(1), {"exclusive": 1}),
    ("axis2-reverse", {"x": POSITIVE}, i64(2), {"reverse": 1}),
    ("negative-axis-exclusive-reverse", {"x": POSITIVE}, i64(-2),
     {"exclusive": 1, "reverse": 1}),
    ("negative-axis-last", {"x": POSITIVE}, i64(-1), {}),
    ("int32-axis-input", {"x": INTS}, np.array(1, np.int32), {"exclusive": 1}),
    ("int32-reverse", {"x": INTS}, i64(0), {"reverse": 1}),
    ("int64", {"x": INTS.astype(np.int64)}, i64(-1), {}),
    ("float64", {"x": POSITIVE.astype(np.float64)}, i64(1), {"reverse": 1}),
    ("one-element-axis", {"x": f32(3, 1)}, i64(1), {"exclusive": 1}),
    ("empty", {"x": np.zeros((2, 0), np.float32)}, i64(1), {}),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("data", "axis", "attrs"), [pytest.param(*c[1:], id=c[0])
                                                      for c in CUMPROD_CASES])
def test_cumprod_matches_onnxruntime(data: dict[str, np.ndarray], axis: np.ndarray,
                                     attrs: dict[str, Any], device: graphrt.Device) -> None:
    model = node_model("CumProd", data, {"axis": axis}, 26, **attrs)
    exact = data["x"].dtype.kind in "iu"
    check(model, data, device, rtol=0.0 if exact else 1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_cumprod_float16_multiplies_in_float32(device: graphrt.Device) -> None:
    x = RNG.uniform(0.9, 1.1, (2, 40)).astype(np.float16)
    model = node_model("CumProd", {"x": x}, {"axis": i64(1)}, 26)
    (got,) = run_graphrt(model, {"x": x}, device)
    want = np.cumprod(x.astype(np.float32), axis=1).astype(np.float16)  # each rounded once
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------
# BitCast (opset 26): same width, same shape


FLOATS = np.array([[0.0, -0.0, 1.5], [np.inf, -2.25, 3e-39]], np.float32)  # with a subnormal
# ONNX Runtime has no BitCast kernel for bool or 0-D inputs: the reference evaluator checks those
BITCAST_CASES = [
    ("float32-int32", FLOATS, TensorProto.INT32, run_ort),
    ("float32-uint32", FLOATS, TensorProto.UINT32, run_ort),
    ("int32-float32", np.array([1065353216, -1, 0, 2139095040], np.int32), TensorProto.FLOAT,
     run_ort),
    ("float64-int64", FLOATS.astype(np.float64), TensorProto.INT64, run_ort),
    ("uint64-float64", np.array([0, 4607182418800017408], np.uint64), TensorProto.DOUBLE,
     run_ort),
    ("float16-int16", FLOATS.astype(np.float16), TensorProto.INT16, run_ort),
    ("uint16-float16", np.array([0x3C00, 0x7BFF, 0x8001], np.uint16), TensorProto.FLOAT16,
     run_ort),
    ("int8-uint8", np.array([-128, -1, 0, 127], np.int8), TensorProto.UINT8, run_ort),
    ("bool-int8", np.array([True, False, True]), TensorProto.INT8, run_reference),
    ("uint8-bool", np.array([0, 1, 1, 0], np.uint8), TensorProto.BOOL, run_reference),
    ("scalar", np.array(2.5, np.float32), TensorProto.INT32, run_reference),
    ("same-type", FLOATS, TensorProto.FLOAT, run_ort),
    ("empty", np.zeros((0, 3), np.float32), TensorProto.INT32, run_ort),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("x", "to", "oracle"), [pytest.param(*c[1:], id=c[0])
                                                 for c in BITCAST_CASES])
def test_bitcast_matches_onnxruntime(x: np.ndarray, to: int, oracle: Any,
                                     device: graphrt.Device) -> None:
    check(node_model("BitCast", {"x": x}, {}, 26, to=to), {"x": x}, device, oracle)


@pytest.mark.parametrize("device", DEVICES)
def test_bitcast_of_bfloat16_keeps_the_bits(device: graphrt.Device) -> None:
    bits = np.array([[0x3F80, 0xC000], [0x7F80, 0x0001]], np.uint16).view(np.int16)
    (as_bf16,) = run_op("bitcast", [bits], {"dtype": "bfloat16"}, device)
    assert str(as_bf16.dtype) == "bfloat16"
    assert as_bf16.astype(np.float32)[0].tolist() == [1.0, -2.0]
    (back,) = run_op("bitcast", [as_bf16], {"dtype": "int16"}, device)
    np.testing.assert_array_equal(back, bits, strict=True)


# ---------------------------------------------------------------------------------------------
# Det (opset 11, 22)


# ONNX Runtime's Det takes float32 only: the reference evaluator checks float64
DET_CASES = [
    ("2d", f32(3, 3), 22, 1e-5, run_ort),
    ("batched", f32(2, 3, 4, 4), 22, 1e-5, run_ort),
    ("1x1", f32(5, 1, 1), 22, 1e-6, run_ort),
    ("singular", np.array([[1, 2], [2, 4]], np.float32), 22, 1e-6, run_ort),
    ("float64", f32(4, 5, 5).astype(np.float64), 22, 1e-12, run_reference),
    ("opset-11", f32(2, 2, 2), 11, 1e-5, run_ort),
    ("empty-batch", np.zeros((0, 3, 3), np.float32), 22, 1e-6, run_ort),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("x", "opset", "rtol", "oracle"), [pytest.param(*c[1:], id=c[0])
                                                            for c in DET_CASES])
def test_det_matches_onnxruntime(x: np.ndarray, opset: int, rtol: float, oracle: Any,
                                 device: graphrt.Device) -> None:
    got = check(node_model("Det", {"x": x}, {}, opset), {"x": x}, device, oracle, rtol)
    assert got[0].shape == x.shape[:-2]


@pytest.mark.parametrize("device", DEVICES)
def test_det_of_float16_factors_in_float32(device: graphrt.Device) -> None:
    x = f32(3, 3, 3).astype(np.float16)
    model = node_model("Det", {"x": x}, {}, 22)
    (got,) = run_graphrt(model, {"x": x}, device)
    assert got.dtype == np.float16 and got.shape == (3,)
    want = np.linalg.det(x.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(got, want)  # neither ONNX Runtime nor the reference has it


def test_det_of_bfloat16_runs_in_float32() -> None:
    import ml_dtypes

    x = np.array([[2.0, 1.0], [1.0, 3.0]], ml_dtypes.bfloat16)
    (got,) = run_op("det", [x], {}, graphrt.sim(0))
    assert got.dtype == ml_dtypes.bfloat16 and float(got) == 5.0


# ---------------------------------------------------------------------------------------------
# MaxUnpool (opset 9, 11, 22)


def pool_unpool_model(x: np.ndarray, opset: int, output_shape: list[int] | None,
                      **window: Any) -> Any:
    """MaxPool (values and indices) of ``x`` then MaxUnpool with the same window."""
    pool = helper.make_node("MaxPool", ["x"], ["v", "i"], name="pool", **window)
    unpool_inputs = ["v", "i"] + (["s"] if output_shape is not None else [])
    unpool = helper.make_node("MaxUnpool", unpool_inputs, ["y"], name="unpool",
                              **{k: v for k, v in window.items() if k != "ceil_mode"})
    initializers = [] if output_shape is None else [
        onnx.numpy_helper.from_array(np.array(output_shape, np.int64), "s")]
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [pool, unpool], "g", [helper.make_tensor_value_info("x", elem, x.shape)],
        [onnx.ValueInfoProto(name="y")], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ort_ir_version())
    return typed(model, elem)


UNPOOL_CASES = [
    ("2d", f32(2, 3, 4, 4), 22, None, {"kernel_shape": [2, 2], "strides": [2, 2]}, run_ort),
    ("2d-overlapping", f32(1, 2, 5, 5), 22, None,
     {"kernel_shape": [3, 3], "strides": [2, 2]}, run_ort),
    ("2d-pads", f32(1, 2, 5, 6), 22, None,
     {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0]}, run_ort),
    ("1d", f32(2, 2, 9), 22, None, {"kernel_shape": [3], "strides": [3]}, run_ort),
    ("3d", f32(1, 1, 4, 4, 4), 22, None,
     {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}, run_ort),
    # ONNX Runtime's MaxUnpool takes float32 only
    ("float64-opset-11", f32(1, 2, 4, 4).astype(np.float64), 11, None,
     {"kernel_shape": [2, 2], "strides": [2, 2]}, run_reference),
    ("opset-9", f32(1, 1, 6, 6), 9, None, {"kernel_shape": [2, 2], "strides": [2, 2]},
     run_ort),
    ("output-shape-same", f32(2, 1, 4, 4), 22, [2, 1, 4, 4],
     {"kernel_shape": [2, 2], "strides": [2, 2]}, run_ort),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("x", "opset", "output_shape", "window", "oracle"),
                         [pytest.param(*c[1:], id=c[0]) for c in UNPOOL_CASES])
def test_max_unpool_of_max_pool_matches(x: np.ndarray, opset: int,
                                        output_shape: list[int] | None,
                                        window: dict[str, Any], oracle: Any,
                                        device: graphrt.Device) -> None:
    check(pool_unpool_model(x, opset, output_shape, **window), {"x": x}, device, oracle)


@pytest.mark.parametrize("device", DEVICES)
def test_max_unpool_places_values_at_their_indices(device: graphrt.Device) -> None:
    """The conformance test's data: indices into the unpooled 4x4, held in a 5x5."""
    x = np.array([[[[5, 6], [7, 8]]]], np.float32)
    idx = np.array([[[[5, 7], [13, 15]]]], np.int64)
    data: dict[str, np.ndarray] = {"x": x, "i": idx}
    model = node_model("MaxUnpool", data, {"s": i64(1, 1, 5, 5)}, 22, kernel_shape=[2, 2],
                       strides=[2, 2])
    (got,) = check(model, data, device, run_reference)
    want = np.zeros((5, 5), np.float32)
    want[1, 1], want[1, 3], want[3, 1], want[3, 3] = 5, 6, 7, 8
    np.testing.assert_array_equal(got[0, 0], want)
    half: dict[str, np.ndarray] = {"x": x.astype(np.float16), "i": idx}
    check(node_model("MaxUnpool", half, {}, 22, kernel_shape=[2, 2], strides=[2, 2]), half,
          device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "output_shape"), [
    (np.float32, [2, 3, 6, 7]), (np.float64, [2, 3, 5, 5]), (np.float32, [2, 3, 5, 9])])
def test_max_unpool_with_pads_and_output_shape_matches_the_reference(
        dtype: type, output_shape: list[int], device: graphrt.Device) -> None:
    """Pads shrink the unpooled shape ((3 - 1) * 2 - 2 + 3 = 5); the indices address it, and
    ``output_shape`` holds it at its start (ONNX's reference; ONNX Runtime differs here)."""
    x: np.ndarray = f32(2, 3, 3, 3).astype(dtype)
    idx = np.stack([RNG.choice(25, 9, replace=False) + 25 * k for k in range(6)])
    data = {"x": x, "i": idx.reshape(2, 3, 3, 3).astype(np.int64)}
    model = node_model("MaxUnpool", data, {"s": np.array(output_shape, np.int64)}, 22,
                       kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    (got,) = check(model, data, device, run_reference)
    assert np.count_nonzero(got) == x.size and not got[..., 5:, :].any()


@pytest.mark.parametrize("device", DEVICES)
def test_max_unpool_indices_out_of_range_fail_at_run_time(device: graphrt.Device) -> None:
    x = np.ones((1, 1, 2, 2), np.float32)
    idx = np.array([[[[0, 1], [2, 16]]]], np.int64)
    model = node_model("MaxUnpool", {"x": x, "i": idx}, {}, 22, kernel_shape=[2, 2],
                       strides=[2, 2])
    module = graphrt.from_onnx(model).create(device)
    with pytest.raises(graphrt.ExecutionError, match=r"indices must lie in \[0, 16\)"):
        module(x=x, i=idx)


# ---------------------------------------------------------------------------------------------
# the standard ops on their own


@pytest.mark.parametrize("device", DEVICES)
def test_cumprod_op(device: graphrt.Device) -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
    for attrs, want in [
        ({"axis": 1}, [[1, 2, 6], [4, 20, 120]]),
        ({"axis": 1, "exclusive": True}, [[1, 1, 2], [1, 4, 20]]),
        ({"axis": -1, "reverse": True}, [[6, 6, 3], [120, 30, 6]]),
        ({"axis": 0, "exclusive": True, "reverse": True}, [[4, 5, 6], [1, 1, 1]]),
    ]:
        (got,) = run_op("cumprod", [x], attrs, device)
        np.testing.assert_array_equal(got, np.array(want, np.int64), strict=True)
        (lowered,) = run_op("cumprod", [x], attrs, device, lowered=True)
        np.testing.assert_array_equal(lowered, got, strict=True)


@pytest.mark.parametrize("device", DEVICES)
def test_max_unpool_op(device: graphrt.Device) -> None:
    x = np.array([[[1.0, 2.0]]], np.float32)
    idx = np.array([[[3, 0]]], np.int64)
    (got,) = run_op("max_unpool", [x, idx], {"kernel": [2], "strides": [2]}, device)
    np.testing.assert_array_equal(got, np.array([[[2, 0, 0, 1]]], np.float32), strict=True)
    (got,) = run_op("max_unpool", [x, idx], {"kernel": [2], "strides": [2],
                                             "output_shape": [1, 1, 6]}, device)
    np.testing.assert_array_equal(got, np.array([[[2, 0, 0, 1, 0, 0]]], np.float32),
                                  strict=True)
    empty = np.zeros((1, 1, 0), np.float32)
    (got,) = run_op("max_unpool", [empty, empty.astype(np.int64)],
                    {"kernel": [2], "strides": [2], "output_shape": [1, 1, 3]}, device)
    np.testing.assert_array_equal(got, np.zeros((1, 1, 3), np.float32), strict=True)


def infer(name: str, types: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    op = get_op(name)
    return op.infer(types, op.attrs.model_validate(attrs), [None] * len(types))


F4 = TensorType((1, 1, 2, 2), "float32")
I4 = TensorType((1, 1, 2, 2), "int64")


@pytest.mark.parametrize(("name", "types", "attrs", "match"), [
    ("cumprod", [TensorType((3,), "bool")], {}, "expects a numeric input"),
    ("cumprod", [TensorType((), "float32")], {}, "at least 1-D"),
    ("cumprod", [TensorType((2, 3), "float32")], {"axis": 2}, "axis 2 is out of range"),
    ("bitcast", [TensorType((2,), "float32")], {"dtype": "int16"},
     "float32 has 32 bits, int16 has 16"),
    ("bitcast", [TensorType((2,), "float32")], {"dtype": "complex64"},
     "unsupported target dtype 'complex64'"),
    ("det", [TensorType((2, 3), "float32")], {}, r"square matrices \[..., M, M\]"),
    ("det", [TensorType((3,), "float32")], {}, "square matrices"),
    ("det", [TensorType((2, 2), "int32")], {}, "must be one of float16"),
    ("max_unpool", [F4, TensorType((1, 1, 2, 2), "int32")], {"kernel": [2, 2]},
     "indices must be int64, given int32"),
    ("max_unpool", [F4, TensorType((1, 1, 4), "int64")], {"kernel": [2, 2]},
     "indices must have the shape of data"),
    ("max_unpool", [TensorType((1, 1, 2, 2), "int32"), I4], {"kernel": [2, 2]},
     "data must be one of"),
    ("max_unpool", [F4, I4], {"kernel": [2]}, "kernel .2. needs 2 values"),
    ("max_unpool", [F4, I4], {"kernel": [2, 2], "padding": [3, 0, 3, 0]},
     "would have size -3"),
    ("max_unpool", [F4, I4], {"kernel": [2, 2], "strides": [2, 2],
                              "output_shape": [1, 1, 3, 5]}, "at least the unpooled"),
    ("max_unpool", [F4, I4], {"kernel": [2, 2], "output_shape": [1, 2, 3, 3]},
     "N and C as data's"),
])
def test_shape_functions_refuse_bad_inputs(name: str, types: list[TensorType],
                                           attrs: dict[str, Any], match: str) -> None:
    with pytest.raises(OpError, match=match):
        infer(name, types, attrs)


# ---------------------------------------------------------------------------------------------
# errors name the node


@pytest.mark.parametrize(("op", "opset", "data", "consts", "attrs", "match"), [
    ("CumProd", 26, {"x": f32(2, 3)}, {"a": i64(1, 0)}, {}, "axis must be one value"),
    ("CumProd", 26, {"x": f32(2, 3)}, {"a": i64(2)}, {}, "axis 2 is out of range"),
    ("CumProd", 26, {"x": f32(2, 3)}, {"a": i64(0)}, {"exclusive": 2},
     "exclusive must be 0 or 1, given 2"),
    ("CumProd", 26, {"x": np.array(2.0, np.float32)}, {"a": i64(0)}, {},
     "CumProd of a 0-D tensor"),
    ("BitCast", 26, {"x": f32(2, 3)}, {}, {"to": TensorProto.INT16},
     r"input is float32 \(32 bits\), 'to' is int16 \(16 bits\)"),
    ("BitCast", 26, {"x": f32(2, 3)}, {}, {"to": TensorProto.COMPLEX64},
     "element type COMPLEX64 is not supported"),
    ("Det", 22, {"x": f32(2, 3, 4)}, {}, {}, r"square matrices \[..., M, M\], given shape "
                                              r"\[2, 3, 4\]"),
    ("Det", 22, {"x": f32(3)}, {}, {}, "square matrices"),
    ("MaxUnpool", 22, {"x": f32(1, 1, 2, 2), "i": np.zeros((1, 1, 2, 2), np.int32)}, {},
     {"kernel_shape": [2, 2]}, "indices I must be int64, given int32"),
    ("MaxUnpool", 22, {"x": f32(1, 1, 2, 2), "i": np.zeros((1, 1, 4), np.int64)}, {},
     {"kernel_shape": [2, 2]}, r"indices I must have X's shape \[1, 1, 2, 2\]"),
    ("MaxUnpool", 22, {"x": f32(1, 1, 2, 2), "i": np.zeros((1, 1, 2, 2), np.int64)}, {},
     {"kernel_shape": [2]}, "kernel_shape must have 2 values"),
    ("MaxUnpool", 22, {"x": f32(1, 1, 2, 2), "i": np.zeros((1, 1, 2, 2), np.int64)},
     {"s": i64(1, 1, 4)}, {"kernel_shape": [2, 2], "strides": [2, 2]},
     "output_shape must be 4 sizes"),
    ("MaxUnpool", 22, {"x": f32(1, 1, 2, 2), "i": np.zeros((1, 1, 2, 2), np.int64)},
     {"s": i64(1, 1, 3, 3)}, {"kernel_shape": [2, 2], "strides": [2, 2]},
     r"at least the unpooled \[1, 1, 4, 4\]"),
])
def test_bad_models_name_the_node(op: str, opset: int, data: dict[str, np.ndarray],
                                  consts: dict[str, np.ndarray | None], attrs: dict[str, Any],
                                  match: str) -> None:
    model = node_model(op, data, consts, opset, **attrs)
    with pytest.raises(ConversionError, match=match) as info:
        graphrt.from_onnx(model)
    assert f"my_{op.lower()}" in str(info.value)


@pytest.mark.parametrize(("op", "data", "consts", "attrs", "value"), [
    ("CumProd", {"x": f32(2, 3), "axis": i64(1)}, {}, {}, "axis"),
    ("MaxUnpool", {"x": f32(1, 1, 2, 2), "i": np.zeros((1, 1, 2, 2), np.int64),
                   "s": i64(1, 1, 4, 4)}, {}, {"kernel_shape": [2, 2], "strides": [2, 2]},
     "s"),
])
def test_a_computed_axis_or_output_shape_must_be_given(op: str, data: dict[str, np.ndarray],
                                                       consts: dict[str, np.ndarray],
                                                       attrs: dict[str, Any],
                                                       value: str) -> None:
    model = node_model(op, data, consts, 26, **attrs)
    with pytest.raises(ConversionError, match="must be known when the model is converted"
                       ) as info:
        graphrt.from_onnx(model)
    assert f"my_{op.lower()}" in str(info.value) and repr(value) in str(info.value)
    # given as a constant, the model converts and runs
    given = {value: data[value]}
    inputs = {k: v for k, v in data.items() if k != value}
    module = graphrt.from_onnx(model, constants=given).create(graphrt.cpu(0))
    want = run_ort(model, data) if op == "CumProd" else run_reference(model, data)
    np.testing.assert_allclose(module(**inputs)[0], want[0], rtol=1e-6)

