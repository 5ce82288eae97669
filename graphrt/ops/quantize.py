"""Standard ops: linear quantization (``quantize``, ``dequantize``, ``dynamic_quantize``) and
casts to and from the low-precision types (``cast_low_precision``).

The scale and the optional zero point are per tensor (one element), per axis (1-D, one per
index of ``axis``) or blocked (``block_size`` > 0: the rank of the data, with
``ceil(data.shape[axis] / block_size)`` along ``axis``, one per block of consecutive indices),
as ONNX ``QuantizeLinear``/``DequantizeLinear``:

* ``quantize``: ``clip(round_half_even(x / scale) + zero_point, lo, hi)``, saturating to the
  output dtype's range (int4 ``[-8, 7]``, uint2 ``[0, 3]``, ...). The division is done in
  ``precision`` (default: numpy's promotion of x and the scale, float32 when that is float16 or
  bfloat16, as ONNX Runtime does); the rounding, the zero point and the saturation in at least
  float32 (float16 cannot hold 32767). To a float8 type, ``x / scale`` is rounded to nearest
  even, out-of-range values clipped to the type's largest finite value when ``saturate``
  (infinities too) and made inf or NaN (as the type can) when not; to float4_e2m1fn, which has
  neither, ``x / scale + zero_point`` rounds and saturates.
* ``dequantize``: ``(x - zero_point) * scale``: the difference is exact (integer, or float32
  for float4_e2m1fn), converted to float32 (or the scale's dtype when wider), multiplied, and
  cast to ``dtype``. A float8_e8m0fnu scale (a power of two) is read as float32.

A float8 zero point is not used (ONNX's reference ignores it, and refuses one that is not 0 when
it dequantizes); it only names the output type.
* ``dynamic_quantize``: ONNX ``DynamicQuantizeLinear``: uint8 with a scale and zero point
  computed from the data's range extended to include 0 (scale 1 when that range is empty).
* ``cast_low_precision``: ONNX ``Cast`` where the input or the target is one of the
  low-precision types (float8, float4_e2m1fn, int4, uint4, int2, uint2, see
  :data:`graphrt.schema.dtypes.LOW_PRECISION`; numpy holds them through ml_dtypes, one byte an
  element, and cannot compute in them). Floats round to nearest even; to a float8 type with
  ``saturate`` out-of-range values and infinities clip to the largest finite value, without it
  they become inf (float8_e5m2) or NaN; to float8_e8m0fnu (powers of two) the float32 exponent
  is kept and ``round_mode`` rounds a value between two powers ``up``, ``down`` or to the
  ``nearest``, as ONNX's reference does; floats to the integer types truncate toward zero and
  wrap around, integers wrap around (two's complement), as numpy's casts do.

A per-tensor ``quantize`` of float32 to int8, uint8, int16 or uint16 and a per-tensor
``dequantize`` of those or int32 to float32 (a float32 scale, one value, and at most one zero
point) are elementwise: :meth:`OpDef.expression <graphrt.ops.OpDef.expression>` gives each such
step a C expression (:func:`quantize_expression`, :func:`dequantize_expression`) computing
bitwise what the reference does, so conversion groups ``dequantize → add → quantize`` into one
node and the cpu provider compiles it as one loop (:mod:`graphrt.kernels.cpu.loops`). Per-axis
and blocked scales, float16 or float64 scales or precisions, and the low-precision types run
the reference, unfused; so do all of them on cuda (not verified bitwise there yet).

The low-precision types exist only where numpy and ml_dtypes do (cpu, sim): cupy has none, so
``cast_low_precision`` does not run on cuda.

Example:
    >>> import numpy as np, ml_dtypes
    >>> x = np.array([1.0, 500.0, np.inf], np.float32)
    >>> out = np.empty(3, ml_dtypes.float8_e4m3fn)
    >>> cast_low_precision(np, x, out, saturate=True)
    >>> out.astype(np.float32)
    array([  1., 448., 448.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import ml_dtypes
import numpy as np
from pydantic import Field

from ..schema.dtypes import LOW_PRECISION
from .base import Attrs, OpDef, OpError, TensorType, accumulator, normalize_axis, register_op

__all__ = ["FUSED_RANGES", "QUANT_EXPRESSIONS", "CastLowPrecisionAttrs", "DequantizeAttrs",
           "DynamicQuantizeAttrs", "QuantizeAttrs", "cast_low_precision", "dequantize_expression",
           "int_range", "quantize_expression"]

QuantDtype = Literal["int8", "uint8", "int16", "uint16", "int32", "int4", "uint4", "int2",
                     "uint2", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                     "float8_e5m2fnuz", "float4_e2m1fn"]
FloatDtype = Literal["float16", "float32", "float64", "bfloat16"]
RoundMode = Literal["up", "down", "nearest"]
_FLOATS = ("float16", "float32", "float64", "bfloat16")
_SCALES = (*_FLOATS, "float8_e8m0fnu")
_FLOAT8 = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})
_LOW_INTS = frozenset({"int4", "uint4", "int2", "uint2"})
_LOW_FLOATS = frozenset(LOW_PRECISION) - _LOW_INTS
_QUANT_FLOATS = (*sorted(_FLOAT8), "float4_e2m1fn")
_DEQUANT_INPUTS = ("int8", "uint8", "int16", "uint16", "int32", "int4", "uint4", "int2",
                   "uint2", *_QUANT_FLOATS)
_STANDARD = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                       "uint64", *_FLOATS})
_CASTABLE = _STANDARD | frozenset(LOW_PRECISION)


class QuantizeAttrs(Attrs):
    """``quantize``: the output dtype, the quantized axis and block size (0: per tensor or per
    axis, from the scale's shape), the dtype the division is done in (None: promotion), and
    whether a float8 output saturates (clips out-of-range values to its largest finite value)
    or makes them inf or NaN."""

    dtype: QuantDtype = "uint8"
    axis: int = 1
    block_size: Annotated[int, Field(ge=0)] = 0
    precision: FloatDtype | None = None
    saturate: bool = True


class DequantizeAttrs(Attrs):
    """``dequantize``: the output dtype, the quantized axis and block size."""

    dtype: FloatDtype = "float32"
    axis: int = 1
    block_size: Annotated[int, Field(ge=0)] = 0


class DynamicQuantizeAttrs(Attrs):
    """``dynamic_quantize`` takes no attributes (its output is uint8)."""


class CastLowPrecisionAttrs(Attrs):
    """``cast_low_precision``: the target dtype (it or the input's is a low-precision type),
    whether a float8 target saturates, and how a float8_e8m0fnu target rounds."""

    dtype: str
    saturate: bool = True
    round_mode: RoundMode = "up"


def _show(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def _single(t: TensorType) -> bool:
    """One value: a scalar or a one-element vector (ONNX Runtime's quantizer writes a scalar
    zero point beside a [1] scale for a bias)."""
    return t.ndim <= 1 and int(np.prod(t.shape, dtype=np.int64)) == 1


def _check_params(x: TensorType, scale: TensorType, zero: TensorType | None, axis: int,
                  block_size: int) -> None:
    """Refuse a scale (and zero point) shape that is none of per tensor, per axis, blocked."""
    if zero is not None and zero.shape != scale.shape and not (_single(zero) and _single(scale)):
        raise OpError(f"the zero point {_show(zero)} must have the scale's shape "
                      f"{list(scale.shape)}")
    if scale.dtype not in _SCALES:
        raise OpError(f"the scale must be float16, float32, float64, bfloat16 or "
                      f"float8_e8m0fnu, given {scale.dtype}")
    size = int(np.prod(scale.shape, dtype=np.int64))
    if block_size == 0 and scale.ndim <= 1 and size == 1:
        return  # per tensor
    if x.ndim == 0:
        raise OpError(f"a scalar input takes one scale, given {_show(scale)}")
    a = normalize_axis(axis, x.ndim)
    if block_size == 0:
        if scale.ndim != 1 or scale.shape[0] != x.shape[a]:
            raise OpError(f"a per-axis scale must be 1-D with {x.shape[a]} elements (axis "
                          f"{axis} of the input {_show(x)}), given {_show(scale)}")
        return
    blocks = -(-x.shape[a] // block_size)
    expected = tuple(blocks if i == a else d for i, d in enumerate(x.shape))
    if scale.shape != expected:
        raise OpError(f"a blocked scale (block_size {block_size} along axis {axis}) must be "
                      f"{list(expected)} for the input {_show(x)}, given {_show(scale)}")


def _expand(xp: Any, value: Any, shape: tuple[int, ...], axis: int, block_size: int) -> Any:
    """``value`` (scale or zero point) made to broadcast against data of ``shape``."""
    if block_size == 0 and value.ndim <= 1 and value.size == 1:
        return value.reshape(())
    a = normalize_axis(axis, len(shape))
    if block_size == 0:
        return value.reshape(tuple(value.size if i == a else 1 for i in range(len(shape))))
    full = xp.repeat(value, block_size, axis=a)
    return full[tuple(slice(0, shape[a]) if i == a else slice(None) for i in range(len(shape)))]


def int_range(dtype: str) -> tuple[int, int]:
    """The smallest and the largest value of an integer dtype (ml_dtypes' for int4, ...)."""
    info = (ml_dtypes.iinfo(dtype) if dtype in _LOW_INTS  # type: ignore[no-untyped-call]
            else np.iinfo(np.dtype(dtype)))
    return int(info.min), int(info.max)


def _scale_dtype(dtype: Any) -> np.dtype[Any]:
    """The dtype a scale computes in: its own, float32 for float8_e8m0fnu (a power of two)."""
    given: np.dtype[Any] = np.dtype(dtype)
    return np.dtype(np.float32) if given.name == "float8_e8m0fnu" else given


def _array(value: Any) -> Any:
    """``value``, a 0-d array where numpy made a 0-d result a scalar (which takes no
    ``out=``); every namespace's arrays as they are."""
    return np.asarray(value) if isinstance(value, np.generic) else value


def _infer_quantize(types: Sequence[TensorType], attrs: QuantizeAttrs, data: Sequence[Any]
                    ) -> list[TensorType]:
    if len(types) not in (2, 3):
        raise OpError(f"quantize takes 2 or 3 inputs (x, scale[, zero_point]), given "
                      f"{len(types)}")
    x, scale = types[0], types[1]
    zero = types[2] if len(types) == 3 else None
    if x.dtype not in (*_FLOATS, "int32"):
        raise OpError(f"quantize takes float or int32 input, given {_show(x)}")
    if zero is not None and zero.dtype != attrs.dtype:
        raise OpError(f"the zero point's dtype ({zero.dtype}) must be the output dtype "
                      f"({attrs.dtype})")
    _check_params(x, scale, zero, attrs.axis, attrs.block_size)
    return [TensorType(x.shape, attrs.dtype)]


def _quantize(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
              attrs: QuantizeAttrs) -> None:
    x, scale, out = inputs[0], inputs[1], outputs[0]
    if out.size == 0:
        return
    precision = np.dtype(attrs.precision) if attrs.precision else accumulator(
        np.result_type(x.dtype, _scale_dtype(scale.dtype)))
    s = _expand(xp, scale, x.shape, attrs.axis, attrs.block_size)
    q = _array(xp.divide(x.astype(precision), s.astype(precision)))
    work = accumulator(precision)  # integers up to 2**24 are exact: the sum and the clip
    q = q.astype(work, copy=False)
    integer = attrs.dtype not in _QUANT_FLOATS
    if integer:
        xp.rint(q, out=q)  # round half to even
    if len(inputs) == 3 and attrs.dtype not in _FLOAT8:
        zero = _expand(xp, inputs[2].astype(work), x.shape, attrs.axis, attrs.block_size)
        xp.add(q, zero, out=q)
    if integer:
        xp.clip(q, *int_range(attrs.dtype), out=q)
        out[...] = q
    else:  # the conversion rounds to nearest even
        cast_low_precision(xp, q, out, saturate=attrs.saturate)


def _infer_dequantize(types: Sequence[TensorType], attrs: DequantizeAttrs, data: Sequence[Any]
                      ) -> list[TensorType]:
    if len(types) not in (2, 3):
        raise OpError(f"dequantize takes 2 or 3 inputs (x, scale[, zero_point]), given "
                      f"{len(types)}")
    x, scale = types[0], types[1]
    zero = types[2] if len(types) == 3 else None
    if x.dtype not in _DEQUANT_INPUTS:
        raise OpError(f"dequantize takes {', '.join(_DEQUANT_INPUTS)} input, given "
                      f"{_show(x)}")
    if zero is not None and zero.dtype != x.dtype:
        raise OpError(f"the zero point's dtype ({zero.dtype}) must be the input's ({x.dtype})")
    _check_params(x, scale, zero, attrs.axis, attrs.block_size)
    return [TensorType(x.shape, attrs.dtype)]


def _dequantize(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                attrs: DequantizeAttrs) -> None:
    x, scale, out = inputs[0], inputs[1], outputs[0]
    if out.size == 0:
        return
    work = np.result_type(np.float32, _scale_dtype(scale.dtype))
    exact = np.float32 if x.dtype.name in _QUANT_FLOATS else np.int64  # holds x - zero
    if len(inputs) == 3 and x.dtype.name not in _FLOAT8:
        zero = _expand(xp, inputs[2], x.shape, attrs.axis, attrs.block_size)
        diff = _array(xp.subtract(x.astype(exact), zero.astype(exact))).astype(work)
    else:
        diff = x.astype(work)
    s = _expand(xp, scale, x.shape, attrs.axis, attrs.block_size)
    xp.multiply(diff, s.astype(work), out=diff)
    out[...] = diff


def _infer_dynamic_quantize(types: Sequence[TensorType], attrs: DynamicQuantizeAttrs,
                            data: Sequence[Any]) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"dynamic_quantize takes 1 input, given {len(types)}")
    (x,) = types
    if x.dtype != "float32":
        raise OpError(f"dynamic_quantize takes float32 input, given {_show(x)}")
    return [TensorType(x.shape, "uint8"), TensorType((), "float32"), TensorType((), "uint8")]


def _dynamic_quantize(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                      attrs: DynamicQuantizeAttrs) -> None:
    (x,), (y, scale, zero) = inputs, outputs
    flat = x.reshape(-1)
    # The range, extended to hold 0 (an empty input has the range [0, 0]).
    high = xp.zeros_like(flat, shape=(1,))
    low = xp.zeros_like(flat, shape=(1,))
    if flat.size:
        xp.maximum(high, xp.max(flat, keepdims=True), out=high)
        xp.minimum(low, xp.min(flat, keepdims=True), out=low)
    span = xp.subtract(high, low)
    xp.divide(span, np.float32(255), out=span)
    xp.add(span, xp.equal(span, 0), out=span)  # max == min: a scale of 1 (as ONNX Runtime)
    point = xp.divide(low, span)  # zero point = clip(rint(0 - low / scale), 0, 255)
    xp.negative(point, out=point)
    xp.clip(point, 0, 255, out=point)
    xp.rint(point, out=point)
    q = xp.divide(x, span.reshape((1,) * x.ndim))
    xp.rint(q, out=q)
    xp.add(q, point.reshape((1,) * x.ndim), out=q)
    xp.clip(q, 0, 255, out=q)
    y[...] = q
    scale[...] = span.reshape(())
    zero[...] = point.reshape(())


# --------------------------------------------------------------------------------------------
# cast_low_precision


def _widen(x: Any) -> Any:
    """``x``, or a low-precision ``x`` as a standard dtype that holds each of its values
    exactly (int8 for the small integers, float32 for the small floats): ml_dtypes converts
    between some pairs of its types only through one."""
    name = x.dtype.name
    if name in _LOW_INTS:
        return x.astype(np.int8)
    if name in _LOW_FLOATS:
        return x.astype(np.float32)
    return x


def _to_e8m0(xp: Any, x: Any, out: Any, saturate: bool, round_mode: str) -> None:
    """float32 ``x`` into float8_e8m0fnu ``out``: the exponent of each value, rounded as ONNX's
    reference (``onnx.numpy_helper.to_float8e8m0``) rounds it; NaN and infinities become NaN
    (0xFF), and so does a value past the largest power (2**127) unless ``saturate``. The sign
    is dropped (ONNX leaves negative values undefined)."""
    bits = x.view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "up":
        up = (bits & 0x7FFFFF) != 0
    elif round_mode == "nearest":  # guard bit, and a round or sticky bit or a nonzero exponent
        up = ((bits & 0x400000) != 0) & (((bits & 0x3FFFFF) != 0) | (exponent > 0))
    else:
        up = xp.zeros(x.shape, dtype=bool)
    up &= ~special
    if saturate:
        up &= exponent != 0xFE
    exponent += up  # NaN and infinities keep 0xFF, NaN in float8_e8m0fnu
    out.view(np.uint8)[...] = exponent


def cast_low_precision(xp: Any, x: Any, out: Any, *, saturate: bool = True,
                       round_mode: str = "up") -> None:
    """Convert ``x`` into ``out`` where either is a low-precision dtype (ONNX ``Cast``).

    Args:
        xp: the array namespace (numpy: only numpy and ml_dtypes hold these types).
        x: the input, of a standard or a low-precision dtype.
        out: the output, the shape of ``x``.
        saturate: to a float8 type, clip out-of-range values and infinities to the largest
            finite value (else they become inf or NaN, as ml_dtypes' conversion makes them);
            to float8_e8m0fnu, keep values past 2**127 at 2**127.
        round_mode: how a value converted to float8_e8m0fnu rounds between two powers of
            two: ``"up"``, ``"down"`` or ``"nearest"``.
    """
    x = _widen(x)
    target = out.dtype.name
    if target == "float8_e8m0fnu":
        _to_e8m0(xp, x.astype(np.float32), out, saturate, round_mode)
    elif target in _FLOAT8 and saturate:
        wide = np.float64 if x.dtype.kind in "iu" or x.dtype == np.float64 else np.float32
        top = float(ml_dtypes.finfo(target).max)  # type: ignore[no-untyped-call]
        out[...] = xp.clip(x.astype(wide), -top, top)  # NaN stays NaN
    else:
        out[...] = x


def _infer_cast_low_precision(types: Sequence[TensorType], attrs: CastLowPrecisionAttrs,
                              data: Sequence[Any]) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"cast_low_precision takes 1 input, given {len(types)}")
    (x,) = types
    known = ", ".join(sorted(_CASTABLE))
    if attrs.dtype not in _CASTABLE:
        raise OpError(f"cast_low_precision: unsupported target dtype {attrs.dtype!r} "
                      f"(expected one of {known})")
    if x.dtype not in _CASTABLE:
        raise OpError(f"cast_low_precision: unsupported input dtype {x.dtype}")
    if x.dtype in _STANDARD and attrs.dtype in _STANDARD:
        raise OpError(f"cast_low_precision converts to or from a low-precision type "
                      f"({', '.join(LOW_PRECISION)}), not {x.dtype} to {attrs.dtype}: use cast")
    return [TensorType(x.shape, attrs.dtype)]


def _cast_low_precision(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                        attrs: CastLowPrecisionAttrs) -> None:
    if outputs[0].size:
        cast_low_precision(xp, inputs[0], outputs[0], saturate=attrs.saturate,
                           round_mode=attrs.round_mode)


# --------------------------------------------------------------------------------------------
# Per-tensor quantize and dequantize as elementwise expressions

FUSED_RANGES: dict[str, tuple[int, int]] = {
    dtype: int_range(dtype) for dtype in ("int8", "uint8", "int16", "uint16")}
"""The quantized dtypes whose per-tensor ``quantize`` (to them) and ``dequantize`` (from them)
are elementwise, with their ranges: ``dequantize`` from int32 is too (its difference is exact
in int64 and rounds once to float32, as numpy's does); the low-precision types have no C type
and float8 rounds in ml_dtypes."""
_FUSED_DEQUANT_INPUTS = frozenset({*FUSED_RANGES, "int32"})


def quantize_expression(dtype: str, zero_point: bool) -> str:
    """The C expression of a per-tensor ``quantize`` of float32 ``in0`` by the float32 scale
    ``in1`` (plus the zero point ``in2``) to ``dtype`` (a key of :data:`FUSED_RANGES`),
    computed as :func:`_quantize` does: the division, rounding half to even, the zero point and
    the clip in float32; NaN becomes 0, as numpy casts it (the C expression says so explicitly,
    fminf would make it the range's low end).

    Example:
        >>> quantize_expression("uint8", True).split(" : ")[1]
        'fminf(fmaxf(rintf(in0 / in1) + (float)in2, 0.0f), 255.0f)'
    """
    low, high = FUSED_RANGES[dtype]
    zero = " + (float)in2" if zero_point else ""
    return (f"in0 / in1 != in0 / in1 ? 0.0f : "
            f"fminf(fmaxf(rintf(in0 / in1){zero}, {low}.0f), {high}.0f)")


def dequantize_expression(zero_point: bool, wide: bool = False) -> str:
    """The C expression of a per-tensor ``dequantize`` of integer ``in0`` by the float32 scale
    ``in1`` (less the zero point ``in2``) to float32, as :func:`_dequantize` computes it: the
    difference exact (in 32-bit integers for 8- and 16-bit inputs, whose conversion to float
    vectorizes; in 64-bit ones for ``wide`` int32 inputs), rounded once to float32,
    multiplied in float32.

    Example:
        >>> dequantize_expression(True)
        '(float)((int)in0 - (int)in2) * in1'
    """
    if not zero_point:
        return "(float)in0 * in1"
    if wide:
        return "(float)((long long)in0 - (long long)in2) * in1"
    return "(float)((int)in0 - (int)in2) * in1"


QUANT_EXPRESSIONS = frozenset({
    *(quantize_expression(dtype, zero) for dtype in FUSED_RANGES for zero in (False, True)),
    *(dequantize_expression(zero, wide) for zero in (False, True) for wide in (False, True))})
"""Every expression a ``quantize`` or ``dequantize`` step can have (a provider that cannot
compute them as the references do leaves such steps unfused)."""


def _per_tensor(types: Sequence[TensorType], block_size: int) -> bool:
    """One float32 scale (and at most one zero point) for the whole input."""
    return (len(types) in (2, 3) and block_size == 0 and types[1].dtype == "float32"
            and all(_single(t) for t in types[1:]))


def _quantize_elementwise(attrs: QuantizeAttrs, types: Sequence[TensorType]) -> str | None:
    """A per-tensor ``quantize`` of float32 (divided in float32) to an integer of
    :data:`FUSED_RANGES` is elementwise; every other one runs its reference."""
    if (not _per_tensor(types, attrs.block_size) or types[0].dtype != "float32"
            or attrs.dtype not in FUSED_RANGES or attrs.precision not in (None, "float32")):
        return None
    return quantize_expression(attrs.dtype, len(types) == 3)


def _dequantize_elementwise(attrs: DequantizeAttrs, types: Sequence[TensorType]
                            ) -> str | None:
    """A per-tensor ``dequantize`` of int8, uint8, int16, uint16 or int32 to float32 by a
    float32 scale is elementwise; every other one runs its reference."""
    if (not _per_tensor(types, attrs.block_size) or attrs.dtype != "float32"
            or types[0].dtype not in _FUSED_DEQUANT_INPUTS):
        return None
    return dequantize_expression(len(types) == 3, types[0].dtype == "int32")


register_op(OpDef(name="quantize", attrs=QuantizeAttrs, arity=None, infer=_infer_quantize,
                  compute=_quantize, elementwise_of=_quantize_elementwise))
register_op(OpDef(name="dequantize", attrs=DequantizeAttrs, arity=None,
                  infer=_infer_dequantize, compute=_dequantize,
                  elementwise_of=_dequantize_elementwise))
register_op(OpDef(name="dynamic_quantize", attrs=DynamicQuantizeAttrs, arity=1,
                  infer=_infer_dynamic_quantize, compute=_dynamic_quantize, num_outputs=3))
register_op(OpDef(name="cast_low_precision", attrs=CastLowPrecisionAttrs, arity=1,
                  infer=_infer_cast_low_precision, compute=_cast_low_precision))
