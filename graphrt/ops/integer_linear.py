"""Standard ops: convolutions and matrix products of 8-bit integers, accumulated exactly (ONNX
``ConvInteger``, ``MatMulInteger``, ``QLinearConv``, ``QLinearMatMul``).

* ``conv_integer``: ``x, w, x_zero_point, w_zero_point`` → int32: the convolution of
  ``x - x_zero_point`` by ``w - w_zero_point`` (attributes as ``conv``: strides, begin then
  end padding, dilation, groups).
* ``qlinear_conv``: ``x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
  y_zero_point[, bias]`` → y_zero_point's dtype: the int32 sum (plus the int32 ``bias``)
  requantized, ``saturate(round_half_even(acc * (x_scale * w_scale / y_scale)) +
  y_zero_point)``.
* ``matmul_integer``: ``a, b, a_zero_point, b_zero_point`` → int32, numpy ``matmul`` (batch
  axes broadcast, 1-D operands) of the differences.
* ``qlinear_matmul``: ``a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
  y_zero_point`` → y_zero_point's dtype, requantized as ``qlinear_conv``.

``x``/``a`` and ``w``/``b`` are int8 or uint8, each zero point of its tensor's dtype. The
zero points and scales of ``x`` and of ``y`` are per tensor (one element); those of ``w`` per
tensor or per output channel (``[O]``). For the matrix products the parameters of ``a`` are per
tensor or per row (``[..., M, 1]``), those of ``b`` per tensor or per column (``[N]`` or
``[..., 1, N]``), those of ``y`` per tensor: each broadcasts against its tensor and is constant
along the summed axis. Scales are float32 (float16, bfloat16 or float64 also taken, all three
of one dtype).

How (the same on every namespace, no host round trip): the integers minus their zero points
lie in [-255, 255], so products are below 2**16 and float32 sums of up to 258 of them are
exact integers (below 2**24). The products run as float32 GEMMs through the namespace's BLAS
over slices of at most 258 along the summed axis, each exact, added into a float64
accumulator (exact for any sum int32 holds). Convolutions write the 8-bit data straight into a
float32 im2col (the padding holds ``x_zero_point``, which the sum then removes through the
weights' row sums: no pass subtracts it from the data). The requantization is ONNX's
reference's: the multiplier rounded in the scales' dtype, the product and the zero point's
sum in float64, rounded half to even, saturated. (ONNX Runtime rounds the product to float32
before rounding to an integer: on rare ties the two differ by one unit.) An int32 sum that
overflows wraps in ONNX; here it would not: no real model comes near (2**31 / 2**16 is 32768
products of extreme values per output).

Example:
    >>> import numpy as np
    >>> from graphrt.ops import get_op
    >>> op = get_op("matmul_integer")
    >>> a = np.array([[11, 7, 3], [10, 6, 2]], np.uint8)
    >>> b = np.array([[1, 4], [2, 5], [3, 6]], np.uint8)
    >>> out = np.empty((2, 2), np.int32)
    >>> op.compute(np, [a, b, np.array(12, np.uint8), np.array(0, np.uint8)], [out],
    ...            op.attrs())
    >>> out
    array([[-38, -83],
           [-44, -98]], dtype=int32)
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from math import prod
from typing import Any

import numpy as np

from .base import Attrs, OpDef, OpError, TensorType, broadcast, register_op
from .convolution import ConvAttrs, Index, conv_plan, per_axis, show

__all__ = ["CHUNK", "IntegerMatmulAttrs", "integer_matmul_types", "qconv_output"]

CHUNK = 258
"""Terms per exact float32 partial sum: ``258 * 255**2 < 2**24``."""

_INTS = ("int8", "uint8")
_SCALES = ("float32", "float16", "bfloat16", "float64")


class IntegerMatmulAttrs(Attrs):
    """``matmul_integer`` and ``qlinear_matmul`` take no attributes."""


# --------------------------------------------------------------------------------------------
# Checks


def _single(t: TensorType) -> bool:
    return t.ndim <= 1 and prod(t.shape) == 1


def _check_int(t: TensorType, what: str, op: str) -> None:
    if t.dtype not in _INTS:
        raise OpError(f"{op}: {what} must be int8 or uint8, given {show(t)}")


def _check_zero(zero: TensorType, of: TensorType, what: str, op: str) -> None:
    if zero.dtype != of.dtype:
        raise OpError(f"{op}: the zero point of {what} must have its dtype ({of.dtype}), "
                      f"given {show(zero)}")


def _check_per_tensor(t: TensorType, what: str, op: str) -> None:
    if not _single(t):
        raise OpError(f"{op}: {what} must be per tensor (one element), given {show(t)}")


def _check_scales(scales: Sequence[TensorType], op: str) -> str:
    dtype = scales[0].dtype
    if dtype not in _SCALES or any(s.dtype != dtype for s in scales):
        shown = ", ".join(show(s) for s in scales)
        raise OpError(f"{op}: the scales must share one of {', '.join(_SCALES)}, given "
                      f"{shown}")
    return dtype


def _per_channel(t: TensorType, channels: int, what: str, op: str) -> None:
    if not _single(t) and t.shape != (channels,):
        raise OpError(f"{op}: {what} must be per tensor (one element) or per output channel "
                      f"([{channels}]), given {show(t)}")


# --------------------------------------------------------------------------------------------
# Convolutions


def qconv_output(x: TensorType, w: TensorType, attrs: ConvAttrs, op: str
                 ) -> tuple[int, ...]:
    """The output shape of an integer convolution of data ``x`` by weight ``w``.

    Raises:
        OpError: the shapes or the attributes do not fit (``op`` names the op).

    Example:
        >>> qconv_output(TensorType((1, 4, 8, 8), "uint8"), TensorType((6, 2, 3, 3), "int8"),
        ...              ConvAttrs(padding=[1, 1, 1, 1], groups=2), "qlinear_conv")
        (1, 6, 8, 8)
    """
    _check_int(x, "the data", op)
    _check_int(w, "the weight", op)
    if x.ndim < 3:
        raise OpError(f"{op}: the data must be [N, C, *spatial] with at least one spatial "
                      f"axis, given {show(x)}")
    if w.ndim != x.ndim:
        raise OpError(f"{op}: the weight must be {x.ndim}-D [O, C/groups, *kernel], given "
                      f"{show(w)}")
    if any(d < 1 for d in w.shape) or any(d < 1 for d in x.shape[1:]):
        raise OpError(f"{op}: data {show(x)} and weight {show(w)} must have no empty axis "
                      "(past the batch)")
    groups, c, o = attrs.groups, x.shape[1], w.shape[0]
    if c % groups or o % groups:
        raise OpError(f"{op}: the data's channels ({c}) and the weight's output channels "
                      f"({o}) must be divisible by groups ({groups})")
    if w.shape[1] != c // groups:
        raise OpError(f"{op}: the weight [O, C/groups, *kernel] must have C/groups = "
                      f"{c // groups} input channels, given {show(w)}")
    rank = x.ndim - 2
    strides = per_axis(attrs.strides, rank, 1, "strides")
    dilation = per_axis(attrs.dilation, rank, 1, "dilation")
    pads = per_axis(attrs.padding, 2 * rank, 0, "padding")
    sizes = []
    for axis in range(rank):
        span = dilation[axis] * (w.shape[2 + axis] - 1) + 1
        padded = x.shape[2 + axis] + pads[axis] + pads[rank + axis]
        if padded < span:
            raise OpError(f"{op}: the dilated kernel ({span}) is larger than the padded input "
                          f"({padded}) along spatial axis {axis}: the output would be empty")
        sizes.append((padded - span) // strides[axis] + 1)
    return (x.shape[0], o, *sizes)


def _infer_conv_integer(types: Sequence[TensorType], attrs: ConvAttrs, data: Sequence[Any]
                        ) -> list[TensorType]:
    op = "conv_integer"
    if len(types) != 4:
        raise OpError(f"{op}: expected 4 inputs (x, w, x_zero_point, w_zero_point), given "
                      f"{len(types)}")
    x, w, xz, wz = types
    shape = qconv_output(x, w, attrs, op)
    _check_zero(xz, x, "x", op)
    _check_zero(wz, w, "w", op)
    _check_per_tensor(xz, "x's zero point", op)
    _per_channel(wz, w.shape[0], "w's zero point", op)
    return [TensorType(shape, "int32")]


def _infer_qlinear_conv(types: Sequence[TensorType], attrs: ConvAttrs, data: Sequence[Any]
                        ) -> list[TensorType]:
    op = "qlinear_conv"
    if len(types) not in (8, 9):
        raise OpError(f"{op}: expected 8 or 9 inputs (x, x_scale, x_zero_point, w, w_scale, "
                      f"w_zero_point, y_scale, y_zero_point[, bias]), given {len(types)}")
    x, xs, xz, w, ws, wz, ys, yz = types[:8]
    shape = qconv_output(x, w, attrs, op)
    _check_zero(xz, x, "x", op)
    _check_zero(wz, w, "w", op)
    _check_int(yz, "y's zero point", op)
    _check_scales([xs, ws, ys], op)
    for t, what in ((xs, "x's scale"), (xz, "x's zero point"), (ys, "y's scale"),
                    (yz, "y's zero point")):
        _check_per_tensor(t, what, op)
    _per_channel(ws, w.shape[0], "w's scale", op)
    _per_channel(wz, w.shape[0], "w's zero point", op)
    if len(types) == 9 and (types[8].dtype != "int32" or types[8].shape != (w.shape[0],)):
        raise OpError(f"{op}: the bias must be int32[{w.shape[0]}] (the output channels), "
                      f"given {show(types[8])}")
    return [TensorType(shape, yz.dtype)]


Taps = tuple[tuple[int, Index, Index], ...]
"""Per kernel offset with valid positions: (flat offset, output region, data region)."""
Borders = tuple[tuple[Index, ...], ...]
"""Per kernel offset: the output regions whose window reads padding."""


@lru_cache(maxsize=256)
def _im2col_geometry(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...],
                     strides: tuple[int, ...], dilation: tuple[int, ...],
                     begin: tuple[int, ...]) -> tuple[Taps, Borders]:
    """The im2col regions of ``conv``'s GEMM plan (per kernel offset: the output region read
    from the data and the data region, and the regions that read padding)."""
    plan = conv_plan(x, w, out, "float32", "float32", True, 1, strides, dilation, begin)
    return plan.taps, plan.borders


def _conv_dims(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], groups: int
               ) -> tuple[int, int, int]:
    """(groups, rows = C/G * kernel, columns = N * output positions) of the GEMM."""
    return groups, w[1] * prod(w[2:]), out[0] * prod(out[2:])


def _conv_workspace(types: Sequence[TensorType], out: tuple[int, ...], groups: int
                    ) -> list[TensorType]:
    """cols, part, acc, weights: see :func:`_run_qconv`."""
    x, w = types[0].shape, types[1 if len(types) == 4 else 3].shape
    if not prod(out):
        return [TensorType((0,), "float32"), TensorType((0,), "float32"),
                TensorType((0,), "float64"), TensorType((0,), "float32")]
    g, rows, cols = _conv_dims(x, w, out, groups)
    o = w[0]
    return [TensorType((g, rows, cols), "float32"), TensorType((g, o // g, cols), "float32"),
            TensorType((g, o // g, cols), "float64"), TensorType((g, o // g, rows), "float32")]


def _conv_integer_workspace(xp: Any, types: Sequence[TensorType], attrs: ConvAttrs
                            ) -> list[TensorType]:
    out = _infer_conv_integer(types, attrs, [None] * len(types))[0].shape
    return _conv_workspace(types, out, attrs.groups)


def _qlinear_conv_workspace(xp: Any, types: Sequence[TensorType], attrs: ConvAttrs
                            ) -> list[TensorType]:
    out = _infer_qlinear_conv(types, attrs, [None] * len(types))[0].shape
    return _conv_workspace(types, out, attrs.groups)


def _channels(value: Any, g: int, og: int) -> Any:
    """A per-tensor or per-output-channel parameter shaped to broadcast against ``[G, O/G,
    columns]``."""
    return value.reshape(()) if value.size == 1 else value.reshape(g, og, 1)


def _centered(xp: Any, values: Any, zero: Any, out: Any) -> None:
    """``out = values - zero`` in float32 (a cast copy, then a subtraction of one dtype: a
    ufunc casting its operands as it goes is several times slower)."""
    out[...] = values
    xp.subtract(out, zero.astype(np.float32), out=out)


def _row_sums(xp: Any, weights: Any) -> Any:
    """The exact float64 sums of the last axis of float32 integers in [-255, 255] (a GEMV
    where float32 holds them, a reduction in float64 beyond)."""
    if weights.shape[-1] * 255 < 2**24:
        ones = xp.ones_like(weights, shape=(weights.shape[-1], 1))
        return xp.matmul(weights, ones).astype(np.float64)
    return xp.sum(weights, axis=-1, dtype=np.float64, keepdims=True)


def _chunked_matmul(xp: Any, a: Any, b: Any, part: Any, first: Any, rest: Any) -> None:
    """The exact ``a @ b`` of float32 integers in [-255, 255], over slices of :data:`CHUNK`
    along the summed axis: ``first(part)`` takes the first slice's product, ``rest(part)``
    each further one."""
    k = a.shape[-1]
    for start in range(0, max(k, 1), CHUNK):
        stop = min(k, start + CHUNK)
        xp.matmul(a[..., start:stop], b[..., start:stop, :], out=part)
        (first if start == 0 else rest)(part)


def _run_qconv(xp: Any, x: Any, xz: Any, w: Any, wz: Any, bias: Any, out: Any,
               spaces: Sequence[Any], attrs: ConvAttrs, finish: Any) -> None:
    """The exact int32 convolution into the float64 ``acc``, then ``finish(acc, out)``.

    ``acc = W' @ cols - corr`` with ``W' = w - w_zero_point`` and ``cols`` the im2col of ``x``
    (padding ``x_zero_point``): ``corr = x_zero_point * rowsum(W') - bias``.
    """
    rank = x.ndim - 2
    groups = attrs.groups
    strides = tuple(per_axis(attrs.strides, rank, 1, "strides"))
    dilation = tuple(per_axis(attrs.dilation, rank, 1, "dilation"))
    begin = tuple(per_axis(attrs.padding, 2 * rank, 0, "padding")[:rank])
    n = x.shape[0]
    o, cg = w.shape[:2]
    kernel, space, out_space = w.shape[2:], x.shape[2:], out.shape[2:]
    g, rows, columns = _conv_dims(x.shape, w.shape, out.shape, groups)
    og, ksize = o // g, prod(kernel)
    if len(spaces) != 4:
        raise OpError(f"expected 4 workspace arrays, given {len(spaces)}")
    cols_buf, part_buf, acc_buf, w_buf = spaces
    # W' = w - w_zero_point, in float32; its row sums give the correction
    weights = w_buf.reshape(g, og, rows)
    _centered(xp, w.reshape(g, og, rows), _channels(wz, g, og), weights)
    corr = _row_sums(xp, weights)  # [G, O/G, 1]
    xp.multiply(corr, xz.reshape(()), out=corr)
    if bias is not None:
        xp.subtract(corr, bias.reshape(g, og, 1), out=corr)
    # im2col: cols[g, c, k, n, *y] = x[n, g, c, *(y * stride + k * dilation - pad)]
    taps, borders = _im2col_geometry(tuple(x.shape), tuple(w.shape), tuple(out.shape),
                                     strides, dilation, begin)
    cols = cols_buf.reshape(g, cg, ksize, n, *out_space)
    xg = x.reshape(n, g, cg, *space).swapaxes(0, 1).swapaxes(1, 2)  # [G, C/G, N, *space]
    lead = (slice(None),) * 3
    pad = xz.reshape(())
    for flat, regions in enumerate(borders):
        slab = cols[:, :, flat]
        for region in regions:
            slab[lead + region] = pad
    for flat, dst, src in taps:
        cols[:, :, flat][lead + dst] = xg[lead + src]
    acc = acc_buf.reshape(g, og, columns)

    def first(part: Any) -> None:
        xp.subtract(part, corr, out=acc)

    def rest(part: Any) -> None:
        xp.add(acc, part, out=acc)

    _chunked_matmul(xp, weights, cols_buf.reshape(g, rows, columns),
                    part_buf.reshape(g, og, columns), first, rest)
    finish(acc)
    moved = acc.reshape(o, n, columns // n).swapaxes(0, 1)  # [N, O, OUT]
    if out.flags.c_contiguous:
        out.reshape(n, o, columns // n)[...] = moved
    else:  # only a plain call can pass one
        out[...] = moved.reshape(out.shape)


def _workspace_or_own(xp: Any, like: Any, outputs: Sequence[Any], types: list[TensorType]
                      ) -> Sequence[Any]:
    """The planned workspace, or (a plain call) arrays allocated for this call."""
    return outputs[1:] or [xp.empty_like(like, shape=t.shape, dtype=np.dtype(t.dtype))
                           for t in types]


def _conv_spaces(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: ConvAttrs
                 ) -> Sequence[Any]:
    """A quantized convolution's scratch arrays: the planned workspace, or its own."""
    types = [TensorType(tuple(a.shape), str(a.dtype)) for a in inputs]
    return _workspace_or_own(xp, inputs[0], outputs, _conv_workspace(
        types, tuple(outputs[0].shape), attrs.groups))


def _conv_integer(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: ConvAttrs
                  ) -> None:
    x, w, xz, wz = inputs
    out = outputs[0]
    if out.size == 0:
        return
    spaces = _conv_spaces(xp, inputs, outputs, attrs)
    _run_qconv(xp, x, xz, w, wz, None, out, spaces, attrs, lambda acc: None)


def _multiplier(xp: Any, a_scale: Any, b_scale: Any, y_scale: Any) -> Any:
    """``a_scale * b_scale / y_scale`` rounded in the scales' dtype, as float64."""
    product = xp.divide(xp.multiply(a_scale, b_scale), y_scale)
    return product.astype(np.float64)  # (a numpy scalar where the scales are per tensor)


def _requantize(xp: Any, acc: Any, multiplier: Any, zero: Any, dtype: Any) -> None:
    """``clip(rint(acc * multiplier + zero))`` to ``dtype``'s range, in place."""
    xp.multiply(acc, multiplier, out=acc)
    xp.add(acc, zero, out=acc)
    xp.rint(acc, out=acc)
    info = np.iinfo(dtype)
    xp.clip(acc, int(info.min), int(info.max), out=acc)


def _qlinear_conv(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: ConvAttrs
                  ) -> None:
    x, xs, xz, w, ws, wz, ys, yz = inputs[:8]
    bias = inputs[8] if len(inputs) == 9 else None
    out = outputs[0]
    if out.size == 0:
        return
    spaces = _conv_spaces(xp, inputs, outputs, attrs)
    g = attrs.groups
    og = w.shape[0] // g
    multiplier = _multiplier(xp, xs.reshape(()), _channels(ws, g, og), ys.reshape(()))

    def finish(acc: Any) -> None:
        _requantize(xp, acc, multiplier, yz.reshape(()), out.dtype)

    _run_qconv(xp, x, xz, w, wz, bias, out, spaces, attrs, finish)


# --------------------------------------------------------------------------------------------
# Matrix products


def _summed_axis(t: TensorType, left: bool) -> int:
    """The axis (from the end) a matmul sums over: a's last, b's second to last (1-D: last)."""
    return -1 if left or t.ndim == 1 else -2


def _check_matmul_param(p: TensorType, t: TensorType, left: bool, what: str, op: str) -> None:
    """``p`` (a scale or zero point of ``t``) broadcasts against ``t`` without growing it and
    is constant along the summed axis."""
    kind = "per row ([..., M, 1])" if left else "per column ([N] or [..., 1, N])"
    if _single(p):
        return
    axis = _summed_axis(t, left)
    try:
        fits = p.ndim <= t.ndim and broadcast(p.shape, t.shape) == t.shape
    except OpError:
        fits = False
    if not fits or (p.ndim >= -axis and p.shape[axis] != 1) or (t.ndim == 1):
        raise OpError(f"{op}: {what} must be per tensor (one element) or {kind} against "
                      f"{show(t)}, given {show(p)}")


def integer_matmul_types(a: TensorType, b: TensorType, op: str
                         ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The output shape of numpy's ``a @ b`` and the shape it is computed in (1-D operands
    made a row ``[1, K]`` and a column ``[K, 1]``).

    Raises:
        OpError: the operands are not int8/uint8 or do not multiply.

    Example:
        >>> integer_matmul_types(TensorType((2, 5, 3), "uint8"), TensorType((3,), "int8"), "x")
        ((2, 5), (2, 5, 1))
    """
    _check_int(a, "a", op)
    _check_int(b, "b", op)
    if a.ndim == 0 or b.ndim == 0:
        raise OpError(f"{op}: takes no scalars, given {show(a)} and {show(b)}")
    a2 = a.shape if a.ndim > 1 else (1, *a.shape)
    b2 = b.shape if b.ndim > 1 else (*b.shape, 1)
    if a2[-1] != b2[-2]:
        raise OpError(f"{op}: a {show(a)} and b {show(b)} do not multiply (the summed axes "
                      f"have {a2[-1]} and {b2[-2]} elements)")
    try:
        batch = broadcast(a2[:-2], b2[:-2])
    except OpError:
        raise OpError(f"{op}: the batch axes of a {show(a)} and b {show(b)} do not "
                      "broadcast") from None
    work = (*batch, a2[-2], b2[-1])
    shape = (*batch, *((a2[-2],) if a.ndim > 1 else ()), *((b2[-1],) if b.ndim > 1 else ()))
    return shape, work


def _infer_matmul_integer(types: Sequence[TensorType], attrs: IntegerMatmulAttrs,
                          data: Sequence[Any]) -> list[TensorType]:
    op = "matmul_integer"
    if len(types) != 4:
        raise OpError(f"{op}: expected 4 inputs (a, b, a_zero_point, b_zero_point), given "
                      f"{len(types)}")
    a, b, az, bz = types
    shape, _ = integer_matmul_types(a, b, op)
    _check_zero(az, a, "a", op)
    _check_zero(bz, b, "b", op)
    _check_matmul_param(az, a, True, "a's zero point", op)
    _check_matmul_param(bz, b, False, "b's zero point", op)
    return [TensorType(shape, "int32")]


def _infer_qlinear_matmul(types: Sequence[TensorType], attrs: IntegerMatmulAttrs,
                          data: Sequence[Any]) -> list[TensorType]:
    op = "qlinear_matmul"
    if len(types) != 8:
        raise OpError(f"{op}: expected 8 inputs (a, a_scale, a_zero_point, b, b_scale, "
                      f"b_zero_point, y_scale, y_zero_point), given {len(types)}")
    a, as_, az, b, bs, bz, ys, yz = types
    shape, _ = integer_matmul_types(a, b, op)
    _check_zero(az, a, "a", op)
    _check_zero(bz, b, "b", op)
    _check_int(yz, "y's zero point", op)
    _check_scales([as_, bs, ys], op)
    _check_matmul_param(as_, a, True, "a's scale", op)
    _check_matmul_param(az, a, True, "a's zero point", op)
    _check_matmul_param(bs, b, False, "b's scale", op)
    _check_matmul_param(bz, b, False, "b's zero point", op)
    _check_per_tensor(ys, "y's scale", op)
    _check_per_tensor(yz, "y's zero point", op)
    return [TensorType(shape, yz.dtype)]


def _matmul_workspace(a: TensorType, b: TensorType, work: tuple[int, ...], exact_out: bool
                      ) -> list[TensorType]:
    """a', b', part, acc (empty where the output takes the one float32 product directly)."""
    if not prod(work):
        return [TensorType((0,), "float32")] * 3 + [TensorType((0,), "float64")]
    single = exact_out and a.shape[-1] <= CHUNK
    return [TensorType(a.shape, "float32"), TensorType(b.shape, "float32"),
            TensorType(work, "float32"), TensorType((0,) if single else work, "float64")]


def _matmul_integer_workspace(xp: Any, types: Sequence[TensorType], attrs: IntegerMatmulAttrs
                              ) -> list[TensorType]:
    _infer_matmul_integer(types, attrs, [None] * len(types))
    _, work = integer_matmul_types(types[0], types[1], "matmul_integer")
    return _matmul_workspace(types[0], types[1], work, True)


def _qlinear_matmul_workspace(xp: Any, types: Sequence[TensorType], attrs: IntegerMatmulAttrs
                              ) -> list[TensorType]:
    _infer_qlinear_matmul(types, attrs, [None] * len(types))
    _, work = integer_matmul_types(types[0], types[3], "qlinear_matmul")
    return _matmul_workspace(types[0], types[3], work, False)


def _run_qmatmul(xp: Any, a: Any, az: Any, b: Any, bz: Any, out: Any,
                 outputs: Sequence[Any], exact_out: bool, finish: Any) -> None:
    """``(a - a_zero_point) @ (b - b_zero_point)`` exactly, then ``finish(acc, view)`` with
    ``view`` the output seen in the computed shape (or, where the single float32 product is
    the output, that product cast into the output)."""
    ta = TensorType(tuple(a.shape), str(a.dtype))
    tb = TensorType(tuple(b.shape), str(b.dtype))
    _, work = integer_matmul_types(ta, tb, "matmul")
    spaces = _workspace_or_own(xp, a, outputs, _matmul_workspace(ta, tb, work, exact_out))
    if len(spaces) != 4:
        raise OpError(f"expected 4 workspace arrays, given {len(spaces)}")
    a_buf, b_buf, part_buf, acc_buf = spaces
    a_work, b_work = a_buf.reshape(a.shape), b_buf.reshape(b.shape)
    _centered(xp, a, az, a_work)
    _centered(xp, b, bz, b_work)
    a2 = a_work if a.ndim > 1 else a_work.reshape(1, -1)
    b2 = b_work if b.ndim > 1 else b_work.reshape(-1, 1)
    part = part_buf.reshape(work)
    contiguous = out.flags.c_contiguous
    view = out.reshape(work) if contiguous else xp.empty_like(out, shape=work)
    if acc_buf.size == 0:  # one exact float32 product: the output
        xp.matmul(a2, b2, out=part)
        view[...] = part
    else:
        acc = acc_buf.reshape(work)

        def first(chunk: Any) -> None:
            acc[...] = chunk

        def rest(chunk: Any) -> None:
            xp.add(acc, chunk, out=acc)

        _chunked_matmul(xp, a2, b2, part, first, rest)
        finish(acc)
        view[...] = acc
    if not contiguous:
        out[...] = view.reshape(out.shape)


def _matmul_integer(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                    attrs: IntegerMatmulAttrs) -> None:
    a, b, az, bz = inputs
    if outputs[0].size == 0:
        return
    _run_qmatmul(xp, a, az, b, bz, outputs[0], outputs, True, lambda acc: None)


def _matmul_param(value: Any, ndim: int) -> Any:
    """A matmul parameter shaped to broadcast against the computed shape (a 1-D operand's
    parameters are per tensor)."""
    return value.reshape(()) if value.size == 1 or ndim == 1 else value


def _qlinear_matmul(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                    attrs: IntegerMatmulAttrs) -> None:
    a, as_, az, b, bs, bz, ys, yz = inputs
    out = outputs[0]
    if out.size == 0:
        return
    multiplier = _multiplier(xp, _matmul_param(as_, a.ndim), _matmul_param(bs, b.ndim),
                             ys.reshape(()))

    def finish(acc: Any) -> None:
        _requantize(xp, acc, multiplier, yz.reshape(()), out.dtype)

    _run_qmatmul(xp, a, _matmul_param(az, a.ndim), b, _matmul_param(bz, b.ndim), out, outputs,
                 False, finish)


register_op(OpDef(name="conv_integer", attrs=ConvAttrs, arity=4, infer=_infer_conv_integer,
                  compute=_conv_integer, workspace=_conv_integer_workspace))
register_op(OpDef(name="qlinear_conv", attrs=ConvAttrs, arity=None, infer=_infer_qlinear_conv,
                  compute=_qlinear_conv, workspace=_qlinear_conv_workspace))
register_op(OpDef(name="matmul_integer", attrs=IntegerMatmulAttrs, arity=4,
                  infer=_infer_matmul_integer, compute=_matmul_integer,
                  workspace=_matmul_integer_workspace))
register_op(OpDef(name="qlinear_matmul", attrs=IntegerMatmulAttrs, arity=8,
                  infer=_infer_qlinear_matmul, compute=_qlinear_matmul,
                  workspace=_qlinear_matmul_workspace))
