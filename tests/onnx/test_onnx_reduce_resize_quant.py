"""ONNX reductions, Resize/Upsample and (de)quantization: graphrt against ONNX Runtime (and
ONNX's reference implementation where ONNX Runtime departs from the spec), across the opsets
where each op changed, plus the new standard ops (reduce, arg_reduce, resize, quantize,
dequantize, dynamic_quantize) on cpu and sim."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_harness import node_model as make_model
from onnx_harness import run_graphrt, run_ort, run_reference
from ops_harness import run_op

import graphrt
from graphrt.errors import ConversionError
from graphrt.ops import OpError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto  # noqa: E402

RNG = np.random.default_rng(7)
DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]


def check(model: Any, data: dict[str, np.ndarray], oracle: Any = run_ort, rtol: float = 1e-5,
          atol: float = 1e-6) -> list[np.ndarray]:
    got, want = run_graphrt(model, data), oracle(model, data)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


# --------------------------------------------------------------------------------------------
# Reductions

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]
AXES_CASES = [None, [1], [-1, 0], [0, 1, 2]]


def _reduce_data(op: str, dtype: str = "float32") -> np.ndarray:
    x = RNG.standard_normal((3, 4, 5))
    if op in ("ReduceLogSum", "ReduceProd"):
        x = np.abs(x) + 0.5
    return x.astype(dtype)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", AXES_CASES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_attribute(op: str, axes: list[int] | None, keepdims: int) -> None:
    opset = 11 if op == "ReduceSum" else 13
    attrs: dict[str, Any] = {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    x = _reduce_data(op)
    check(make_model(op, {"x": x}, {}, opset, **attrs), {"x": x})


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", AXES_CASES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_input(op: str, axes: list[int] | None, keepdims: int) -> None:
    x = _reduce_data(op)
    consts = {"axes": None if axes is None else np.array(axes, np.int64)}
    check(make_model(op, {"x": x}, consts, 18, keepdims=keepdims), {"x": x})


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_noop_with_empty_axes(op: str) -> None:
    x = _reduce_data(op)
    model = make_model(op, {"x": x}, {"axes": np.array([], np.int64)}, 18,
                       noop_with_empty_axes=1)
    (got,) = check(model, {"x": x})
    assert got.shape == x.shape


def test_reduce_sum_axes_input_from_opset_13() -> None:
    x = _reduce_data("ReduceSum")
    check(make_model("ReduceSum", {"x": x}, {"axes": np.array([2], np.int64)}, 13), {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceMean", "ReduceSumSquare", "ReduceL1"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_reduce_integers(op: str, dtype: str) -> None:
    x = RNG.integers(-4, 5, (3, 4, 2)).astype(dtype)
    check(make_model(op, {"x": x}, {"axes": np.array([1], np.int64)}, 18, keepdims=0),
          {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceL2", "ReduceMax"])
def test_reduce_float16_accumulates_in_float32(op: str) -> None:
    x = (RNG.random((4, 4096)) + 1.0).astype("float16")
    (got,) = run_graphrt(make_model(op, {"x": x}, {"axes": np.array([1], np.int64)}, 18), {"x": x})
    wide = x.astype(np.float64)
    want = {"ReduceSum": wide.sum(1, keepdims=True), "ReduceMean": wide.mean(1, keepdims=True),
            "ReduceL2": np.sqrt((wide * wide).sum(1, keepdims=True)),
            "ReduceMax": wide.max(1, keepdims=True)}[op].astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3)


EMPTY = {"ReduceSum": 0.0, "ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceProd": 1.0,
         "ReduceL1": 0.0, "ReduceL2": 0.0, "ReduceSumSquare": 0.0, "ReduceLogSum": -np.inf,
         "ReduceLogSumExp": -np.inf}


@pytest.mark.parametrize("op", sorted(EMPTY))
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_empty_set_gives_the_identity(op: str, keepdims: int) -> None:
    x = np.zeros((2, 0, 3), np.float32)
    model = make_model(op, {"x": x}, {"axes": np.array([1], np.int64)}, 20, keepdims=keepdims)
    (got,) = run_graphrt(model, {"x": x})
    assert got.shape == ((2, 1, 3) if keepdims else (2, 3))
    np.testing.assert_array_equal(got, np.full(got.shape, EMPTY[op], np.float32))


def test_reduce_empty_set_integers_and_bool() -> None:
    ints = np.zeros((2, 0), np.int32)
    (low,) = run_graphrt(make_model("ReduceMax", {"x": ints}, {"axes": np.array([1])}, 20),
                         {"x": ints})
    np.testing.assert_array_equal(low, np.full((2, 1), np.iinfo(np.int32).min, np.int32))
    flags = np.zeros((3, 0), bool)
    (none,) = run_graphrt(make_model("ReduceMax", {"x": flags}, {"axes": np.array([1])}, 20),
                          {"x": flags})
    (every,) = run_graphrt(make_model("ReduceMin", {"x": flags}, {"axes": np.array([1])}, 20),
                           {"x": flags})
    assert none.dtype == bool and not none.any() and every.all()


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_bool_from_opset_20(op: str) -> None:
    x = RNG.random((4, 3)) > 0.5
    (got,) = run_graphrt(make_model(op, {"x": x}, {"axes": np.array([1])}, 20), {"x": x})
    want = x.max(1, keepdims=True) if op == "ReduceMax" else x.min(1, keepdims=True)
    np.testing.assert_array_equal(got, want)


def test_reduce_log_sum_exp_does_not_overflow() -> None:
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], np.float32)
    (got,) = run_graphrt(make_model("ReduceLogSumExp", {"x": x}, {"axes": np.array([1])}, 18,
                                    keepdims=0), {"x": x})
    np.testing.assert_allclose(got, [1000.0 + np.log(2.0), -np.inf], rtol=1e-6)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_max_min(op: str, opset: int, axis: int, keepdims: int, last: int) -> None:
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    attrs: dict[str, Any] = {"axis": axis, "keepdims": keepdims}
    if opset >= 12:
        attrs["select_last_index"] = last
    elif last:
        pytest.skip("select_last_index is new in opset 12")
    check(make_model(op, {"x": x}, {}, opset, **attrs), {"x": x})


def test_reduce_errors_name_the_node() -> None:
    x = _reduce_data("ReduceSum")
    with pytest.raises(ConversionError, match=r"my_reducemean.*keepdims must be 0 or 1"):
        graphrt.from_onnx(make_model("ReduceMean", {"x": x}, {}, 13, keepdims=2))
    with pytest.raises(ConversionError, match=r"my_reducemax.*axis 3 is out of range"):
        graphrt.from_onnx(make_model("ReduceMax", {"x": x}, {"axes": np.array([3])}, 18))
    with pytest.raises(ConversionError, match=r"my_argmax.*axis 5 is out of range"):
        graphrt.from_onnx(make_model("ArgMax", {"x": x}, {}, 13, axis=5))


# --------------------------------------------------------------------------------------------
# Resize and Upsample

COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
SCALES = [np.array([1, 1, 2, 3], np.float32), np.array([1, 1, 0.5, 0.5], np.float32),
          np.array([1, 1, 1.7, 0.6], np.float32)]


def _resize_model(x: np.ndarray, opset: int, scales: np.ndarray | None = None,
                  sizes: np.ndarray | None = None, roi: np.ndarray | None = None,
                  **attrs: Any) -> Any:
    return make_model("Resize", {"x": x}, {"roi": roi, "scales": scales, "sizes": sizes},
                      opset, **attrs)


@pytest.mark.parametrize("opset", [11, 13, 19])
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest", NEAREST)
@pytest.mark.parametrize("scale_index", range(len(SCALES)))
def test_resize_nearest_scales(opset: int, coord: str, nearest: str, scale_index: int) -> None:
    x = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
    scales = SCALES[scale_index]
    roi = np.array([], np.float32) if opset == 11 else None
    model = _resize_model(x, opset, scales, roi=roi, mode="nearest",
                          coordinate_transformation_mode=coord, nearest_mode=nearest)
    # ONNX Runtime takes align_corners' output length as the floored integer; ONNX (spec and
    # reference) takes scale * in, which differs when that is fractional.
    fractional = bool(np.any(scales * x.shape != np.floor(scales * x.shape)))
    check(model, {"x": x}, run_reference if coord == "align_corners" and fractional else run_ort)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", [*COORDS, "tf_crop_and_resize"])
@pytest.mark.parametrize("sizes", [[1, 2, 9, 4], [1, 2, 3, 11], [1, 2, 1, 1]])
def test_resize_sizes(mode: str, coord: str, sizes: list[int]) -> None:
    x = RNG.standard_normal((1, 2, 7, 5)).astype(np.float32)
    roi = (np.array([0, 0, 0.1, 0.3, 1, 1, 0.8, 1.2], np.float32)
           if coord == "tf_crop_and_resize" else None)
    model = _resize_model(x, 13, sizes=np.array(sizes, np.int64), roi=roi, mode=mode,
                          coordinate_transformation_mode=coord, extrapolation_value=-3.0)
    check(model, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "pytorch_half_pixel"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("scale_index", range(len(SCALES)))
def test_resize_linear_cubic_scales(mode: str, coord: str, exclude_outside: int,
                                    scale_index: int) -> None:
    if mode == "linear" and exclude_outside:
        pytest.skip("ONNX Runtime takes exclude_outside with linear only when antialiasing")
    x = RNG.standard_normal((2, 1, 6, 5)).astype(np.float32)
    model = _resize_model(x, 13, SCALES[scale_index], mode=mode, cubic_coeff_a=-0.5,
                          coordinate_transformation_mode=coord, exclude_outside=exclude_outside)
    check(model, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.5, 0.35], [1, 1, 0.75, 1.5]])
def test_resize_antialias(mode: str, scales: list[float]) -> None:
    x = RNG.standard_normal((1, 2, 12, 10)).astype(np.float32)
    model = _resize_model(x, 18, np.array(scales, np.float32), mode=mode, antialias=1)
    check(model, {"x": x}, run_reference, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("axes", [[2, 3], [3, 2], [3]])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_axes_and_aspect_ratio(policy: str, axes: list[int], mode: str) -> None:
    x = RNG.standard_normal((1, 2, 4, 6)).astype(np.float32)
    sizes = np.array([7, 5][: len(axes)], np.int64)
    model = _resize_model(x, 18, sizes=sizes, mode=mode, axes=axes,
                          keep_aspect_ratio_policy=policy)
    check(model, {"x": x}, run_reference, rtol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_half_pixel_symmetric(mode: str) -> None:
    x = RNG.standard_normal((1, 1, 5, 6)).astype(np.float32)
    model = _resize_model(x, 19, np.array([1, 1, 1.7, 0.55], np.float32), mode=mode,
                          coordinate_transformation_mode="half_pixel_symmetric")
    check(model, {"x": x}, run_reference, rtol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("shape,scales", [((3, 4, 5), [1, 2, 0.6]),
                                          ((1, 2, 3, 4, 5), [1, 1, 2, 1.5, 0.4])])
def test_resize_any_rank(mode: str, shape: tuple[int, ...], scales: list[float]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _resize_model(x, 13, np.array(scales, np.float32), mode=mode)
    check(model, {"x": x}, run_reference, rtol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_uint8(mode: str) -> None:
    x = RNG.integers(0, 256, (1, 3, 5, 6)).astype(np.uint8)
    model = _resize_model(x, 13, np.array([1, 1, 1.5, 0.75], np.float32), mode=mode)
    # Rounded and saturated as ONNX's reference (ONNX Runtime truncates); an exact half may
    # round the other way there, as its float64 sum lands just off it.
    (got,) = run_graphrt(model, {"x": x})
    (want,) = run_reference(model, {"x": x})
    assert got.dtype == np.uint8 and got.shape == want.shape
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= (0 if mode == "nearest" else 1) and np.mean(diff == 0) > 0.9


def test_resize_float_scales_mean_the_written_value() -> None:
    """0.7 is stored as 0.699999988; taken literally, half_pixel maps output 3 of 6 -> 4 to
    3.5 / 0.699999988 - 0.5 = 4.50000007 and rounds to pixel 5. graphrt takes the scale as
    7/10, the value written: 4.5 exactly, which rounds down to 4 (as ONNX Runtime does)."""
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 1, 6)
    model = _resize_model(x, 13, np.array([1, 1, 1, 0.7], np.float32), mode="nearest")
    (got,) = check(model, {"x": x})
    np.testing.assert_array_equal(got.ravel(), [0, 2, 3, 4])


@pytest.mark.parametrize("op,opset", [("Upsample", 7), ("Upsample", 9), ("Resize", 10)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 1.5, 2.5]])
def test_upsample_and_resize_10(op: str, opset: int, mode: str, scales: list[float]) -> None:
    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    values = np.array(scales, np.float32)
    if opset == 7:
        model = make_model(op, {"x": x}, {}, opset, mode=mode, scales=[float(v) for v in scales])
    else:
        model = make_model(op, {"x": x}, {"scales": values}, opset, mode=mode)
    check(model, {"x": x})


@pytest.mark.parametrize("scales", [[1, 1, 0.5, 0.6], [1, 1, 0.75, 1.5]])
def test_resize_10_nearest_ceils_when_downsampling(scales: list[float]) -> None:
    x = RNG.standard_normal((1, 1, 8, 10)).astype(np.float32)
    check(make_model("Resize", {"x": x}, {"scales": np.array(scales, np.float32)}, 10),
          {"x": x})


def test_resize_nearest_coordinates_are_exact() -> None:
    """7 -> 9 with half_pixel: output 4 maps to (4.5) * 7/9 - 0.5 = 3 exactly; floating point
    gives 2.9999999999999996, which floors to the wrong pixel."""
    x = np.arange(7, dtype=np.float32).reshape(1, 7)
    for device in (graphrt.cpu(0), graphrt.sim(0)):
        (got,) = run_op("resize", [x], {"size": (1, 9), "nearest_mode": "floor"}, device)
        assert got[0, 4] == 3.0
        np.testing.assert_array_equal(got[0], [0, 0, 1, 2, 3, 3, 4, 5, 6])


def test_resize_errors_name_the_node() -> None:
    x = RNG.standard_normal((1, 1, 2, 2)).astype(np.float32)
    scales = np.array([1, 1, 2, 2], np.float32)
    with pytest.raises(ConversionError, match=r"my_resize.*mode 'area'"):
        graphrt.from_onnx(_resize_model(x, 13, scales, mode="area"))
    with pytest.raises(ConversionError, match=r"my_resize.*tf_half_pixel_for_nn"):
        graphrt.from_onnx(_resize_model(x, 13, scales,
                                        coordinate_transformation_mode="tf_half_pixel_for_nn"))
    with pytest.raises(ConversionError, match=r"my_resize.*half_pixel_symmetric"):
        graphrt.from_onnx(_resize_model(x, 18, scales,
                                        coordinate_transformation_mode="half_pixel_symmetric"))
    with pytest.raises(ConversionError, match=r"my_upsample.*scales must be >= 1"):
        graphrt.from_onnx(make_model("Upsample", {"x": x},
                                     {"s": np.array([1, 1, 0.5, 1], np.float32)}, 9))
    with pytest.raises(ConversionError, match=r"my_resize.*scale of axis 2 must be positive"):
        graphrt.from_onnx(_resize_model(x, 13, np.array([1, 1, 0, 1], np.float32)))


def test_resize_11_tf_half_pixel_for_nn() -> None:
    x = RNG.standard_normal((1, 1, 4, 5)).astype(np.float32)
    model = _resize_model(x, 11, np.array([1, 1, 1.5, 0.6], np.float32),
                          roi=np.array([], np.float32),
                          coordinate_transformation_mode="tf_half_pixel_for_nn")
    check(model, {"x": x})


# --------------------------------------------------------------------------------------------
# QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear

TIES = np.array([-300.0, -2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 3.49, 300.0], np.float32)


@pytest.mark.parametrize("opset", [10, 13, 19])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("zero", [None, 3])
def test_quantize_per_tensor(opset: int, dtype: str, zero: int | None) -> None:
    x = np.concatenate([TIES, RNG.standard_normal(20).astype(np.float32) * 50])
    zp = None if zero is None else np.array(zero, dtype)
    if zp is None and dtype == "int8":
        pytest.skip("without a zero point the output is uint8")
    model = make_model("QuantizeLinear", {"x": x}, {"s": np.array(0.5, np.float32), "zp": zp},
                       opset)
    check(model, {"x": x})


@pytest.mark.parametrize("axis", [1, -1, 0])
@pytest.mark.parametrize("opset", [13, 21])
def test_quantize_dequantize_per_axis(axis: int, opset: int) -> None:
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32) * 20
    n = x.shape[axis]
    scale = (RNG.random(n) + 0.1).astype(np.float32)
    zp = RNG.integers(-5, 5, n).astype(np.int8)
    check(make_model("QuantizeLinear", {"x": x}, {"s": scale, "zp": zp}, opset, axis=axis),
          {"x": x})
    q = RNG.integers(-128, 128, x.shape).astype(np.int8)
    check(make_model("DequantizeLinear", {"q": q}, {"s": scale, "zp": zp}, opset, axis=axis),
          {"q": q})


@pytest.mark.parametrize("dtype", ["int16", "uint16", "int8", "uint8"])
@pytest.mark.parametrize("block", [2, 3])
def test_quantize_dequantize_blocked(dtype: str, block: int) -> None:
    x = RNG.standard_normal((4, 7)).astype(np.float32) * 300
    blocks = -(-7 // block)
    scale = (RNG.random((4, blocks)) + 0.5).astype(np.float32)
    info = np.iinfo(dtype)
    zp = RNG.integers(max(info.min, -10), min(info.max, 10), (4, blocks)).astype(dtype)
    model = make_model("QuantizeLinear", {"x": x}, {"s": scale, "zp": zp}, 21, axis=1,
                       block_size=block)
    (q,) = check(model, {"x": x}, run_reference)
    check(make_model("DequantizeLinear", {"q": q}, {"s": scale, "zp": zp}, 21, axis=1,
                     block_size=block), {"q": q}, run_reference)


def test_quantize_output_dtype_without_zero_point() -> None:
    x = TIES * 100
    model = make_model("QuantizeLinear", {"x": x}, {"s": np.array(2.0, np.float32)}, 21,
                       output_dtype=TensorProto.INT16)
    (got,) = check(model, {"x": x})
    assert got.dtype == np.int16


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32"])
def test_dequantize_per_tensor(opset: int, dtype: str) -> None:
    info = np.iinfo(dtype)
    q = RNG.integers(max(info.min, -1000), min(info.max, 1000), 16).astype(dtype)
    zp = np.array(0 if dtype == "int32" else 7, dtype)
    check(make_model("DequantizeLinear", {"q": q}, {"s": np.array(0.25, np.float32), "zp": zp},
                     opset), {"q": q})


@pytest.mark.parametrize(("scale_shape", "zero_shape"), [((1,), ()), ((), (1,))])
def test_dequantize_one_value_scale_and_zero_point_of_other_ranks(
        scale_shape: tuple[int, ...], zero_shape: tuple[int, ...]) -> None:
    # ONNX Runtime's static quantizer writes a bias's int32 zero point as a scalar beside a
    # [1] scale: both are one value, per tensor
    q = RNG.integers(-1000, 1000, 12).astype(np.int32)
    scale = np.full(scale_shape, 0.125, np.float32)
    zp = np.zeros(zero_shape, np.int32)
    check(make_model("DequantizeLinear", {"q": q}, {"s": scale, "zp": zp}, 13), {"q": q})


def test_dequantize_float16_scale_gives_float16() -> None:
    q = RNG.integers(0, 256, 10).astype(np.uint8)
    model = make_model("DequantizeLinear", {"q": q}, {"s": np.array(0.5, np.float16)}, 19)
    (got,) = check(model, {"q": q})
    assert got.dtype == np.float16


@pytest.mark.parametrize("data", [RNG.standard_normal((3, 4)) * 5, RNG.random(7) + 1,
                                  -RNG.random(6) - 1, np.zeros(4)])
def test_dynamic_quantize_linear(data: np.ndarray) -> None:
    x = data.astype(np.float32)
    check(make_model("DynamicQuantizeLinear", {"x": x}, {}, 11, n_outputs=3), {"x": x})


def test_quant_errors_name_the_node_and_type() -> None:
    x = TIES
    with pytest.raises(ConversionError, match=r"my_quantizelinear.*FLOAT6E2M3"):
        graphrt.from_onnx(make_model("QuantizeLinear", {"x": x}, {"s": np.array(1.0, "f4")},
                                     25, output_dtype=TensorProto.FLOAT6E2M3))
    with pytest.raises(ConversionError, match=r"my_quantizelinear.*per-axis scales need"):
        graphrt.from_onnx(make_model("QuantizeLinear", {"x": x.reshape(2, 5)},
                                     {"s": np.ones(2, "f4")}, 10))
    with pytest.raises(ConversionError, match=r"my_dequantizelinear.*per-axis scale"):
        graphrt.from_onnx(make_model("DequantizeLinear",
                                     {"q": np.zeros((2, 5), np.uint8)},
                                     {"s": np.ones(3, "f4")}, 13, axis=1))


# --------------------------------------------------------------------------------------------
# The new standard ops on cpu and sim


@pytest.mark.parametrize("device", DEVICES)
def test_models_run_on_sim_and_cpu(device: graphrt.Device) -> None:
    """Each new op inside a converted model (a declarative lib function) on both devices."""
    x = RNG.standard_normal((1, 2, 4, 6)).astype(np.float32)
    models = [
        make_model("ReduceLogSumExp", {"x": x}, {"axes": np.array([1, 3])}, 18),
        make_model("ArgMin", {"x": x}, {}, 13, axis=2, select_last_index=1),
        _resize_model(x, 19, np.array([1, 1, 1.5, 0.5], np.float32), mode="cubic",
                      antialias=1),
        _resize_model(x, 13, sizes=np.array([1, 2, 3, 8]), mode="linear",
                      coordinate_transformation_mode="tf_crop_and_resize",
                      roi=np.array([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.1], np.float32)),
        make_model("QuantizeLinear", {"x": x}, {"s": np.array([0.1, 0.2], np.float32),
                                                "zp": np.array([3, -3], np.int8)}, 13),
        make_model("DynamicQuantizeLinear", {"x": x}, {}, 11, n_outputs=3),
    ]
    for model in models:
        got = run_graphrt(model, {"x": x}, device)
        want = run_ort(model, {"x": x})
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-4,
                                       atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_ops_directly(device: graphrt.Device) -> None:
    x = np.array([[1.0, 3.0, 3.0], [-2.0, 0.0, -2.0]], np.float32)
    (total,) = run_op("reduce", [x], {"kind": "sum_square", "axes": [1]}, device)
    np.testing.assert_allclose(total, [19.0, 8.0])
    (same,) = run_op("reduce", [x], {"kind": "l1", "axes": []}, device)
    np.testing.assert_array_equal(same, np.abs(x))
    (last,) = run_op("arg_reduce", [x], {"kind": "max", "axis": 1, "keepdims": False,
                                         "select_last_index": True}, device)
    np.testing.assert_array_equal(last, [2, 1])
    (q,) = run_op("quantize", [np.array([0.5, 1.5, 2.5, -2.5, 1e9], np.float32),
                               np.array(1.0, np.float32)], {"dtype": "int8"}, device)
    np.testing.assert_array_equal(q, [0, 2, 2, -2, 127])  # half to even, saturated
    (d,) = run_op("dequantize", [np.array([0, 255], np.uint8), np.array(0.5, np.float32),
                                 np.array(255, np.uint8)], {}, device)
    np.testing.assert_array_equal(d, [-127.5, 0.0])
    y, scale, zero = run_op("dynamic_quantize", [np.array([-1.0, 0.0, 3.0], np.float32)], {},
                            device)
    assert scale.shape == () and zero.dtype == np.uint8
    np.testing.assert_array_equal(y, [0, 64, 255])


@pytest.mark.parametrize("name,inputs,attrs,match", [
    ("reduce", [np.zeros((2, 3), np.float32)], {"kind": "sum", "axes": [0, -2]},
     "more than once"),
    ("reduce", [np.zeros(3, bool)], {"kind": "sum"}, "does not take bool"),
    ("arg_reduce", [np.zeros((2, 0), np.float32)], {"kind": "max", "axis": 1}, "empty axis"),
    ("resize", [np.zeros((2, 3), np.float32)], {"size": (4,)}, "one length per axis"),
    ("resize", [np.zeros((2, 3), np.float32)], {"size": (2, 3),
                                                "coordinate_transformation_mode":
                                                "tf_crop_and_resize"}, "needs a roi"),
    ("resize", [np.zeros((2, 3), bool)], {"size": (2, 3), "mode": "linear"}, "bool"),
    ("quantize", [np.zeros((2, 3), np.float32), np.ones(4, np.float32)], {},
     "per-axis scale must be 1-D with 3"),
    ("quantize", [np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32)],
     {"block_size": 2, "axis": 1}, r"blocked scale .* must be \[2, 2\]"),
    ("dequantize", [np.zeros(3, np.float32), np.ones(1, np.float32)], {}, "takes int8"),
])
def test_shape_functions_refuse(name: str, inputs: list[np.ndarray], attrs: dict[str, Any],
                                match: str) -> None:
    with pytest.raises(OpError, match=match):
        run_op(name, inputs, attrs)


def test_a_model_from_onnx_runtimes_static_quantizer(tmp_path: Any) -> None:
    """QDQ as ONNX Runtime's quantize_static writes it (int32 biases with a scalar zero point
    beside a [1] scale), converted and run on cpu and sim, equal to ONNX Runtime."""
    import sys
    from pathlib import Path

    import onnx
    quantization = pytest.importorskip("onnxruntime.quantization")
    from ort_compat import for_ort

    examples = str(Path(__file__).resolve().parents[2] / "examples" / "onnx")
    sys.path.insert(0, examples)
    try:
        import models
    finally:
        sys.path.remove(examples)
    rng = np.random.default_rng(0)
    source, target = tmp_path / "model.onnx", tmp_path / "qdq.onnx"
    onnx.save(for_ort(models.resnet18(image=32, classes=10, width=8)), source)

    class Reader(quantization.CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.items = iter([{"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    quantization.quantize_static(str(source), str(target), Reader(),
                                 quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    model = onnx.load(str(target))
    assert any(node.op_type == "DequantizeLinear" for node in model.graph.node)
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    (want,) = run_ort(model, {"input": x})
    for device in (graphrt.cpu(0), graphrt.sim(0)):
        (got,) = run_graphrt(model, {"input": x}, device)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
