"""Standard op ``resize``: ONNX ``Resize`` on any rank, one axis at a time.

Every interpolation mode is separable, so the op resizes each axis whose mapping is not the
identity in turn: ``nearest`` gathers (exact for every dtype), ``linear`` and ``cubic`` sum a
few gathered taps times their weights (in float32 for float16/bfloat16/float32 input, else in
float64; integer outputs are rounded half to even and saturated).

Source coordinates are computed exactly. The scale of an axis is a rational number: ``out/in``
when the output size was given, or the exact binary value of a float scale, given as
``(numerator, denominator)``; every ``coordinate_transformation_mode`` maps output index ``y``
to ``a*y + b`` with rational ``a`` and ``b``, evaluated in integer arithmetic, so ``nearest``
never picks the wrong pixel through an inexact float (``(y + 0.5) / 0.6 - 0.5`` is exactly 2 at
``y = 1``). With ``s`` the scale, ``n`` the input length, ``m`` the output length and
``w = s * n`` the (possibly fractional) output extent:

* ``half_pixel``: ``(y + 1/2) / s - 1/2``;
* ``half_pixel_symmetric``: the same plus ``n/2 * (1 - m/w)`` (centres the output);
* ``pytorch_half_pixel``: as ``half_pixel``, and 0 when ``m == 1``;
* ``align_corners``: ``y * (n - 1) / (w - 1)``, and 0 when ``w == 1``;
* ``asymmetric``: ``y / s``;
* ``tf_half_pixel_for_nn``: ``(y + 1/2) / s`` (ONNX opset 11);
* ``tf_crop_and_resize``: ``start*(n-1) + y*(end - start)*(n-1)/(w - 1)`` with the axis's
  ``roi`` (start, end), ``(start + end)/2 * (n-1)`` when ``w == 1``; a coordinate outside
  ``[0, n-1]`` gives ``extrapolation_value`` (which the dtype must hold, as ``pad``'s value).

``nearest_mode`` rounds the coordinate (``simple``, ONNX Resize-10's rule: floor when the axis
is upsampled, ceil when it is downsampled), then clamps it to ``[0, n-1]``. ``linear`` and
``cubic`` (``cubic_coeff_a``) take the 2 or 4 nearest samples, clamped at the edges, or with
``exclude_outside`` drop those outside and renormalize. ``antialias`` stretches the linear or
cubic filter by ``1/s`` when downsampling. These match ONNX's reference implementation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from .base import Attrs, OpDef, OpError, TensorType, check_fill, register_op

__all__ = ["CoordinateMode", "ResizeAttrs", "axis_table", "resize"]

Array = np.ndarray[Any, Any]

CoordinateMode = Literal["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                         "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                         "tf_crop_and_resize"]
NearestMode = Literal["round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"]
PosInt = Annotated[int, Field(ge=1)]
_NUMERIC = ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
            "uint8", "uint16", "uint32", "uint64")


class ResizeAttrs(Attrs):
    """``resize``: the output shape and how each output index maps to the input.

    Attributes:
        size: the output shape (one length per axis).
        scales: per axis, the scale as ``(numerator, denominator)``; None: ``out / in``.
        roi: ``(start_0, ..., start_{r-1}, end_0, ..., end_{r-1})``, normalized; only for
            ``tf_crop_and_resize`` (which needs it).
    """

    size: tuple[Annotated[int, Field(ge=0)], ...]
    mode: Literal["nearest", "linear", "cubic"] = "nearest"
    scales: tuple[tuple[PosInt, PosInt], ...] | None = None
    coordinate_transformation_mode: CoordinateMode = "half_pixel"
    nearest_mode: NearestMode = "round_prefer_floor"
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    extrapolation_value: float = 0.0
    antialias: bool = False
    roi: tuple[float, ...] | None = None


# --------------------------------------------------------------------------------------------
# Per-axis tables (host, exact coordinates)


def _affine(n_in: int, n_out: int, scale: Fraction, mode: str,
            roi: tuple[float, float] | None) -> tuple[Fraction, Fraction]:
    """``(a, b)`` with source coordinate ``a*y + b`` for output index ``y``."""
    extent = scale * n_in  # the output length before flooring
    half = Fraction(1, 2)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        if mode == "pytorch_half_pixel" and n_out <= 1:
            return Fraction(0), Fraction(0)
        return 1 / scale, half / scale - half
    if mode == "half_pixel_symmetric":
        offset = Fraction(n_in, 2) * (1 - n_out / extent)
        return 1 / scale, offset + half / scale - half
    if mode == "align_corners":
        if extent == 1:
            return Fraction(0), Fraction(0)
        return (n_in - 1) / (extent - 1), Fraction(0)
    if mode == "asymmetric":
        return 1 / scale, Fraction(0)
    if mode == "tf_half_pixel_for_nn":
        return 1 / scale, half / scale
    assert roi is not None  # tf_crop_and_resize
    start, end = Fraction(roi[0]), Fraction(roi[1])
    if extent == 1:
        return Fraction(0), (start + end) / 2 * (n_in - 1)
    return (end - start) * (n_in - 1) / (extent - 1), start * (n_in - 1)


def _cubic(r: Array, a: float) -> Array:
    """Cubic convolution weights of the 4 taps at distances ``1+r, r, 1-r, 2-r``."""
    s = 1 - r
    return np.stack([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                     ((a + 2) * r - (a + 3)) * r * r + 1,
                     ((a + 2) * s - (a + 3)) * s * s + 1,
                     ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a], axis=1)


def _cubic_kernel(x: Array, a: float) -> Array:
    x = np.abs(x)
    near = (a + 2) * x**3 - (a + 3) * x**2 + 1
    far = a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _weights(ratio: Array, scale: float, mode: str, a: float, antialias: bool) -> Array:
    """Per output row, the weights of consecutive taps (ONNX's reference filters)."""
    if not antialias:
        return np.stack([1 - ratio, ratio], axis=1) if mode == "linear" else _cubic(ratio, a)
    s = min(scale, 1.0)
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)
        taps = np.arange(start, 2 - start)
        w = np.clip(1 - np.abs((taps[None, :] - ratio[:, None]) * s), 0, 1)
    else:
        start = int(np.floor(-2 / s) + 1)
        taps = np.arange(start, 2 - start)
        w = _cubic_kernel(s * (taps[None, :] - ratio[:, None]), a)
    total = w.sum(axis=1, keepdims=True)
    return w / np.where(total == 0, 1.0, total)  # type: ignore[no-any-return]


@lru_cache(maxsize=256)
def axis_table(n_in: int, n_out: int, scale: tuple[int, int] | None, mode: str,
               coordinate_mode: str, nearest_mode: str, cubic_coeff_a: float,
               exclude_outside: bool, antialias: bool, roi: tuple[float, float] | None
               ) -> tuple[Array, Array | None, Array | None] | None:
    """One axis's resampling: ``(indices [out, taps], weights [out, taps] or None for
    nearest, outside [out] bool or None)``, or None when the axis maps to itself."""
    exact = Fraction(*scale) if scale is not None else Fraction(n_out, n_in)
    a, b = _affine(n_in, n_out, exact, coordinate_mode, roi)
    den = math.lcm(a.denominator, b.denominator)
    num_a, num_b = a.numerator * (den // a.denominator), b.numerator * (den // b.denominator)
    nums = [num_a * y + num_b for y in range(n_out)]
    floors = np.array([v // den for v in nums], dtype=np.int64)
    rems = [v % den for v in nums]
    outside = None
    if coordinate_mode == "tf_crop_and_resize":
        top = (n_in - 1) * den
        mask = np.array([v < 0 or v > top for v in nums], dtype=bool)
        outside = mask if mask.any() else None
    if mode == "nearest":
        if nearest_mode == "simple":
            nearest_mode = "ceil" if exact < 1 else "floor"
        up = {"round_prefer_floor": [2 * r > den for r in rems],
              "round_prefer_ceil": [r > 0 and 2 * r >= den for r in rems],
              "floor": [False] * n_out, "ceil": [r > 0 for r in rems]}[nearest_mode]
        index = np.clip(floors + np.array(up, dtype=np.int64), 0, n_in - 1)
        if outside is None and n_out == n_in and np.array_equal(index, np.arange(n_in)):
            return None
        return index.reshape(n_out, 1), None, outside
    integral = np.array([r == 0 for r in rems], dtype=bool)
    ratio = np.where(integral, 1.0, np.array([r / den for r in rems], dtype=np.float64))
    weights = _weights(ratio, float(exact), mode, cubic_coeff_a, antialias)
    taps = weights.shape[1]
    if taps % 2 == 0:  # the taps nearest the coordinate, ties to the lower ones
        offset = np.where(integral, -(taps // 2), -(taps // 2) + 1)
    else:
        low = np.array([2 * r <= den for r in rems], dtype=bool)
        offset = np.where(low, -((taps - 1) // 2), -((taps - 1) // 2) + 1)
    index = (floors + offset)[:, None] + np.arange(taps)[None, :]
    if exclude_outside:
        weights = np.where((index < 0) | (index >= n_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    index = np.clip(index, 0, n_in - 1)
    if outside is None and n_out == n_in:
        on_self = index == np.arange(n_in)[:, None]
        if (np.all(np.where(on_self, weights, 0.0).sum(axis=1) == 1.0)
                and np.all(np.where(on_self, 0.0, weights) == 0.0)):
            return None
    return index, weights, outside


# --------------------------------------------------------------------------------------------
# The op


def _infer_resize(types: Sequence[TensorType], attrs: ResizeAttrs, data: Sequence[Any]
                  ) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"resize takes 1 input, given {len(types)}")
    (x,) = types
    allowed = (*_NUMERIC, "bool") if attrs.mode == "nearest" else _NUMERIC
    if x.dtype not in allowed:
        raise OpError(f"resize (mode {attrs.mode!r}) does not take {x.dtype} input")
    rank = x.ndim
    if len(attrs.size) != rank:
        raise OpError(f"size {list(attrs.size)} must have one length per axis of the "
                      f"{rank}-D input {x.dtype}{list(x.shape)}")
    if attrs.scales is not None and len(attrs.scales) != rank:
        raise OpError(f"scales must have one entry per axis ({rank}), given "
                      f"{len(attrs.scales)}")
    if attrs.coordinate_transformation_mode == "tf_crop_and_resize" and (
            attrs.roi is None or len(attrs.roi) != 2 * rank):
        raise OpError(f"tf_crop_and_resize needs a roi of {2 * rank} values (starts, then "
                      f"ends), given {None if attrs.roi is None else list(attrs.roi)}")
    if attrs.coordinate_transformation_mode == "tf_crop_and_resize":
        check_fill(attrs.extrapolation_value, x.dtype, "resize: extrapolation_value")
    for axis, (n_in, n_out) in enumerate(zip(x.shape, attrs.size, strict=True)):
        if n_in == 0 and n_out > 0:
            raise OpError(f"axis {axis} of the input {x.dtype}{list(x.shape)} is empty, so it "
                          f"cannot be resized to {n_out}")
    return [TensorType(tuple(attrs.size), x.dtype)]


def _device_const(xp: Any, like: Any, host: Array) -> Any:
    """``host`` (computed from shapes only) copied to the device of ``like``."""
    buf = xp.empty_like(like, shape=host.shape, dtype=host.dtype)
    buf[...] = xp.asarray(host)
    return buf


def _along(values: Any, axis: int, ndim: int) -> Any:
    """A 1-D array shaped to broadcast along ``axis`` of an ``ndim``-D tensor."""
    return values.reshape((values.shape[0],) + (1,) * (ndim - 1 - axis))


def resize(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: ResizeAttrs) -> None:
    """The compute of ``resize`` (also of ``resize2d``)."""
    (x,), (out,) = inputs, outputs
    if out.size == 0:
        return
    dtype = np.dtype(out.dtype)
    work = np.dtype(np.float64 if dtype == np.float64 or dtype.kind in "iu" else np.float32)
    ndim = x.ndim
    roi = attrs.roi
    current = x
    for axis in range(ndim):
        table = axis_table(
            x.shape[axis], attrs.size[axis],
            attrs.scales[axis] if attrs.scales is not None else None, attrs.mode,
            attrs.coordinate_transformation_mode, attrs.nearest_mode, attrs.cubic_coeff_a,
            attrs.exclude_outside, attrs.antialias,
            (roi[axis], roi[axis + ndim]) if roi is not None else None)
        if table is None:
            continue
        index, weights, outside = table
        taps = _device_const(xp, current, index.T.copy())
        if weights is None:
            current = xp.take(current, taps[0], axis=axis)
        else:
            if current.dtype != work:
                current = current.astype(work)
            w = _device_const(xp, current, weights.T.astype(work))
            total = None
            for k in range(weights.shape[1]):
                term = xp.take(current, taps[k], axis=axis)
                xp.multiply(term, _along(w[k], axis, ndim), out=term)
                total = term if total is None else xp.add(total, term, out=total)
            current = total
        if outside is not None:
            mask = _device_const(xp, current, outside)
            xp.copyto(current, attrs.extrapolation_value, where=_along(mask, axis, ndim),
                      casting="unsafe")
    if current is x:
        out[...] = x
        return
    if dtype.kind in "iu" and current.dtype.kind == "f":
        xp.rint(current, out=current)
        info = np.iinfo(dtype)
        xp.clip(current, info.min, info.max, out=current)
    out[...] = current


register_op(OpDef(name="resize", attrs=ResizeAttrs, arity=1, infer=_infer_resize,
                  compute=resize))
