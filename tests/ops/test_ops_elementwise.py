"""Elementwise, reduction and softmax ops against numpy references, on cpu and on sim."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import ops_harness
import pytest
from ops_harness import run_op

import graphrt
from graphrt.ops import OPS, OpError, TensorType, elementwise, get_op

DEVICES = [graphrt.cpu(0), graphrt.sim(0)]
device_param = pytest.mark.parametrize("device", DEVICES, ids=str)

ARITHMETIC = ["add", "subtract", "multiply", "divide", "floor_divide", "power", "maximum",
              "minimum", "mod"]
COMPARISON = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
LOGICAL = ["logical_and", "logical_or", "logical_not"]
UNARY = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "gelu", "relu", "leaky_relu",
         "clip", "negative", "abs", "floor", "ceil", "round"]
OTHER = ["cast", "where", "bias_add", "sum", "mean", "max", "min", "argmax", "softmax",
         "log_softmax"]
ALL_OPS = ARITHMETIC + COMPARISON + LOGICAL + UNARY + OTHER
NUMPY_NAME = {"mod": "remainder", "round": "rint", "abs": "absolute"}

rng = np.random.default_rng(1234)

_on_device = ops_harness.on_device


@pytest.fixture(autouse=True)
def _keep_0d_inputs_0d(monkeypatch: pytest.MonkeyPatch) -> None:
    """ops_harness.on_device goes through np.ascontiguousarray, which makes 0-d arrays 1-d;
    give the op the shape its types were inferred from."""
    monkeypatch.setattr(ops_harness, "on_device",
                        lambda array, device: _on_device(array, device).reshape(array.shape))


def one(name: str, inputs: list[np.ndarray], attrs: dict[str, Any] | None = None,
        device: graphrt.Device | None = None) -> np.ndarray:
    outputs = run_op(name, inputs, attrs, device)
    assert len(outputs) == 1
    return outputs[0]


def check(name: str, inputs: list[np.ndarray], attrs: dict[str, Any] | None,
          device: graphrt.Device, expected: np.ndarray) -> None:
    """Run the op and compare exactly (dtype, shape and values; nan == nan)."""
    out = one(name, inputs, attrs, device)
    assert out.dtype == expected.dtype, (out.dtype, expected.dtype)
    np.testing.assert_array_equal(out, expected, strict=True)


def close(name: str, inputs: list[np.ndarray], attrs: dict[str, Any] | None,
          device: graphrt.Device, expected: np.ndarray, rtol: float, atol: float = 0.0) -> None:
    out = one(name, inputs, attrs, device)
    assert out.dtype == inputs[0].dtype and out.shape == expected.shape
    np.testing.assert_allclose(out, expected.astype(out.dtype), rtol=rtol, atol=atol)


def infer(name: str, types: list[TensorType], attrs: dict[str, Any] | None = None
          ) -> list[TensorType]:
    op = get_op(name)
    return op.infer(types, op.attrs.model_validate(attrs or {}), [None] * len(types))


def T(shape: tuple[int, ...], dtype: str) -> TensorType:
    return TensorType(shape, dtype)


def sample(shape: tuple[int, ...], dtype: str, low: float = -9, high: float = 9) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return rng.uniform(low, high, shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(int(low), int(high) + 1, shape).astype(dtype)


def tol(dtype: Any) -> dict[str, float]:
    return {"rtol": 1e-6} if np.dtype(dtype) == np.float32 else {"rtol": 1e-12}


# ----------------------------------------------------------------------------- registry


def module_ops() -> list[str]:
    return sorted(name for name, op in OPS.items()
                  if op.compute.__module__ == elementwise.__name__)


def test_the_module_registers_exactly_these_ops() -> None:
    assert module_ops() == sorted(ALL_OPS)


@pytest.mark.parametrize("name", ALL_OPS)
def test_no_op_is_data_dependent(name: str) -> None:
    op = get_op(name)
    for n in (1, 2, 3):
        assert op.needs_data(n) == (False,) * n
    assert op.outputs_for(op.attrs.model_construct()) == 1


FUSABLE = set(ARITHMETIC + COMPARISON + LOGICAL + UNARY + ["cast", "where"]) - {
    "floor_divide", "power", "mod",          # no one C expression matches numpy for ints and floats
    "gelu", "leaky_relu", "clip"}            # the expression would depend on attribute values


@pytest.mark.parametrize("name", ALL_OPS)
def test_elementwise_expressions_name_only_their_inputs(name: str) -> None:
    op = get_op(name)
    assert (op.elementwise is not None) == (name in FUSABLE)
    if op.elementwise is not None:
        assert op.arity is not None
        used = {int(i) for i in re.findall(r"\bin(\d+)\b", op.elementwise)}
        assert used == set(range(op.arity)), op.elementwise


_C_FUNCTIONS = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
                "erf": np.vectorize(math.erf), "floor": np.floor, "ceil": np.ceil,
                "rint": np.rint}


def c_eval(expression: str, operands: list[Any]) -> Any:
    """Evaluate one of our C expressions on Python scalars (ternaries, && || !, calls)."""
    python = expression.replace("&&", " and ").replace("||", " or ")
    python = re.sub(r"!(?!=)", " not ", python)
    ternary = re.fullmatch(r"(.*?)\?(.*?):(.*)", python)
    if ternary:
        python = f"({ternary[2]}) if ({ternary[1]}) else ({ternary[3]})"
    names = {f"in{i}": value for i, value in enumerate(operands)}
    with np.errstate(all="ignore"):
        return eval(python, {"__builtins__": {}}, {**_C_FUNCTIONS, **names})


SPECIAL = [-2.5, -1.0, -0.5, -0.0, 0.0, 0.25, 0.5, 1.5, 2.5, 3.0, math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("name", sorted(FUSABLE - {"cast"}))
def test_elementwise_expressions_agree_with_compute(name: str) -> None:
    op = get_op(name)
    assert op.elementwise is not None and op.arity is not None
    if name.startswith("logical") or name == "where":
        values: list[Any] = [False, True]
        grids = list(np.meshgrid(*[np.array(values)] * op.arity, indexing="ij"))
        if name == "where":
            grids[1:] = [np.array([1.5, -2.0])[g.astype(int)] for g in grids[1:]]
    else:
        grids = list(np.meshgrid(*[np.array(SPECIAL)] * op.arity, indexing="ij"))
    inputs = [g.ravel() for g in grids]
    with np.errstate(all="ignore"):
        (got,) = run_op(name, inputs)
    for k in range(got.size):
        operands = [np.float64(a[k]) if a.dtype.kind == "f" else bool(a[k]) for a in inputs]
        want = np.asarray(c_eval(op.elementwise, operands)).astype(got.dtype)
        if name in ("erf", "sigmoid"):  # different formulas / libm: a few ulp apart
            assert np.allclose(got[k], want, rtol=1e-14, atol=0, equal_nan=True), (operands, want)
        else:
            assert np.array_equal(got[k], want, equal_nan=True), (name, operands, got[k], want)


# ----------------------------------------------------------------------------- binary ops


def binary_operands(name: str, dtype: str, shapes: tuple[tuple[int, ...], ...]
                    ) -> tuple[np.ndarray, np.ndarray]:
    a = sample(shapes[0], dtype)
    b = sample(shapes[1], dtype)
    if name == "power":
        a = sample(shapes[0], dtype, -4, 4)
        b = sample(shapes[1], dtype, 0, 3)
        if dtype != "int32":
            a = np.abs(a) + np.asarray(0.5, dtype)
    if name in ("divide", "floor_divide", "mod"):
        b = np.where(b == 0, np.asarray(3, dtype), b)
    return a, b


BINARY_CASES = [(name, dtype) for name in ARITHMETIC + COMPARISON
                for dtype in ("float32", "float64", "int32")
                if (name, dtype) != ("divide", "int32")]


@device_param
@pytest.mark.parametrize(("name", "dtype"), BINARY_CASES)
@pytest.mark.parametrize("shapes", [((2, 1, 3), (4, 1)), ((3,), (2, 3)), ((), ()), ((2, 3), ())],
                         ids=str)
def test_binary_ops_broadcast_like_numpy(name: str, dtype: str, shapes: Any,
                                         device: graphrt.Device) -> None:
    a, b = binary_operands(name, dtype, shapes)
    if name in COMPARISON and shapes[0]:
        b.flat[0] = a.flat[0]  # some ties
    expected = getattr(np, NUMPY_NAME.get(name, name))(a, b)
    check(name, [a, b], None, device, np.asarray(expected))


@device_param
@pytest.mark.parametrize(("a_dtype", "b_dtype"), [("float32", "float64"), ("int8", "int32"),
                                                   ("uint8", "uint16"), ("float16", "float32")])
def test_binary_ops_promote_within_a_family(a_dtype: str, b_dtype: str,
                                            device: graphrt.Device) -> None:
    a, b = sample((2, 3), a_dtype, 0, 9), sample((3,), b_dtype, 1, 9)
    for name in ("add", "multiply", "maximum", "mod", "less"):
        expected = getattr(np, NUMPY_NAME.get(name, name))(a, b)
        check(name, [a, b], None, device, expected)


@device_param
def test_nan_propagates_through_maximum_and_minimum(device: graphrt.Device) -> None:
    a = np.array([np.nan, 1.0, np.nan, -np.inf], "float32")
    b = np.array([1.0, np.nan, np.nan, 2.0], "float32")
    check("maximum", [a, b], None, device, np.maximum(a, b))
    check("minimum", [a, b], None, device, np.minimum(a, b))
    check("not_equal", [a, b], None, device, a != b)


@device_param
def test_integer_floor_divide_and_mod_follow_python(device: graphrt.Device) -> None:
    a = np.array([7, -7, 7, -7, 0], "int32")
    b = np.array([2, 2, -2, -2, 5], "int32")
    check("floor_divide", [a, b], None, device, np.array([3, -4, -4, 3, 0], "int32"))
    check("mod", [a, b], None, device, np.array([1, 1, -1, -1, 0], "int32"))


@device_param
@pytest.mark.parametrize("name", ["logical_and", "logical_or"])
def test_logical_binary_ops(name: str, device: graphrt.Device) -> None:
    a, b = sample((2, 1, 3), "bool"), sample((4, 1), "bool")
    check(name, [a, b], None, device, getattr(np, name)(a, b))
    check(name, [np.array(True), np.array(False)], None, device, getattr(np, name)(True, False))


@device_param
def test_logical_not(device: graphrt.Device) -> None:
    x = sample((3, 4), "bool")
    check("logical_not", [x], None, device, ~x)
    check("logical_not", [np.array(False)], None, device, np.array(True))


BINARY_REJECTIONS = [
    ("add", T((2, 3), "float32"), T((2, 3), "int32"), r"add .*float32.*int32.*cast"),
    ("subtract", T((2, 3), "float32"), T((4,), "float32"), r"subtract: .*\[2, 3\], \[4\] do not"),
    ("multiply", T((3,), "bool"), T((3,), "bool"), r"multiply expects int, uint or float.*bool"),
    ("divide", T((3,), "int32"), T((3,), "int32"), r"divide expects float.*int32.*true division"),
    ("floor_divide", T((3,), "int32"), T((3,), "uint32"), r"input 0 is int32 and input 1 is uint"),
    ("power", T((3,), "complex64"), T((3,), "complex64"), r"power expects .*complex64"),
    ("maximum", T((2,), "float64"), T((3,), "float64"), r"do not broadcast"),
    ("minimum", T((2,), "int64"), T((2,), "float64"), r"int64.*float64"),
    ("mod", T((2,), "bool"), T((2,), "bool"), r"mod expects .*bool"),
    ("equal", T((2,), "bool"), T((2,), "int8"), r"equal needs inputs of one dtype family"),
    ("not_equal", T((2, 2), "int8"), T((3,), "int8"), r"do not broadcast"),
    ("less", T((2,), "float32"), T((2,), "uint8"), r"float32.*uint8"),
    ("less_equal", T((2,), "complex128"), T((2,), "complex128"), r"expects bool, int"),
    ("greater", T((5,), "int32"), T((4,), "int32"), r"greater: .*do not broadcast"),
    ("greater_equal", T((2,), "uint8"), T((2,), "int8"), r"uint8.*int8"),
    ("logical_and", T((2,), "float32"), T((2,), "bool"), r"logical_and expects bool.*float32"),
    ("logical_or", T((2,), "bool"), T((3,), "bool"), r"do not broadcast"),
]


@pytest.mark.parametrize(("name", "a", "b", "message"), BINARY_REJECTIONS,
                         ids=[case[0] for case in BINARY_REJECTIONS])
def test_binary_ops_refuse(name: str, a: TensorType, b: TensorType, message: str) -> None:
    with pytest.raises(OpError, match=message):
        infer(name, [a, b])


def test_logical_not_refuses_non_bool() -> None:
    with pytest.raises(OpError, match=r"logical_not expects bool input.*int32"):
        infer("logical_not", [T((2,), "int32")])


def test_infer_types() -> None:
    assert infer("add", [T((2, 1, 3), "float32"), T((4, 1), "float64")]) == [
        T((2, 4, 3), "float64")]
    assert infer("less", [T((), "int8"), T((5,), "int64")]) == [T((5,), "bool")]
    assert infer("exp", [T((0, 2), "float16")]) == [T((0, 2), "float16")]


# ----------------------------------------------------------------------------- unary math

EXACT_UNARY = ["exp", "log", "sqrt", "rsqrt", "tanh", "relu", "negative", "abs", "floor", "ceil",
               "round"]
POSITIVE_ONLY = {"log", "sqrt", "rsqrt"}


def unary_reference(name: str, x: np.ndarray) -> np.ndarray:
    if name == "rsqrt":
        return np.asarray(1 / np.sqrt(x), x.dtype)
    if name == "relu":
        return np.asarray(np.maximum(x, np.zeros_like(x)))
    return np.asarray(getattr(np, NUMPY_NAME.get(name, name))(x))


@device_param
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name", EXACT_UNARY)
def test_unary_ops_match_numpy_exactly(name: str, dtype: str, device: graphrt.Device) -> None:
    x = sample((3, 4), dtype, 0.01 if name in POSITIVE_ONLY else -6, 6)
    if name == "round":
        x.flat[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]  # half to even
    check(name, [x], None, device, unary_reference(name, x))
    scalar = np.array(2.25, dtype)
    check(name, [scalar], None, device, unary_reference(name, scalar))


@device_param
@pytest.mark.parametrize("name", EXACT_UNARY)
def test_unary_ops_on_special_values(name: str, device: graphrt.Device) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0])
    with np.errstate(all="ignore"):
        expected = unary_reference(name, x)
        check(name, [x], None, device, expected)


@device_param
@pytest.mark.parametrize("name", ["relu", "negative", "abs"])
def test_signed_integer_unary_ops(name: str, device: graphrt.Device) -> None:
    x = sample((2, 5), "int32")
    check(name, [x], None, device, unary_reference(name, x))


@device_param
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sigmoid(dtype: str, device: graphrt.Device) -> None:
    x = np.concatenate([sample((50,), dtype, -20, 20), np.array([0, -0.0], dtype)])
    expected = 1 / (1 + np.exp(-x.astype(np.float64)))
    close("sigmoid", [x], None, device, expected, **tol(dtype))
    extremes = np.array([-800, 800, -np.inf, np.inf, np.nan], dtype)
    np.testing.assert_array_equal(one("sigmoid", [extremes], None, device),
                                  np.array([0, 1, 0, 1, np.nan], dtype))


ERF_POINTS = np.concatenate([
    np.linspace(-7, 7, 2801), rng.standard_normal(500) * 1e-3,
    np.geomspace(1e-300, 30, 300), -np.geomspace(1e-300, 30, 300),
    [0.0, -0.0, 0.46875, -0.46875, 4.0, -4.0, 5.9, 6.0, 26.5, 1e300, 5e-324]])
SPECIALS = np.array([np.inf, -np.inf, np.nan])


def erf_reference(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(float(v)) for v in x])


@device_param
def test_erf_float64_is_accurate_to_a_few_ulp(device: graphrt.Device) -> None:
    got = one("erf", [ERF_POINTS], None, device)
    expected = erf_reference(ERF_POINTS)
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=0)
    np.testing.assert_array_max_ulp(got, expected, maxulp=8)
    assert np.signbit(got[ERF_POINTS == 0]).tolist() == np.signbit(ERF_POINTS[ERF_POINTS == 0]
                                                                   ).tolist()
    np.testing.assert_array_equal(one("erf", [SPECIALS], None, device), [1.0, -1.0, np.nan])


@device_param
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_erf_narrow_floats_are_rounded_from_exact(dtype: str, device: graphrt.Device) -> None:
    x = ERF_POINTS[np.abs(ERF_POINTS) < np.finfo(dtype).max].astype(dtype)
    got = one("erf", [x], None, device)
    expected = erf_reference(x.astype(np.float64)).astype(dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, expected, rtol=1e-6 if dtype == "float32" else 1e-3)
    np.testing.assert_array_max_ulp(got, expected, maxulp=1)
    np.testing.assert_array_equal(one("erf", [SPECIALS.astype(dtype)], None, device),
                                  np.array([1.0, -1.0, np.nan], dtype))


def test_erf_of_a_scalar() -> None:
    assert one("erf", [np.array(0.5)]).item() == pytest.approx(math.erf(0.5), rel=1e-15)


def gelu_reference(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + erf(x/sqrt 2)) written with erfc, which keeps the left tail exact."""
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x])


def gelu_tanh_reference(x: np.ndarray) -> np.ndarray:
    return np.asarray(0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))))


@device_param
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_exact(dtype: str, device: graphrt.Device) -> None:
    x = np.concatenate([sample((200,), dtype, -8, 8), np.array([0, 1, -1], dtype)])
    x64 = x.astype(np.float64)
    close("gelu", [x], None, device, gelu_reference(x64), **tol(dtype))
    # the textbook form, up to its cancellation in the left tail
    textbook = 0.5 * x64 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x64]))
    close("gelu", [x], {"approximate": False}, device, textbook, **tol(dtype), atol=1e-15)
    np.testing.assert_array_equal(one("gelu", [np.array([-np.inf, np.inf, np.nan], dtype)],
                                      None, device), np.array([np.nan, np.inf, np.nan], dtype))
    # gelu(-inf) is -inf * 0: NaN, as in ONNX Runtime and PyTorch


@device_param
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_tanh_approximation(dtype: str, device: graphrt.Device) -> None:
    x = np.concatenate([sample((200,), dtype, -3, 3), np.array([0, 1, -1], dtype)])
    close("gelu", [x], {"approximate": True}, device, gelu_tanh_reference(x.astype(np.float64)),
          **tol(dtype))
    far = np.array([-np.inf, -1e30, -40, 40, 1e30, np.inf, np.nan], dtype)
    np.testing.assert_array_equal(one("gelu", [far], {"approximate": True}, device),
                                  np.array([np.nan, 0, 0, 40, 1e30, np.inf, np.nan], dtype))


@device_param
@pytest.mark.parametrize("alpha", [None, 0.2, -1.5, 3.0])
def test_leaky_relu(alpha: float | None, device: graphrt.Device) -> None:
    x = np.concatenate([sample((3, 4), "float32").ravel(), [0.0, np.nan, -np.inf]]
                       ).astype("float32")
    attrs = {} if alpha is None else {"alpha": alpha}
    slope = np.float32(0.01 if alpha is None else alpha)
    with np.errstate(invalid="ignore"):
        expected = np.where(x > 0, x, x * slope)
    check("leaky_relu", [x], attrs, device, expected)


@device_param
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clip(dtype: str, device: graphrt.Device) -> None:
    x = np.concatenate([sample((10,), dtype), np.array([np.nan, np.inf, -np.inf], dtype)])
    check("clip", [x], {"a_min": -2.5, "a_max": 4}, device, np.clip(x, -2.5, 4))
    check("clip", [np.array(7.0, dtype)], {"a_min": 1, "a_max": 1}, device, np.array(1.0, dtype))


UNARY_ATTRS: dict[str, dict[str, Any]] = {"clip": {"a_min": -1, "a_max": 1}}


@device_param
@pytest.mark.parametrize("name", [*UNARY, "logical_not", "cast"])
def test_unary_ops_take_0d_inputs(name: str, device: graphrt.Device) -> None:
    x = np.array(False) if name == "logical_not" else np.array(0.75)
    attrs = {"dtype": "float32"} if name == "cast" else UNARY_ATTRS.get(name)
    vector = one(name, [x.reshape(1)], attrs, device)
    scalar = one(name, [x], attrs, device)
    assert scalar.shape == ()
    np.testing.assert_array_equal(scalar, vector[0], strict=True)
    if name == "gelu":
        approximate = one(name, [x], {"approximate": True}, device)
        assert approximate.shape == () and approximate == one(name, [x.reshape(1)],
                                                             {"approximate": True}, device)[0]


UNARY_REJECTIONS = [
    ("exp", "int32", None, "exp expects float input.*int32"),
    ("log", "bool", None, "log expects float"),
    ("sqrt", "uint8", None, "sqrt expects float"),
    ("rsqrt", "int64", None, "rsqrt expects float"),
    ("tanh", "complex64", None, "tanh expects float"),
    ("sigmoid", "int8", None, "sigmoid expects float"),
    ("erf", "int32", None, "erf expects float input.*int32"),
    ("gelu", "int32", {"approximate": True}, "gelu expects float"),
    ("relu", "uint8", None, "relu expects int or float.*uint8"),
    ("leaky_relu", "int32", None, "leaky_relu expects float"),
    ("clip", "float32", {"a_min": 2, "a_max": 1}, r"a_min <= a_max.*a_min=2\.0 and a_max=1\.0"),
    ("clip", "int32", {"a_min": 0, "a_max": 1}, "clip expects float"),
    ("negative", "bool", None, "negative expects int or float.*bool"),
    ("abs", "uint16", None, "abs expects int or float"),
    ("floor", "int32", None, "floor expects float"),
    ("ceil", "int16", None, "ceil expects float"),
    ("round", "int32", None, "round expects float"),
]


@pytest.mark.parametrize(("name", "dtype", "attrs", "message"), UNARY_REJECTIONS,
                         ids=[f"{c[0]}-{c[1]}" for c in UNARY_REJECTIONS])
def test_unary_ops_refuse(name: str, dtype: str, attrs: dict[str, Any] | None,
                          message: str) -> None:
    with pytest.raises(OpError, match=message):
        infer(name, [T((2, 3), dtype)], attrs)


# ----------------------------------------------------------------------------- cast, where


CASTS = [("float32", "int32"), ("float64", "uint8"), ("float32", "float16"), ("float64", "bool"),
         ("int32", "float32"), ("int64", "int8"), ("bool", "float64"), ("uint16", "int64"),
         ("float16", "float64"), ("int8", "uint64"), ("int32", "bool"), ("bool", "int32")]


@device_param
@pytest.mark.parametrize(("src", "dst"), CASTS, ids=str)
def test_cast(src: str, dst: str, device: graphrt.Device) -> None:
    low = 0 if np.dtype(dst).kind == "u" or np.dtype(src).kind == "u" else -100
    x = sample((2, 3, 4), src, low, 100)
    if np.dtype(src).kind == "f":
        x.flat[:3] = [0.0, -0.75, 2.5]
    check("cast", [x], {"dtype": dst}, device, x.astype(dst))
    check("cast", [np.array(1, src)], {"dtype": dst}, device, np.array(1, dst))


@pytest.mark.parametrize("dtype", ["complex64", "bfloat16", "float128", "int", "float", "str", ""])
def test_cast_refuses_unknown_dtypes(dtype: str) -> None:
    with pytest.raises(OpError, match=f"unsupported target dtype '{dtype}'.*float16.*bool"):
        infer("cast", [T((2,), "float32")], {"dtype": dtype})


def test_cast_refuses_unsupported_inputs() -> None:
    with pytest.raises(OpError, match=r"cast expects bool, int, uint or float.*complex64"):
        infer("cast", [T((2,), "complex64")], {"dtype": "float32"})


@device_param
@pytest.mark.parametrize(("x_dtype", "y_dtype"), [("float32", "float32"), ("float32", "float64"),
                                                  ("int32", "int64"), ("bool", "bool")])
def test_where_broadcasts(x_dtype: str, y_dtype: str, device: graphrt.Device) -> None:
    cond = sample((2, 1, 3), "bool")
    x = sample((4, 1), x_dtype)
    y = sample((), y_dtype)
    check("where", [cond, x, y], None, device, np.where(cond, x, y))
    check("where", [np.array(True), np.array(1, x_dtype), np.array(0, y_dtype)], None, device,
          np.where(True, np.array(1, x_dtype), np.array(0, y_dtype)))


@pytest.mark.parametrize(("types", "message"), [
    ([T((3,), "int32"), T((3,), "float32"), T((3,), "float32")],
     "where expects bool input.*input 0 is int32"),
    ([T((3,), "bool"), T((3,), "float32"), T((3,), "int32")],
     "where needs inputs of one dtype family, but input 1 is float32 and input 2 is int32"),
    ([T((3,), "bool"), T((4,), "float32"), T((3,), "float32")], r"where: .*do not broadcast"),
])
def test_where_refuses(types: list[TensorType], message: str) -> None:
    with pytest.raises(OpError, match=message):
        infer("where", types)


# ----------------------------------------------------------------------------- bias_add


@device_param
@pytest.mark.parametrize(("shape", "axis"), [((2, 3, 4, 5), None), ((2, 3, 4, 5), -1),
                                             ((2, 3, 4, 5), 3), ((2, 3, 4, 5), -4), ((6,), 0)],
                         ids=str)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_bias_add(shape: tuple[int, ...], axis: int | None, dtype: str,
                  device: graphrt.Device) -> None:
    data = sample(shape, dtype)
    normalized = 1 if axis is None else axis % len(shape)
    bias = sample((shape[normalized],), dtype)
    view = [1] * len(shape)
    view[normalized] = shape[normalized]
    attrs = None if axis is None else {"axis": axis}
    check("bias_add", [data, bias], attrs, device, data + bias.reshape(view))


@pytest.mark.parametrize(("types", "attrs", "message"), [
    ([T((2, 3, 4), "float32"), T((4,), "float32")], None,
     r"bias length 4 does not match data axis 1 of length 3 \(data shape \[2, 3, 4\]\)"),
    ([T((2, 3), "float32"), T((1, 3), "float32")], None, r"1-D bias, got shape \[1, 3\]"),
    ([T((2, 3), "float32"), T((3,), "float32")], {"axis": 2},
     "bias_add: axis 2 is out of range for a 2-D tensor"),
    ([T((2, 3), "float32"), T((3,), "float64")], None,
     "bias's dtype to match.*float32, bias is float64"),
    ([T((2, 3), "bool"), T((3,), "bool")], None, "bias_add expects int, uint or float"),
    ([T((), "float32"), T((1,), "float32")], {"axis": 0}, "out of range for a 0-D tensor"),
])
def test_bias_add_refuses(types: list[TensorType], attrs: dict[str, Any] | None,
                          message: str) -> None:
    with pytest.raises(OpError, match=message):
        infer("bias_add", types, attrs)


# ----------------------------------------------------------------------------- reductions

AXES: list[Any] = [None, 0, -1, 1, [0, 2], [-1, 0], [2, 1, 0], []]
REDUCTIONS = [("sum", "float32"), ("sum", "float64"), ("sum", "int32"), ("sum", "int8"),
              ("mean", "float32"), ("mean", "float64"), ("max", "float32"), ("max", "int32"),
              ("min", "float64"), ("min", "uint8")]


def reduce_reference(name: str, x: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    axes = tuple(axis) if isinstance(axis, list) else axis
    kwargs = {"dtype": x.dtype} if name == "sum" else {}
    return np.asarray(getattr(np, name)(x, axis=axes, keepdims=keepdims, **kwargs))


@device_param
@pytest.mark.parametrize(("name", "dtype"), REDUCTIONS)
def test_reductions_match_numpy(name: str, dtype: str, device: graphrt.Device) -> None:
    x = sample((3, 4, 5), dtype, 0 if dtype == "uint8" else -100, 100)
    for axis in AXES:
        for keepdims in (False, True):
            attrs = {"axis": axis, "keepdims": keepdims}
            expected = reduce_reference(name, x, axis, keepdims)
            check(name, [x], attrs, device, expected)
    check(name, [x], None, device, reduce_reference(name, x, None, False))
    scalar = np.array(5, dtype)
    check(name, [scalar], {"keepdims": True}, device, scalar.copy())


@device_param
def test_integer_sum_wraps_in_its_dtype(device: graphrt.Device) -> None:
    x = np.full((4, 100), 100, "int8")
    check("sum", [x], {"axis": 1}, device, np.asarray(np.sum(x, axis=1, dtype=np.int8)))


@device_param
def test_max_min_propagate_nan(device: graphrt.Device) -> None:
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -np.inf]])
    check("max", [x], {"axis": 1}, device, np.array([np.nan, 5.0]))
    check("min", [x], {"axis": -1}, device, np.array([np.nan, -np.inf]))


@pytest.mark.parametrize(("name", "dtype", "shape", "attrs", "message"), [
    ("sum", "float32", (2, 3, 4), {"axis": [0, -3]}, r"sum: axis \[0, -3\] names axis 0 more"),
    ("sum", "bool", (2,), None, "sum expects int, uint or float"),
    ("mean", "int32", (2, 3), None, "mean expects float input.*int32"),
    ("mean", "float32", (2, 3), {"axis": 2}, "mean: axis 2 is out of range for a 2-D tensor"),
    ("max", "float32", (2, 0, 3), {"axis": 1}, r"max over an empty axis.*axis 1 of shape "
                                                r"\[2, 0, 3\]"),
    ("max", "float32", (2, 3), {"axis": [-3]}, "axis -3 is out of range"),
    ("min", "float64", (0,), None, "min over an empty axis"),
    ("min", "float64", (2, 2), {"axis": [1, 1]}, "names axis 1 more than once"),
    ("argmax", "float32", (2, 3), {"axis": 2}, "argmax: axis 2 is out of range"),
    ("argmax", "float32", (2, 0), {"axis": 1}, "argmax over an empty axis"),
    ("argmax", "complex64", (2, 3), {"axis": 0}, "argmax expects bool, int, uint or float"),
])
def test_reductions_refuse(name: str, dtype: str, shape: tuple[int, ...],
                           attrs: dict[str, Any] | None, message: str) -> None:
    with pytest.raises(OpError, match=message):
        infer(name, [T(shape, dtype)], attrs)


def test_reduction_types() -> None:
    assert infer("sum", [T((2, 0, 3), "int32")], {"axis": 1}) == [T((2, 3), "int32")]
    assert infer("max", [T((2, 0, 3), "int32")], {"axis": 2, "keepdims": True}) == [
        T((2, 0, 1), "int32")]
    assert infer("mean", [T((2, 3), "float16")], {"axis": []}) == [T((2, 3), "float16")]
    assert infer("argmax", [T((2, 3), "bool")], {"axis": -1}) == [T((2,), "int64")]


@device_param
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
def test_argmax(dtype: str, device: graphrt.Device) -> None:
    x = sample((3, 4, 5), dtype, -3, 3)  # many ties: the first index wins
    for axis in (0, 1, 2, -1, -3):
        for keepdims in (False, True):
            expected = np.argmax(x, axis=axis, keepdims=keepdims).astype(np.int64)
            check("argmax", [x], {"axis": axis, "keepdims": keepdims}, device, expected)
    ties = np.array([1, 3, 3, 2], dtype if dtype != "bool" else "int32")
    check("argmax", [ties], {"axis": 0}, device, np.array(1, np.int64))


@device_param
def test_argmax_finds_the_first_nan(device: graphrt.Device) -> None:
    x = np.array([[1.0, np.nan, 5.0, np.nan], [2.0, 1.0, 0.0, -1.0]])
    check("argmax", [x], {"axis": 1}, device, np.array([1, 0], np.int64))


# ----------------------------------------------------------------------------- softmax


def softmax_reference(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x)
    return np.asarray(e / e.sum(axis=axis, keepdims=True))


@device_param
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("axis", [None, -1, 0, 1, -3])
def test_softmax_and_log_softmax(dtype: str, axis: int | None, device: graphrt.Device) -> None:
    x = sample((3, 4, 5), dtype, -5, 5)
    attrs = None if axis is None else {"axis": axis}
    expected = softmax_reference(x.astype(np.float64), -1 if axis is None else axis)
    close("softmax", [x], attrs, device, expected, **tol(dtype))
    # log_softmax values near 0 carry the absolute rounding error of log(sum)
    close("log_softmax", [x], attrs, device, np.log(expected), **tol(dtype),
          atol=1e-6 if dtype == "float32" else 1e-15)


@device_param
def test_softmax_is_stable_for_large_inputs(device: graphrt.Device) -> None:
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]], "float32")
    expected = softmax_reference(np.array([[0.0, 1.0, 2.0], [0.0, -1.0, -2.0]]), -1)
    close("softmax", [x], None, device, expected, rtol=1e-6)
    close("log_softmax", [x], None, device, np.log(expected), rtol=1e-6)
    out = one("softmax", [np.full((2, 7), 1e30, "float32")], {"axis": 1}, device)
    np.testing.assert_allclose(out, np.full((2, 7), 1 / 7, "float32"), rtol=1e-6)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_refuses(name: str) -> None:
    with pytest.raises(OpError, match=f"{name} expects float input.*int32"):
        infer(name, [T((2, 3), "int32")])
    with pytest.raises(OpError, match=f"{name}: axis 2 is out of range for a 2-D tensor"):
        infer(name, [T((2, 3), "float32")], {"axis": 2})
    with pytest.raises(OpError, match="out of range for a 0-D tensor"):
        infer(name, [T((), "float32")])


@pytest.mark.parametrize("device", [graphrt.cpu(0), graphrt.sim(0)], ids=str)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_half_precision_softmax_accumulates_in_float32(device: graphrt.Device,
                                                       name: str) -> None:
    import ml_dtypes

    # 4096 ones summed in float16 stop at 2048: the denominator must be summed wider.
    x = np.zeros(4096, "float16")
    (y,) = run_op(name, [x], {"axis": 0}, device)
    expected = np.float32(1 / 4096) if name == "softmax" else np.float32(-np.log(4096))
    np.testing.assert_allclose(y.astype("float32"), expected, rtol=1e-3)
    (z,) = run_op(name, [x.astype(ml_dtypes.bfloat16)], {"axis": 0}, device)
    assert z.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(z.astype("float32"), expected, rtol=1e-2)
