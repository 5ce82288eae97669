"""Standard ops: linear quantization (``quantize``, ``dequantize``, ``dynamic_quantize``).

The scale and the optional zero point are per tensor (one element), per axis (1-D, one per
index of ``axis``) or blocked (``block_size`` > 0: the rank of the data, with
``ceil(data.shape[axis] / block_size)`` along ``axis``, one per block of consecutive indices),
as ONNX ``QuantizeLinear``/``DequantizeLinear``:

* ``quantize``: ``clip(round_half_even(x / scale) + zero_point, lo, hi)``, saturating to the
  output dtype's range. The division is done in ``precision`` (default: numpy's promotion of x
  and the scale, float32 when that is float16 or bfloat16, as ONNX Runtime does); the rounding,
  the zero point and the saturation in at least float32 (float16 cannot hold 32767).
* ``dequantize``: ``(x - zero_point) * scale``: the difference is exact (integer), converted to
  float32 (or the scale's dtype when wider), multiplied, and cast to ``dtype``.
* ``dynamic_quantize``: ONNX ``DynamicQuantizeLinear``: uint8 with a scale and zero point
  computed from the data's range extended to include 0 (scale 1 when that range is empty).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from .base import Attrs, OpDef, OpError, TensorType, accumulator, normalize_axis, register_op

__all__ = ["DequantizeAttrs", "DynamicQuantizeAttrs", "QuantizeAttrs"]

QuantDtype = Literal["int8", "uint8", "int16", "uint16", "int32"]
FloatDtype = Literal["float16", "float32", "float64", "bfloat16"]
_FLOATS = ("float16", "float32", "float64", "bfloat16")


class QuantizeAttrs(Attrs):
    """``quantize``: the output dtype, the quantized axis and block size (0: per tensor or per
    axis, from the scale's shape), and the dtype the division is done in (None: promotion)."""

    dtype: QuantDtype = "uint8"
    axis: int = 1
    block_size: Annotated[int, Field(ge=0)] = 0
    precision: FloatDtype | None = None


class DequantizeAttrs(Attrs):
    """``dequantize``: the output dtype, the quantized axis and block size."""

    dtype: FloatDtype = "float32"
    axis: int = 1
    block_size: Annotated[int, Field(ge=0)] = 0


class DynamicQuantizeAttrs(Attrs):
    """``dynamic_quantize`` takes no attributes (its output is uint8)."""


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
    if scale.dtype not in _FLOATS:
        raise OpError(f"the scale must be float16, float32, float64 or bfloat16, given "
                      f"{scale.dtype}")
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
        np.result_type(x.dtype, scale.dtype))
    s = _expand(xp, scale, x.shape, attrs.axis, attrs.block_size)
    q = xp.divide(x.astype(precision), s.astype(precision))
    work = accumulator(precision)  # integers up to 2**24 are exact: the sum and the clip
    q = q.astype(work, copy=False)
    xp.rint(q, out=q)  # round half to even
    if len(inputs) == 3:
        zero = _expand(xp, inputs[2], x.shape, attrs.axis, attrs.block_size)
        xp.add(q, zero.astype(work), out=q)
    info = np.iinfo(np.dtype(attrs.dtype))
    xp.clip(q, info.min, info.max, out=q)
    out[...] = q


def _infer_dequantize(types: Sequence[TensorType], attrs: DequantizeAttrs, data: Sequence[Any]
                      ) -> list[TensorType]:
    if len(types) not in (2, 3):
        raise OpError(f"dequantize takes 2 or 3 inputs (x, scale[, zero_point]), given "
                      f"{len(types)}")
    x, scale = types[0], types[1]
    zero = types[2] if len(types) == 3 else None
    if x.dtype not in ("int8", "uint8", "int16", "uint16", "int32"):
        raise OpError(f"dequantize takes int8, uint8, int16, uint16 or int32 input, given "
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
    work = np.result_type(np.float32, scale.dtype)
    if len(inputs) == 3:
        zero = _expand(xp, inputs[2], x.shape, attrs.axis, attrs.block_size)
        diff = xp.subtract(x.astype(np.int64), zero.astype(np.int64)).astype(work)
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


register_op(OpDef(name="quantize", attrs=QuantizeAttrs, arity=None, infer=_infer_quantize,
                  compute=_quantize))
register_op(OpDef(name="dequantize", attrs=DequantizeAttrs, arity=None,
                  infer=_infer_dequantize, compute=_dequantize))
register_op(OpDef(name="dynamic_quantize", attrs=DynamicQuantizeAttrs, arity=1,
                  infer=_infer_dynamic_quantize, compute=_dynamic_quantize, num_outputs=3))
