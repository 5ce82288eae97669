"""The low-precision ONNX element types (FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2,
FLOAT8E5M2FNUZ, FLOAT8E8M0, FLOAT4E2M1, INT4, UINT4, INT2, UINT2) through ml_dtypes: the dtype
table, params blobs and bundles, and Cast, CastLike, QuantizeLinear and DequantizeLinear
against ONNX's reference implementation, bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx_harness import node_model, run_graphrt, run_reference

import graphrt
from graphrt.bundle import read_safetensors, write_safetensors
from graphrt.errors import ConversionError, GraphFormatError
from graphrt.ops import OpError, TensorType, get_op
from graphrt.ops.quantize import cast_low_precision
from graphrt.schema import dtype_from_code, dtype_of, parse_dtype
from graphrt.schema.dtypes import LOW_PRECISION

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

# graphrt dtype → (ONNX element type, DLPack code, bits)
TYPES: dict[str, tuple[int, int, int]] = {
    "float8_e4m3fn": (TensorProto.FLOAT8E4M3FN, 10, 8),
    "float8_e4m3fnuz": (TensorProto.FLOAT8E4M3FNUZ, 11, 8),
    "float8_e5m2": (TensorProto.FLOAT8E5M2, 12, 8),
    "float8_e5m2fnuz": (TensorProto.FLOAT8E5M2FNUZ, 13, 8),
    "float8_e8m0fnu": (TensorProto.FLOAT8E8M0, 14, 8),
    "float4_e2m1fn": (TensorProto.FLOAT4E2M1, 17, 4),
    "int4": (TensorProto.INT4, 0, 4),
    "uint4": (TensorProto.UINT4, 1, 4),
    "int2": (TensorProto.INT2, 0, 2),
    "uint2": (TensorProto.UINT2, 1, 2),
}
FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
SMALL_INTS = ["int4", "uint4", "int2", "uint2"]
DEVICES = [pytest.param(graphrt.cpu(0), id="cpu"), pytest.param(graphrt.sim(0), id="sim")]

# Values that reach every rounding case: ties, subnormals, the largest finite values and past
# them, infinities, NaN and signed zeros.
FLOATS = np.array([0.0, -0.0, 0.1, 0.47892547, 0.5, 1.0, 1.0625, 1.125, -1.1875, 2.75, 3.0,
                   -5.5, 6.0, 7.0, 100.0, 240.0, 248.0, 440.0, 448.0, 464.0, 500.0, -10000.0,
                   57344.0, 61440.0, 1e6, -1e6, 1e-7, -1e-3, 2.0**-9, 2.0**-10, 2.0**-17,
                   np.inf, -np.inf, np.nan], np.float32)


def np_dtype(name: str) -> np.dtype[Any]:
    return np.dtype(getattr(ml_dtypes, name))


def sample(name: str) -> np.ndarray:
    """Every value a type can hold (its 16 or 4 codes for the sub-byte ones, else all 256 bit
    patterns), so a round trip is checked bit for bit."""
    dtype = np_dtype(name)
    if name in SMALL_INTS:
        info = ml_dtypes.iinfo(dtype)
        return np.arange(info.min, info.max + 1).astype(dtype)
    if name == "float4_e2m1fn":
        return np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                        np.float32).astype(dtype)
    return np.arange(256, dtype=np.uint8).view(dtype)


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                 want.dtype, want.shape)
    bits = np.dtype(f"uint{8 * got.dtype.itemsize}")
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(bits),
                                  np.ascontiguousarray(want).view(bits))


def check_reference(model: Any, data: dict[str, np.ndarray],
                    device: graphrt.Device | None = None) -> list[np.ndarray]:
    got, want = run_graphrt(model, data, device), run_reference(model, data)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        same_bits(g, np.asarray(w))
    return got


# --------------------------------------------------------------------------------------------
# The dtype table, params blobs and bundles


@pytest.mark.parametrize("name", LOW_PRECISION)
def test_each_type_is_a_graph_dtype_of_one_byte(name: str) -> None:
    _, code, bits = TYPES[name]
    dtype = parse_dtype(name)
    assert (dtype.code, dtype.bits, dtype.itemsize) == (code, bits, 1)
    assert dtype.numpy == np_dtype(name)
    assert dtype_from_code(code, bits, 1) is dtype
    assert dtype_of(np_dtype(name)) is dtype


def test_the_table_names_every_low_precision_type_once() -> None:
    assert sorted(LOW_PRECISION) == sorted(TYPES)
    with pytest.raises(ValueError, match="unsupported dtype 'float6_e2m3fn'"):
        parse_dtype("float6_e2m3fn")


@pytest.mark.parametrize("name", LOW_PRECISION)
def test_a_params_blob_round_trips_each_type(name: str) -> None:
    values = sample(name).reshape(-1, 1)
    blob = graphrt.save_params({"w": values})
    _, code, bits = TYPES[name]
    assert bytes([code, bits]) in blob
    back = graphrt.load_params(blob)["w"]
    same_bits(back, values)


def test_a_params_blob_with_packed_sub_byte_data_is_refused() -> None:
    """graphrt's blobs hold one int4 a byte; a blob that says 4 elements in 2 bytes (packed)
    is refused, not misread."""
    blob = bytearray(graphrt.save_params({"w": np.zeros(4, ml_dtypes.int4)}))
    size_at = blob.rindex((4).to_bytes(8, "little"))
    blob[size_at:size_at + 8] = (2).to_bytes(8, "little")
    with pytest.raises(GraphFormatError, match="which is 4 bytes, but says 2"):
        graphrt.load_params(bytes(blob[:-2]))


def identity_model(values: np.ndarray, elem: int) -> Any:
    """A model whose output ``y`` is the initializer ``w`` and whose output ``z`` is the
    graph input ``x`` cast to ``elem``."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"]),
         helper.make_node("Cast", ["x"], ["z"], to=elem)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", elem, list(values.shape)),
         helper.make_tensor_value_info("z", elem, [3])],
        [numpy_helper.from_array(values, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])


@pytest.mark.parametrize("name", LOW_PRECISION)
def test_each_type_round_trips_through_a_saved_bundles_params(name: str,
                                                              tmp_path: Path) -> None:
    elem = TYPES[name][0]
    values = sample(name)
    bundle = graphrt.from_onnx(identity_model(values, elem))
    bundle.save(tmp_path / "model.grb")
    loaded = graphrt.load_bundle(tmp_path / "model.grb")
    same_bits(np.asarray(loaded.params["w"]), values)
    x = np.array([1.0, 2.0, 0.5], np.float32)
    y, z = loaded.create("cpu")(x=x)
    same_bits(np.asarray(y), values)
    same_bits(np.asarray(z), x.astype(np_dtype(name)))


def test_float8_params_use_safetensors_own_codes_and_sub_byte_ones_graphrts(
        tmp_path: Path) -> None:
    """float8 tensors are written with safetensors' codes (F8_E4M3 is float8_e4m3fn); int4,
    int2 and float4 have none for one value a byte, so graphrt writes codes of its own."""
    values = {"a": sample("float8_e4m3fn"), "b": sample("float8_e5m2fnuz"),
              "c": sample("int4")}
    path = tmp_path / "t.safetensors"
    with path.open("wb") as file:
        write_safetensors(file, values)
    data = path.read_bytes()
    header = data[8:8 + int.from_bytes(data[:8], "little")]
    assert b'"F8_E4M3"' in header and b'"F8_E5M2FNUZ"' in header and b'"I4_U8"' in header
    back = read_safetensors(memoryview(data))
    for name, array in values.items():
        same_bits(back[name], array)


def test_a_packed_int4_initializer_stored_externally_is_read_and_unpacked(
        tmp_path: Path) -> None:
    values = np.array([-8, -1, 0, 3, 7], ml_dtypes.int4)  # 5 values: 3 packed bytes
    model = identity_model(values, TensorProto.INT4)
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    assert (tmp_path / "w.bin").stat().st_size == 3
    (y, _) = graphrt.from_onnx(tmp_path / "m.onnx").create("cpu")(
        x=np.zeros(3, np.float32))
    same_bits(np.asarray(y), values)


# --------------------------------------------------------------------------------------------
# Cast and CastLike


def cast_model(source: np.ndarray, to: int, opset: int = 25, **attrs: Any) -> Any:
    return node_model("Cast", {"x": source}, {}, opset, to=to, **attrs)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("source", ["float32", "float16", "float64", "bfloat16"])
@pytest.mark.parametrize("name", FLOAT8)
def test_cast_to_float8_with_and_without_saturate(name: str, source: str, saturate: int) -> None:
    with np.errstate(over="ignore"):  # 1e6 is inf in float16
        x = FLOATS.astype(np_dtype(source) if source == "bfloat16" else source)
    check_reference(cast_model(x, TYPES[name][0], saturate=saturate), {"x": x})


@pytest.mark.parametrize("name", FLOAT8)
def test_cast_saturates_by_default_and_before_opset_19(name: str) -> None:
    x = np.array([1e6, -np.inf, np.inf, 2.0], np.float32)
    top = float(ml_dtypes.finfo(np_dtype(name)).max)
    for model in (cast_model(x, TYPES[name][0]), cast_model(x, TYPES[name][0], opset=19)):
        (y,) = check_reference(model, {"x": x})
        assert y.astype(np.float32).tolist() == [top, -top, top, 2.0]
    (y,) = run_graphrt(cast_model(x, TYPES[name][0], saturate=0), {"x": x})
    assert not np.isfinite(y.astype(np.float32)[:3]).any()


@pytest.mark.parametrize("name", ["float4_e2m1fn", *SMALL_INTS])
@pytest.mark.parametrize("source", ["float32", "float16"])
def test_cast_to_float4_and_the_small_integers(name: str, source: str) -> None:
    x = np.concatenate([FLOATS[np.isfinite(FLOATS) & (np.abs(FLOATS) < 100)],
                        np.arange(-9, 16)]).astype(source)
    check_reference(cast_model(x, TYPES[name][0]), {"x": x})


@pytest.mark.parametrize("source", ["int8", "int64", "uint8", "bool"])
@pytest.mark.parametrize("name", LOW_PRECISION)
def test_cast_integers_and_bool_to_each_type(name: str, source: str) -> None:
    if name == "float8_e8m0fnu" and source != "bool":
        x = np.array([1, 2, 3, 64, 100, 127], source)
    else:
        x = (np.array([0, 1, 0, 1]) if source == "bool" else
             np.array([0, 1, 2, 3, 5, 7, 8, 15, 16, 100, 127, 200 % 128])).astype(source)
    check_reference(cast_model(x, TYPES[name][0]), {"x": x})


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # e8m0
@pytest.mark.parametrize("target", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE,
                                    TensorProto.INT8, TensorProto.INT32, TensorProto.UINT8,
                                    TensorProto.BOOL, TensorProto.BFLOAT16])
@pytest.mark.parametrize("name", LOW_PRECISION)
def test_cast_each_type_to_the_standard_ones(name: str, target: int) -> None:
    x = sample(name)
    if target not in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE,
                      TensorProto.BFLOAT16, TensorProto.BOOL):
        wide = x.astype(np.float32)
        x = x[np.isfinite(wide) & (np.abs(wide) < 100)]  # out of range is undefined
        if target == TensorProto.UINT8:
            x = x[x.astype(np.float32) >= 0]
    check_reference(cast_model(x, target), {"x": x})


@pytest.mark.parametrize("target", LOW_PRECISION)
@pytest.mark.parametrize("name", LOW_PRECISION)
def test_cast_between_low_precision_types(name: str, target: str) -> None:
    """Every pair, including those ml_dtypes cannot convert directly (int4 to uint2, float8
    to float8_e8m0fnu): graphrt goes through float32 or int8, which hold every value."""
    if name == target:
        return
    x = sample(name)
    wide = x.astype(np.float32)
    if target in SMALL_INTS:  # floats past an integer type's range are undefined
        x = x[np.isfinite(wide) & (np.abs(wide) < 8)]
    if target == "float8_e8m0fnu":  # negative values are undefined
        x = x[~(wide < 0)]
    model = cast_model(x, TYPES[target][0])
    (got,) = run_graphrt(model, {"x": x})
    try:
        (want,) = run_reference(model, {"x": x})
    except TypeError:  # "Cannot cast array data from dtype(int4) to dtype(uint2)": ml_dtypes
        assert name in SMALL_INTS or name == "float8_e8m0fnu"  # has no direct conversion
        want = x.astype(np.int8 if name in SMALL_INTS else np.float32).astype(np_dtype(target))
    same_bits(got, np.asarray(want))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("source", ["float32", "float16"])
def test_cast_to_float8_e8m0_rounds_as_the_reference(round_mode: str, saturate: int,
                                                     source: str) -> None:
    x = np.array([0.0, 1e-40, 2.0**-127, 2.0**-126, 0.3, 0.5, 0.75, 1.0, 1.5, 1.75, 3.0, 6.0,
                  2.0**126 * 1.5, 2.0**127, 2.0**127 * 1.5, 3e38, np.inf, np.nan,
                  *np.linspace(0.01, 1000, 51)], np.float32)
    with np.errstate(over="ignore"):  # the largest are inf in float16
        x = x.astype(source)
    check_reference(cast_model(x, TensorProto.FLOAT8E8M0, saturate=saturate,
                               round_mode=round_mode), {"x": x})


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "int4", "float4_e2m1fn"])
def test_cast_like_takes_the_target_and_saturate(name: str, saturate: int) -> None:
    x = FLOATS if name not in SMALL_INTS else np.arange(-9.0, 16.0, dtype=np.float32)
    like = np.zeros(1, np_dtype(name))
    model = node_model("CastLike", {"x": x}, {"like": like}, 25, saturate=saturate)
    check_reference(model, {"x": x})


@pytest.mark.parametrize("device", DEVICES)
def test_casts_run_on_cpu_and_sim(device: graphrt.Device) -> None:
    for name in LOW_PRECISION:
        x = FLOATS if name not in SMALL_INTS else FLOATS[np.abs(FLOATS) < 7]
        (y,) = check_reference(cast_model(x, TYPES[name][0]), {"x": x}, device)
        check_reference(cast_model(y, TensorProto.FLOAT), {"x": y}, device)


def test_a_bad_round_mode_is_a_conversion_error_naming_the_node() -> None:
    model = cast_model(FLOATS, TensorProto.FLOAT8E8M0, round_mode="sideways")
    with pytest.raises(ConversionError, match=r"my_cast.*round_mode must be one of up, "
                                              r"down, nearest, given 'sideways'"):
        graphrt.from_onnx(model)


def test_types_graphrt_still_lacks_are_conversion_errors_naming_them() -> None:
    x = np.ones(3, np.float32)
    with pytest.raises(ConversionError, match=r"my_cast.*element type FLOAT6E2M3 is not "
                                              r"supported"):
        graphrt.from_onnx(cast_model(x, TensorProto.FLOAT6E2M3))


def test_the_cast_op_refuses_two_standard_types_and_unknown_ones() -> None:
    op = get_op("cast_low_precision")
    f32 = TensorType((2,), "float32")
    with pytest.raises(OpError, match="not float32 to int8: use cast"):
        op.infer([f32], op.attrs(dtype="int8"), [None])
    with pytest.raises(OpError, match="unsupported target dtype 'float6_e2m3fn'"):
        op.infer([f32], op.attrs(dtype="float6_e2m3fn"), [None])
    assert op.infer([f32], op.attrs(dtype="int4"), [None]) == [TensorType((2,), "int4")]
    assert not graphrt.kernels.supports("cuda", op)
    assert graphrt.kernels.supports("cpu", op) and graphrt.kernels.supports("sim", op)


def test_cast_low_precision_writes_into_the_output() -> None:
    out = np.empty(4, ml_dtypes.float8_e5m2)
    cast_low_precision(np, np.array([1.0, 1e6, -np.inf, np.nan], np.float32), out,
                       saturate=False)
    assert out.astype(np.float32)[:3].tolist() == [1.0, np.inf, -np.inf]
    assert np.isnan(out.astype(np.float32)[3])


# --------------------------------------------------------------------------------------------
# QuantizeLinear and DequantizeLinear

QX = np.array([[0.0, 2.5, 4.8, 8.6, -1.0, 1000.0],
               [-30.0, -20.0, 6.0, 9.0, 0.25, -0.75],
               [12.0, 15.0, 16.0, 40.0, -3.0, 1e6]], np.float32)


@pytest.mark.parametrize("zero", [0, 1])
@pytest.mark.parametrize("name", ["int4", "uint4", "int2", "uint2", "float4_e2m1fn"])
def test_quantize_per_axis_to_the_small_types(name: str, zero: int) -> None:
    scale = np.array([2.0, 3.0, 4.0], np.float32)
    zero_point = np.full(3, zero if name != "float4_e2m1fn" else 0).astype(np_dtype(name))
    model = node_model("QuantizeLinear", {"x": QX}, {"s": scale, "z": zero_point}, 25, axis=0)
    check_reference(model, {"x": QX})


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("name", FLOAT8)
def test_quantize_to_float8_with_and_without_saturate(name: str, saturate: int) -> None:
    x = np.concatenate([FLOATS, QX.reshape(-1)])
    zero_point = np.zeros(1, np_dtype(name))
    model = node_model("QuantizeLinear", {"x": x}, {"s": np.float32(0.5), "z": zero_point},
                       21, saturate=saturate)
    check_reference(model, {"x": x})


@pytest.mark.parametrize("name", [*FLOAT8, "float4_e2m1fn", *SMALL_INTS])
def test_quantize_with_output_dtype_and_no_zero_point(name: str) -> None:
    model = node_model("QuantizeLinear", {"x": QX}, {"s": np.float32(2.0)}, 25,
                       output_dtype=TYPES[name][0])
    check_reference(model, {"x": QX})


@pytest.mark.parametrize("name", ["int4", "uint4", "float8_e4m3fn"])
def test_blocked_quantize_and_dequantize(name: str) -> None:
    scale = np.array([[1.5, 2.0], [0.5, 4.0], [3.0, 1.0]], np.float32)
    zero = np.array([[1, 0], [2, 3], [0, 1]]) if name != "float8_e4m3fn" else np.zeros((3, 2))
    zero_point = zero.astype(np_dtype(name))
    quantize = node_model("QuantizeLinear", {"x": QX}, {"s": scale, "z": zero_point}, 21,
                          axis=1, block_size=4)
    (q,) = check_reference(quantize, {"x": QX})
    dequantize = node_model("DequantizeLinear", {"q": q}, {"s": scale, "z": zero_point}, 21,
                            axis=1, block_size=4)
    check_reference(dequantize, {"q": q})


@pytest.mark.parametrize("output", [None, TensorProto.FLOAT16, TensorProto.BFLOAT16])
@pytest.mark.parametrize("name", LOW_PRECISION)
def test_dequantize_each_type(name: str, output: int | None) -> None:
    if name == "float8_e8m0fnu":
        return  # not a quantized type
    x = sample(name)
    scale = np.float32(0.5)
    consts: dict[str, Any] = {"s": scale}
    if name not in FLOAT8:
        consts["z"] = np.array(1 if name in SMALL_INTS else 0).astype(np_dtype(name))
    attrs = {} if output is None else {"output_dtype": output}
    model = node_model("DequantizeLinear", {"x": x}, consts, 25, **attrs)
    check_reference(model, {"x": x})


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn"])
def test_a_float_zero_point_of_zero_is_accepted_and_one_that_is_not_refused(name: str) -> None:
    """ONNX's reference ignores a float8 zero point, and a float4 one where it dequantizes but
    not where it quantizes: graphrt refuses one that is not 0 rather than pick a side."""
    x = sample(name)
    zero = np.zeros(1, np_dtype(name))
    check_reference(node_model("DequantizeLinear", {"x": x}, {"s": np.float32(2.0), "z": zero},
                               25), {"x": x})
    check_reference(node_model("QuantizeLinear", {"x": FLOATS}, {"s": np.float32(2.0),
                                                                 "z": zero}, 25), {"x": FLOATS})
    one = np.ones(1, np_dtype(name))
    with pytest.raises(ConversionError, match=rf"my_dequantizelinear.*{name} zero "
                                              r"point must be 0"):
        graphrt.from_onnx(node_model("DequantizeLinear", {"x": x}, {"s": np.float32(2.0),
                                                                    "z": one}, 25))
    with pytest.raises(ConversionError, match=rf"my_quantizelinear.*{name} zero "
                                              r"point must be 0"):
        graphrt.from_onnx(node_model("QuantizeLinear", {"x": FLOATS},
                                     {"s": np.float32(2.0), "z": one}, 25))


def test_a_float8_e8m0_scale() -> None:
    """An MX-style power-of-two scale: QuantizeLinear divides by it, DequantizeLinear needs
    output_dtype (the output cannot be float8e8m0)."""
    scale = np.array([0.25, 2.0, 8.0], ml_dtypes.float8_e8m0fnu)
    zero = np.zeros(3, ml_dtypes.int4)
    quantize = node_model("QuantizeLinear", {"x": QX}, {"s": scale, "z": zero}, 25, axis=0)
    (q,) = check_reference(quantize, {"x": QX})
    dequantize = node_model("DequantizeLinear", {"q": q}, {"s": scale, "z": zero}, 25, axis=0,
                            output_dtype=TensorProto.FLOAT)
    check_reference(dequantize, {"q": q})


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_dequantize_round_trip_on_cpu_and_sim(device: graphrt.Device) -> None:
    for name in ["int4", "uint2", "float8_e5m2", "float4_e2m1fn"]:
        model = node_model("QuantizeLinear", {"x": QX}, {"s": np.float32(4.0)}, 25,
                           output_dtype=TYPES[name][0])
        (q,) = check_reference(model, {"x": QX}, device)
        back = node_model("DequantizeLinear", {"q": q}, {"s": np.float32(4.0)}, 25)
        check_reference(back, {"q": q}, device)


def test_dequantize_with_a_float8_e8m0_scale_needs_output_dtype() -> None:
    scale = np.array([0.25, 2.0, 8.0], ml_dtypes.float8_e8m0fnu)
    q = np.zeros((3, 6), ml_dtypes.int4)
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["q", "s"], ["y"], name="dq", axis=0)], "g",
        [helper.make_tensor_value_info("q", TensorProto.INT4, [3, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 6])],
        [numpy_helper.from_array(scale, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    with pytest.raises(ConversionError, match=r"'dq'.*a float8e8m0 scale needs output_dtype"):
        graphrt.from_onnx(model).create("cpu")(q=q)
