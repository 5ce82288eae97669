"""Standard ops: reductions (``reduce``) and arg-reductions (``arg_reduce``).

``reduce`` covers the ONNX ``Reduce*`` family with one op and a ``kind``:

=============== ============================== =====================================
kind            value                          over an empty set (a zero-size axis)
=============== ============================== =====================================
``sum``         ``sum(x)``                     0
``mean``        ``sum(x) / count``             nan (0 / 0)
``max``         ``max(x)``                     -inf (ints: the dtype's min; bool: False)
``min``         ``min(x)``                     +inf (ints: the dtype's max; bool: True)
``prod``        ``prod(x)``                    1
``l1``          ``sum(|x|)``                   0
``l2``          ``sqrt(sum(x * x))``           0
``sum_square``  ``sum(x * x)``                 0
``log_sum``     ``log(sum(x))``                -inf
``log_sum_exp`` ``log(sum(exp(x)))``           -inf
=============== ============================== =====================================

``axes`` None reduces every axis; an empty list reduces none (the elementwise part still
applies: ``sum_square`` squares, ``l1`` takes the absolute value; ONNX's
``noop_with_empty_axes``). float16 and bfloat16 inputs accumulate in float32 and are cast back
once; integer sums and products wrap around in the input dtype; integer ``mean``, ``l2``,
``log_sum`` and ``log_sum_exp`` compute in float64 and truncate toward zero, as a cast does.
``log_sum_exp`` subtracts the maximum first, so it does not overflow.

``arg_reduce`` is ONNX ``ArgMax``/``ArgMin``: the int64 index of the first (or, with
``select_last_index``, the last) extreme element along one axis.

Results are written straight into the output (``out=``) where it is contiguous; ``mean`` is the
sum divided in place; sums over short trailing rows on numpy go through :func:`row_sums`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from math import prod
from typing import Any, Literal

import numpy as np

from .base import Attrs, OpDef, OpError, TensorType, normalize_axis, numpy_api, register_op

__all__ = ["ArgReduceAttrs", "ReduceAttrs", "ReduceKind", "row_sums"]

ReduceKind = Literal["sum", "mean", "max", "min", "prod", "l1", "l2", "sum_square", "log_sum",
                     "log_sum_exp"]

_NUMERIC = ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
            "uint8", "uint16", "uint32", "uint64")
_LOW_PRECISION = ("float16", "bfloat16")


class ReduceAttrs(Attrs):
    """``reduce``: what to compute, over which axes (None: all; []: none), keeping them as
    length-1 dimensions or not."""

    kind: ReduceKind
    axes: list[int] | None = None
    keepdims: bool = False


class ArgReduceAttrs(Attrs):
    """``arg_reduce``: index of the max or min along ``axis``; ties go to the first index, or
    the last with ``select_last_index``."""

    kind: Literal["max", "min"]
    axis: int = 0
    keepdims: bool = True
    select_last_index: bool = False


def _axes(axes: Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """The normalized axes (all for None); repeats refused."""
    if axes is None:
        return tuple(range(ndim))
    out: list[int] = []
    for a in axes:
        axis = normalize_axis(a, ndim)
        if axis in out:
            raise OpError(f"axes {list(axes)} name axis {axis} more than once")
        out.append(axis)
    return tuple(sorted(out))


def _reduced(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _infer_reduce(types: Sequence[TensorType], attrs: ReduceAttrs, data: Sequence[Any]
                  ) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"reduce takes 1 input, given {len(types)}")
    (x,) = types
    allowed = (*_NUMERIC, "bool") if attrs.kind in ("max", "min") else _NUMERIC
    if x.dtype not in allowed:
        raise OpError(f"reduce (kind {attrs.kind!r}) does not take {x.dtype} input "
                      f"(takes {', '.join(allowed)})")
    axes = _axes(attrs.axes, x.ndim)
    return [TensorType(_reduced(x.shape, axes, attrs.keepdims), x.dtype)]


def _empty_value(kind: str, dtype: np.dtype[Any]) -> float | int | bool:
    """What reducing an empty set gives."""
    if kind in ("max", "min"):
        if dtype.kind == "b":
            return kind == "min"
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            return int(info.min if kind == "max" else info.max)
        return -np.inf if kind == "max" else np.inf
    return {"prod": 1.0, "mean": np.nan, "log_sum": -np.inf, "log_sum_exp": -np.inf}.get(
        kind, 0.0)


ROW_SUM_MAX = 1024
"""The longest rows :func:`row_sums` sums with ``numpy.einsum`` (one SIMD pass, but each row
summed in order in a few lanes); longer rows use numpy's pairwise ``sum``."""


def row_sums(xp: Any, rows: Any, out: Any, *, square: bool = False) -> None:
    """``out[i] = sum(rows[i])`` (or the sum of squares) of a 2-D array, in ``out``'s dtype.

    On numpy, rows of at most :data:`ROW_SUM_MAX` elements of ``out``'s dtype are summed by
    ``numpy.einsum`` (slow when it must cast), which costs one pass (numpy's ``sum`` along a
    short last axis pays a fixed cost per row), and squares are never materialized.

    Example:
        >>> rows = np.arange(6.0, dtype=np.float32).reshape(2, 3)
        >>> out = np.empty(2, dtype=np.float32)
        >>> row_sums(np, rows, out)
        >>> out.tolist()
        [3.0, 12.0]
        >>> row_sums(np, rows, out, square=True)
        >>> out.tolist()
        [5.0, 50.0]
    """
    if numpy_api(xp) and rows.shape[1] <= ROW_SUM_MAX and rows.dtype == out.dtype:
        operands = (rows, rows) if square else (rows,)
        np.einsum("ij,ij->i" if square else "ij->i", *operands, out=out, dtype=out.dtype,
                  casting="same_kind")
        return
    xp.sum(xp.multiply(rows, rows) if square else rows, axis=1, out=out, dtype=out.dtype)


def _reduce(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: ReduceAttrs) -> None:
    with np.errstate(divide="ignore"):  # log(0) is -inf by design
        _reduce_into(xp, inputs, outputs, attrs)


def _reduce_into(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                 attrs: ReduceAttrs) -> None:
    (x,), (out,) = inputs, outputs
    axes = _axes(attrs.axes, x.ndim)
    kind = attrs.kind
    if out.size == 0:
        return
    if any(x.shape[a] == 0 for a in axes):
        out[...] = _empty_value(kind, np.dtype(out.dtype))
        return
    dtype: np.dtype[Any] = np.dtype(x.dtype)
    name = _name(dtype)
    if kind in ("max", "min") and name != "bfloat16":  # exact in any dtype
        result = _kept(xp, out, x.shape, axes)
        getattr(xp, kind)(x, axis=axes, keepdims=True, out=result)
        _finish(out, result)
        return
    work: np.dtype[Any]
    if name in _LOW_PRECISION:
        x, work = x.astype(np.float32), np.dtype(np.float32)
    elif dtype.kind in "iu" and kind in ("mean", "l2", "log_sum", "log_sum_exp"):
        x, work = x.astype(np.float64), np.dtype(np.float64)
    else:
        work = dtype
    if kind in ("sum", "mean"):
        result = _kept(xp, out, x.shape, axes, work)
        _sum(xp, x, axes, result)
        if kind == "mean":
            xp.divide(result, prod(x.shape[a] for a in axes), out=result)
        _finish(out, result)
        return
    # Reductions keep the axes (so results stay arrays, never scalars); out gets the shape.
    if kind in ("max", "min"):
        result = getattr(xp, kind)(x, axis=axes, keepdims=True)
    elif kind == "log_sum":
        result = xp.sum(x, axis=axes, keepdims=True, dtype=work)
        xp.log(result, out=result)
    elif kind == "prod":
        result = xp.prod(x, axis=axes, keepdims=True, dtype=work)
    elif kind == "l1":
        result = xp.sum(xp.abs(x), axis=axes, keepdims=True, dtype=work)
    elif kind in ("l2", "sum_square"):
        result = xp.sum(xp.multiply(x, x), axis=axes, keepdims=True, dtype=work)
        if kind == "l2":
            xp.sqrt(result, out=result)
    else:  # log_sum_exp, shifted by the maximum where it is finite
        peak = xp.max(x, axis=axes, keepdims=True)
        xp.copyto(peak, 0, where=xp.logical_not(xp.isfinite(peak)))
        result = xp.sum(xp.exp(xp.subtract(x, peak)), axis=axes, keepdims=True)
        xp.log(result, out=result)
        xp.add(result, peak, out=result)
    out[...] = result.reshape(out.shape)  # a cast truncates toward zero for integer outputs


@lru_cache(maxsize=64)
def _name(dtype: np.dtype[Any]) -> str:
    """``dtype.name``, cached (numpy computes it in Python, ~10 us)."""
    return str(dtype.name)


def _kept(xp: Any, out: Any, shape: Sequence[int], axes: Sequence[int], dtype: Any = None
          ) -> Any:
    """``out`` seen with the reduced axes kept (a view when contiguous and of ``dtype``), else a
    new array of that shape and ``dtype``."""
    kept = tuple(1 if a in axes else d for a, d in enumerate(shape))
    if _is_kept_view(out) and (dtype is None or out.dtype == dtype):
        return out.reshape(kept)
    return xp.empty_like(out, shape=kept, dtype=dtype or out.dtype)


def _finish(out: Any, result: Any) -> None:
    """Copy ``result`` into ``out`` unless it is ``out`` seen with the axes kept (a cast
    truncates toward zero for integer outputs)."""
    if not (result.dtype == out.dtype and _is_kept_view(out)):
        out[...] = result.reshape(out.shape)


def _is_kept_view(out: Any) -> bool:
    """Whether :func:`_kept` sees ``out`` itself (rather than a new array)."""
    return bool(out.flags.c_contiguous)


def _sum(xp: Any, x: Any, axes: Sequence[int], result: Any) -> None:
    """``result`` (axes kept) = the sum of ``x`` over ``axes``, in ``result``'s dtype; rows of
    trailing axes of a contiguous ``x`` through :func:`row_sums`."""
    trailing = tuple(range(x.ndim - len(axes), x.ndim))
    if tuple(axes) == trailing and x.flags.c_contiguous and result.flags.c_contiguous:
        row_sums(xp, x.reshape(-1, prod(x.shape[a] for a in axes)), result.reshape(-1))
        return
    xp.sum(x, axis=tuple(axes), keepdims=True, dtype=result.dtype, out=result)


def _infer_arg_reduce(types: Sequence[TensorType], attrs: ArgReduceAttrs, data: Sequence[Any]
                      ) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"arg_reduce takes 1 input, given {len(types)}")
    (x,) = types
    if x.dtype not in (*_NUMERIC, "bool"):
        raise OpError(f"arg_reduce does not take {x.dtype} input")
    if x.ndim == 0:
        raise OpError("arg_reduce needs an input of at least 1 dimension, given a scalar")
    axis = normalize_axis(attrs.axis, x.ndim)
    if x.shape[axis] == 0:
        raise OpError(f"arg{attrs.kind} over an empty axis has no value: axis {axis} of shape "
                      f"{list(x.shape)} has length 0")
    return [TensorType(_reduced(x.shape, (axis,), attrs.keepdims), "int64")]


def _arg_reduce(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                attrs: ArgReduceAttrs) -> None:
    (x,), (out,) = inputs, outputs
    axis = normalize_axis(attrs.axis, x.ndim)
    if np.dtype(x.dtype).name in _LOW_PRECISION:
        x = x.astype(np.float32)
    find = xp.argmax if attrs.kind == "max" else xp.argmin
    if not attrs.select_last_index:
        out[...] = find(x, axis=axis).reshape(out.shape)
        return
    last = x.shape[axis] - 1
    index = find(xp.flip(x, axis=axis), axis=axis)
    out[...] = xp.subtract(last, index).reshape(out.shape)


register_op(OpDef(name="reduce", attrs=ReduceAttrs, arity=1, infer=_infer_reduce,
                  compute=_reduce))
register_op(OpDef(name="arg_reduce", attrs=ArgReduceAttrs, arity=1, infer=_infer_arg_reduce,
                  compute=_arg_reduce))
