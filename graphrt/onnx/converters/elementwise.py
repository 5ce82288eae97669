"""Elementwise ONNX ops: arithmetic, comparisons, logic, activations, casts.

Each converter emits standard ops (``graphrt/lib/ops/elementwise.py`` and
``activations.py``). ONNX's dtype rules hold: comparisons and predicates give bool, ``Pow``
gives the base's dtype, integer ``Div`` rounds toward zero, ``Mod`` follows Python's sign rule
(``fmod=0``) or C's (``fmod=1``). Standard ops without bfloat16 support run on bfloat16 inputs
in float32, rounded back once.

Ops that exist before opset 7 register from opset 1: the loader upgrades such models to 7
before converting, so ``since=1`` only says "every version the loader lets through"; the
version-specific rules (no broadcasting in Max/Min/Sum/Mean before 8, Clip's attributes before
11, Dropout's mask dtype before 10) are checked against the model's opset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...ops import OpError, TensorType, get_op
from ...schema.dtypes import LOW_PRECISION
from ..builder import Builder
from ..model import OnnxNode, dtype_name
from ..registry import converter

BF16 = "bfloat16"
_FLOAT_DTYPES = ("float16", "float32", "float64", BF16)
_UNSIGNED = ("uint8", "uint16", "uint32", "uint64")


def _is_float(dtype: str) -> bool:
    return dtype in _FLOAT_DTYPES


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _accepts(op_name: str, types: Sequence[TensorType], attrs: dict[str, Any]) -> bool:
    """Whether standard op ``op_name``'s shape function takes inputs of ``types``."""
    op = get_op(op_name)
    try:
        op.infer(types, op.attrs.model_validate(attrs), [None] * len(types))
    except (OpError, ValueError):
        return False
    return True


def cast_to(b: Builder, value: str, dtype: str) -> str:
    """``value`` converted to ``dtype`` (nothing when it has it already)."""
    if b.dtype(value) == dtype:
        return value
    op = "cast_bfloat16" if BF16 in (dtype, b.dtype(value)) else "cast"
    return b.op(op, [value], {"dtype": dtype})[0]


def apply(b: Builder, op: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None
          ) -> str:
    """Standard op ``op`` over ``inputs``: its one output.

    When an input is bfloat16 and the op does not take bfloat16, the op runs on float32
    copies and a float result is rounded back to bfloat16.
    """
    attrs = attrs or {}
    types = [b.type(v) for v in inputs]
    if any(t.dtype == BF16 for t in types) and not _accepts(op, types, attrs):
        wide = [cast_to(b, v, "float32") if b.dtype(v) == BF16 else v for v in inputs]
        (out,) = b.op(op, wide, attrs, num_outputs=1)
        return cast_to(b, out, BF16) if b.dtype(out) == "float32" else out
    return b.op(op, list(inputs), attrs, num_outputs=1)[0]


def _inputs(n: OnnxNode, count: int) -> list[str]:
    """The node's first ``count`` inputs, all required."""
    names = [n.input(i) for i in range(count)]
    if any(name is None for name in names) or len(n.inputs) > count:
        raise n.fail(f"expects {count} input(s), given {len(n.inputs)}")
    return [name for name in names if name is not None]


def _same_dtype(b: Builder, n: OnnxNode, values: Sequence[str]) -> None:
    dtypes = [b.dtype(v) for v in values]
    if len(set(dtypes)) > 1:
        raise n.fail(f"inputs must have one dtype, given {', '.join(dtypes)}")


# --------------------------------------------------------------------------------------------
# Plain one-to-one ops
# --------------------------------------------------------------------------------------------


def _register_unary(op_type: str, op: str, since: int,
                    attrs: Callable[[OnnxNode], dict[str, Any]] | None = None) -> None:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        (x,) = _inputs(n, 1)
        return [apply(b, op, [x], attrs(n) if attrs else None)]

    converter(op_type, since=since)(convert)


def _register_binary(op_type: str, op: str, since: int) -> None:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        x, y = _inputs(n, 2)
        _same_dtype(b, n, [x, y])
        return [apply(b, op, [x, y])]

    converter(op_type, since=since)(convert)


for _onnx, _op, _since in [
        ("Relu", "relu", 1), ("Sigmoid", "sigmoid", 1), ("Tanh", "tanh", 1), ("Erf", "erf", 9),
        ("Exp", "exp", 1), ("Log", "log", 1), ("Sqrt", "sqrt", 1),
        ("Reciprocal", "reciprocal", 1), ("Neg", "negative", 1), ("Floor", "floor", 1),
        ("Ceil", "ceil", 1), ("Round", "round", 11), ("Sign", "sign", 9),
        ("Not", "logical_not", 1), ("Sin", "sin", 1), ("Cos", "cos", 1), ("Tan", "tan", 1),
        ("Asin", "asin", 1), ("Acos", "acos", 1), ("Atan", "atan", 1), ("Sinh", "sinh", 9),
        ("Cosh", "cosh", 9), ("Asinh", "asinh", 9), ("Acosh", "acosh", 9),
        ("Atanh", "atanh", 9), ("IsNaN", "isnan", 9), ("Softplus", "softplus", 1),
        ("Softsign", "softsign", 1), ("HardSwish", "hard_swish", 14), ("Mish", "mish", 18),
        ("BitwiseNot", "bitwise_not", 18)]:
    _register_unary(_onnx, _op, _since)

for _onnx, _op, _since in [
        ("Add", "add", 1), ("Sub", "subtract", 1), ("Mul", "multiply", 1),
        ("Equal", "equal", 1), ("Less", "less", 1), ("Greater", "greater", 1),
        ("LessOrEqual", "less_equal", 12), ("GreaterOrEqual", "greater_equal", 12),
        ("And", "logical_and", 1), ("Or", "logical_or", 1), ("Xor", "logical_xor", 1),
        ("BitwiseAnd", "bitwise_and", 18), ("BitwiseOr", "bitwise_or", 18),
        ("BitwiseXor", "bitwise_xor", 18)]:
    _register_binary(_onnx, _op, _since)


def _alpha(default: float) -> Callable[[OnnxNode], dict[str, Any]]:
    return lambda n: {"alpha": float(n.attr("alpha", default))}


_register_unary("LeakyRelu", "leaky_relu", 1, _alpha(0.01))
_register_unary("Elu", "elu", 1, _alpha(1.0))
_register_unary("Celu", "celu", 12, _alpha(1.0))
_register_unary("ThresholdedRelu", "thresholded_relu", 10, _alpha(1.0))
_register_unary("Swish", "swish", 24, _alpha(1.0))
_register_unary("Selu", "selu", 1, lambda n: {
    "alpha": float(n.attr("alpha", 1.67326319217681884765625)),
    "gamma": float(n.attr("gamma", 1.05070102214813232421875))})
_register_unary("HardSigmoid", "hard_sigmoid", 1, lambda n: {
    "alpha": float(n.attr("alpha", 0.2)), "beta": float(n.attr("beta", 0.5))})
_register_unary("Shrink", "shrink", 9, lambda n: {
    "bias": float(n.attr("bias", 0.0)), "lambd": float(n.attr("lambd", 0.5))})


def _flag(n: OnnxNode, key: str) -> bool:
    value = n.attr(key, 1)
    if value not in (0, 1):
        raise n.fail(f"attribute {key!r} must be 0 or 1, given {value!r}")
    return bool(value)


_register_unary("IsInf", "isinf", 10, lambda n: {
    "detect_positive": _flag(n, "detect_positive"),
    "detect_negative": _flag(n, "detect_negative")})


@converter("Gelu", since=20)
def _gelu(b: Builder, n: OnnxNode) -> list[str]:
    (x,) = _inputs(n, 1)
    approximate = n.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise n.fail(f"attribute 'approximate' must be 'none' or 'tanh', given {approximate!r}")
    return [apply(b, "gelu", [x], {"approximate": approximate == "tanh"})]


@converter("Abs", since=1)
def _abs(b: Builder, n: OnnxNode) -> list[str]:
    (x,) = _inputs(n, 1)
    return [x if b.dtype(x) in _UNSIGNED else apply(b, "abs", [x])]


@converter("Where", since=9)
def _where(b: Builder, n: OnnxNode) -> list[str]:
    cond, x, y = _inputs(n, 3)
    _same_dtype(b, n, [x, y])
    return [apply(b, "where", [cond, x, y])]


@converter("PRelu", since=1)
def _prelu(b: Builder, n: OnnxNode) -> list[str]:
    x, slope = _inputs(n, 2)
    _same_dtype(b, n, [x, slope])
    shape, slope_shape = b.shape(x), b.shape(slope)
    try:
        unidirectional = np.broadcast_shapes(shape, slope_shape) == shape
    except ValueError:
        unidirectional = False
    if (not unidirectional and n.opset < 9 and len(slope_shape) == 1 and len(shape) > 2
            and slope_shape[0] == shape[1]):
        # PRelu-6's per-channel slope: opset-6 models reach the converter upgraded to opset 7
        # by ONNX's version converter, which leaves the slope as it was.
        channel = [shape[1]] + [1] * (len(shape) - 2)
        slope = b.op("reshape", [slope], {"newshape": channel})[0]
        unidirectional = True
    if not unidirectional:
        raise n.fail(f"slope of shape {list(slope_shape)} does not broadcast to the input's "
                     f"shape {list(shape)}")
    return [apply(b, "prelu", [x, slope])]


# --------------------------------------------------------------------------------------------
# Arithmetic with ONNX's own dtype rules
# --------------------------------------------------------------------------------------------


@converter("Div", since=1)
def _div(b: Builder, n: OnnxNode) -> list[str]:
    x, y = _inputs(n, 2)
    _same_dtype(b, n, [x, y])
    return [apply(b, "trunc_divide" if _is_int(b.dtype(x)) else "divide", [x, y])]


@converter("Pow", since=1)
def _pow(b: Builder, n: OnnxNode) -> list[str]:
    x, y = _inputs(n, 2)
    base, exponent = b.dtype(x), b.dtype(y)
    if n.opset < 12 and base != exponent:
        raise n.fail(f"before opset 12 base and exponent must have one dtype, given {base} "
                     f"and {exponent}")
    if _is_float(base):
        return [apply(b, "power", [x, cast_to(b, y, base)])]
    if not _is_int(base):
        raise n.fail(f"the base must be a number, given {base}")
    if _is_float(exponent):  # computed in float64, truncated to the base's dtype
        result = apply(b, "power", [cast_to(b, x, "float64"), cast_to(b, y, "float64")])
        return [cast_to(b, result, base)]
    return [apply(b, "power", [x, cast_to(b, y, base)])]


@converter("Mod", since=10)
def _mod(b: Builder, n: OnnxNode) -> list[str]:
    x, y = _inputs(n, 2)
    _same_dtype(b, n, [x, y])
    fmod = n.attr("fmod", 0)
    if fmod not in (0, 1):
        raise n.fail(f"attribute 'fmod' must be 0 or 1, given {fmod!r}")
    if fmod == 1:
        return [apply(b, "fmod", [x, y])]
    if _is_float(b.dtype(x)) and n.opset < 28:
        raise n.fail(f"fmod=0 takes integer inputs before opset 28 (given {b.dtype(x)}); set "
                     "fmod=1 for floating point")
    return [apply(b, "mod", [x, y])]


def _variadic(b: Builder, n: OnnxNode) -> list[str]:
    """The node's inputs (at least one, one dtype; one shape before opset 8)."""
    values = [v for v in n.inputs if v]
    if not values or len(values) != len(n.inputs):
        raise n.fail("needs at least one input and no omitted ones")
    _same_dtype(b, n, values)
    if n.opset < 8 and len({b.shape(v) for v in values}) > 1:
        raise n.fail("inputs must have one shape before opset 8 (no broadcasting), given "
                     + ", ".join(str(list(b.shape(v))) for v in values))
    return values


def _fold(b: Builder, op: str, values: Sequence[str]) -> str:
    result = values[0]
    for value in values[1:]:
        result = apply(b, op, [result, value])
    return result


def _register_variadic(op_type: str, op: str) -> None:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        return [_fold(b, op, _variadic(b, n))]

    converter(op_type, since=1)(convert)


for _onnx, _op in [("Max", "maximum"), ("Min", "minimum"), ("Sum", "add")]:
    _register_variadic(_onnx, _op)


@converter("Mean", since=1)
def _mean(b: Builder, n: OnnxNode) -> list[str]:
    values = _variadic(b, n)
    total = _fold(b, "add", values)
    if len(values) == 1:
        return [total]
    dtype = b.dtype(total)
    if not _is_float(dtype):
        raise n.fail(f"takes float inputs, given {dtype}")
    count = b.constant(np.asarray(len(values), "float32" if dtype == BF16 else dtype))
    return [apply(b, "divide", [total, count])]


@converter("BitShift", since=11)
def _bitshift(b: Builder, n: OnnxNode) -> list[str]:
    x, y = _inputs(n, 2)
    _same_dtype(b, n, [x, y])
    direction = n.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise n.fail(f"attribute 'direction' must be 'LEFT' or 'RIGHT', given {direction!r}")
    if n.opset < 28 and b.dtype(x) not in _UNSIGNED:
        raise n.fail(f"shifts unsigned integers before opset 28, given {b.dtype(x)}")
    return [apply(b, "left_shift" if direction == "LEFT" else "right_shift", [x, y])]


# --------------------------------------------------------------------------------------------
# Clip
# --------------------------------------------------------------------------------------------


def _bound_value(n: OnnxNode, bound: float | int, dtype: str, which: str
                 ) -> float | int | None:
    """A constant Clip bound as a number of ``dtype``, or None when it bounds nothing (a
    float bound beyond the dtype's range on the open side: ``min=-FLT_MAX`` in float16); an
    integer bound beyond the dtype's range is its nearest end."""
    if not _is_float(dtype):
        if isinstance(bound, float) and np.isnan(bound):
            raise n.fail(f"{which} is NaN, which no {dtype} stands for")
        info = np.iinfo(dtype)
        if isinstance(bound, float) and np.isinf(bound):
            return int(info.max) if bound > 0 else int(info.min)
        return min(max(int(bound), int(info.min)), int(info.max))
    with np.errstate(over="ignore"):
        value = float(np.asarray(bound, "float32" if dtype == BF16 else dtype))
    return None if value == (-np.inf if which == "min" else np.inf) else value


def _clip(b: Builder, n: OnnxNode, x: str, low: str | float | None, high: str | float | None
          ) -> list[str]:
    """Clip ``x`` to ``[low, high]``: bounds are constant numbers, value names or None.

    ``low > high`` gives ``high`` everywhere, as ONNX says (``min(max(x, low), high)``).
    """
    dtype = b.dtype(x)
    if dtype == "bool":
        raise n.fail("Clip takes numbers, given a bool input")
    bounds: list[Any] = []
    for bound in (low, high):
        if isinstance(bound, str) and b.is_constant(bound):
            values = np.asarray(b.constant_value(bound)).reshape(-1)
            if values.size != 1:
                raise n.fail(f"min and max must be scalars, given {values.size} values")
            bound = values[0].item()
        bounds.append(bound)
    low, high = bounds
    if not isinstance(low, str) and low is not None:
        low = _bound_value(n, low, dtype, "min")
    if not isinstance(high, str) and high is not None:
        high = _bound_value(n, high, dtype, "max")
    if (isinstance(low, float) and isinstance(high, float) and low <= high
            and dtype in ("float16", "float32", "float64")):
        return [apply(b, "clip", [x], {"a_min": low, "a_max": high})]
    result = x
    for op, bound in (("maximum", low), ("minimum", high)):
        if bound is None:
            continue
        if isinstance(bound, str):
            if b.dtype(bound) != dtype:
                raise n.fail(f"min and max must have the input's dtype {dtype}, given "
                             f"{b.dtype(bound)}")
            if b.shape(bound) != ():
                bound = b.op("reshape", [bound], {"newshape": []})[0]
        else:
            bound = b.constant(np.asarray(bound, "float32" if dtype == BF16 else dtype))
            bound = cast_to(b, bound, dtype)
        result = apply(b, op, [result, bound])
    return [result]


@converter("Clip", since=1, until=10)
def _clip_6(b: Builder, n: OnnxNode) -> list[str]:
    (x,) = _inputs(n, 1)
    return _clip(b, n, x, float(n.attr("min", -3.4028234663852886e38)),
                 float(n.attr("max", 3.4028234663852886e38)))


@converter("Clip", since=11)
def _clip_11(b: Builder, n: OnnxNode) -> list[str]:
    if not n.input(0) or len(n.inputs) > 3:
        raise n.fail(f"expects an input and optional min and max, given {len(n.inputs)} inputs")
    return _clip(b, n, n.inputs[0], n.input(1), n.input(2))


# --------------------------------------------------------------------------------------------
# Identity, Cast, CastLike, Dropout
# --------------------------------------------------------------------------------------------


@converter("Identity", since=1)
def _identity(b: Builder, n: OnnxNode) -> list[str]:
    (x,) = _inputs(n, 1)
    return [x]


_ROUND_MODES = ("up", "down", "nearest")


def _cast(b: Builder, n: OnnxNode, x: str, dtype: str) -> list[str]:
    """``x`` as ``dtype``; to or from a low-precision type (float8, float4, int4, int2) with the
    node's ``saturate`` (opset 19, float8 targets) and ``round_mode`` (opset 24,
    float8_e8m0fnu targets)."""
    source = b.dtype(x)
    if source == dtype:
        return [x]
    if source in LOW_PRECISION or dtype in LOW_PRECISION:
        saturate = int(n.attr("saturate", 1)) if n.opset >= 19 else 1
        round_mode = str(n.attr("round_mode", "up")) if n.opset >= 24 else "up"
        if round_mode not in _ROUND_MODES:
            raise n.fail(f"round_mode must be one of {', '.join(_ROUND_MODES)}, given "
                         f"{round_mode!r}")
        return b.op("cast_low_precision", [x], {"dtype": dtype, "saturate": bool(saturate),
                                                "round_mode": round_mode})
    if (source == BF16 and dtype == "bool") or (source == "bool" and dtype == BF16):
        return [cast_to(b, cast_to(b, x, "float32"), dtype)]
    return [cast_to(b, x, dtype)]


@converter("Cast", since=1)
def _cast_op(b: Builder, n: OnnxNode) -> list[str]:
    (x,) = _inputs(n, 1)
    return _cast(b, n, x, dtype_name(int(n.attr("to")), f"{n.label}: attribute 'to'"))


@converter("CastLike", since=15)
def _cast_like(b: Builder, n: OnnxNode) -> list[str]:
    x, like = _inputs(n, 2)
    return _cast(b, n, x, b.dtype(like))


def _dropout(b: Builder, n: OnnxNode, mask_dtype: str | None) -> list[str]:
    """Inference: the data unchanged and, when asked for, a mask of ones."""
    x = n.inputs[0] if n.inputs else ""
    if not x:
        raise n.fail("the data input is missing")
    outputs = [x]
    if len(n.outputs) > 1 and n.outputs[1]:
        outputs.append(b.filled(1, b.shape(x), mask_dtype or b.dtype(x)))
    return outputs


@converter("Dropout", since=1, until=9)
def _dropout_7(b: Builder, n: OnnxNode) -> list[str]:
    return _dropout(b, n, None)  # the mask has the data's dtype


@converter("Dropout", since=10, until=11)
def _dropout_10(b: Builder, n: OnnxNode) -> list[str]:
    return _dropout(b, n, "bool")


@converter("Dropout", since=12)
def _dropout_12(b: Builder, n: OnnxNode) -> list[str]:
    training = n.input(2)
    if training is not None:
        mode = np.asarray(b.constant_value(training, "Dropout's training_mode")).reshape(-1)
        if mode.size != 1:
            raise n.fail(f"training_mode must be a scalar, given {mode.size} values")
        if bool(mode[0]):
            raise n.fail("training_mode is true: graphrt runs inference only (random dropout "
                         "is not supported)")
    return _dropout(b, n, "bool")
