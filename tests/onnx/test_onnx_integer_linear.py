"""ONNX's integer ops (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul) converted by
graphrt and run on cpu and sim: equal, integer for integer, to ONNX's reference evaluator, to
ONNX Runtime and to an independent exact computation (int64 sums, a float64 convolution of the
differences), per tensor and per channel, uint8 and int8; a model quantized by ONNX Runtime's
``quantize_static`` (QOperator format) against ONNX Runtime and against its QDQ twin.

Where the oracles themselves depart from exact arithmetic, the test says so:

* ONNX Runtime, on a CPU without AVX-512 VNNI, adds pairs of uint8 x int8 products in
  saturating int16 (``vpmaddubsw``), which is why its quantizer offers ``reduce_range``: those
  cases use 7-bit weights against it (full-range ones against the reference). It also rounds
  the requantized product to float32 first, which on rare near-ties moves the result by one:
  such positions are computed and allowed (:func:`requantized_both`). Type pairs and
  per-channel forms it has no kernel for are compared with the other oracles only.
* ONNX's reference reshapes per-channel weight parameters for 2-D convolutions only, and
  multiplies ``[..., 1, N]`` scales into a 1-D ``a``'s output without its M axis: those cases
  are compared with ONNX Runtime and the exact computation.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest
from onnx_harness import node_model, run_graphrt, run_ort, run_reference
from ops_harness import run_op

import graphrt
from graphrt.errors import ConversionError
from graphrt.ops import OpError, TensorType, get_op

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(11)
DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]


@pytest.fixture(autouse=True)
def _seeded(request: pytest.FixtureRequest) -> None:
    """Each test draws its own data, whatever else runs (``-k``, order)."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def ints(shape: Any, dtype: str, low: int | None = None, high: int | None = None
         ) -> np.ndarray:
    info = np.iinfo(dtype)
    lo = int(info.min) if low is None else low
    hi = int(info.max) if high is None else high
    return RNG.integers(lo, hi + 1, shape).astype(dtype)


def weights(shape: Any, x_type: str, w_type: str, ort_exact: bool) -> np.ndarray:
    """Weights of ``w_type``; 7-bit where ONNX Runtime's uint8 x int8 kernel would saturate."""
    if ort_exact and (x_type, w_type) == ("uint8", "int8"):
        return ints(shape, w_type, -64, 63)
    return ints(shape, w_type)


def check(model: Any, data: dict[str, np.ndarray], device: graphrt.Device,
          with_ort: bool = True, with_reference: bool = True,
          exact: np.ndarray | None = None, ort_ties: np.ndarray | None = None) -> np.ndarray:
    """graphrt on ``device`` equal to ONNX's reference, to ONNX Runtime and to ``exact`` (an
    independent result): dtype, shape, values.

    ``ort_ties``: where ONNX Runtime rounds the requantized product in float32, which moves
    a value within float32 precision of a half onto it (it then rounds to even): at those
    positions it may differ by one from the reference's float64 product, and only there.
    """
    (got,) = run_graphrt(model, data, device)
    oracles = [(oracle.__name__, oracle(model, data)[0]) for oracle, used in
               ((run_reference, with_reference), (run_ort, with_ort)) if used]
    if exact is not None:
        oracles.append(("exact", exact))
    assert oracles
    for name, want in oracles:
        assert got.dtype == want.dtype and got.shape == want.shape, (
            name, got.dtype, got.shape, want.dtype, want.shape)
        if name == "run_ort" and ort_ties is not None:
            moved = got != want
            assert not (moved & ~ort_ties).any(), "ONNX Runtime differs off float32 ties"
            assert (np.abs(got[moved].astype(np.int64) - want[moved]) == 1).all()
            continue
        np.testing.assert_array_equal(got, want, err_msg=name)
    return got


def requantized_both(acc: np.ndarray, multiplier: Any, zero: int, dtype: str
                     ) -> tuple[np.ndarray, np.ndarray]:
    """ONNX's reference requantization of the exact sums ``acc`` (the product and the zero
    point's sum in float64, rounded half to even, saturated), and where ONNX Runtime's (MLAS:
    the product rounded to float32, then rounded, then the zero point added) differs."""
    info = np.iinfo(dtype)
    wide = np.rint(acc.astype(np.float64) * np.asarray(multiplier).astype(np.float64) + zero)
    narrow = np.rint(acc.astype(np.float32) * np.asarray(multiplier).astype(np.float32)) + zero
    exact = np.clip(wide, info.min, info.max).astype(dtype)
    return exact, exact != np.clip(narrow, info.min, info.max).astype(dtype)


def conv_accumulator(x: np.ndarray, x_zero: Any, w: np.ndarray, w_zero: Any, bias: Any,
                     attrs: dict[str, Any]) -> np.ndarray:
    """The exact int32 sums of an integer convolution: ONNX's reference Conv of the
    differences in float64 (exact at these sizes), independent of the integer ops."""
    from onnx import TensorProto, helper

    xd = x.astype(np.float64) - np.float64(x_zero)
    zero = np.asarray(w_zero, np.float64)
    wd = w.astype(np.float64) - (zero.reshape((-1,) + (1,) * (w.ndim - 1)) if zero.size > 1
                                 else zero.reshape(()))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], "exact",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, xd.shape),
         helper.make_tensor_value_info("w", TensorProto.DOUBLE, wd.shape)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    (acc,) = run_reference(model, {"x": xd, "w": wd})
    if bias is not None:
        acc = acc + np.asarray(bias, np.float64).reshape((-1,) + (1,) * (x.ndim - 2))
    return acc.astype(np.int64)


# --------------------------------------------------------------------------------------------
# QLinearConv and ConvInteger

# (x shape, weight shape, attributes): padding, strides, dilations, groups, auto_pad, 1-D/3-D,
# and a sum of 40 * 9 = 360 > 258 terms (more than one exact float32 slice)
GEOMETRIES = {
    "pads-strides-dilations-groups": ((2, 8, 9, 10), (6, 4, 3, 3),
                                      {"pads": [1, 0, 2, 1], "strides": [2, 1],
                                       "dilations": [1, 2], "group": 2}),
    "depthwise": ((1, 6, 7, 7), (6, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2],
                                               "group": 6}),
    "same-upper": ((1, 3, 9, 8), (4, 3, 3, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 3]}),
    "1d": ((2, 4, 11), (5, 4, 3), {"pads": [2, 1], "dilations": [2]}),
    "3d": ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1]}),
    "pointwise": ((2, 16, 5, 5), (8, 16, 1, 1), {}),
    "long-sum": ((1, 40, 6, 6), (5, 40, 3, 3), {"pads": [1, 1, 1, 1]}),
}
# (x, w, y) types ONNX Runtime has QLinearConv kernels for
QCONV_TYPES = [("uint8", "uint8", "uint8"), ("uint8", "int8", "uint8"),
               ("int8", "int8", "int8")]


def qconv_consts(x_type: str, w_type: str, y_type: str, w_shape: tuple[int, ...],
                 per_channel: bool, bias: bool, ort_exact: bool) -> dict[str, Any]:
    o = w_shape[0]
    consts: dict[str, Any] = {
        "x_scale": np.float32(0.02), "x_zero_point": ints((), x_type),
        "w": weights(w_shape, x_type, w_type, ort_exact),
        "w_scale": ((RNG.random(o) * 0.02 + 0.002).astype(np.float32) if per_channel
                    else np.float32(0.01)),
        "w_zero_point": (ints((o,), w_type) if per_channel and w_type == "uint8"
                         else np.zeros(o, w_type) if per_channel else ints((), w_type)),
        "y_scale": np.float32(0.37), "y_zero_point": ints((), y_type)}
    if bias:
        consts["B"] = RNG.integers(-20000, 20000, o).astype(np.int32)
    return consts


def qconv_expected(x: np.ndarray, c: dict[str, Any], attrs: dict[str, Any]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The exact QLinearConv of ``x`` and where ONNX Runtime may round otherwise."""
    acc = conv_accumulator(x, c["x_zero_point"], c["w"], c["w_zero_point"], c.get("B"), attrs)
    scale = np.asarray(c["w_scale"], np.float32)
    per_channel = scale.reshape((-1,) + (1,) * (x.ndim - 2)) if scale.size > 1 else scale
    multiplier = np.float32(c["x_scale"]) * per_channel / np.float32(c["y_scale"])
    y_zero = np.asarray(c["y_zero_point"])
    return requantized_both(acc, multiplier, y_zero.item(), str(y_zero.dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("types", QCONV_TYPES, ids="-".join)
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
def test_qlinear_conv_matches_the_reference_and_onnxruntime(
        geometry: str, per_channel: bool, types: tuple[str, str, str],
        device: graphrt.Device) -> None:
    x_shape, w_shape, attrs = GEOMETRIES[geometry]
    x = ints(x_shape, types[0])
    consts = qconv_consts(*types, w_shape, per_channel, bias=geometry != "3d", ort_exact=True)
    exact, ties = qconv_expected(x, consts, attrs)
    # ONNX's reference reshapes per-channel scales for 2-D convolutions only
    check(node_model("QLinearConv", {"x": x}, consts, 10, **attrs), {"x": x}, device,
          with_reference=not per_channel or len(x_shape) == 4, exact=exact, ort_ties=ties)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("types", [("uint8", "int8", "uint8"), ("int8", "uint8", "int8"),
                                   ("uint8", "uint8", "int8"), ("int8", "int8", "uint8")],
                         ids="-".join)
def test_qlinear_conv_full_range_and_mixed_types_match_the_reference(
        types: tuple[str, str, str], device: graphrt.Device) -> None:
    x_shape, w_shape, attrs = GEOMETRIES["long-sum"]
    x = ints(x_shape, types[0])
    consts = qconv_consts(*types, w_shape, per_channel=True, bias=True, ort_exact=False)
    exact, _ = qconv_expected(x, consts, attrs)
    got = check(node_model("QLinearConv", {"x": x}, consts, 10, **attrs), {"x": x}, device,
                with_ort=False, exact=exact)
    info = np.iinfo(types[2])
    assert ((got == info.min) | (got == info.max)).any()  # saturation was exercised


@pytest.mark.parametrize("device", DEVICES)
def test_qlinear_conv_with_every_parameter_a_graph_input(device: graphrt.Device) -> None:
    x_shape, w_shape, attrs = GEOMETRIES["pads-strides-dilations-groups"]
    consts = qconv_consts("uint8", "uint8", "uint8", w_shape, True, True, True)
    data = {k: np.asarray(v) for k, v in {"x": ints(x_shape, "uint8"), **consts}.items()}
    exact, ties = qconv_expected(data["x"], consts, attrs)
    check(node_model("QLinearConv", data, {}, 10, **attrs), data, device, exact=exact,
          ort_ties=ties)


def test_qlinear_conv_requantizes_ties_to_even() -> None:
    # x_scale * w_scale / y_scale = 1/4: sums of 2, 6, 10, -2, -6 are 0.5, 1.5, 2.5, -0.5, -1.5
    x = np.array([[[2, 6, 10, -2, -6]]], np.int8)
    consts = {"x_scale": np.float32(0.5), "x_zero_point": np.int8(0), "w": np.ones((1, 1, 1),
                                                                                   np.int8),
              "w_scale": np.float32(0.5), "w_zero_point": np.int8(0), "y_scale": np.float32(1),
              "y_zero_point": np.int8(0)}
    got = check(node_model("QLinearConv", {"x": x}, consts, 10), {"x": x}, graphrt.cpu(0))
    np.testing.assert_array_equal(got, [[[0, 2, 2, -0, -2]]])


# ConvInteger: ONNX Runtime computes uint8 x uint8, uint8 x int8 (7-bit) and int8 x int8
# exactly, with per-tensor weight zero points only; ONNX's reference takes per-channel ones
# for 2-D convolutions only.
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("types", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8"),
                                   ("int8", "uint8")], ids="-".join)
@pytest.mark.parametrize("zero_points", ["none", "x", "per-tensor", "per-channel"])
@pytest.mark.parametrize("geometry", ["pads-strides-dilations-groups", "1d", "3d",
                                      "long-sum"])
def test_conv_integer_matches_the_reference_and_onnxruntime(
        geometry: str, zero_points: str, types: tuple[str, str],
        device: graphrt.Device) -> None:
    x_shape, w_shape, attrs = GEOMETRIES[geometry]
    x_type, w_type = types
    with_ort = types != ("int8", "uint8") and zero_points != "per-channel"
    x = ints(x_shape, x_type)
    consts: dict[str, Any] = {"w": weights(w_shape, x_type, w_type, with_ort),
                              "x_zero_point": None, "w_zero_point": None}
    if zero_points != "none":
        consts["x_zero_point"] = ints((), x_type)
    if zero_points == "per-tensor":
        consts["w_zero_point"] = ints((), w_type)
    elif zero_points == "per-channel":
        consts["w_zero_point"] = ints((w_shape[0],), w_type)
    exact = conv_accumulator(x, consts["x_zero_point"] or 0, consts["w"],
                             0 if consts["w_zero_point"] is None else consts["w_zero_point"],
                             None, attrs).astype(np.int32)
    got = check(node_model("ConvInteger", {"x": x}, consts, 10, **attrs), {"x": x}, device,
                with_ort=with_ort, exact=exact,
                with_reference=zero_points != "per-channel" or len(x_shape) == 4)
    assert got.dtype == np.int32


# --------------------------------------------------------------------------------------------
# QLinearMatMul and MatMulInteger

# (a shape, b shape): 2-D, batched with broadcasting, 1-D operands, a long sum
MATMUL_SHAPES = {
    "2d": ((5, 7), (7, 4)),
    "batched": ((2, 3, 6), (6, 5)),
    "broadcast-batch": ((3, 1, 4, 6), (2, 6, 5)),
    "vector-a": ((6,), (2, 6, 3)),
    "vector-b": ((2, 4, 6), (6,)),
    "long-sum": ((3, 700), (700, 4)),
}
QMATMUL_TYPES = [("uint8", "uint8", "uint8"), ("uint8", "int8", "uint8"),
                 ("int8", "int8", "int8")]


def per_column(b_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of a per-column parameter of ``b``: ``[N]``, or ``[..., 1, N]`` for a batched
    ``b`` (the form ONNX Runtime takes)."""
    return (b_shape[-1],) if len(b_shape) == 2 else (*b_shape[:-2], 1, b_shape[-1])


def qmatmul_consts(a_type: str, b_type: str, y_type: str, b_shape: tuple[int, ...],
                   columns: bool, ort_exact: bool, scale: str = "float32") -> dict[str, Any]:
    shape = per_column(b_shape) if columns and len(b_shape) > 1 else ()
    return {
        "a_scale": np.asarray(0.03, scale), "a_zero_point": ints((), a_type),
        "b": weights(b_shape, a_type, b_type, ort_exact),
        "b_scale": (RNG.random(shape) * 0.02 + 0.002).astype(scale),
        "b_zero_point": ints(shape, b_type),
        "y_scale": np.asarray(0.29, scale), "y_zero_point": ints((), y_type)}


def matmul_accumulator(a: np.ndarray, a_zero: Any, b: np.ndarray, b_zero: Any) -> np.ndarray:
    """The exact sums in int64, 1-D operands made a row and a column (the output keeps the
    axes of 1)."""
    a2 = a.astype(np.int64) - np.asarray(a_zero, np.int64)
    b2 = b.astype(np.int64) - np.asarray(b_zero, np.int64)
    return (a2 if a.ndim > 1 else a2[None]) @ (b2 if b.ndim > 1 else b2[:, None])


def qmatmul_expected(a: np.ndarray, c: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The exact QLinearMatMul of ``a`` and where ONNX Runtime may round otherwise."""
    b = c["b"]
    acc = matmul_accumulator(a, c["a_zero_point"], b, c["b_zero_point"])
    multiplier = c["a_scale"] * c["b_scale"] / c["y_scale"]  # in the scales' dtype
    y_zero = np.asarray(c["y_zero_point"])
    exact, ties = requantized_both(acc, multiplier, y_zero.item(), str(y_zero.dtype))
    shape = np.matmul(np.empty(a.shape, np.int8), np.empty(b.shape, np.int8)).shape
    return exact.reshape(shape), ties.reshape(shape)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("types", QMATMUL_TYPES, ids="-".join)
@pytest.mark.parametrize("columns", [False, True], ids=["per-tensor", "per-column"])
@pytest.mark.parametrize("shapes", sorted(MATMUL_SHAPES))
@pytest.mark.parametrize("opset", [10, 21])
def test_qlinear_matmul_matches_the_reference_and_onnxruntime(
        opset: int, shapes: str, columns: bool, types: tuple[str, str, str],
        device: graphrt.Device) -> None:
    a_shape, b_shape = MATMUL_SHAPES[shapes]
    a = ints(a_shape, types[0])
    consts = qmatmul_consts(*types, b_shape, columns, ort_exact=True)
    exact, ties = qmatmul_expected(a, consts)
    # ONNX's reference multiplies [..., 1, N] scales into the output of a 1-D a, which has
    # no M axis: they broadcast against the batch
    check(node_model("QLinearMatMul", {"a": a}, consts, opset), {"a": a}, device,
          with_reference=not (columns and shapes == "vector-a"), exact=exact, ort_ties=ties)


@pytest.mark.parametrize("device", DEVICES)
def test_qlinear_matmul_rounds_the_exact_product_where_onnxruntime_rounds_in_float32(
        device: graphrt.Device) -> None:
    # 1450 * (0.03f * 0.01f / 0.29f) is 1.49999996 exactly, 1.5 in float32: the reference (and
    # graphrt) give 1, ONNX Runtime 2
    a, consts = np.array([[10]], np.uint8), qmatmul_consts("uint8", "uint8", "uint8", (1, 1),
                                                           False, True)
    consts.update(b=np.array([[145]], np.uint8), a_zero_point=np.uint8(0),
                  b_zero_point=np.uint8(0), y_zero_point=np.uint8(0), a_scale=np.float32(0.03),
                  b_scale=np.float32(0.01), y_scale=np.float32(0.29))
    exact, ties = qmatmul_expected(a, consts)
    assert exact.item() == 1 and ties.all()
    check(node_model("QLinearMatMul", {"a": a}, consts, 10), {"a": a}, device, exact=exact,
          ort_ties=ties)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", ["float16", "float32"])
@pytest.mark.parametrize("types", [("uint8", "int8", "uint8"), ("int8", "uint8", "int8"),
                                   ("uint8", "uint8", "int8")], ids="-".join)
def test_qlinear_matmul_full_range_per_row_and_float16_scales_match_the_reference(
        types: tuple[str, str, str], scale: str, device: graphrt.Device) -> None:
    a = ints((3, 5, 300), types[0])
    consts = qmatmul_consts(*types, (300, 6), True, ort_exact=False, scale=scale)
    consts["a_scale"] = (RNG.random((5, 1)) * 0.02 + 0.01).astype(scale)  # per row
    consts["a_zero_point"] = ints((5, 1), types[0])
    exact, _ = qmatmul_expected(a, consts)
    got = check(node_model("QLinearMatMul", {"a": a}, consts, 21), {"a": a}, device,
                with_ort=False, exact=exact)
    info = np.iinfo(types[2])
    assert ((got == info.min) | (got == info.max)).any()


@pytest.mark.parametrize("device", DEVICES)
def test_qlinear_matmul_with_every_parameter_a_graph_input(device: graphrt.Device) -> None:
    consts = qmatmul_consts("uint8", "uint8", "uint8", (6, 5), True, True)
    data = {k: np.asarray(v) for k, v in {"a": ints((2, 3, 6), "uint8"), **consts}.items()}
    exact, ties = qmatmul_expected(data["a"], consts)
    check(node_model("QLinearMatMul", data, {}, 10), data, device, exact=exact, ort_ties=ties)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("types", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8"),
                                   ("int8", "uint8")], ids="-".join)
@pytest.mark.parametrize("zero_points", ["none", "a", "per-tensor", "per-column"])
@pytest.mark.parametrize("shapes", sorted(MATMUL_SHAPES))
def test_matmul_integer_matches_the_reference_and_onnxruntime(
        shapes: str, zero_points: str, types: tuple[str, str], device: graphrt.Device
        ) -> None:
    a_shape, b_shape = MATMUL_SHAPES[shapes]
    a_type, b_type = types
    a = ints(a_shape, a_type)
    consts: dict[str, Any] = {"b": weights(b_shape, a_type, b_type, True),
                              "a_zero_point": None, "b_zero_point": None}
    if zero_points != "none":
        consts["a_zero_point"] = ints((), a_type)
    if zero_points == "per-tensor":
        consts["b_zero_point"] = ints((), b_type)
    elif zero_points == "per-column":
        consts["b_zero_point"] = ints(per_column(b_shape) if len(b_shape) > 1 else (), b_type)
    exact = matmul_accumulator(a, consts["a_zero_point"] or 0, consts["b"],
                               0 if consts["b_zero_point"] is None else consts["b_zero_point"])
    exact = exact.reshape(np.matmul(np.empty(a_shape), np.empty(b_shape)).shape)
    got = check(node_model("MatMulInteger", {"a": a}, consts, 10), {"a": a}, device,
                exact=exact.astype(np.int32))
    assert got.dtype == np.int32


def test_matmul_integer_full_range_uint8_by_int8_matches_the_reference() -> None:
    a, b = ints((4, 500), "uint8"), ints((500, 3), "int8")
    consts = {"b": b, "a_zero_point": np.uint8(0), "b_zero_point": np.int8(-128)}
    exact = (a.astype(np.int64) @ (b.astype(np.int64) + 128)).astype(np.int32)
    check(node_model("MatMulInteger", {"a": a}, consts, 10), {"a": a}, graphrt.cpu(0),
          with_ort=False, exact=exact)


# --------------------------------------------------------------------------------------------
# The standard ops directly: exact sums, refusals


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_integer_op_is_exact_for_long_sums_of_extreme_values(
        device: graphrt.Device) -> None:
    # every product 255 * 255: float32 sums of more than 258 of them would round
    k = 5000
    a, b = np.full((2, k), 255, np.uint8), np.full((k, 3), 255, np.uint8)
    zero = np.zeros((), np.uint8)
    (got,) = run_op("matmul_integer", [a, b, zero, zero], device=device)
    np.testing.assert_array_equal(got, np.full((2, 3), 255 * 255 * k, np.int32))
    (got,) = run_op("matmul_integer", [a, b, zero, zero], device=device, lowered=True)
    np.testing.assert_array_equal(got, np.full((2, 3), 255 * 255 * k, np.int32))


@pytest.mark.parametrize("device", DEVICES)
def test_conv_integer_op_pads_with_the_zero_point(device: graphrt.Device) -> None:
    x = np.full((1, 1, 2, 2), 7, np.uint8)
    w = np.ones((1, 1, 3, 3), np.uint8)
    (got,) = run_op("conv_integer", [x, w, np.array(7, np.uint8), np.array(0, np.uint8)],
                    {"padding": [1, 1, 1, 1]}, device)
    np.testing.assert_array_equal(got, np.zeros((1, 1, 2, 2), np.int32))


def _t(shape: tuple[int, ...], dtype: str) -> TensorType:
    return TensorType(shape, dtype)


@pytest.mark.parametrize(("name", "types", "attrs", "match"), [
    ("conv_integer", [_t((1, 2, 4, 4), "float32"), _t((1, 2, 3, 3), "int8"),
                      _t((), "float32"), _t((), "int8")], {}, "int8 or uint8"),
    ("conv_integer", [_t((1, 2, 4, 4), "uint8"), _t((1, 2, 3, 3), "int8"),
                      _t((), "int8"), _t((), "int8")], {}, "zero point of x"),
    ("conv_integer", [_t((1, 2, 4, 4), "uint8"), _t((3, 2, 3, 3), "int8"),
                      _t((), "uint8"), _t((2,), "int8")], {}, r"per output channel \(\[3\]\)"),
    ("conv_integer", [_t((1, 4, 4, 4), "uint8"), _t((3, 2, 3, 3), "int8"),
                      _t((), "uint8"), _t((), "int8")], {"groups": 2}, "divisible by groups"),
    ("conv_integer", [_t((1, 2, 2, 2), "uint8"), _t((3, 2, 3, 3), "int8"),
                      _t((), "uint8"), _t((), "int8")], {}, "larger than the padded input"),
    ("qlinear_conv", [_t((1, 2, 4, 4), "uint8"), _t((), "float32"), _t((2,), "uint8"),
                      _t((3, 2, 3, 3), "int8"), _t((3,), "float32"), _t((3,), "int8"),
                      _t((), "float32"), _t((), "uint8")], {}, "x's zero point must be per"),
    ("qlinear_conv", [_t((1, 2, 4, 4), "uint8"), _t((), "float32"), _t((), "uint8"),
                      _t((3, 2, 3, 3), "int8"), _t((3,), "float16"), _t((3,), "int8"),
                      _t((), "float32"), _t((), "uint8")], {}, "scales must share"),
    ("qlinear_conv", [_t((1, 2, 4, 4), "uint8"), _t((), "float32"), _t((), "uint8"),
                      _t((3, 2, 3, 3), "int8"), _t((3,), "float32"), _t((3,), "int8"),
                      _t((), "float32"), _t((), "uint8"), _t((3,), "float32")], {},
     r"bias must be int32\[3\]"),
    ("matmul_integer", [_t((4, 3), "uint8"), _t((2, 5), "int8"), _t((), "uint8"),
                        _t((), "int8")], {}, "do not multiply"),
    ("matmul_integer", [_t((4, 3), "uint8"), _t((3, 5), "int8"), _t((4,), "uint8"),
                        _t((), "int8")], {}, r"per row \(\[\.\.\., M, 1\]\)"),
    ("matmul_integer", [_t((2, 4, 3), "uint8"), _t((3, 3, 5), "int8"), _t((), "uint8"),
                        _t((), "int8")], {}, "batch axes"),
    ("qlinear_matmul", [_t((4, 3), "uint8"), _t((), "float32"), _t((), "uint8"),
                        _t((3, 5), "int8"), _t((3, 1), "float32"), _t((), "int8"),
                        _t((), "float32"), _t((), "uint8")], {}, "per column"),
    ("qlinear_matmul", [_t((4, 3), "uint8"), _t((), "float32"), _t((), "uint8"),
                        _t((3, 5), "int8"), _t((), "float32"), _t((), "int8"),
                        _t((5,), "float32"), _t((), "uint8")], {}, "y's scale must be per"),
])
def test_the_ops_refuse_bad_inputs_with_op_errors(name: str, types: list[TensorType],
                                                   attrs: dict[str, Any], match: str) -> None:
    op = get_op(name)
    with pytest.raises(OpError, match=match):
        op.infer(types, op.attrs.model_validate(attrs), [None] * len(types))


# --------------------------------------------------------------------------------------------
# Conversion errors name the node


def test_a_per_row_zero_point_given_as_a_vector_is_a_conversion_error() -> None:
    a = ints((4, 3), "uint8")
    consts = {"b": ints((3, 2), "uint8"), "a_zero_point": ints((4,), "uint8")}
    with pytest.raises(ConversionError, match=r"my_matmulinteger.*per row"):
        graphrt.from_onnx(node_model("MatMulInteger", {"a": a}, consts, 10))


def test_float16_scales_before_opset_21_are_a_conversion_error() -> None:
    a = ints((4, 3), "uint8")
    consts = qmatmul_consts("uint8", "uint8", "uint8", (3, 2), False, True, scale="float16")
    with pytest.raises(ConversionError, match=r"my_qlinearmatmul.*QLinearMatMul-10 takes "
                                              r"scales of one type among float32"):
        graphrt.from_onnx(node_model("QLinearMatMul", {"a": a}, consts, 10))


def test_a_zero_point_of_another_type_is_a_conversion_error() -> None:
    x = ints((1, 2, 4, 4), "uint8")
    consts = {"w": ints((3, 2, 3, 3), "int8"), "x_zero_point": np.int8(0)}
    with pytest.raises(ConversionError, match=r"my_convinteger.*x_zero_point must be uint8"):
        graphrt.from_onnx(node_model("ConvInteger", {"x": x}, consts, 10))


def test_a_float_bias_is_a_conversion_error() -> None:
    x_shape, w_shape, attrs = GEOMETRIES["pointwise"]
    x = ints(x_shape, "uint8")
    consts = qconv_consts("uint8", "uint8", "uint8", w_shape, False, False, True)
    consts["B"] = np.zeros(w_shape[0], np.float32)
    with pytest.raises(ConversionError, match=r"my_qlinearconv.*bias B must be int32"):
        graphrt.from_onnx(node_model("QLinearConv", {"x": x}, consts, 10, **attrs))


def test_a_per_channel_scale_of_the_wrong_length_is_a_conversion_error() -> None:
    x_shape, w_shape, attrs = GEOMETRIES["pointwise"]
    x = ints(x_shape, "uint8")
    consts = qconv_consts("uint8", "uint8", "uint8", w_shape, True, False, True)
    consts["w_scale"] = np.ones(3, np.float32)
    with pytest.raises(ConversionError, match=r"my_qlinearconv.*per output channel"):
        graphrt.from_onnx(node_model("QLinearConv", {"x": x}, consts, 10, **attrs))


# --------------------------------------------------------------------------------------------
# A model quantized by ONNX Runtime


def _float_model() -> Any:
    from onnx import TensorProto, helper, numpy_helper
    from ort_compat import ort_ir_version

    rng = np.random.default_rng(3)
    params = {"w1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b1": rng.standard_normal(8) * 0.1,
              "w2": rng.standard_normal((8, 4, 3, 3)) * 0.3, "w3": rng.standard_normal((4, 6))}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], group=2,
                              pads=[1, 1, 1, 1]),
             helper.make_node("MatMul", ["c2", "w3"], ["y"])]
    graph = helper.make_graph(
        nodes, "float", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 4, 6])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             ir_version=ort_ir_version())


def _quantized(tmp_path: Any, fmt: str) -> Any:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(5)
    batches = [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(8)]

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.batches = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    source, target = tmp_path / "float.onnx", tmp_path / f"{fmt}.onnx"
    onnx.save(_float_model(), str(source))
    # reduce_range: 7-bit weights, which ONNX Runtime's uint8 x int8 kernels sum exactly
    # on every CPU (see the module's docstring)
    quantize_static(str(source), str(target), Reader(), quant_format=getattr(QuantFormat, fmt),
                    per_channel=True, reduce_range=True)
    return onnx.load(str(target))


@pytest.mark.parametrize("device", DEVICES)
def test_a_model_quantized_by_onnxruntime_matches_it_within_one_quantization_step(
        tmp_path: Any, device: graphrt.Device) -> None:
    qop, qdq = _quantized(tmp_path, "QOperator"), _quantized(tmp_path, "QDQ")
    ops = [node.op_type for node in qop.graph.node]
    assert ops.count("QLinearConv") == 2 and "QLinearMatMul" in ops
    last = qop.graph.node[-1]
    assert last.op_type == "DequantizeLinear"
    scales = {t.name: onnx.numpy_helper.to_array(t) for t in qop.graph.initializer}
    step = float(scales[last.input[1]])  # the output's quantization step
    x = {"x": np.random.default_rng(9).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    (got,) = run_graphrt(qop, x, device)
    (ort_qop,) = run_ort(qop, x)
    (ort_qdq,) = run_ort(qdq, x)  # ONNX Runtime fuses the QDQ pairs into its integer kernels
    (graphrt_qdq,) = run_graphrt(qdq, x, device)  # graphrt runs them in float
    for other in (ort_qop, ort_qdq, graphrt_qdq):
        assert got.shape == other.shape and got.dtype == other.dtype == np.float32
        np.testing.assert_allclose(got, other, rtol=0, atol=step * 1.001)
    assert np.abs(got).max() > 10 * step  # a meaningful output, not all zeros
