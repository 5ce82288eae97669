"""Standard ops: activations and the rest of ONNX's elementwise math (numpy and cupy).

Unary float ops (``FLOATS``: float16/32/64 and bfloat16):

* trigonometric and hyperbolic: ``sin cos tan asin acos atan sinh cosh asinh acosh atanh``;
* ``reciprocal``, ``softplus`` (``log(1 + exp(x))``, without overflow), ``softsign``
  (``x / (1 + |x|)``), ``mish`` (``x * tanh(softplus(x))``), ``hard_swish``
  (``x * clip(x / 6 + 1 / 2, 0, 1)``);
* with attributes: ``elu`` (alpha), ``selu`` (alpha, gamma), ``celu`` (alpha),
  ``hard_sigmoid`` (``clip(alpha * x + beta, 0, 1)``), ``thresholded_relu`` (``x`` where
  ``x > alpha``, else 0), ``swish`` (``x * sigmoid(alpha * x)``);
* predicates (bool output): ``isnan``, ``isinf`` (which infinities to detect).

Other unary ops: ``sign`` and ``shrink`` (any numeric dtype), ``bitwise_not`` (integers).

Binary ops (both inputs of one dtype, numpy broadcasting): ``prelu`` (``x < 0 ? x * slope :
x``), ``trunc_divide`` (integer division rounding toward zero, as C and ONNX do; numpy's
``floor_divide`` rounds down), ``fmod`` (C's remainder: the sign of the dividend),
``bitwise_and/or/xor``, ``left_shift`` and ``right_shift`` (a shift by a negative amount or
by the width or more gives what sign extension alone gives: -1 for a right shift of a negative
value, else 0), ``logical_xor``.

``cast_bfloat16`` converts to or from bfloat16 (numpy with ml_dtypes; cupy has no bfloat16).

float16 and bfloat16 inputs of the composite ops (everything beyond one array function) are
computed in float32 and rounded once. Ops with an ``elementwise`` expression fuse into one
CUDA kernel (float16 and bfloat16 stay unfused); ops whose expression would depend on
attribute values have none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from .base import Attrs, Direct, OpDef, OpError, TensorType, broadcast, register_op

__all__ = [
    "FLOATS",
    "INTEGERS",
    "NUMERIC",
    "AlphaAttrs",
    "CastBfloat16Attrs",
    "CeluAttrs",
    "HardSigmoidAttrs",
    "IsInfAttrs",
    "SeluAttrs",
    "ShrinkAttrs",
]

FLOATS = frozenset({"float16", "float32", "float64", "bfloat16"})
SIGNED_INTS = frozenset({"int8", "int16", "int32", "int64"})
INTEGERS = SIGNED_INTS | {"uint8", "uint16", "uint32", "uint64"}
NUMERIC = FLOATS | INTEGERS
BOOLS = frozenset({"bool"})
ALL_DTYPES = NUMERIC | BOOLS

_WHAT = {FLOATS: "float", INTEGERS: "integer", NUMERIC: "int, uint or float", BOOLS: "bool"}

Types = Sequence[TensorType]

# --------------------------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------------------------


class NoAttrs(Attrs):
    """Attributes of an op that takes none."""


class AlphaAttrs(Attrs):
    """``elu``, ``thresholded_relu``, ``swish``: the one coefficient."""

    alpha: float = 1.0


class CeluAttrs(Attrs):
    """``celu``: ``alpha`` (nonzero: x is divided by it)."""

    alpha: float = 1.0


class SeluAttrs(Attrs):
    """``selu``: ``gamma * (x > 0 ? x : alpha * (exp(x) - 1))``."""

    alpha: float = 1.67326319217681884765625
    gamma: float = 1.05070102214813232421875


class HardSigmoidAttrs(Attrs):
    """``hard_sigmoid``: ``clip(alpha * x + beta, 0, 1)``."""

    alpha: float = 0.2
    beta: float = 0.5


class ShrinkAttrs(Attrs):
    """``shrink``: ``x < -lambd ? x + bias : x > lambd ? x - bias : 0``."""

    bias: float = 0.0
    lambd: float = 0.5


class IsInfAttrs(Attrs):
    """``isinf``: which infinities count."""

    detect_positive: bool = True
    detect_negative: bool = True


class CastBfloat16Attrs(Attrs):
    """``cast_bfloat16``: the target dtype; it or the input's dtype is ``bfloat16``."""

    dtype: str


# --------------------------------------------------------------------------------------------
# Registration helpers
# --------------------------------------------------------------------------------------------


def _check(name: str, index: int, tensor: TensorType, allowed: frozenset[str]) -> None:
    if tensor.dtype not in allowed:
        raise OpError(f"{name} expects {_WHAT[allowed]} input(s), but input {index} is "
                      f"{tensor.dtype}")


def _register(name: str, attrs: type[Attrs], arity: int, infer: Callable[[Types, Any],
              list[TensorType]], compute: Callable[[Any, Sequence[Any], Sequence[Any], Any],
              None], elementwise: str | None = None, direct: Direct | None = None) -> None:
    """Register an op whose shape function needs no input values."""
    def shape_function(types: Types, parsed: Any, data: Sequence[Any]) -> list[TensorType]:
        if len(types) != arity:
            raise OpError(f"{name} takes {arity} input(s), got {len(types)}")
        return infer(types, parsed)

    register_op(OpDef(name=name, attrs=attrs, arity=arity, infer=shape_function,
                      compute=compute, elementwise=elementwise, direct=direct))


def _at_least_1d(*arrays: Any) -> list[Any]:
    """The arrays, 0-d ones as 1-element views (numpy computes on 0-d arrays return scalars,
    which ``copyto`` cannot fill); a 0-d output means every input is 0-d."""
    if arrays[-1].ndim:
        return list(arrays)
    return [a.reshape(1) for a in arrays]


UnaryCompute = Callable[[Any, Any, Any, Any], None]
"""``compute(xp, x, out, attrs)`` of a unary op."""


def _unary(name: str, allowed: frozenset[str], compute: UnaryCompute,
           elementwise: str | None = None, attrs: type[Attrs] = NoAttrs,
           out_dtype: str | None = None, ufunc: str | None = None,
           check: Callable[[Any], None] | None = None) -> None:
    """A unary op: same shape out, same dtype (or ``out_dtype``). ``ufunc`` names the one
    array function ``compute`` calls, so the kernel can call it directly."""
    def infer(types: Types, parsed: Any) -> list[TensorType]:
        _check(name, 0, types[0], allowed)
        if check is not None:
            check(parsed)
        return [TensorType(types[0].shape, out_dtype or types[0].dtype)]

    def run(xp: Any, ins: Sequence[Any], outs: Sequence[Any], parsed: Any) -> None:
        x, out = _at_least_1d(ins[0], outs[0])
        compute(xp, x, out, parsed)

    _register(name, attrs, 1, infer, run, elementwise,
              None if ufunc is None else Direct(ufunc))  # ufunc(x, out)


def _ufunc(function: str) -> UnaryCompute:
    def compute(xp: Any, x: Any, out: Any, attrs: Any) -> None:
        getattr(xp, function)(x, out=out)

    return compute


BinaryCompute = Callable[[Any, Any, Any, Any, Any], None]
"""``compute(xp, a, b, out, attrs)`` of a binary op."""


def _binary(name: str, allowed: frozenset[str], compute: BinaryCompute,
            elementwise: str | None = None, *, boolean: bool = False,
            ufunc: str | None = None) -> None:
    """A broadcasting binary op over two inputs of one dtype (bool output when ``boolean``)."""
    def infer(types: Types, parsed: Any) -> list[TensorType]:
        a, b = types
        _check(name, 0, a, allowed)
        _check(name, 1, b, allowed)
        if a.dtype != b.dtype:
            raise OpError(f"{name} needs inputs of one dtype, but input 0 is {a.dtype} and "
                          f"input 1 is {b.dtype}; cast one of them first")
        try:
            shape = broadcast(a.shape, b.shape)
        except OpError as err:
            raise OpError(f"{name}: input {err}") from None
        return [TensorType(shape, "bool" if boolean else a.dtype)]

    def run(xp: Any, ins: Sequence[Any], outs: Sequence[Any], parsed: Any) -> None:
        a, b, out = _at_least_1d(ins[0], ins[1], outs[0])
        compute(xp, a, b, out, parsed)

    _register(name, NoAttrs, 2, infer, run, elementwise,
              None if ufunc is None else Direct(ufunc))  # ufunc(a, b, out)


def _binary_ufunc(function: str) -> BinaryCompute:
    def compute(xp: Any, a: Any, b: Any, out: Any, attrs: Any) -> None:
        getattr(xp, function)(a, b, out=out)

    return compute


def _working(xp: Any, x: Any) -> Any:
    """``x`` in the precision composite float ops compute in: float32 for 16-bit floats."""
    return x.astype(xp.float32) if x.dtype.itemsize < 4 else x


# --------------------------------------------------------------------------------------------
# Unary float ops without attributes
# --------------------------------------------------------------------------------------------

for _name, _function, _expression in [
        ("sin", "sin", "sin(in0)"), ("cos", "cos", "cos(in0)"), ("tan", "tan", "tan(in0)"),
        ("asin", "arcsin", "asin(in0)"), ("acos", "arccos", "acos(in0)"),
        ("atan", "arctan", "atan(in0)"), ("sinh", "sinh", "sinh(in0)"),
        ("cosh", "cosh", "cosh(in0)"), ("asinh", "arcsinh", "asinh(in0)"),
        ("acosh", "arccosh", "acosh(in0)"), ("atanh", "arctanh", "atanh(in0)"),
        ("reciprocal", "reciprocal", "1 / in0")]:
    _unary(_name, FLOATS, _ufunc(_function), _expression, ufunc=_function)

_unary("isnan", FLOATS, _ufunc("isnan"), "in0 != in0", out_dtype="bool", ufunc="isnan")


def _softplus_of(xp: Any, w: Any) -> Any:
    """``log(1 + exp(w))`` as ``max(w, 0) + log1p(exp(-|w|))``: no overflow, NaN kept."""
    return xp.maximum(w, 0) + xp.log1p(xp.exp(-xp.abs(w)))


def _softplus(xp: Any, x: Any, out: Any, attrs: Any) -> None:
    out[...] = _softplus_of(xp, _working(xp, x))


def _softsign(xp: Any, x: Any, out: Any, attrs: Any) -> None:
    w = _working(xp, x)
    out[...] = w / (xp.abs(w) + 1)


def _mish(xp: Any, x: Any, out: Any, attrs: Any) -> None:
    w = _working(xp, x)
    out[...] = w * xp.tanh(_softplus_of(xp, w))


def _hard_swish(xp: Any, x: Any, out: Any, attrs: Any) -> None:
    w = _working(xp, x)
    out[...] = w * xp.clip(w / 6 + 0.5, 0, 1)  # -inf * 0: NaN, as ONNX's formula gives


_SOFTPLUS_C = "(in0 > 0 ? in0 + log1p(exp(-in0)) : log1p(exp(in0)))"
_unary("softplus", FLOATS, _softplus, _SOFTPLUS_C)
_unary("softsign", FLOATS, _softsign, "in0 / (fabs(in0) + 1)")
_unary("mish", FLOATS, _mish, f"in0 * tanh{_SOFTPLUS_C}")
_unary("hard_swish", FLOATS, _hard_swish,
       "in0 * (in0 >= 3 ? 1 : (in0 <= -3 ? 0 : in0 / 6 + 0.5f))")

# --------------------------------------------------------------------------------------------
# Unary float ops with attributes
# --------------------------------------------------------------------------------------------


def _elu(xp: Any, x: Any, out: Any, attrs: AlphaAttrs) -> None:
    w = _working(xp, x)
    y = xp.expm1(xp.minimum(w, 0)) * attrs.alpha  # min first: exp never overflows
    xp.copyto(y, w, where=~(w < 0))  # ONNX's ``x < 0 ? ... : x``: elu(-0.0) is -0.0
    out[...] = y


def _selu(xp: Any, x: Any, out: Any, attrs: SeluAttrs) -> None:
    w = _working(xp, x)
    y = xp.expm1(xp.minimum(w, 0)) * attrs.alpha
    xp.copyto(y, w, where=w > 0)
    out[...] = y * attrs.gamma


def _celu_check(attrs: CeluAttrs) -> None:
    if attrs.alpha == 0:
        raise OpError("celu needs a nonzero alpha (x is divided by it)")


def _celu(xp: Any, x: Any, out: Any, attrs: CeluAttrs) -> None:
    w = _working(xp, x)
    y = xp.expm1(xp.minimum(w, 0) / attrs.alpha) * attrs.alpha
    xp.copyto(y, w, where=w > 0)
    out[...] = y


def _hard_sigmoid(xp: Any, x: Any, out: Any, attrs: HardSigmoidAttrs) -> None:
    w = _working(xp, x)
    out[...] = xp.clip(w * attrs.alpha + attrs.beta, 0, 1)  # NaN stays NaN


def _thresholded_relu(xp: Any, x: Any, out: Any, attrs: AlphaAttrs) -> None:
    out[...] = 0
    xp.copyto(out, x, where=x > attrs.alpha)


def _sigmoid_of(xp: Any, z: Any) -> Any:
    """``1 / (1 + exp(-z))`` without overflow: with ``e = exp(-|z|)``, ``1 / (1 + e)`` for
    ``z >= 0`` and ``e / (1 + e)`` below."""
    e = xp.exp(-xp.abs(z))
    y = 1 / (e + 1)
    xp.copyto(y, e * y, where=z < 0)
    return y


def _swish(xp: Any, x: Any, out: Any, attrs: AlphaAttrs) -> None:
    w = _working(xp, x)
    out[...] = w * _sigmoid_of(xp, w * attrs.alpha)


def _isinf(xp: Any, x: Any, out: Any, attrs: IsInfAttrs) -> None:
    if attrs.detect_positive and attrs.detect_negative:
        xp.isinf(x, out=out)
    elif attrs.detect_positive:
        xp.equal(x, math.inf, out=out)
    elif attrs.detect_negative:
        xp.equal(x, -math.inf, out=out)
    else:
        out[...] = False


_unary("elu", FLOATS, _elu, attrs=AlphaAttrs)
_unary("selu", FLOATS, _selu, attrs=SeluAttrs)
_unary("celu", FLOATS, _celu, attrs=CeluAttrs, check=_celu_check)
_unary("hard_sigmoid", FLOATS, _hard_sigmoid, attrs=HardSigmoidAttrs)
_unary("thresholded_relu", FLOATS, _thresholded_relu, attrs=AlphaAttrs)
_unary("swish", FLOATS, _swish, attrs=AlphaAttrs)
_unary("isinf", FLOATS, _isinf, attrs=IsInfAttrs, out_dtype="bool")

# --------------------------------------------------------------------------------------------
# Other unary ops
# --------------------------------------------------------------------------------------------


def _wrapped(value: int, dtype: Any) -> Any:
    """The integer ``value`` modulo the width of integer ``dtype``, as a scalar of it."""
    bits = dtype.itemsize * 8
    value %= 1 << bits
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return dtype.type(value)


def _shrink(xp: Any, x: Any, out: Any, attrs: ShrinkAttrs) -> None:
    if x.dtype.kind in "iu" and math.isfinite(attrs.bias) and attrs.bias == int(attrs.bias):
        # an integer bias: exact in the input dtype (wrapping around, as integer arithmetic)
        bias = _wrapped(int(attrs.bias), x.dtype)
        out[...] = 0
        xp.copyto(out, x - bias, where=x > attrs.lambd)
        xp.copyto(out, x + bias, where=x < -attrs.lambd)
        return
    # Other integer inputs: x +- bias in float64, truncated toward zero on the way out.
    w = x.astype(xp.float64) if x.dtype.kind in "iu" else _working(xp, x)
    y = w + attrs.bias
    xp.copyto(y, w - attrs.bias, where=w > attrs.lambd)
    xp.copyto(y, 0, where=~((w < -attrs.lambd) | (w > attrs.lambd)))  # NaN: 0, as ONNX's
    out[...] = y


_unary("sign", NUMERIC, _ufunc("sign"), "in0 > 0 ? 1 : (in0 < 0 ? -1 : (in0 == 0 ? 0 : in0))",
       ufunc="sign")
_unary("shrink", NUMERIC, _shrink, attrs=ShrinkAttrs)
_unary("bitwise_not", INTEGERS, _ufunc("invert"), "~in0", ufunc="invert")

# --------------------------------------------------------------------------------------------
# Binary ops
# --------------------------------------------------------------------------------------------


def _prelu(xp: Any, x: Any, slope: Any, out: Any, attrs: Any) -> None:
    out[...] = xp.where(x < 0, x * slope, x)


def _trunc_divide(xp: Any, a: Any, b: Any, out: Any, attrs: Any) -> None:
    quotient = xp.floor_divide(a, b)  # a zero divisor gives 0, as numpy's integer division
    if a.dtype.kind == "i":  # round up where the exact quotient is negative and inexact
        inexact = xp.remainder(a, b) != 0
        quotient = quotient + (inexact & ((a < 0) != (b < 0)))
    out[...] = quotient


def _left_shift(xp: Any, x: Any, y: Any, out: Any, attrs: Any) -> None:
    valid = (y >= 0) & (y < out.dtype.itemsize * 8)
    xp.left_shift(x, y * valid, out=out)
    xp.multiply(out, valid, out=out)  # shifted out entirely: 0


def _right_shift(xp: Any, x: Any, y: Any, out: Any, attrs: Any) -> None:
    bits = out.dtype.itemsize * 8
    valid = (y >= 0) & (y < bits)
    xp.right_shift(x, y * valid, out=out)
    fill = xp.right_shift(x, bits - 1) if out.dtype.kind == "i" else 0  # the sign, or 0
    xp.copyto(out, fill, where=~valid)


_SHIFT_OK = "(in1 >= 0 && in1 < sizeof(in0) * 8)"
_binary("prelu", NUMERIC, _prelu, "in0 < 0 ? in0 * in1 : in0")
_binary("trunc_divide", INTEGERS, _trunc_divide, "in1 == 0 ? 0 : in0 / in1")
_binary("fmod", NUMERIC, _binary_ufunc("fmod"), ufunc="fmod")
_binary("bitwise_and", INTEGERS, _binary_ufunc("bitwise_and"), "in0 & in1",
        ufunc="bitwise_and")
_binary("bitwise_or", INTEGERS, _binary_ufunc("bitwise_or"), "in0 | in1", ufunc="bitwise_or")
_binary("bitwise_xor", INTEGERS, _binary_ufunc("bitwise_xor"), "in0 ^ in1",
        ufunc="bitwise_xor")
_binary("left_shift", INTEGERS, _left_shift, f"{_SHIFT_OK} ? in0 << in1 : 0")
_binary("right_shift", INTEGERS, _right_shift,
        f"{_SHIFT_OK} ? in0 >> in1 : (in0 < 0 ? -1 : 0)")
_binary("logical_xor", BOOLS, _binary_ufunc("logical_xor"), "in0 != in1", boolean=True,
        ufunc="logical_xor")

# --------------------------------------------------------------------------------------------
# cast_bfloat16
# --------------------------------------------------------------------------------------------


def _cast_bfloat16_infer(types: Types, attrs: CastBfloat16Attrs) -> list[TensorType]:
    (x,) = types
    if attrs.dtype not in ALL_DTYPES:
        raise OpError(f"cast_bfloat16: unsupported target dtype {attrs.dtype!r} (expected one "
                      f"of {', '.join(sorted(ALL_DTYPES))})")
    if x.dtype not in ALL_DTYPES:
        raise OpError(f"cast_bfloat16: unsupported input dtype {x.dtype}")
    if "bfloat16" not in (x.dtype, attrs.dtype):
        raise OpError(f"cast_bfloat16 converts to or from bfloat16, not {x.dtype} to "
                      f"{attrs.dtype}: use cast")
    return [TensorType(x.shape, attrs.dtype)]


def _cast_bfloat16(xp: Any, ins: Sequence[Any], outs: Sequence[Any],
                   attrs: CastBfloat16Attrs) -> None:
    outs[0][...] = ins[0]  # ml_dtypes: round to nearest even; to ints: toward zero


_register("cast_bfloat16", CastBfloat16Attrs, 1, _cast_bfloat16_infer, _cast_bfloat16)
# cupy has no bfloat16: the cuda kernels do not run it (graphrt.kernels.cuda), so placement
# keeps it on the host
