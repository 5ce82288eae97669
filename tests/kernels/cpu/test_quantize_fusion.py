"""Per-tensor quantize and dequantize fused into the compiled elementwise loops on cpu
(graphrt.ops.quantize's expressions, graphrt.kernels.cpu.loops): a QDQ model's
``DequantizeLinear, DequantizeLinear, Add, QuantizeLinear`` is one node and one loop, bitwise
the numpy path (fusion off, ``GRAPHRT_JIT=0``, the sim device), within one quantization unit
of ONNX Runtime; per-axis ones stay unfused and correct."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.kernels.cpu import loops
from graphrt.ops import TensorType, get_op
from graphrt.ops.quantize import QUANT_EXPRESSIONS

numba = pytest.importorskip("numba")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(7)
SHAPE = (2, 3, 16, 17)


@pytest.fixture(autouse=True)
def cache(loop_cache: Path) -> Path:
    return loop_cache


# -- models ---------------------------------------------------------------------------------


def _model(nodes: list[Any], inputs: dict[str, Array], outputs: dict[str, str],
           consts: dict[str, Array]) -> Any:
    """A model of ``nodes`` (opset 21: int16 and output_dtype), graph inputs typed as
    ``inputs``, outputs named with their dtype, ``consts`` as initializers."""
    graph = helper.make_graph(
        nodes, "q",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(np.dtype(d)), SHAPE)
         for k, d in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _q(x: str, scale: str, zero: str | None, out: str, dtype: str) -> Any:
    return helper.make_node("QuantizeLinear", [x, scale, *([zero] if zero else [])], [out],
                            output_dtype=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


def _dq(x: str, scale: str, zero: str | None, out: str) -> Any:
    return helper.make_node("DequantizeLinear", [x, scale, *([zero] if zero else [])], [out])


def _quantized(dtype: str) -> Array:
    """Random values over the whole range of ``dtype``, both ends included."""
    info = np.iinfo(dtype)
    values = RNG.integers(info.min, int(info.max) + 1, SHAPE).astype(dtype)
    values.flat[:2] = info.min, info.max
    return values


def _zero(dtype: str, zero: bool, where: float) -> Array | None:
    """A zero point at fraction ``where`` of ``dtype``'s range (None: no zero point)."""
    info = np.iinfo(dtype)
    return np.array(int(info.min + where * (int(info.max) - int(info.min))), dtype) if zero \
        else None


def _residual(dtype: str, zero: bool, scales: tuple[float, float, float]) -> tuple[Any, Any]:
    """``Q(DQ(a) + DQ(b))``, a QDQ residual add, and its feeds."""
    za, zb, zy = (_zero(dtype, zero, w) for w in (0.5, 0.4, 0.6))
    consts = {"sa": np.array(scales[0], np.float32), "sb": np.array([scales[1]], np.float32),
              "sy": np.array(scales[2], np.float32)}
    consts.update({k: v for k, v in (("za", za), ("zb", zb), ("zy", zy)) if v is not None})
    nodes = [_dq("a", "sa", "za" if zero else None, "da"),
             _dq("b", "sb", "zb" if zero else None, "db"),
             helper.make_node("Add", ["da", "db"], ["u"]),
             _q("u", "sy", "zy" if zero else None, "y", dtype)]
    feeds = {"a": _quantized(dtype), "b": _quantized(dtype)}
    return _model(nodes, feeds, {"y": dtype}, consts), feeds


def _ties_and_ends(scale: float, dtype: str) -> Array:
    """float32 data whose quotients by ``scale`` (a power of two) are exact ``k + 0.5`` ties,
    random, far past both ends of ``dtype``, infinite."""
    info = np.iinfo(dtype)
    x = RNG.integers(int(info.min) - 50, int(info.max) + 50, SHAPE) + 0.5
    x = (x * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[:200] = (RNG.standard_normal(200) * (int(info.max) - int(info.min)) * scale)
    flat[200:204] = [np.inf, -np.inf, 1e30, -1e30]
    return x


def _lone_quantize(dtype: str, zero: bool) -> tuple[Any, Any]:
    consts = {"s": np.array(0.25, np.float32)}
    z = _zero(dtype, zero, 0.3)
    if z is not None:
        consts["z"] = z
    feeds = {"x": _ties_and_ends(0.25, dtype)}
    return _model([_q("x", "s", "z" if zero else None, "y", dtype)], feeds, {"y": dtype},
                  consts), feeds


def _lone_dequantize(dtype: str, zero: bool) -> tuple[Any, Any]:
    consts = {"s": np.array([0.0371], np.float32)}
    # ONNX (and ONNX Runtime) take an int32 zero point of 0 only
    z = np.array(0, dtype) if zero and dtype == "int32" else _zero(dtype, zero, 0.7)
    if z is not None:
        consts["z"] = z
    feeds = {"x": _quantized(dtype)}
    return _model([_dq("x", "s", "z" if zero else None, "y")], feeds, {"y": "float32"},
                  consts), feeds


# -- running --------------------------------------------------------------------------------


def _run(module: graphrt.GraphModule, feeds: dict[str, Array]) -> Array:
    (out,) = module(**feeds)
    return np.array(out)


def _ops(bundle: graphrt.Bundle) -> list[str]:
    return [node.func_name or "" for node in bundle.graph.nodes if node.op != "null"]


def _compiled_loops(module: graphrt.GraphModule) -> int:
    """How many calls of the module's lowered nodes are numba-compiled loops."""
    return sum(isinstance(call.kernel, (loops.BoundLoop, loops.FusedLoop))
               for program in module.compiled.programs if program.lowering is not None
               for call in program.lowering.calls)


def _paths(model: Any, feeds: dict[str, Array], monkeypatch: pytest.MonkeyPatch
           ) -> tuple[Array, list[Array]]:
    """The fused cpu result, and the numpy paths' results: fusion off at conversion,
    ``GRAPHRT_JIT=0``, the sim device."""
    bundle = graphrt.from_onnx(model)
    fused = _run(bundle.create(graphrt.cpu(0)), feeds)
    others = [_run(graphrt.from_onnx(model, fuse=False).create(graphrt.cpu(0)), feeds),
              _run(bundle.create(graphrt.sim(0)), feeds)]
    with monkeypatch.context() as patch:
        patch.setenv("GRAPHRT_JIT", "0")
        module = bundle.create(graphrt.cpu(0))
        assert _compiled_loops(module) == 0
        others.append(_run(module, feeds))
    return fused, others


def _ort(model: Any, feeds: dict[str, Array]) -> Array:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, feeds)
    return np.asarray(out)


def _check(model: Any, feeds: dict[str, Array], monkeypatch: pytest.MonkeyPatch) -> Array:
    """Bitwise the numpy paths; within one quantization unit of ONNX Runtime (which rounds
    some ties of x / scale the other way) for integers, its float32 bits for floats."""
    fused, others = _paths(model, feeds, monkeypatch)
    for other in others:
        assert fused.dtype == other.dtype
        np.testing.assert_array_equal(fused.view(np.uint8), other.view(np.uint8))
    want = _ort(model, feeds)
    assert want.dtype == fused.dtype
    if fused.dtype.kind == "f":
        np.testing.assert_array_equal(fused, want)
    else:
        assert np.abs(fused.astype(np.int64) - want.astype(np.int64)).max() <= 1
    return fused


# -- tests ----------------------------------------------------------------------------------

DTYPES = ["uint8", "int8", "int16", "uint16"]
SCALES = [pytest.param((0.25, 0.125, 0.25), id="ties"),
          pytest.param((0.0371, 0.0213, 0.0257), id="random")]


@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("zero", [True, False], ids=["zero_point", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_residual_add_is_one_node_and_one_loop(dtype: str, zero: bool,
                                                 scales: tuple[float, float, float],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _residual(dtype, zero, scales)
    bundle = graphrt.from_onnx(model)
    assert _ops(bundle) == ["fused_dequantize_dequantize_add_quantize"]
    module = bundle.create(graphrt.cpu(0))
    ((program,),) = [[p for p in module.compiled.programs if p.lowering is not None]]
    assert program.lowering is not None and len(program.lowering.calls) == 1
    assert _compiled_loops(module) == 1
    got = _check(model, feeds, monkeypatch)
    info = np.iinfo(dtype)
    assert got.min() == info.min and got.max() == info.max  # saturated at both ends


@pytest.mark.parametrize("zero", [True, False], ids=["zero_point", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_lone_quantize_is_a_loop_rounding_ties_to_even(dtype: str, zero: bool,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    model, feeds = _lone_quantize(dtype, zero)
    assert _compiled_loops(graphrt.from_onnx(model).create(graphrt.cpu(0))) == 1
    got = _check(model, feeds, monkeypatch)
    info = np.iinfo(dtype)
    assert got.min() == info.min and got.max() == info.max


@pytest.mark.parametrize("zero", [True, False], ids=["zero_point", "none"])
@pytest.mark.parametrize("dtype", [*DTYPES, "int32"])
def test_a_lone_dequantize_is_a_loop(dtype: str, zero: bool,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _lone_dequantize(dtype, zero)
    assert _compiled_loops(graphrt.from_onnx(model).create(graphrt.cpu(0))) == 1
    _check(model, feeds, monkeypatch)


def test_nan_quantizes_to_zero_as_numpy_casts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN (which ONNX leaves undefined) quantizes to what the numpy path makes of it: 0,
    whatever the zero point and range; the compiled loop says so explicitly."""
    for dtype in DTYPES:
        model, feeds = _lone_quantize(dtype, True)
        feeds["x"].reshape(-1)[::7] = np.nan
        fused, others = _paths(model, feeds, monkeypatch)
        assert np.all(fused.reshape(-1)[::7] == 0)
        for other in others:
            np.testing.assert_array_equal(fused, other)


def test_int32_dequantize_rounds_its_difference_once_as_numpy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """int32 differences beyond 2**24 round to float32 (to nearest even) as numpy's do."""
    x = RNG.integers(-2**31, 2**31, SHAPE, dtype=np.int64).astype(np.int32)
    x.flat[:4] = [2**31 - 1, -2**31, 2**24 + 1, -(2**24) - 3]
    consts = {"s": np.array(1.0, np.float32), "z": np.array(-12345, np.int32)}
    model = _model([_dq("x", "s", "z", "y")], {"x": x}, {"y": "float32"}, consts)
    fused, others = _paths(model, {"x": x}, monkeypatch)
    for other in others:
        np.testing.assert_array_equal(fused, other)


def test_per_axis_quantize_and_dequantize_stay_unfused_and_correct(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scale = (RNG.random(3) + 0.1).astype(np.float32)
    consts: dict[str, Array] = {"sa": scale, "za": np.array([1, -2, 3], np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"], axis=1),
             helper.make_node("Relu", ["da"], ["u"]),
             helper.make_node("QuantizeLinear", ["u", "sa", "za"], ["y"], axis=1)]
    feeds = {"a": _quantized("int8")}
    model = _model(nodes, feeds, {"y": "int8"}, consts)
    assert _ops(graphrt.from_onnx(model)) == ["fused_dequantize", "fused_nn_relu",
                                               "fused_quantize"]
    _check(model, feeds, monkeypatch)


@pytest.mark.parametrize(("attrs", "types"), [
    ({"dtype": "uint8", "axis": 1}, ["float32", "float32[3]"]),    # per axis
    ({"dtype": "int8", "block_size": 2}, ["float32", "float32[1]"]),  # blocked
    ({"dtype": "uint8", "precision": "float64"}, ["float32", "float32"]),
    ({"dtype": "int4"}, ["float32", "float32"]),
    ({"dtype": "float8_e4m3fn"}, ["float32", "float32"]),
    ({"dtype": "uint8"}, ["float16", "float16"]),
    ({"dtype": "uint8"}, ["float64", "float64"]),
])
def test_other_quantize_steps_have_no_expression(attrs: dict[str, Any], types: list[str]
                                                 ) -> None:
    op = get_op("quantize")
    assert op.expression(op.attrs.model_validate(attrs), _types(types)) is None


@pytest.mark.parametrize(("attrs", "types"), [
    ({"axis": 1}, ["int8", "float32[3]"]),
    ({"dtype": "float16"}, ["uint8", "float32"]),
    ({}, ["uint8", "float16"]),
    ({}, ["int4", "float32"]),
    ({}, ["float8_e4m3fn", "float32"]),
])
def test_other_dequantize_steps_have_no_expression(attrs: dict[str, Any], types: list[str]
                                                   ) -> None:
    op = get_op("dequantize")
    assert op.expression(op.attrs.model_validate(attrs), _types(types)) is None


def _types(texts: list[str]) -> list[TensorType]:
    """The data ([3, 4] of the first dtype), then scalars (``float32``) or vectors
    (``float32[3]``)."""
    found = [TensorType((3, 4), texts[0])]
    for text in texts[1:]:
        dtype, _, size = text.rstrip("]").partition("[")
        found.append(TensorType((int(size),) if size else (), dtype))
    return found


def test_every_expression_has_a_cpu_form_and_cuda_leaves_them_unfused() -> None:
    """The cpu loops know each expression the ops can give; the cuda provider (not verified
    bitwise on a GPU) keeps such steps out of its runs."""
    assert set(loops._PYTHON) >= QUANT_EXPRESSIONS
    from graphrt.kernels.cuda.provider import CudaProvider

    f32, u8 = TensorType((4,), "float32"), TensorType((4,), "uint8")
    one = TensorType((), "float32")
    (dq,) = sorted(e for e in QUANT_EXPRESSIONS if "rint" not in e and "in2" not in e)
    steps = [(dq, ("q", "s"), ("a",)), ("in0 + in1", ("a", "a"), ("y",))]
    types = {"q": u8, "s": one, "a": f32, "y": f32}
    assert CudaProvider().fuse(steps, {"y"}, types, dynamic=False, xp=None) == []


@pytest.mark.parametrize("zero", [True, False], ids=["zero_point", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_quantize_dequantize_pair_inside_a_loop_skips_the_integer_round_trip(
        dtype: str, zero: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """x → Q → DQ → erf → Q → DQ (a QDQ GELU's shape): the dequantize reads its quantize's
    float value in the loop (no integer conversion), bitwise the numpy paths."""
    scale = np.array(0.0371 if dtype.endswith("8") else 0.000371, np.float32)
    point = _zero(dtype, zero, 0.5)
    consts = {"s": scale, **({"z": point} if point is not None else {})}
    z = "z" if point is not None else None
    nodes = [_q("x", "s", z, "q0", dtype), _dq("q0", "s", z, "d0"),
             helper.make_node("Erf", ["d0"], ["e"]),
             _q("e", "s", z, "q1", dtype), _dq("q1", "s", z, "y")]
    x = (RNG.standard_normal(SHAPE) * 3).astype(np.float32)
    x.flat[:4] = scale * np.float32([0.5, 1.5, -2.5, 1e9])  # ties, and one saturating
    model = _model(nodes, {"x": x}, {"y": "float32"}, consts)
    module = graphrt.from_onnx(model).create(graphrt.cpu(0))
    assert _compiled_loops(module) == 1
    source = "\n".join(path.read_text() for path in loops.cache_dir().glob("*.py"))
    assert "_float32(t0f)" in source  # the dequantize reads the float value
    fused, others = _paths(model, {"x": x}, monkeypatch)
    for other in others:
        np.testing.assert_array_equal(fused.view(np.uint8), other.view(np.uint8))
