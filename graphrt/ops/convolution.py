"""Standard ops: N-d convolutions and tensor contractions (numpy and cupy).

* ``conv``: data ``[N, C, *spatial]`` (any number >= 1 of spatial axes), weight
  ``[O, C/groups, *kernel]``, optional bias ``[O]``. ``padding`` lists the begin pads of every
  spatial axis, then the end pads (ONNX ``pads``). See :class:`ConvPlan`: im2col into a
  workspace the executor plans (``OpDef.workspace``) and one GEMM over the batch or one per
  large image, 1x1 without im2col, 2-D depthwise as shifted multiply-adds.
* ``conv_transpose``: weight ``[C, O/groups, *kernel]``; one ``matmul`` then col2im (a strided
  add per kernel offset). Output size per axis ``(in - 1) * stride + dilation * (k - 1) + 1 +
  output_padding - pad_begin - pad_end``; pads may be negative (the output grows, the extra
  positions hold only the bias), which is how ONNX ``output_shape`` larger than the natural size
  is expressed.
* ``einsum``: ``xp.einsum`` over any number of operands (ONNX ``Einsum``).

Matrix products of float16 run in float32 on numpy (which has no float16 BLAS) and natively
on cupy (tensor cores, float32 accumulation); bfloat16 always runs in float32. Overlapping
sums (col2im) accumulate in float32 for 16-bit floats; results are rounded once.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
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
    gemm_dtype,
    matmul,
    numpy_api,
    register_op,
)

__all__ = ["ConvAttrs", "ConvGeometry", "ConvTransposeAttrs", "EinsumAttrs", "Window",
           "conv_geometry", "conv_workspace", "run_conv", "window_range"]

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]

_FLOATS = ("float16", "float32", "float64", "bfloat16")


class ConvAttrs(Attrs):
    """``conv``: per spatial axis strides, dilation (default 1), padding (begins then ends,
    default 0), and the number of groups."""

    strides: list[PosInt] | None = None
    padding: list[NonNegInt] | None = None
    dilation: list[PosInt] | None = None
    groups: PosInt = 1


class ConvTransposeAttrs(Attrs):
    """``conv_transpose``: as ``conv`` (pads may be negative), plus ``output_padding`` added at
    the end of each spatial axis."""

    strides: list[PosInt] | None = None
    padding: list[int] | None = None
    dilation: list[PosInt] | None = None
    groups: PosInt = 1
    output_padding: list[NonNegInt] | None = None


class EinsumAttrs(Attrs):
    """``einsum``: the equation in numpy's notation (explicit ``->`` output, ``...`` allowed)."""

    equation: str


# --------------------------------------------------------------------------------------------
# Helpers shared with pooling


def show(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def per_axis(values: Sequence[int] | None, count: int, default: int, name: str) -> list[int]:
    """``values`` checked to hold ``count`` entries, or ``count`` times ``default``."""
    if values is None:
        return [default] * count
    if len(values) != count:
        raise OpError(f"{name} needs {count} values (one per spatial axis), given "
                      f"{list(values)}")
    return list(values)


def window_range(offset: int, pad: int, stride: int, n_src: int, n_dst: int
                 ) -> tuple[int, int, int]:
    """Indices ``d`` in ``[0, n_dst)`` with ``s = d*stride + offset - pad`` in ``[0, n_src)``.

    Returns ``(d_begin, d_end, s_begin)``; the matching ``s`` are ``s_begin, s_begin + stride,
    ...`` (``d_end - d_begin`` of them, possibly none).
    """
    begin = max(0, -((offset - pad) // stride))
    end = max(begin, min(n_dst, (n_src - 1 + pad - offset) // stride + 1))
    return begin, end, begin * stride + offset - pad


def _axis_offsets(kernel: int, stride: int, dilation: int, pad: int, n_src: int, n_dst: int
                  ) -> list[tuple[int, slice, slice]]:
    """``(offset, dst slice, src slice)`` of each kernel offset of one axis that reads a
    source element. Only offsets ``k`` with ``k * dilation - pad`` within
    ``(-n_dst * stride, n_src)`` can, so at most that many are visited."""
    first = max(0, -(-(pad - (n_dst - 1) * stride) // dilation))  # ceil
    last = min(kernel, (n_src - 1 + pad) // dilation + 1)
    found = []
    for k in range(first, max(first, last)):
        d0, d1, s0 = window_range(k * dilation, pad, stride, n_src, n_dst)
        if d1 > d0:
            found.append((k, slice(d0, d1), slice(s0, s0 + (d1 - d0 - 1) * stride + 1,
                                                  stride)))
    return found


class Window:
    """The regions of a sliding-window op, one pair per kernel offset.

    For each offset (row-major over the kernel) with at least one valid position:
    ``(offset, dst, src)`` where ``dst`` slices the destination axes and ``src`` the source
    axes (``src`` positions are ``dst * stride + offset * dilation - pad``).
    """

    def __init__(self, kernel: Sequence[int], strides: Sequence[int], dilation: Sequence[int],
                 pads: Sequence[int], src: Sequence[int], dst: Sequence[int]) -> None:
        self.pairs: list[tuple[tuple[int, ...], tuple[slice, ...], tuple[slice, ...]]] = []
        # per axis, the kernel offsets that read at least one source element: a window far
        # larger than its input (a declared kernel of 10**6) costs its input's size, not its own
        axes = [_axis_offsets(*args) for args in zip(kernel, strides, dilation, pads, src, dst,
                                                     strict=True)]
        for picked in itertools.product(*axes):
            offset = tuple(k for k, _, _ in picked)
            self.pairs.append((offset, tuple(d for _, d, _ in picked),
                               tuple(s for _, _, s in picked)))


def check_float(types: Sequence[TensorType], names: Sequence[str], op: str) -> str:
    """The one float dtype of every input."""
    first = types[0].dtype
    if first not in _FLOATS:
        raise OpError(f"{op}: {names[0]} must be one of {', '.join(_FLOATS)}, given {first}")
    for t, name in zip(types[1:], names[1:], strict=False):
        if t.dtype != first:
            raise OpError(f"{op}: {name} must have the dtype of {names[0]} ({first}), given "
                          f"{t.dtype}")
    return first


# --------------------------------------------------------------------------------------------
# conv and conv_transpose


def _conv_checks(types: Sequence[TensorType], groups: int, transpose: bool, op: str
                 ) -> tuple[str, int, int]:
    """Checks shared by both ops; returns (dtype, spatial rank, output channels)."""
    if len(types) not in (2, 3):
        raise OpError(f"{op}: expected 2 or 3 inputs (data, weight[, bias]), given {len(types)}")
    x, w = types[0], types[1]
    dtype = check_float(types, ["data", "weight", "bias"], op)
    if x.ndim < 3:
        raise OpError(f"{op}: data must be [N, C, *spatial] with at least one spatial axis, "
                      f"given {show(x)}")
    layout = "[C, O/groups, *kernel]" if transpose else "[O, C/groups, *kernel]"
    if w.ndim != x.ndim:
        raise OpError(f"{op}: weight must be {x.ndim}-D {layout}, given {show(w)}")
    if any(d < 1 for d in w.shape) or any(d < 1 for d in x.shape[1:]):
        raise OpError(f"{op}: data {show(x)} and weight {show(w)} must have no empty axis "
                      "(past the batch)")
    c = x.shape[1]
    if c % groups:
        raise OpError(f"{op}: data channels ({c}) must be divisible by groups ({groups})")
    if transpose:
        if w.shape[0] != c:
            raise OpError(f"{op}: weight {layout} must have C = {c} (the channels of data), "
                          f"given {show(w)}")
        out_channels = w.shape[1] * groups
    else:
        if w.shape[1] != c // groups:
            raise OpError(f"{op}: weight {layout} must have C/groups = {c // groups} input "
                          f"channels, given {show(w)}")
        out_channels = w.shape[0]
        if out_channels % groups:
            raise OpError(f"{op}: weight's output channels ({out_channels}) must be divisible "
                          f"by groups ({groups})")
    if len(types) == 3 and types[2].shape != (out_channels,):
        raise OpError(f"{op}: bias must be [{out_channels}] (the output channels), given "
                      f"{show(types[2])}")
    return dtype, x.ndim - 2, out_channels


def _conv_params(attrs: ConvAttrs | ConvTransposeAttrs, rank: int
                 ) -> tuple[list[int], list[int], list[int], list[int]]:
    strides = per_axis(attrs.strides, rank, 1, "strides")
    dilation = per_axis(attrs.dilation, rank, 1, "dilation")
    pads = per_axis(attrs.padding, 2 * rank, 0, "padding")
    return strides, dilation, pads[:rank], pads[rank:]


def _infer_conv(types: Sequence[TensorType], attrs: ConvAttrs, data: Sequence[Any]
                ) -> list[TensorType]:
    dtype, rank, o = _conv_checks(types, attrs.groups, False, "conv")
    strides, dilation, begin, end = _conv_params(attrs, rank)
    x, w = types[0], types[1]
    sizes = []
    for axis in range(rank):
        span = dilation[axis] * (w.shape[2 + axis] - 1) + 1
        padded = x.shape[2 + axis] + begin[axis] + end[axis]
        if padded < span:
            raise OpError(f"conv: the dilated kernel ({span}) is larger than the padded input "
                          f"({padded}) along spatial axis {axis}: the output would be empty")
        sizes.append((padded - span) // strides[axis] + 1)
    return [TensorType((x.shape[0], o, *sizes), dtype)]


def _add_bias(xp: Any, acc: Any, inputs: Sequence[Any]) -> None:
    if len(inputs) == 3:
        bias = inputs[2]
        xp.add(acc, bias.reshape(bias.shape + (1,) * (acc.ndim - 2)), out=acc)


def _finish(xp: Any, acc: Any, out: Any) -> None:
    if acc is not out:
        out[...] = acc


Index = tuple[slice | int, ...]


@dataclass(frozen=True)
class Planes:
    """Depthwise geometry (2-D): the padded data split by stride phase into planes
    ``[H/sh, W/sw]`` (``planes[a*sw + b][r, q] = padded[r*sh + a, q*sw + b]``), so that every
    kernel offset reads one plane at a flat offset with stride 1 over "wide" output rows of
    the planes' width (the columns past the output width are computed and dropped).

    Attributes:
        width: the planes' width (and the wide rows').
        length: wide output elements computed: ``(OH - 1) * width + OW``.
        fills: per plane: (index, plane region, data region, regions left zero).
        taps: per kernel offset: (plane, flat offset in the plane).
    """

    width: int
    length: int
    fills: tuple[tuple[int, Index, Index, tuple[Index, ...]], ...]
    taps: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class ConvPlan:
    """How one convolution runs at given shapes, and the workspace it needs.

    Two algorithms (the cpu's compiled direct convolution is a kernel of its own,
    :mod:`graphrt.kernels.cpu.conv`):

    * GEMM: im2col into ``cols`` ``[G, C/G*K, N*OUT]`` (one strided copy per kernel offset,
      zeros written only where the window reads padding), one matmul per group over the
      whole batch into ``result`` ``[O, N*OUT]``, then one pass moving it to NCHW and adding
      the bias; or, for one image or large ones (``per_image``), a matmul per image straight
      into the output, where a 1x1 convolution of stride 1 without padding reads the data as
      its own im2col (no ``cols``). The bias is added in place.
    * depthwise (2-D, one input channel per group, any channel multiplier; see
      :class:`Planes`): the data copied once into ``cols`` (the stride-phase planes, zeros
      only in their borders), then per kernel offset ``acc += plane[offset:] * weight[:, k]``
      over contiguous wide rows into ``result``, a few channels at a time so that they stay
      in cache (``temp`` holds one block's products), then one pass into the output with the
      bias.

    Attributes:
        work: the dtype products and sums are computed in.
        cols, result, temp: workspace shapes (None: not needed).
        planes: the depthwise geometry, None for GEMM.
        per_image: GEMM, one matmul per image (and group) into the output, with ``cols``
            ``[N, G, C/G*K, OUT]`` (and ``result`` ``[N, O, OUT]`` when the output's dtype is
            not the work dtype): for one image, or images large enough that a GEMM per image
            runs as fast as one over the batch.
        chunk: depthwise channels per block.
        taps: GEMM, per kernel offset with valid positions: (flat offset, output region, data
            region).
        borders: GEMM, per kernel offset: the regions of its im2col slab that read padding.
    """

    work: str
    cols: tuple[int, ...] | None
    result: tuple[int, ...] | None
    temp: tuple[int, ...] | None
    planes: Planes | None = None
    per_image: bool = False
    chunk: int = 0
    taps: tuple[tuple[int, Index, Index], ...] = ()
    borders: tuple[tuple[Index, ...], ...] = ()

    @cached_property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """The shapes of :meth:`workspace`."""
        return tuple(t.shape for t in self.workspace())

    def workspace(self) -> list[TensorType]:
        """The workspace arrays ``cols, result, temp``, in the order the kernel takes them
        after its output; one not needed at these shapes is empty, so that a node whose
        shapes change between runs always declares the same three."""
        return [TensorType(shape or (0,), self.work)
                for shape in (self.cols, self.result, self.temp)]


_PER_IMAGE = 784
"""Output positions per image from which a GEMM per image (written straight into the NCHW
output) beats one GEMM over the batch (which must be moved to NCHW after): measured on
ResNet layers, 28x28 and larger."""

_BLOCK = 1 << 16
"""Depthwise accumulator elements per block on the host (256 KiB of float32, L2-resident)."""


@lru_cache(maxsize=512)
def conv_plan(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], dtype: str,
              gemm: str, host: bool, groups: int, strides: tuple[int, ...],
              dilation: tuple[int, ...], begin: tuple[int, ...]) -> ConvPlan:
    """The :class:`ConvPlan` of a convolution of data ``x``, weight ``w`` into ``out`` (shapes)
    of ``dtype`` whose matrix products run in ``gemm`` (:func:`gemm_dtype`); ``host``: the
    array namespace is numpy (cpu, sim), else cupy.

    Example:
        >>> plan = conv_plan((8, 512, 7, 7), (512, 512, 3, 3), (8, 512, 7, 7), "float32",
        ...                  "float32", True, 1, (1, 1), (1, 1), (1, 1))
        >>> plan.per_image, plan.cols, plan.result  # one GEMM over the batch
        (False, (1, 4608, 392), (512, 392))
    """
    n = x[0]
    kernel, space, out_space = w[2:], x[2:], out[2:]
    cg, ksize, osize = w[1], prod(kernel), prod(out_space)
    if groups > 1 and cg == 1 and len(space) == 2:
        return _depthwise_plan(x, w, out, accumulator(dtype).name, host, strides, dilation,
                               begin)
    pointwise = ksize == 1 and all(s == 1 for s in strides) and out_space == space
    taps = []
    borders = []
    for flat, offset in enumerate(itertools.product(*(range(k) for k in kernel))):
        ranges = [window_range(k * d, p, s, n_src, n_dst) for k, s, d, p, n_src, n_dst in
                  zip(offset, strides, dilation, begin, space, out_space, strict=True)]
        borders.append(_padding_regions(ranges, out_space))
        if all(d1 > d0 for d0, d1, _ in ranges):
            taps.append((flat, *_regions(ranges, strides)))
    per_image = n == 1 or osize >= _PER_IMAGE
    own = per_image and pointwise and not any(begin) and gemm == dtype
    rows = cg * ksize
    cols = None if own else (n, groups, rows, osize) if per_image else (groups, rows, n * osize)
    result = (None if per_image and gemm == dtype else (n, w[0], osize) if per_image
              else (w[0], n * osize))
    return ConvPlan(gemm, cols, result, None, per_image=per_image, taps=tuple(taps),
                    borders=tuple(borders))


def _regions(ranges: Sequence[tuple[int, int, int]], strides: Sequence[int]
             ) -> tuple[Index, Index]:
    """The destination and source regions of per-axis :func:`window_range` results."""
    dst = tuple(slice(d0, d1) for d0, d1, _ in ranges)
    src = tuple(slice(s0, s0 + (d1 - d0 - 1) * s + 1, s)
                for (d0, d1, s0), s in zip(ranges, strides, strict=True))
    return dst, src


def _depthwise_plan(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], work: str,
                    host: bool, strides: tuple[int, ...], dilation: tuple[int, ...],
                    begin: tuple[int, ...]) -> ConvPlan:
    (n, c, h, wd), (o, _, kh, kw), (oh, ow) = x, w, out[2:]
    (sh, sw), (dh, dw), (pt, pl) = strides, dilation, begin
    # Planes cover every padded row and column a window reads.
    rows = -(-((oh - 1) * sh + (kh - 1) * dh + 1) // sh)
    width = -(-((ow - 1) * sw + (kw - 1) * dw + 1) // sw)
    fills = []
    for a, b in itertools.product(range(sh), range(sw)):
        ranges = [window_range(a, pt, sh, h, rows), window_range(b, pl, sw, wd, width)]
        if all(d1 > d0 for d0, d1, _ in ranges):
            dst, src = _regions(ranges, strides)
        else:
            dst, src = (), ()
        fills.append((a * sw + b, dst, src, _padding_regions(ranges, (rows, width))))
    taps = tuple(((i * dh % sh) * sw + j * dw % sw, (i * dh // sh) * width + j * dw // sw)
                 for i, j in itertools.product(range(kh), range(kw)))
    length = (oh - 1) * width + ow
    m = o // c
    chunk = max(1, min(c, _BLOCK // (n * m * length))) if host else c
    planes = Planes(width, length, tuple(fills), taps)
    return ConvPlan(work, (sh * sw, n, c, rows * width), (n, c, m, oh * width),
                    (n, chunk, m, length), planes=planes, chunk=chunk)


def _padding_regions(ranges: Sequence[tuple[int, int, int]], out_space: Sequence[int]
                     ) -> tuple[Index, ...]:
    """The parts of an output box outside ``ranges`` (per axis ``[d0, d1)``), as slabs."""
    regions: list[Index] = []
    inner: list[slice] = []
    for (d0, d1, _), size in zip(ranges, out_space, strict=True):
        d1 = max(d0, d1)
        rest = (slice(None),) * (len(out_space) - len(inner) - 1)
        for part in (slice(0, min(d0, size)), slice(d1, size)):
            if part.stop > part.start:
                regions.append((*inner, part, *rest))
        if d1 <= d0:
            break
        inner.append(slice(d0, d1))
    return tuple(regions)


def run_conv(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], groups: int,
             strides: tuple[int, ...], dilation: tuple[int, ...], begin: tuple[int, ...]
             ) -> None:
    """A convolution (see :class:`ConvPlan`): ``outputs`` is the output, then the
    workspace the executor planned (:meth:`ConvPlan.workspace`), or nothing: it is then
    allocated for this call."""
    x, weight, out = inputs[0], inputs[1], outputs[0]
    if out.size == 0:
        return
    if not out.flags.c_contiguous:  # only a plain call can pass one
        whole = xp.empty_like(out, order="C")
        run_conv(xp, inputs, [whole], groups, strides, dilation, begin)
        out[...] = whole
        return
    plan = conv_plan(tuple(x.shape), tuple(weight.shape), tuple(out.shape), str(x.dtype),
                     gemm_dtype(xp, x.dtype).name, numpy_api(xp), groups, strides, dilation,
                     begin)
    spaces = outputs[1:] or [xp.empty_like(x, shape=t.shape, dtype=np.dtype(t.dtype))
                             for t in plan.workspace()]
    if len(spaces) != 3:
        raise OpError(f"conv: expected 3 workspace arrays, given {len(spaces)}")
    buffers = [None if shape is None else space
               for shape, space in zip((plan.cols, plan.result, plan.temp), spaces, strict=True)]
    bias = inputs[2] if len(inputs) == 3 else None
    if plan.planes is not None:
        _depthwise(xp, plan, x, weight, bias, out, *buffers)
    else:
        _gemm_conv(xp, plan, x, weight, bias, out, *buffers)


def _as_work(array: Any, work: str) -> Any:
    return array if array.dtype == np.dtype(work) else array.astype(work)


def _gemm_conv(xp: Any, plan: ConvPlan, x: Any, weight: Any, bias: Any, out: Any,
               cols_buf: Any, result_buf: Any, _: Any) -> None:
    n, c = x.shape[:2]
    o, cg = weight.shape[:2]
    g, ksize = c // cg, prod(weight.shape[2:])
    rows, osize = cg * ksize, prod(out.shape[2:])
    w = _as_work(weight, plan.work).reshape(g, o // g, rows)
    if cols_buf is None:
        cols = x.reshape(n, g, rows, osize)  # 1x1: the data is its own im2col
    else:
        xg = x.reshape(n, g, cg, *x.shape[2:]).swapaxes(0, 1).swapaxes(1, 2)  # [G, C/G, N, ..]
        if plan.per_image:  # [N, G, C/G, K, *OUT] seen as [G, C/G, K, N, *OUT]
            slabs = cols_buf.reshape(n, g, cg, ksize, *out.shape[2:]).transpose(
                1, 2, 3, 0, *range(4, 2 + out.ndim))
        else:
            slabs = cols_buf.reshape(g, cg, ksize, n, *out.shape[2:])
        _im2col(plan, xg, slabs)
        cols = cols_buf.reshape((n, g, rows, osize) if plan.per_image else (g, rows, n * osize))
    if plan.per_image:
        dest = (out if result_buf is None else result_buf).reshape(n, g, o // g, osize)
        matmul(xp, w, cols, out=dest)
        if bias is not None:
            xp.add(dest, bias.reshape(g, o // g, 1), out=dest)
        if result_buf is not None:
            out[...] = dest.reshape(out.shape)
        return
    matmul(xp, w, cols, out=result_buf.reshape(g, o // g, n * osize))
    moved = result_buf.reshape(o, n, osize).swapaxes(0, 1)  # [N, O, OUT]
    bias_b = None if bias is None else bias.reshape(o, 1)
    if out.dtype == result_buf.dtype:
        dest = out.reshape(n, o, osize)
        if bias_b is None:
            dest[...] = moved
        else:
            xp.add(moved, bias_b, out=dest)  # moved to NCHW and biased in one pass
        return
    if bias_b is not None:  # added before the one rounding to a 16-bit output
        flat = result_buf.reshape(o, n * osize)
        xp.add(flat, bias_b, out=flat)
    out[...] = moved.reshape(out.shape)


def _im2col(plan: ConvPlan, xg: Any, cols: Any) -> None:
    """``cols[g, c, k, n, *y] = data[n, g, c, *(y*stride + k*dilation - pad)]``, 0 in the
    padding, written once each (``xg`` is the data as ``[G, C/G, N, *space]``)."""
    lead = (slice(None),) * 3
    for flat, regions in enumerate(plan.borders):
        slab = cols[:, :, flat]
        for region in regions:
            slab[lead + region] = 0
    for flat, dst, src in plan.taps:
        cols[:, :, flat][lead + dst] = xg[lead + src]


def _depthwise(xp: Any, plan: ConvPlan, x: Any, weight: Any, bias: Any, out: Any,
               planes_buf: Any, acc_buf: Any, temp_buf: Any) -> None:
    geometry = plan.planes
    assert geometry is not None
    n, c = x.shape[:2]
    _, o, oh, ow = out.shape
    m, length, width = o // c, geometry.length, geometry.width
    planes = planes_buf.reshape(plan.cols)
    lead = (slice(None),) * 2
    for index, dst, src, zeros in geometry.fills:  # the data, split by stride phase
        plane = planes[index].reshape(n, c, -1, width)
        for region in zeros:
            plane[lead + region] = 0
        if dst:
            plane[lead + dst] = x[lead + src]
    acc = acc_buf.reshape(n, c, m, oh * width)
    temp = temp_buf.reshape(n, plan.chunk, m, length)
    taps = _as_work(weight, plan.work).reshape(c, m, -1)
    for c0 in range(0, c, plan.chunk):
        c1 = min(c, c0 + plan.chunk)
        block, part = acc[:, c0:c1, :, :length], temp[:, :c1 - c0]
        for flat, (index, offset) in enumerate(geometry.taps):
            shifted = planes[index, :, c0:c1, None, offset:offset + length]
            scale = taps[c0:c1, :, flat, None]
            if flat == 0:
                xp.multiply(shifted, scale, out=block)
            else:
                xp.multiply(shifted, scale, out=part)
                xp.add(block, part, out=block)
    wide = acc.reshape(n, o, oh, width)[..., :ow]
    if bias is None:
        out[...] = wide
    elif out.dtype == acc.dtype:
        xp.add(wide, bias.reshape(o, 1, 1), out=out)
    else:  # added before the one rounding to a 16-bit output
        xp.add(wide, bias.reshape(o, 1, 1), out=wide)
        out[...] = wide


ConvGeometry = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""A convolution's groups, strides, dilation and begin pads, as :func:`run_conv` takes them."""


def conv_geometry(attrs: ConvAttrs, rank: int) -> ConvGeometry:
    """The :data:`ConvGeometry` of ``conv`` with ``rank`` spatial axes."""
    strides, dilation, begin, _ = _conv_params(attrs, rank)
    return attrs.groups, tuple(strides), tuple(dilation), tuple(begin)


def _conv(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: ConvAttrs) -> None:
    run_conv(xp, inputs, outputs, *conv_geometry(attrs, inputs[0].ndim - 2))


def conv_workspace(xp: Any, types: Sequence[TensorType], out: TensorType,
                   geometry: ConvGeometry) -> list[TensorType]:
    """The workspace of :func:`run_conv` at these types (three empty arrays for an empty
    output)."""
    dtype = types[0].dtype
    if not prod(out.shape):
        return [TensorType((0,), accumulator(dtype).name)] * 3
    return conv_plan(types[0].shape, types[1].shape, out.shape, dtype,
                     gemm_dtype(xp, dtype).name, numpy_api(xp), *geometry).workspace()


def _conv_workspace(xp: Any, types: Sequence[TensorType], attrs: ConvAttrs
                    ) -> list[TensorType]:
    out = _infer_conv(types, attrs, [None] * len(types))[0]
    return conv_workspace(xp, types, out, conv_geometry(attrs, len(types[0].shape) - 2))


def _infer_conv_transpose(types: Sequence[TensorType], attrs: ConvTransposeAttrs,
                          data: Sequence[Any]) -> list[TensorType]:
    dtype, rank, o = _conv_checks(types, attrs.groups, True, "conv_transpose")
    strides, dilation, begin, end = _conv_params(attrs, rank)
    extra = per_axis(attrs.output_padding, rank, 0, "output_padding")
    x, w = types[0], types[1]
    sizes = []
    for axis in range(rank):
        full = ((x.shape[2 + axis] - 1) * strides[axis]
                + dilation[axis] * (w.shape[2 + axis] - 1) + 1 + extra[axis])
        size = full - begin[axis] - end[axis]
        if size < 1:
            raise OpError(f"conv_transpose: padding ({begin[axis]} + {end[axis]}) crops the "
                          f"whole output ({full}) along spatial axis {axis}")
        sizes.append(size)
    return [TensorType((x.shape[0], o, *sizes), dtype)]


def _conv_transpose(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                    attrs: ConvTransposeAttrs) -> None:
    x, weight, out = inputs[0], inputs[1], outputs[0]
    if out.size == 0:
        return
    rank = x.ndim - 2
    n, c = x.shape[:2]
    og = weight.shape[1]
    kernel, space, out_space = weight.shape[2:], x.shape[2:], out.shape[2:]
    o = out.shape[1]
    g = attrs.groups
    cg = c // g
    strides, dilation, begin, _ = _conv_params(attrs, rank)
    ksize, isize = prod(kernel), prod(space)
    # [G, O/G*K, C/G] @ [N, G, C/G, IN] -> cols [N, G, O/G*K, IN]: one matmul.
    wt = weight.reshape(g, cg, og * ksize).swapaxes(-1, -2)
    cols = matmul(xp, wt, x.reshape(n, g, cg, isize)).reshape(n, o, *kernel, *space)
    work = accumulator(out.dtype)  # the overlapping sums: float32 for 16-bit floats
    acc = out if work == out.dtype else xp.empty_like(out, dtype=work)
    acc[...] = 0
    lead = (slice(None),) * 2
    # col2im: out[n, o, *(y*stride + k*dilation - pad)] += cols[n, o, *k, *y]
    for offset, src, dst in Window(kernel, strides, dilation, begin, out_space, space).pairs:
        target = acc[lead + dst]
        xp.add(target, cols[lead + offset + src], out=target)
    _add_bias(xp, acc, inputs)
    _finish(xp, acc, out)


# --------------------------------------------------------------------------------------------
# einsum

_TERM = re.compile(r"^(?:[A-Za-z]|\.\.\.)*$")
_NUMERIC = ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
            "uint8", "uint16", "uint32", "uint64")


def _einsum_terms(equation: str, count: int) -> tuple[list[str], str | None]:
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise OpError(f"einsum: equation {equation!r} has more than one '->'")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != count:
        raise OpError(f"einsum: equation {equation!r} names {len(terms)} operands, given "
                      f"{count}")
    for term in [*terms, rhs]:
        if not _TERM.match(term) or term.count("...") > 1:
            raise OpError(f"einsum: equation {equation!r} has a malformed term {term!r}")
    return terms, rhs if "->" in eq else None


def _infer_einsum(types: Sequence[TensorType], attrs: EinsumAttrs, data: Sequence[Any]
                  ) -> list[TensorType]:
    if not types:
        raise OpError("einsum: expected at least one input")
    dtype = types[0].dtype
    shown = ", ".join(show(t) for t in types)
    if dtype not in _NUMERIC or any(t.dtype != dtype for t in types):
        raise OpError(f"einsum: inputs must share one numeric dtype, given {shown}")
    terms, rhs = _einsum_terms(attrs.equation, len(types))
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    ellipses: list[tuple[int, ...]] = []
    for term, t in zip(terms, types, strict=True):
        letters = term.replace("...", "")
        if (len(letters) != t.ndim) if "..." not in term else (len(letters) > t.ndim):
            raise OpError(f"einsum: term {term!r} of {attrs.equation!r} does not fit input "
                          f"{show(t)}")
        head = term.index("...") if "..." in term else len(letters)
        n_ell = t.ndim - len(letters)
        dims = list(t.shape[:head]) + list(t.shape[head + n_ell:])
        ellipses.append(t.shape[head:head + n_ell])
        for label, dim in zip(letters, dims, strict=True):
            known = sizes.get(label, dim)
            if dim != known and 1 not in (dim, known):
                raise OpError(f"einsum: label {label!r} of {attrs.equation!r} has sizes "
                              f"{known} and {dim} (inputs {shown})")
            sizes[label] = max(dim, known)
            counts[label] = counts.get(label, 0) + 1
    try:
        ell = broadcast(*ellipses)
    except OpError:
        raise OpError(f"einsum: the '...' axes of inputs {shown} do not broadcast") from None
    if rhs is None:
        out = ell + tuple(sizes[label] for label in sorted(counts) if counts[label] == 1)
        return [TensorType(out, dtype)]
    letters = rhs.replace("...", "")
    for label in letters:
        if label not in sizes or letters.count(label) > 1:
            raise OpError(f"einsum: output label {label!r} of {attrs.equation!r} must appear "
                          "in an input, once in the output")
    head = rhs.index("...") if "..." in rhs else len(letters)
    if "..." not in rhs and any(ellipses):
        raise OpError(f"einsum: {attrs.equation!r} drops the '...' axes of inputs {shown}")
    out = (tuple(sizes[label] for label in letters[:head]) + (ell if "..." in rhs else ())
           + tuple(sizes[label] for label in letters[head:]))
    return [TensorType(out, dtype)]


def _einsum(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: EinsumAttrs) -> None:
    out = outputs[0]
    work = gemm_dtype(xp, out.dtype)
    operands = [a.astype(work) if a.dtype != work else a for a in inputs]
    out[...] = xp.einsum(attrs.equation, *operands, optimize=True)


register_op(OpDef(name="conv", attrs=ConvAttrs, arity=None, infer=_infer_conv, compute=_conv,
                  workspace=_conv_workspace))
register_op(OpDef(name="conv_transpose", attrs=ConvTransposeAttrs, arity=None,
                  infer=_infer_conv_transpose, compute=_conv_transpose))
register_op(OpDef(name="einsum", attrs=EinsumAttrs, arity=None, infer=_infer_einsum,
                  compute=_einsum))
