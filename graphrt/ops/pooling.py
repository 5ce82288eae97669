"""Standard ops: N-d pooling (numpy and cupy).

``max_pool``, ``avg_pool`` and ``lp_pool`` take data ``[N, C, *spatial]`` with any number >= 1
of spatial axes, a ``kernel`` per spatial axis, ``strides`` and ``dilation`` (default 1),
``padding`` (begin pads of every spatial axis, then end pads; each smaller than the kernel).

The output size per axis is ``floor((in + pads - span) / stride) + 1`` with ``span =
dilation * (kernel - 1) + 1``; ``ceil_mode`` rounds up instead, but drops a last window that
would start in the end padding (PyTorch, ONNX Runtime). Windows skip padded positions:
``avg_pool`` divides by the number of real elements, or with ``count_include_pad`` by the
window's positions inside the padded input (the ceil-mode overhang does not count).
``lp_pool`` is ``(sum |x|^p) ** (1/p)`` over each window.

``max_pool`` with ``indices`` makes a second output, the flat index (int64) of each maximum in
the whole input (``((n*C + c) * H + h) * W + w``; column-major over the spatial axes with
``column_major``); ties keep the first position in row-major window order. ``max_unpool``
inverts it in part: zeros with each value written at its flat index (see
:class:`MaxUnpoolAttrs`).

The windows are separable: :func:`window_reduce` reduces one spatial axis at a time (outer
axes first, whose strided rows stay contiguous inside), ``kernel - 1`` vectorized maxima or sums
per axis instead of one pass per kernel offset (9 for a 3x3 window). ``max_pool`` with
``indices`` runs one update per kernel offset. float16 and bfloat16 sums accumulate in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from .base import (
    Attrs,
    OpDef,
    OpError,
    TensorType,
    accumulator,
    numpy_api,
    register_op,
)
from .convolution import Window, per_axis, show, window_range

__all__ = ["AvgPoolAttrs", "AxisWindow", "LpPoolAttrs", "MaxPoolAttrs", "MaxUnpoolAttrs",
           "PoolAttrs", "axis_windows", "window_reduce"]

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]

_FLOATS = ("float16", "float32", "float64", "bfloat16")
_MAX_DTYPES = (*_FLOATS, "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64")


class PoolAttrs(Attrs):
    """Window shared by the pools: kernel, strides, padding (begins then ends), dilation."""

    kernel: list[PosInt]
    strides: list[PosInt] | None = None
    padding: list[NonNegInt] | None = None
    dilation: list[PosInt] | None = None
    ceil_mode: bool = False


class MaxPoolAttrs(PoolAttrs):
    """``max_pool``: plus whether to output the argmax indices, and their order."""

    indices: bool = False
    column_major: bool = False


class AvgPoolAttrs(PoolAttrs):
    """``avg_pool``: plus whether padded positions count in the divisor."""

    count_include_pad: bool = False


class LpPoolAttrs(PoolAttrs):
    """``lp_pool``: plus the norm's exponent."""

    p: Annotated[float, Field(gt=0.0)] = 2.0


def _params(attrs: PoolAttrs, rank: int) -> tuple[list[int], list[int], list[int], list[int]]:
    strides = per_axis(attrs.strides, rank, 1, "strides")
    dilation = per_axis(attrs.dilation, rank, 1, "dilation")
    pads = per_axis(attrs.padding, 2 * rank, 0, "padding")
    return strides, dilation, pads[:rank], pads[rank:]


def _pool_size(size: int, kernel: int, stride: int, dilation: int, begin: int, end: int,
               ceil: bool, axis: int, op: str) -> int:
    if begin >= kernel or end >= kernel:
        raise OpError(f"{op}: padding along spatial axis {axis} ({begin}, {end}) must be smaller "
                      f"than the kernel ({kernel})")
    span = dilation * (kernel - 1) + 1
    total = size + begin + end
    if total < span:
        raise OpError(f"{op}: the window ({span}) is larger than the padded input ({total}) "
                      f"along spatial axis {axis}: the output would be empty")
    out = (total - span + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + begin:
        out -= 1  # the last window would start in the end padding
    return out


def _infer(types: Sequence[TensorType], attrs: PoolAttrs, op: str, dtypes: Sequence[str]
           ) -> TensorType:
    if len(types) != 1:
        raise OpError(f"{op}: expected 1 input (data), given {len(types)}")
    (x,) = types
    if x.dtype not in dtypes:
        raise OpError(f"{op}: data must be one of {', '.join(dtypes)}, given {x.dtype}")
    rank = x.ndim - 2
    if rank < 1:
        raise OpError(f"{op}: data must be [N, C, *spatial] with at least one spatial axis, "
                      f"given {show(x)}")
    if len(attrs.kernel) != rank:
        raise OpError(f"{op}: kernel {attrs.kernel} needs {rank} values (one per spatial axis "
                      f"of {show(x)})")
    if any(d < 1 for d in x.shape[2:]):
        raise OpError(f"{op}: data must have no empty spatial axis, given {show(x)}")
    strides, dilation, begin, end = _params(attrs, rank)
    sizes = [_pool_size(x.shape[2 + a], attrs.kernel[a], strides[a], dilation[a], begin[a],
                        end[a], attrs.ceil_mode, a, op) for a in range(rank)]
    return TensorType((*x.shape[:2], *sizes), x.dtype)


def _window(x: Any, out: Any, attrs: PoolAttrs) -> Window:
    rank = x.ndim - 2
    strides, dilation, begin, _ = _params(attrs, rank)
    return Window(attrs.kernel, strides, dilation, begin, x.shape[2:], out.shape[2:])


def axis_windows(attrs: PoolAttrs, rank: int) -> list[AxisWindow]:
    strides, dilation, begin, _ = _params(attrs, rank)
    return list(zip(attrs.kernel, strides, dilation, begin, strict=True))


def _device_const(xp: Any, like: Any, host: np.ndarray[Any, Any]) -> Any:
    """``host`` (computed from shapes only) copied to the device of ``like``."""
    buf = xp.empty_like(like, shape=host.shape, dtype=host.dtype)
    buf[...] = xp.asarray(host)
    return buf


# --------------------------------------------------------------------------------------------
# Separable window reductions

AxisWindow = tuple[int, int, int, int]
"""One spatial axis of a pool window: ``(kernel, stride, dilation, pad_begin)``."""


def window_reduce(xp: Any, x: Any, out: Any, windows: Sequence[AxisWindow],
                  kind: Literal["max", "sum"]) -> None:
    """``out[n, c, o...]`` = the max or sum of ``x`` over each pool window, padding skipped.

    Separable: one spatial axis at a time, outer axes first (their strided rows stay
    contiguous inside), each with ``kernel - 1`` vectorized maxima or sums over strided views
    into a temporary of the partly reduced shape (in ``out``'s dtype, so float16 sums
    accumulate in a float32 ``out``). On numpy the ``N*C`` planes go in chunks of about
    :data:`CHUNK_BYTES` of input, so the temporaries stay in cache. Every window must hold at
    least one input position.

    Example:
        >>> x = np.arange(16.0, dtype=np.float32).reshape(1, 1, 4, 4)
        >>> out = np.empty((1, 1, 2, 2), dtype=np.float32)
        >>> window_reduce(np, x, out, [(3, 2, 1, 1), (3, 2, 1, 1)], "max")
        >>> out[0, 0].tolist()
        [[5.0, 7.0], [13.0, 15.0]]
    """
    steps = [(2 + a, _axis_pairs(w, x.shape[2 + a], out.shape[2 + a]))
             for a, w in enumerate(windows)
             if (w[0], w[1], w[3]) != (1, 1, 0) or x.shape[2 + a] != out.shape[2 + a]]
    ufunc = xp.maximum if kind == "max" else xp.add
    fill = _lowest(out.dtype) if kind == "max" else 0
    planes = x.shape[0] * x.shape[1]
    rows = max(1, CHUNK_BYTES // max(1, x[:1, :1].nbytes))
    if not numpy_api(xp) or rows >= planes or not (x.flags.c_contiguous and out.flags.c_contiguous):
        _separable(xp, x, out, steps, ufunc, fill)
        return
    xs, outs = x.reshape(planes, 1, *x.shape[2:]), out.reshape(planes, 1, *out.shape[2:])
    for i in range(0, planes, rows):
        _separable(xp, xs[i:i + rows], outs[i:i + rows], steps, ufunc, fill)


CHUNK_BYTES = 1 << 20
"""Input bytes per chunk of :func:`window_reduce` on numpy (its temporaries stay in L2/L3)."""


def _separable(xp: Any, x: Any, out: Any, steps: Sequence[tuple[int, list[tuple[slice, slice]]]],
               ufunc: Any, fill: float | int) -> None:
    """Reduce ``x`` into ``out`` along each ``(axis, pairs)`` of ``steps`` in turn."""
    if not steps:
        out[...] = x
        return
    src = x
    for axis, pairs in steps:
        shape = (*src.shape[:axis], out.shape[axis], *src.shape[axis + 1:])
        dst = out if axis == steps[-1][0] else xp.empty_like(out, shape=shape)
        _reduce_axis(ufunc, src, dst, axis, pairs, fill)
        src = dst


def _axis_pairs(window: AxisWindow, n_src: int, n_dst: int) -> list[tuple[slice, slice]]:
    """Per kernel offset along one axis with a valid position: (dst slice, src slice)."""
    kernel, stride, dilation, pad = window
    pairs = []
    for k in range(kernel):
        d0, d1, s0 = window_range(k * dilation, pad, stride, n_src, n_dst)
        if d1 > d0:
            pairs.append((slice(d0, d1), slice(s0, s0 + (d1 - d0 - 1) * stride + 1, stride)))
    return pairs


def _reduce_axis(ufunc: Any, src: Any, dst: Any, axis: int, pairs: list[tuple[slice, slice]],
                 fill: float | int) -> None:
    """``dst`` = ``ufunc`` over ``src``'s window along ``axis``: offsets covering every
    destination position first (the first two combined straight into ``dst`` when the dtypes
    agree, else the first copied), then the partial ones into their regions."""
    n = dst.shape[axis]
    full = [s for d, s in pairs if d.start == 0 and d.stop == n]
    partial = [(d, s) for d, s in pairs if not (d.start == 0 and d.stop == n)]
    if len(full) >= 2 and src.dtype == dst.dtype:
        ufunc(src[_at(axis, full[0])], src[_at(axis, full[1])], out=dst)
        full = full[2:]
    elif full:
        dst[...] = src[_at(axis, full[0])]
        full = full[1:]
    else:
        dst[...] = fill
    for s in full:
        ufunc(dst, src[_at(axis, s)], out=dst)
    for d, s in partial:
        target = dst[_at(axis, d)]
        ufunc(target, src[_at(axis, s)], out=target)


def _at(axis: int, part: slice) -> tuple[slice, ...]:
    """The index taking ``part`` of ``axis`` and all of the axes before it."""
    index = [slice(None)] * (axis + 1)
    index[axis] = part
    return tuple(index)


# --------------------------------------------------------------------------------------------
# max_pool


def _infer_max_pool(types: Sequence[TensorType], attrs: MaxPoolAttrs, data: Sequence[Any]
                    ) -> list[TensorType]:
    out = _infer(types, attrs, "max_pool", _MAX_DTYPES)
    return [out, TensorType(out.shape, "int64")] if attrs.indices else [out]


def _lowest(dtype: Any) -> float | int:
    dtype = np.dtype(dtype)
    return -np.inf if dtype.kind == "f" or dtype.name == "bfloat16" else int(
        np.iinfo(dtype).min)


def _flat_index(x_shape: Sequence[int], column_major: bool, dst: tuple[slice, ...],
                src: tuple[slice, ...]) -> np.ndarray[Any, Any]:
    """The flat spatial index of every source position of one kernel offset (host int64)."""
    space = x_shape[2:]
    rank = len(space)
    order = range(rank - 1, -1, -1) if not column_major else range(rank)
    index = np.zeros([s.stop - s.start for s in dst], dtype=np.int64)
    step = 1
    for axis in order:
        positions = np.arange(src[axis].start, src[axis].stop, src[axis].step, dtype=np.int64)
        shape = [1] * rank
        shape[axis] = positions.size
        index = index + positions.reshape(shape) * step
        step *= space[axis]
    return np.asarray(index, dtype=np.int64)


def _max_pool(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
              attrs: MaxPoolAttrs) -> None:
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    if not attrs.indices:
        window_reduce(xp, x, out, axis_windows(attrs, x.ndim - 2), "max")
        return
    out[...] = _lowest(out.dtype)
    lead = (slice(None),) * 2
    pairs = _window(x, out, attrs).pairs
    indices = outputs[1]
    n, c = x.shape[:2]
    spatial = prod(x.shape[2:])
    base = np.arange(n * c, dtype=np.int64).reshape((n, c) + (1,) * (x.ndim - 2)) * spatial
    base_dev = _device_const(xp, indices, base)
    indices[...] = 0
    for _, dst, src in pairs:
        target, where = out[lead + dst], indices[lead + dst]
        values = x[lead + src]
        better = xp.greater(values, target)
        flat = xp.add(base_dev, _device_const(xp, indices, _flat_index(
            x.shape, attrs.column_major, dst, src)))
        where[...] = xp.where(better, flat, where)
        xp.maximum(target, values, out=target)


# --------------------------------------------------------------------------------------------
# avg_pool and lp_pool


def _infer_avg_pool(types: Sequence[TensorType], attrs: AvgPoolAttrs, data: Sequence[Any]
                    ) -> list[TensorType]:
    return [_infer(types, attrs, "avg_pool", _FLOATS)]


def _infer_lp_pool(types: Sequence[TensorType], attrs: LpPoolAttrs, data: Sequence[Any]
                   ) -> list[TensorType]:
    return [_infer(types, attrs, "lp_pool", _FLOATS)]


def _sum_pool(xp: Any, x: Any, out: Any, attrs: PoolAttrs) -> Any:
    """Window sums of ``x`` (already in the work dtype) into a work-dtype accumulator."""
    acc = out if out.dtype == x.dtype else xp.empty_like(out, dtype=x.dtype)
    window_reduce(xp, x, acc, axis_windows(attrs, x.ndim - 2), "sum")
    return acc


def _counts(size: int, n_out: int, kernel: int, stride: int, dilation: int, begin: int,
            end: int, include_pad: bool) -> np.ndarray[Any, Any]:
    """Per output position along one axis: the window positions that count."""
    positions = (np.arange(n_out)[:, None] * stride - begin
                 + np.arange(kernel)[None, :] * dilation)
    inside = positions < size + end if include_pad else (positions >= 0) & (positions < size)
    return np.asarray(inside.sum(axis=1), dtype=np.int64)


def _avg_pool(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
              attrs: AvgPoolAttrs) -> None:
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    work = accumulator(x.dtype)
    acc = _sum_pool(xp, x.astype(work) if work != x.dtype else x, out, attrs)
    rank = x.ndim - 2
    strides, dilation, begin, end = _params(attrs, rank)
    counts = np.ones((), dtype=np.float64)
    for a in range(rank):
        per = _counts(x.shape[2 + a], out.shape[2 + a], attrs.kernel[a], strides[a],
                      dilation[a], begin[a], end[a], attrs.count_include_pad)
        counts = np.multiply.outer(counts, per)
    xp.divide(acc, _device_const(xp, acc, counts.astype(work)), out=acc)
    if acc is not out:
        out[...] = acc


def _lp_pool(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
             attrs: LpPoolAttrs) -> None:
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    work = accumulator(x.dtype)
    powered = xp.abs(x.astype(work) if work != x.dtype else x)
    if attrs.p != 1.0:
        xp.power(powered, attrs.p, out=powered)
    acc = _sum_pool(xp, powered, out, attrs)
    if attrs.p != 1.0:
        xp.power(acc, 1.0 / attrs.p, out=acc)
    if acc is not out:
        out[...] = acc


# --------------------------------------------------------------------------------------------
# max_unpool


class MaxUnpoolAttrs(Attrs):
    """``max_unpool`` (ONNX ``MaxUnpool``): the window of the ``max_pool`` it inverts (kernel,
    strides, padding as there) and, optionally, the output's whole shape.

    The unpooled shape is ``[N, C, *spatial]`` with ``spatial = (in - 1) * stride - pad_begin
    - pad_end + kernel`` per axis; the indices address its elements flat (row-major). An
    ``output_shape`` (same N and C, each spatial size at least the unpooled one) holds the
    unpooled tensor at its start and zeros after it, as ONNX's reference does.
    """

    kernel: list[PosInt]
    strides: list[PosInt] | None = None
    padding: list[NonNegInt] | None = None
    output_shape: list[NonNegInt] | None = None


def _unpooled_shape(x: TensorType, attrs: MaxUnpoolAttrs) -> tuple[int, ...]:
    """``[N, C, *spatial]`` the indices address (before any ``output_shape``)."""
    rank = x.ndim - 2
    if rank < 1:
        raise OpError(f"max_unpool: data must be [N, C, *spatial] with at least one spatial "
                      f"axis, given {show(x)}")
    if len(attrs.kernel) != rank:
        raise OpError(f"max_unpool: kernel {attrs.kernel} needs {rank} values (one per spatial "
                      f"axis of {show(x)})")
    strides = per_axis(attrs.strides, rank, 1, "max_unpool: strides")
    pads = per_axis(attrs.padding, 2 * rank, 0, "max_unpool: padding")
    sizes = []
    for a in range(rank):
        size = ((x.shape[2 + a] - 1) * strides[a] - pads[a] - pads[rank + a]
                + attrs.kernel[a])
        if size < 0:
            raise OpError(f"max_unpool: spatial axis {a} would have size {size} ((in - 1) * "
                          f"stride - pads + kernel with in {x.shape[2 + a]}, stride "
                          f"{strides[a]}, pads ({pads[a]}, {pads[rank + a]}), kernel "
                          f"{attrs.kernel[a]}): the padding is too large")
        sizes.append(size)
    return (*x.shape[:2], *sizes)


def _infer_max_unpool(types: Sequence[TensorType], attrs: MaxUnpoolAttrs, data: Sequence[Any]
                      ) -> list[TensorType]:
    if len(types) != 2:
        raise OpError(f"max_unpool: expected 2 inputs (data, indices), given {len(types)}")
    x, indices = types
    if x.dtype not in _FLOATS:
        raise OpError(f"max_unpool: data must be one of {', '.join(_FLOATS)}, given {x.dtype}")
    if indices.dtype != "int64":
        raise OpError(f"max_unpool: indices must be int64, given {indices.dtype}")
    if indices.shape != x.shape:
        raise OpError(f"max_unpool: indices must have the shape of data, given data {show(x)} "
                      f"and indices {show(indices)}")
    unpooled = _unpooled_shape(x, attrs)
    if attrs.output_shape is None:
        return [TensorType(unpooled, x.dtype)]
    given = tuple(attrs.output_shape)
    if (len(given) != len(unpooled) or given[:2] != unpooled[:2]
            or any(g < u for g, u in zip(given, unpooled, strict=True))):
        raise OpError(f"max_unpool: output_shape {list(given)} must be {len(unpooled)} sizes, "
                      f"N and C as data's and each spatial size at least the unpooled "
                      f"{list(unpooled)}")
    return [TensorType(given, x.dtype)]


def _max_unpool(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                attrs: MaxUnpoolAttrs) -> None:
    x, indices, out = inputs[0], inputs[1], outputs[0]
    out[...] = 0
    if x.size == 0 or out.size == 0:
        return
    unpooled = _unpooled_shape(TensorType(x.shape, str(x.dtype)), attrs)
    total = prod(unpooled)
    flat = indices.reshape(-1)
    low, high = int(flat.min()), int(flat.max())
    if low < 0 or high >= total:
        raise OpError(f"max_unpool: indices must lie in [0, {total}) (flat positions in the "
                      f"unpooled {list(unpooled)}), given values in [{low}, {high}]")
    whole = tuple(out.shape) == unpooled and out.flags.c_contiguous
    target = out if whole else xp.zeros_like(out, shape=unpooled)
    target.reshape(-1)[flat] = x.reshape(-1)  # a repeated index keeps the last value
    if not whole:
        out[tuple(slice(0, d) for d in unpooled)] = target


register_op(OpDef(name="max_pool", attrs=MaxPoolAttrs, arity=1, infer=_infer_max_pool,
                  compute=_max_pool, num_outputs=lambda attrs: 2 if attrs.indices else 1))
register_op(OpDef(name="avg_pool", attrs=AvgPoolAttrs, arity=1, infer=_infer_avg_pool,
                  compute=_avg_pool))
register_op(OpDef(name="lp_pool", attrs=LpPoolAttrs, arity=1, infer=_infer_lp_pool,
                  compute=_lp_pool))
register_op(OpDef(name="max_unpool", attrs=MaxUnpoolAttrs, arity=2, infer=_infer_max_unpool,
                  compute=_max_unpool))
