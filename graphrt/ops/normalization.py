"""Standard ops: normalization (numpy and cupy).

* ``normalize``: over ``axes``, ``y = (x - mean) / sqrt(var + epsilon) * scale + bias`` with the
  optional ``scale`` and ``bias`` broadcast to the data's shape (ONNX ``LayerNormalization``
  over several axes, ``MeanVarianceNormalization``). ``center=False`` skips the mean
  (``x / sqrt(mean(x^2) + epsilon)``: ``RMSNormalization``); ``epsilon_outside`` adds epsilon
  to the standard deviation instead of the variance (``MeanVarianceNormalization``).
  With ``stats`` the op also outputs the mean and the inverse standard deviation (the data's
  shape with the normalized axes kept as 1, in the work dtype).
* ``group_norm``: data ``[N, C, ...]`` normalized per sample over each of ``num_groups``
  channel groups, then ``* scale[c] + bias[c]`` per channel; ``num_groups = C`` is instance
  normalization.
* ``lrn``: local response normalization across channels (ONNX ``LRN``):
  ``y = x / (bias + alpha / size * sum(x^2 over the channel window)) ** beta`` with the window
  ``[c - floor((size-1)/2), c + ceil((size-1)/2)]``.

Statistics of float16 and bfloat16 data are computed in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from .base import (
    Attrs,
    OpDef,
    OpError,
    TensorType,
    accumulator,
    broadcast,
    numpy_api,
    register_op,
)
from .convolution import check_float, show
from .reductions import row_sums

__all__ = ["GroupNormAttrs", "LrnAttrs", "NormalizeAttrs", "normalize"]

NonNegFloat = Annotated[float, Field(ge=0.0)]


class NormalizeAttrs(Attrs):
    """``normalize``: the axes, epsilon, whether to subtract the mean, where epsilon goes and
    whether to output the statistics."""

    axes: list[int]
    epsilon: NonNegFloat = 1e-5
    center: bool = True
    epsilon_outside: bool = False
    stats: bool = False


class GroupNormAttrs(Attrs):
    """``group_norm``: the number of channel groups and epsilon."""

    num_groups: Annotated[int, Field(ge=1)]
    epsilon: NonNegFloat = 1e-5


class LrnAttrs(Attrs):
    """``lrn``: the channel window and the coefficients."""

    size: Annotated[int, Field(ge=1)]
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0


def _cast(x: Any, dtype: Any) -> Any:
    return x.astype(dtype) if x.dtype != dtype else x


def _store(out: Any, value: Any) -> None:
    out[...] = value


# --------------------------------------------------------------------------------------------
# normalize


def _axes(axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    normalized = []
    for axis in axes:
        if not -ndim <= axis < ndim:
            raise OpError(f"normalize: axis {axis} is out of range for a {ndim}-D input")
        normalized.append(axis % ndim)
    if len(set(normalized)) != len(normalized):
        raise OpError(f"normalize: axes {list(axes)} name an axis twice")
    if not normalized:
        raise OpError("normalize: axes must name at least one axis")
    return tuple(sorted(normalized))


def _infer_normalize(types: Sequence[TensorType], attrs: NormalizeAttrs, data: Sequence[Any]
                     ) -> list[TensorType]:
    if not 1 <= len(types) <= 3:
        raise OpError(f"normalize: expected 1 to 3 inputs (data[, scale[, bias]]), given "
                      f"{len(types)}")
    dtype = check_float(types, ["data", "scale", "bias"], "normalize")
    x = types[0]
    axes = _axes(attrs.axes, x.ndim)
    for t, name in zip(types[1:], ("scale", "bias"), strict=False):
        try:
            fits = t.ndim <= x.ndim and broadcast(x.shape, t.shape) == x.shape
        except OpError:
            fits = False
        if not fits:
            raise OpError(f"normalize: {name} {show(t)} must broadcast to data {show(x)}")
    outs = [TensorType(x.shape, dtype)]
    if attrs.stats:
        kept = tuple(1 if a in axes else d for a, d in enumerate(x.shape))
        stat = TensorType(kept, str(accumulator(dtype)))
        outs += [stat, stat]
    return outs


def normalize(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
              attrs: NormalizeAttrs) -> None:
    """The compute of ``normalize`` (also of ``layer_norm``); float16 in float32.

    In place in the output (or one work-dtype buffer for float16): the mean, ``x - mean`` and
    its sum of squares, each sum one pass (trailing axes through
    :func:`graphrt.ops.reductions.row_sums`), then ``* (1 / std)``, scale and bias. Where
    the mean is large against the deviation (data far from zero), the rounding error of the
    float32 mean would show in the output: the mean of ``x - mean`` is subtracted as well.

    Example:
        >>> x = np.array([[1.0, 3.0], [2.0, 6.0]], dtype=np.float32)
        >>> out = np.empty_like(x)
        >>> normalize(np, [x], [out], NormalizeAttrs(axes=[1], epsilon=0.0))
        >>> out.tolist()
        [[-1.0, 1.0], [-1.0, 1.0]]
    """
    x, out = inputs[0], outputs[0]
    axes = _axes(attrs.axes, x.ndim)
    if x.size == 0:
        return
    work = accumulator(x.dtype)
    direct = out.dtype == work and out.flags.c_contiguous
    y = out if direct else xp.empty_like(out, dtype=work)
    if x.dtype != work:
        y[...] = x
        x = y
    count = prod(x.shape[a] for a in axes)
    mean = None
    if attrs.center:
        mean = _mean(xp, x, axes, count)
        xp.subtract(x, mean, out=y)
        x = y
    spread = _mean(xp, x, axes, count, square=True)
    if attrs.epsilon_outside:
        xp.sqrt(spread, out=spread)
        xp.add(spread, attrs.epsilon, out=spread)
    else:
        xp.add(spread, attrs.epsilon, out=spread)
        xp.sqrt(spread, out=spread)
    inverse = xp.reciprocal(spread, out=spread)
    if mean is not None and _far(xp, mean, inverse):
        residual = _mean(xp, y, axes, count)  # what rounding left in the mean
        xp.subtract(y, residual, out=y)
        xp.add(mean, residual, out=mean)
    xp.multiply(x, inverse, out=y)
    for operand, combine in zip(inputs[1:], (xp.multiply, xp.add), strict=False):
        combine(y, _cast(operand, work), out=y)
    if not direct:
        _store(out, y)
    if attrs.stats:
        _store(outputs[1], mean if mean is not None else 0)
        _store(outputs[2], inverse)



def _far(xp: Any, mean: Any, inverse: Any) -> bool:
    """Whether some mean exceeds its standard deviation. Below that, the float32 rounding of
    the mean adds at most ~2e-7 to the normalized output (measured with rows of 256 to 1024;
    at 70 deviations it adds 1.2e-5). Always on cupy: no host round trip."""
    if not numpy_api(xp):
        return True
    ratio = np.abs(np.multiply(mean, inverse))
    return float(np.maximum.reduce(ratio, axis=None)) > 1.0


def _mean(xp: Any, a: Any, axes: tuple[int, ...], count: int, square: bool = False) -> Any:
    """The mean of ``a`` (or of its squares) over ``axes``, kept as length-1 axes."""
    kept = tuple(1 if i in axes else d for i, d in enumerate(a.shape))
    total = xp.empty_like(a, shape=kept)
    if axes == tuple(range(a.ndim - len(axes), a.ndim)) and a.flags.c_contiguous:
        row_sums(xp, a.reshape(-1, count), total.reshape(-1), square=square)
    else:
        xp.sum(xp.multiply(a, a) if square else a, axis=axes, keepdims=True, out=total)
    return xp.divide(total, count, out=total)


# --------------------------------------------------------------------------------------------
# group_norm


def _infer_group_norm(types: Sequence[TensorType], attrs: GroupNormAttrs, data: Sequence[Any]
                      ) -> list[TensorType]:
    if len(types) != 3:
        raise OpError(f"group_norm: expected 3 inputs (data, scale, bias), given {len(types)}")
    dtype = check_float(types, ["data", "scale", "bias"], "group_norm")
    x = types[0]
    if x.ndim < 2:
        raise OpError(f"group_norm: data must be [N, C, ...], given {show(x)}")
    c = x.shape[1]
    if c % attrs.num_groups:
        raise OpError(f"group_norm: channels ({c}) must be divisible by num_groups "
                      f"({attrs.num_groups})")
    for t, name in zip(types[1:], ("scale", "bias"), strict=True):
        if t.shape != (c,):
            raise OpError(f"group_norm: {name} must be [{c}] (the channels), given {show(t)}")
    return [TensorType(x.shape, dtype)]


def _group_norm(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                attrs: GroupNormAttrs) -> None:
    x, scale, bias = inputs
    out = outputs[0]
    if x.size == 0:
        return
    n, c = x.shape[:2]
    g = attrs.num_groups
    work = accumulator(x.dtype)
    grouped = _cast(x, work).reshape(n, g, -1)
    mean = xp.mean(grouped, axis=2, keepdims=True)
    centered = xp.subtract(grouped, mean)
    var = xp.mean(xp.multiply(centered, centered), axis=2, keepdims=True)
    xp.add(var, attrs.epsilon, out=var)
    xp.sqrt(var, out=var)
    xp.divide(centered, var, out=centered)
    result = centered.reshape(x.shape)
    trailing = (1,) * (x.ndim - 2)
    xp.multiply(result, _cast(scale, work).reshape((c, *trailing)), out=result)
    xp.add(result, _cast(bias, work).reshape((c, *trailing)), out=result)
    _store(out, result)


# --------------------------------------------------------------------------------------------
# lrn


def _infer_lrn(types: Sequence[TensorType], attrs: LrnAttrs, data: Sequence[Any]
               ) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"lrn: expected 1 input (data), given {len(types)}")
    dtype = check_float(types, ["data"], "lrn")
    if types[0].ndim < 2:
        raise OpError(f"lrn: data must be [N, C, ...], given {show(types[0])}")
    return [TensorType(types[0].shape, dtype)]


def _lrn(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: LrnAttrs) -> None:
    x, out = inputs[0], outputs[0]
    if x.size == 0:
        return
    c = x.shape[1]
    work = accumulator(x.dtype)
    squares = _cast(x, work)
    squares = xp.multiply(squares, squares)
    total = xp.zeros_like(squares)
    before = (attrs.size - 1) // 2
    after = attrs.size - 1 - before
    # total[:, ch] += squares[:, ch + shift], for the shifts that reach another channel (a
    # window wider than the channels adds nothing more: size may be 2**62)
    for shift in range(max(-before, 1 - c), min(after, c - 1) + 1):
        lo, hi = max(0, -shift), min(c, c - shift)
        if hi > lo:
            target = total[:, lo:hi]
            xp.add(target, squares[:, lo + shift:hi + shift], out=target)
    xp.multiply(total, attrs.alpha / attrs.size, out=total)
    xp.add(total, attrs.bias, out=total)
    xp.power(total, attrs.beta, out=total)
    xp.divide(_cast(x, work), total, out=total)
    _store(out, total)


register_op(OpDef(name="normalize", attrs=NormalizeAttrs, arity=None, infer=_infer_normalize,
                  compute=normalize, num_outputs=lambda attrs: 3 if attrs.stats else 1))
register_op(OpDef(name="group_norm", attrs=GroupNormAttrs, arity=3, infer=_infer_group_norm,
                  compute=_group_norm))
register_op(OpDef(name="lrn", attrs=LrnAttrs, arity=1, infer=_infer_lrn, compute=_lrn))
