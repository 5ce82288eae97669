"""Standard ops: nn (dense and matmul, det, convolutions, pooling, normalization, resize).

Every op here is written once against the array namespace ``xp`` (numpy on cpu and sim, cupy on
cuda) and only uses what numpy and cupy share with the same meaning: ufuncs with ``out=``,
``matmul``, reductions, ``*_like`` constructors, ``asarray``, basic and advanced indexing. Every
temporary is made from an input with ``xp.*_like`` (so on sim it stays a SimArray on the right
device); index and weight tables computed from shapes alone are built on the host and copied into
such a temporary.

Layouts and conventions:

* Images are NCHW. ``padding`` is ``(top, left, bottom, right)``, i.e. ONNX ``pads``
  ``[H_begin, W_begin, H_end, W_end]``; ``strides`` and ``dilation`` are ``(H, W)``.
* ``dense``: weight ``[N, K]`` (transposed, as ONNX Gemm ``transB=1`` / TVM ``nn.dense``).
* ``conv2d``: weight ``[O, C/groups, KH, KW]`` (OIHW). Runs the N-d ``conv`` kernel
  (:class:`graphrt.ops.convolution.ConvPlan`): im2col into a workspace the executor plans
  and one GEMM over the batch (or one per large image), 1x1 convolutions without im2col,
  depthwise ones as shifted multiply-adds, the bias added in place. Its data and output may
  each be ``NCHW8c`` (``data_layout``, ``out_layout``: ``[N, C/8, H, W, 8]``), which the
  reference unblocks around the NCHW kernel and the cpu's compiled kernels read and write as
  they are (:mod:`graphrt.onnx.layout` chooses them for chains of convolutions), or ``NHWC``
  with the weight ``OHWI`` (``kernel_layout``), which cuDNN reads as they are
  (:mod:`graphrt.onnx.channels_last` chooses them on cuda). The pools take ``NHWC`` too
  (``layout``), ``max_pool2d`` and the global pools ``NCHW8c`` as well; a global pool gives
  ``[N, C, 1, 1]`` whatever its data's layout (of a 1x1 image, the same bytes).
* ``conv2d_transpose``: weight ``[C_in, O/groups, KH, KW]`` (IOHW, as PyTorch ``ConvTranspose2d``
  and ONNX ``ConvTranspose``); one ``matmul`` then col2im (a strided scatter-add per kernel
  offset). Output size ``(H-1)*stride - pad_begin - pad_end + dilation*(K-1) + output_padding + 1``
  per axis. It is the adjoint of ``conv2d`` with the same weight and attributes.
* Pools follow PyTorch (and ONNX opset >= 19): ``ceil_mode`` rounds the output size up, but a
  window that would start in the end padding is dropped. ``avg_pool2d`` with
  ``count_include_pad`` divides by the window clipped to the padded input (padding counts, the
  ceil-mode overhang beyond it does not); without it, by the number of real input elements.
  Windows reduce separably, H then W (:func:`graphrt.ops.pooling.window_reduce`).
* ``resize2d`` follows ONNX ``Resize`` (opset >= 13) given ``sizes`` (so scale = out / in), see
  :class:`Resize2DAttrs`; it is the N-d ``resize`` op's implementation (exact coordinates).
* float16: sums (pools, normalization statistics, col2im) accumulate in float32 and epsilon is
  applied in float32; matrix products run in float32 on numpy (no float16 BLAS) and natively on
  cupy (:func:`graphrt.ops.base.gemm_dtype`); each result is rounded once.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
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
    broadcast,
    gemm_dtype,
    matmul,
    normalize_axis,
    register_op,
)
from .convolution import ConvGeometry, conv_workspace, run_conv
from .normalization import NormalizeAttrs, normalize
from .pooling import AxisWindow, window_reduce
from .resize import ResizeAttrs, resize

__all__ = [
    "AvgPool2DAttrs",
    "BatchNormAttrs",
    "Conv2DAttrs",
    "Conv2DTransposeAttrs",
    "GlobalPool2DAttrs",
    "LayerNormAttrs",
    "MatmulAttrs",
    "MaxPool2DAttrs",
    "NoAttrs",
    "Resize2DAttrs",
    "conv2d_blocked",
    "conv2d_channels_last",
    "conv2d_geometry",
    "nchw_shape",
    "pool2d_windows",
]

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
Pair = tuple[PosInt, PosInt]
Pads = tuple[NonNegInt, NonNegInt, NonNegInt, NonNegInt]

_FLOATS = ("float16", "float32", "float64")


# --------------------------------------------------------------------------------------------
# Attributes


class NoAttrs(Attrs):
    """Ops without attributes (dense, det)."""


class MatmulAttrs(Attrs):
    """``matmul`` and ``batch_matmul``: transpose the last two axes of an operand first."""

    transpose_a: bool = False
    transpose_b: bool = False


class _Conv2DGeometry(Attrs):
    """Strides (H, W), padding (top, left, bottom, right), dilation (H, W), groups."""

    strides: Pair = (1, 1)
    padding: Pads = (0, 0, 0, 0)
    dilation: Pair = (1, 1)
    groups: PosInt = 1


Layout = Literal["NCHW", "NCHW8c", "NHWC"]
"""An image layout: ``NCHW``; ``NCHW8c`` (``[N, C/8, H, W, 8]``: the 8 channels of a block
side by side, as TVM's ``conv2d_NCHWc`` and MLAS's NCHWc kernels take them); or ``NHWC``
(channels last, as cuDNN's tensor-core convolutions and PyTorch's ``channels_last`` take
them)."""
ImageLayout = Literal["NCHW", "NHWC"]
"""The layout of a pool's data (and output)."""


class Conv2DAttrs(_Conv2DGeometry):
    """``conv2d``: strides (H, W), padding (top, left, bottom, right), dilation (H, W), groups,
    and the layouts of the data, the output and the weight (TVM's ``data_layout``,
    ``out_layout`` and ``kernel_layout``: the weight is ``OIHW``, or ``OHWI`` beside ``NHWC``
    data)."""

    data_layout: Layout = "NCHW"
    out_layout: Layout = "NCHW"
    kernel_layout: Literal["OIHW", "OHWI"] = "OIHW"


class Conv2DTransposeAttrs(_Conv2DGeometry):
    """``conv2d_transpose``: as conv2d (NCHW), plus ``output_padding`` (H, W) added at
    bottom/right.

    Each output_padding must be smaller than the stride or the dilation of its axis.
    """

    output_padding: tuple[NonNegInt, NonNegInt] = (0, 0)


class MaxPool2DAttrs(Attrs):
    """``max_pool2d``: window (H, W), strides (default: the window), padding (t, l, b, r).

    Each padding must be smaller than the window along its axis, so that every window holds at
    least one input element.
    """

    pool_size: Pair
    strides: Pair | None = None
    padding: Pads = (0, 0, 0, 0)
    ceil_mode: bool = False
    layout: Layout = "NCHW"


class AvgPool2DAttrs(MaxPool2DAttrs):
    """``avg_pool2d``: as max_pool2d (NCHW or NHWC), plus whether padding counts in the
    divisor."""

    layout: ImageLayout = "NCHW"
    count_include_pad: bool = False


class GlobalPool2DAttrs(Attrs):
    """``global_avg_pool2d``, ``global_max_pool2d``: the data's layout. The output is
    ``[N, C, 1, 1]`` either way (of a 1x1 image, NCHW, NHWC and NCHW8c are the same bytes)."""

    layout: Layout = "NCHW"


class BatchNormAttrs(Attrs):
    """``batch_norm`` (inference): the channel axis and the variance epsilon."""

    axis: int = 1
    epsilon: Annotated[float, Field(ge=0.0)] = 1e-5


class LayerNormAttrs(Attrs):
    """``layer_norm``: the one axis normalized over, and the variance epsilon."""

    axis: int = -1
    epsilon: Annotated[float, Field(ge=0.0)] = 1e-5


NearestMode = Literal["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


class Resize2DAttrs(Attrs):
    """``resize2d`` (NCHW): ONNX ``Resize`` with ``sizes = (N, C, *size)``.

    Source coordinate of output index ``x`` (scale = out / in, exact rational arithmetic: the
    ``resize`` op computes it), per ONNX ``coordinate_transformation_mode``:

    * ``half_pixel``: ``(x + 0.5) / scale - 0.5`` (also when out == 1; this is not
      ``pytorch_half_pixel``);
    * ``align_corners``: ``x * (in - 1) / (out - 1)``, and 0 when out == 1;
    * ``asymmetric``: ``x / scale``.

    ``method="nearest"`` rounds that coordinate per ONNX ``nearest_mode`` and clamps it to
    ``[0, in - 1]``. ``nearest_mode`` None means ``floor`` for ``asymmetric`` (TensorFlow's and
    PyTorch's ``nearest``) and ``round_prefer_floor`` (the ONNX default: halves go down) for the
    other two modes. ``method="bilinear"`` is ONNX ``mode="linear"`` (no antialias,
    ``exclude_outside=0``): ``(1 - t) * v[floor] + t * v[floor + 1]`` with the taps clamped to
    ``[0, in - 1]`` (ONNX's edge behavior), along H, then along W, in float32 for float16.
    """

    size: Pair
    method: Literal["nearest", "bilinear"]
    coordinate_transformation_mode: Literal["half_pixel", "align_corners", "asymmetric"] = (
        "half_pixel")
    nearest_mode: NearestMode | None = None


# --------------------------------------------------------------------------------------------
# Shape-function helpers


def _show(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def _arity(types: Sequence[TensorType], low: int, high: int, names: str) -> None:
    if not low <= len(types) <= high:
        count = str(low) if low == high else f"{low} or {high}"
        raise OpError(f"expected {count} inputs ({names}), given {len(types)}")


def _rank(t: TensorType, name: str, ndim: int, what: str = "") -> None:
    if t.ndim != ndim:
        raise OpError(f"{name} must be {ndim}-D{what}, given {_show(t)}")


def _float_dtypes(types: Sequence[TensorType], names: Sequence[str],
                  allowed: Sequence[str] = _FLOATS) -> str:
    """The common dtype of ``types``: one of ``allowed``, the same for all."""
    first = types[0].dtype
    if first not in allowed:
        raise OpError(f"{names[0]} must be one of {', '.join(allowed)}, given {first}")
    for t, name in zip(types[1:], names[1:], strict=True):
        if t.dtype != first:
            raise OpError(f"{name} must have the dtype of {names[0]} ({first}), given {t.dtype}")
    return first


def _positive_shape(t: TensorType, name: str) -> None:
    if any(d < 1 for d in t.shape):
        raise OpError(f"{name} must have no empty axis, given {_show(t)}")


def _conv_out(size: int, kernel: int, stride: int, dilation: int, pad: int, axis: str) -> int:
    span = dilation * (kernel - 1) + 1
    if size + pad < span:
        raise OpError(f"the dilated kernel ({span}) is larger than the padded input along {axis} "
                      f"({size + pad}): the output would be empty")
    return (size + pad - span) // stride + 1


def _pool_out(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, ceil: bool,
              axis: str) -> int:
    if pad_begin >= kernel or pad_end >= kernel:
        raise OpError(f"padding along {axis} ({pad_begin}, {pad_end}) must be smaller than the "
                      f"pool size {kernel}")
    total = size + pad_begin + pad_end
    if total < kernel:
        raise OpError(f"the pool window ({kernel}) is larger than the padded input along {axis} "
                      f"({total}): the output would be empty")
    out = (total - kernel + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + pad_begin:
        out -= 1  # the last window would start in the end padding
    return out


# --------------------------------------------------------------------------------------------
# Compute helpers


def _window_range(offset: int, pad: int, stride: int, n_src: int, n_dst: int
                  ) -> tuple[int, int, int]:
    """Indices ``d`` in ``[0, n_dst)`` with ``s = d*stride + offset - pad`` in ``[0, n_src)``.

    Returns ``(d_begin, d_end, s_begin)``; the matching ``s`` are
    ``s_begin, s_begin + stride, ...`` (``d_end - d_begin`` of them, possibly none).
    """
    begin = max(0, -((offset - pad) // stride))
    end = min(n_dst, (n_src - 1 + pad - offset) // stride + 1)
    return begin, end, begin * stride + offset - pad


def _strided(begin: int, count: int, stride: int) -> slice:
    return slice(begin, begin + (count - 1) * stride + 1, stride)


def _device_const(xp: Any, like: Any, host: np.ndarray[Any, Any]) -> Any:
    """``host`` (computed from shapes only) copied to the device of ``like``."""
    buf = xp.empty_like(like, shape=host.shape, dtype=host.dtype)
    buf[...] = xp.asarray(host)
    return buf


class _Dest:
    """``out`` seen with another shape (and the dtype a GEMM of its dtype runs in): a view when
    contiguous and of that dtype, else a temporary copied (cast once) back by ``finish``."""

    def __init__(self, xp: Any, out: Any, shape: tuple[int, ...]) -> None:
        self.out = out
        work = gemm_dtype(xp, out.dtype)
        self.direct = bool(out.flags.c_contiguous) and work == out.dtype
        self.view = (out.reshape(shape) if self.direct
                     else xp.empty_like(out, shape=shape, dtype=work))

    def finish(self) -> None:
        if not self.direct:
            self.out[...] = self.view.reshape(self.out.shape)


def _add_bias(xp: Any, out: Any, inputs: Sequence[Any], channel_axis_trailing: int) -> None:
    """``out += bias`` along the channel axis, followed by ``channel_axis_trailing`` axes."""
    if len(inputs) == 3:
        bias = inputs[2].reshape(inputs[2].shape + (1,) * channel_axis_trailing)
        xp.add(out, bias, out=out)


# --------------------------------------------------------------------------------------------
# dense, matmul, batch_matmul


def _infer_dense(types: Sequence[TensorType], attrs: NoAttrs, data: Sequence[Any]
                 ) -> list[TensorType]:
    _arity(types, 2, 3, "data, weight[, bias]")
    x, w = types[0], types[1]
    names = ["data", "weight", "bias"][: len(types)]
    dtype = _float_dtypes(types, names)
    if x.ndim < 1:
        raise OpError(f"data must be at least 1-D ([..., K]), given {_show(x)}")
    _rank(w, "weight", 2, " ([N, K])")
    if w.shape[1] != x.shape[-1]:
        raise OpError(f"weight [N, K] must have K = {x.shape[-1]} (the last axis of data "
                      f"{_show(x)}), given {_show(w)}")
    if len(types) == 3 and types[2].shape != (w.shape[0],):
        raise OpError(f"bias must be [{w.shape[0]}] (the N of weight), given {_show(types[2])}")
    return [TensorType((*x.shape[:-1], w.shape[0]), dtype)]


def _dense(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: NoAttrs) -> None:
    x, w, out = inputs[0], inputs[1], outputs[0]
    n, k = w.shape
    rows = prod(x.shape[:-1])
    dest = _Dest(xp, out, (rows, n))
    matmul(xp, x.reshape(rows, k), w.T, out=dest.view)
    _add_bias(xp, dest.view, inputs, 0)
    dest.finish()


def _matmul_shapes(a: TensorType, b: TensorType, attrs: MatmulAttrs
                   ) -> tuple[tuple[int, int], tuple[int, int]]:
    ma, ka = (a.shape[-1], a.shape[-2]) if attrs.transpose_a else (a.shape[-2], a.shape[-1])
    kb, nb = (b.shape[-1], b.shape[-2]) if attrs.transpose_b else (b.shape[-2], b.shape[-1])
    if ka != kb:
        raise OpError(f"inner dimensions differ: a {_show(a)} (transpose_a="
                      f"{attrs.transpose_a}) has K = {ka}, b {_show(b)} (transpose_b="
                      f"{attrs.transpose_b}) has K = {kb}")
    return (ma, ka), (kb, nb)


def _infer_matmul(types: Sequence[TensorType], attrs: MatmulAttrs, data: Sequence[Any]
                  ) -> list[TensorType]:
    _arity(types, 2, 2, "a, b")
    a, b = types
    dtype = _float_dtypes(types, ["a", "b"], _MATMUL_DTYPES)
    for t, name in ((a, "a"), (b, "b")):
        if t.ndim < 2:
            raise OpError(f"{name} must be at least 2-D ([..., M, K]), given {_show(t)}")
    (m, _), (_, n) = _matmul_shapes(a, b, attrs)
    batch = broadcast(a.shape[:-2], b.shape[:-2])
    return [TensorType((*batch, m, n), dtype)]


def _infer_batch_matmul(types: Sequence[TensorType], attrs: MatmulAttrs, data: Sequence[Any]
                        ) -> list[TensorType]:
    _arity(types, 2, 2, "a, b")
    a, b = types
    dtype = _float_dtypes(types, ["a", "b"], _MATMUL_DTYPES)
    _rank(a, "a", 3, " ([B, M, K])")
    _rank(b, "b", 3, " ([B, K, N])")
    (m, _), (_, n) = _matmul_shapes(a, b, attrs)
    ba, bb = a.shape[0], b.shape[0]
    if ba != bb and 1 not in (ba, bb):
        raise OpError(f"batch sizes must be equal or 1, given a {_show(a)} and b {_show(b)}")
    return [TensorType((max(ba, bb), m, n), dtype)]


_MATMUL_DTYPES = (*_FLOATS, "bfloat16")


def _matmul(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: MatmulAttrs) -> None:
    a, b = inputs
    if attrs.transpose_a:
        a = a.swapaxes(-1, -2)
    if attrs.transpose_b:
        b = b.swapaxes(-1, -2)
    matmul(xp, a, b, out=outputs[0])


# --------------------------------------------------------------------------------------------
# det


def _infer_det(types: Sequence[TensorType], attrs: NoAttrs, data: Sequence[Any]
               ) -> list[TensorType]:
    _arity(types, 1, 1, "data")
    (x,) = types
    dtype = _float_dtypes(types, ["data"], _MATMUL_DTYPES)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise OpError(f"det: data must be square matrices [..., M, M], given {_show(x)}")
    return [TensorType(x.shape[:-2], dtype)]


def _det(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: NoAttrs) -> None:
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    work = accumulator(x.dtype)  # LAPACK (and cuSOLVER) factor float32 and float64 only
    out[...] = xp.linalg.det(x.astype(work) if x.dtype != work else x)


# --------------------------------------------------------------------------------------------
# conv2d, conv2d_transpose


def _conv_common(types: Sequence[TensorType], attrs: _Conv2DGeometry, transpose: bool
                 ) -> tuple[str, int]:
    """Checks shared by conv2d and conv2d_transpose; returns (dtype, output channels)."""
    layout = "[C_in, O/groups, KH, KW]" if transpose else "[O, C/groups, KH, KW]"
    _arity(types, 2, 3, "data, weight[, bias]")
    x, w = types[0], types[1]
    names = ["data", "weight", "bias"][: len(types)]
    dtype = _float_dtypes(types, names)
    _rank(x, "data", 4, " (NCHW)")
    _rank(w, "weight", 4, f" ({layout})")
    _positive_shape(x, "data")
    _positive_shape(w, "weight")
    g, c = attrs.groups, x.shape[1]
    if c % g:
        raise OpError(f"data channels ({c}) must be divisible by groups ({g})")
    if transpose:
        if w.shape[0] != c:
            raise OpError(f"weight {layout} must have C_in = {c} (the channels of data), "
                          f"given {_show(w)}")
        out_channels = w.shape[1] * g
    else:
        if w.shape[1] != c // g:
            raise OpError(f"weight {layout} must have C/groups = {c}/{g} = {c // g} input "
                          f"channels, given {_show(w)}")
        out_channels = w.shape[0]
        if out_channels % g:
            raise OpError(f"weight's output channels ({out_channels}) must be divisible by "
                          f"groups ({g})")
    if len(types) == 3 and types[2].shape != (out_channels,):
        raise OpError(f"bias must be [{out_channels}] (the output channels), given "
                      f"{_show(types[2])}")
    return dtype, out_channels


def nchw_shape(shape: tuple[int, ...], blocked: bool) -> tuple[int, ...]:
    """The NCHW shape of a tensor of ``shape``, ``[N, C/8, H, W, 8]`` where ``blocked``.

    Example:
        >>> nchw_shape((1, 4, 7, 7, 8), True), nchw_shape((1, 32, 7, 7), False)
        ((1, 32, 7, 7), (1, 32, 7, 7))
    """
    if not blocked:
        return shape
    n, blocks, *space, lanes = shape
    return (n, blocks * lanes, *space)


def _nchw_type(x: TensorType, layout: str, what: str) -> TensorType:
    """``x`` as NCHW, given in ``layout`` (``NCHW``, ``NHWC`` or ``NCHW8c``)."""
    if layout == "NCHW":
        return x
    if layout == "NHWC":
        _rank(x, what, 4, " (NHWC)")
        n, h, w, c = x.shape
        return TensorType((n, c, h, w), x.dtype)
    _rank(x, what, 5, " (NCHW8c)")
    if x.shape[4] != 8:
        raise OpError(f"{what} in NCHW8c must be [N, C/8, H, W, 8], given {_show(x)}")
    return TensorType(nchw_shape(x.shape, True), x.dtype)


def _oihw_type(w: TensorType, layout: str) -> TensorType:
    """The weight ``w`` as OIHW, given in ``layout`` (``OIHW`` or ``OHWI``)."""
    if layout == "OIHW":
        return w
    _rank(w, "weight", 4, " (OHWI: [O, KH, KW, C/groups])")
    o, kh, kw, i = w.shape
    return TensorType((o, i, kh, kw), w.dtype)


def _in_layout(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """The NCHW ``shape`` laid out as ``layout``."""
    n, c, h, w = shape
    if layout == "NHWC":
        return (n, h, w, c)
    if layout == "NCHW8c":
        return (n, c // 8, h, w, 8)
    return shape


def _infer_conv2d(types: Sequence[TensorType], attrs: Conv2DAttrs, data: Sequence[Any]
                  ) -> list[TensorType]:
    _arity(types, 2, 3, "data, weight[, bias]")
    types = [_nchw_type(types[0], attrs.data_layout, "data"),
             _oihw_type(types[1], attrs.kernel_layout), *types[2:]]
    dtype, o = _conv_common(types, attrs, transpose=False)
    (n, _, h, w), (_, _, kh, kw) = types[0].shape, types[1].shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs.strides, attrs.dilation, attrs.padding
    oh = _conv_out(h, kh, sh, dh, pt + pb, "H")
    ow = _conv_out(w, kw, sw, dw, pl + pr, "W")
    if attrs.out_layout == "NCHW8c" and o % 8:
        raise OpError(f"out_layout NCHW8c needs output channels divisible by 8, given {o}")
    return [TensorType(_in_layout((n, o, oh, ow), attrs.out_layout), dtype)]


def conv2d_geometry(attrs: Conv2DAttrs) -> ConvGeometry:
    """groups, strides, dilation and begin pads, as :func:`run_conv` takes them."""
    return attrs.groups, attrs.strides, attrs.dilation, attrs.padding[:2]


def conv2d_blocked(attrs: Conv2DAttrs) -> tuple[bool, bool]:
    """Whether the data and the output of a ``conv2d`` are ``NCHW8c``."""
    return attrs.data_layout == "NCHW8c", attrs.out_layout == "NCHW8c"


def conv2d_channels_last(attrs: Conv2DAttrs) -> tuple[bool, bool, bool]:
    """Whether the data, the output and the weight of a ``conv2d`` are channels last
    (``NHWC``, ``NHWC``, ``OHWI``)."""
    return (attrs.data_layout == "NHWC", attrs.out_layout == "NHWC",
            attrs.kernel_layout == "OHWI")


def _nchw_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """The NCHW (OIHW) shape of an array in ``layout`` (checked at infer)."""
    if layout == "NCHW8c":
        return nchw_shape(shape, True)
    n, h, w, c = shape  # NHWC, or OHWI as [O, KH, KW, I]
    return (n, c, h, w)


def _to_nchw(x: Any, layout: str, target: Any) -> None:
    """Write ``x`` (in ``layout``: an image layout, or ``OHWI`` for a weight) into the NCHW
    (OIHW) array ``target``."""
    if layout == "NCHW8c":
        n, blocks, h, w, lanes = x.shape
        target.reshape(n, blocks, lanes, h, w)[...] = x.transpose(0, 1, 4, 2, 3)
    else:  # NHWC, OHWI
        target[...] = x.transpose(0, 3, 1, 2)


def _from_nchw(source: Any, layout: str, out: Any) -> None:
    """Write the NCHW array ``source`` into ``out``, in ``layout``."""
    if layout == "NCHW8c":
        n, blocks, oh, ow, lanes = out.shape
        out[...] = source.reshape(n, blocks, lanes, oh, ow).transpose(0, 1, 3, 4, 2)
    else:
        out[...] = source.transpose(0, 2, 3, 1)


def _conv2d(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], attrs: Conv2DAttrs) -> None:
    # The N-d convolution's kernel (GEMM over the batch, 1x1 without im2col, depthwise as
    # shifted multiply-adds), with the workspace the executor planned in outputs[1:4]. Data,
    # weight and output in another layout go through NCHW (OIHW) copies around it, planned
    # after those three in that order (the cpu's compiled kernels read and write NCHW8c as it
    # is, cuDNN NHWC); a plain call allocates them.
    copies = list(outputs[4:])
    arrays, out = list(inputs), outputs[0]
    for index, layout in ((0, attrs.data_layout), (1, attrs.kernel_layout)):
        if layout not in ("NCHW", "OIHW"):
            copy = copies.pop(0) if copies else xp.empty_like(
                arrays[index], shape=_nchw_shape(arrays[index].shape, layout))
            _to_nchw(arrays[index], layout, copy)
            arrays[index] = copy
    target = out
    if attrs.out_layout != "NCHW":
        target = copies.pop(0) if copies else xp.empty_like(
            out, shape=_nchw_shape(out.shape, attrs.out_layout))
    run_conv(xp, arrays, [target, *outputs[1:4]], *conv2d_geometry(attrs))
    if target is not out:
        _from_nchw(target, attrs.out_layout, out)


def _conv2d_workspace(xp: Any, types: Sequence[TensorType], attrs: Conv2DAttrs
                      ) -> list[TensorType]:
    """The convolution's three arrays, then NCHW (OIHW) copies of the data, the weight and
    the output where they are in another layout."""
    out = _infer_conv2d(types, attrs, [None] * len(types))[0]
    data = _nchw_type(types[0], attrs.data_layout, "data")
    weight = _oihw_type(types[1], attrs.kernel_layout)
    nchw = _nchw_type(out, attrs.out_layout, "output")
    copies = [t for t, other in ((data, attrs.data_layout != "NCHW"),
                                 (weight, attrs.kernel_layout != "OIHW"),
                                 (nchw, attrs.out_layout != "NCHW")) if other]
    return [*conv_workspace(xp, [data, weight, *types[2:]], nchw, conv2d_geometry(attrs)),
            *copies]


def _infer_conv2d_transpose(types: Sequence[TensorType], attrs: Conv2DTransposeAttrs,
                            data: Sequence[Any]) -> list[TensorType]:
    dtype, o = _conv_common(types, attrs, transpose=True)
    (n, _, h, w), (_, _, kh, kw) = types[0].shape, types[1].shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs.strides, attrs.dilation, attrs.padding
    oph, opw = attrs.output_padding
    for axis, op, s, d in (("H", oph, sh, dh), ("W", opw, sw, dw)):
        if op >= max(s, d):
            raise OpError(f"output_padding along {axis} ({op}) must be smaller than the stride "
                          f"({s}) or the dilation ({d})")
    sizes = []
    for axis, size, k, s, d, begin, end, op in (("H", h, kh, sh, dh, pt, pb, oph),
                                                ("W", w, kw, sw, dw, pl, pr, opw)):
        full = (size - 1) * s + d * (k - 1) + 1 + op
        if full - begin - end < 1:
            raise OpError(f"padding along {axis} ({begin} + {end}) crops the whole output "
                          f"({full}): the output would be empty")
        sizes.append(full - begin - end)
    return [TensorType((n, o, sizes[0], sizes[1]), dtype)]


def _conv2d_transpose(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                      attrs: Conv2DTransposeAttrs) -> None:
    x, weight, out = inputs[0], inputs[1], outputs[0]
    n, c, h, w = x.shape
    _, og, kh, kw = weight.shape
    _, o, oh, ow = out.shape
    g = attrs.groups
    cg = c // g
    (sh, sw), (dh, dw), (pt, pl, _, _) = attrs.strides, attrs.dilation, attrs.padding
    # [G, O/G*KH*KW, C/G] @ [N, G, C/G, H*W] -> cols [N, G, O/G*KH*KW, H*W]: one matmul.
    wt = weight.reshape(g, cg, og * kh * kw).swapaxes(-1, -2)
    cols = matmul(xp, wt, x.reshape(n, g, cg, h * w)).reshape(n, o, kh, kw, h, w)
    # col2im: out[n, o, y*sh + i*dh - pt, x*sw + j*dw - pl] += cols[n, o, i, j, y, x], summed
    # in float32 for 16-bit floats.
    work = accumulator(out.dtype)
    acc = out if work == out.dtype else xp.empty_like(out, dtype=work)
    acc[...] = 0
    for i in range(kh):
        y0, y1, hs = _window_range(i * dh, pt, sh, oh, h)
        if y1 <= y0:
            continue
        for j in range(kw):
            x0, x1, ws = _window_range(j * dw, pl, sw, ow, w)
            if x1 <= x0:
                continue
            target = acc[:, :, _strided(hs, y1 - y0, sh), _strided(ws, x1 - x0, sw)]
            xp.add(target, cols[:, :, i, j, y0:y1, x0:x1], out=target)
    _add_bias(xp, acc, inputs, 2)
    if acc is not out:
        out[...] = acc


# --------------------------------------------------------------------------------------------
# Pooling


def _infer_pool(types: Sequence[TensorType], attrs: MaxPool2DAttrs, dtypes: Sequence[str]
                ) -> list[TensorType]:
    _arity(types, 1, 1, "data")
    dtype = _float_dtypes(types, ["data"], dtypes)
    x = _nchw_type(types[0], attrs.layout, "data")
    _rank(x, "data", 4, " (NCHW)")
    _positive_shape(x, "data")
    n, c, h, w = x.shape
    kh, kw = attrs.pool_size
    sh, sw = attrs.strides or attrs.pool_size
    pt, pl, pb, pr = attrs.padding
    oh = _pool_out(h, kh, sh, pt, pb, attrs.ceil_mode, "H")
    ow = _pool_out(w, kw, sw, pl, pr, attrs.ceil_mode, "W")
    return [TensorType(_in_layout((n, c, oh, ow), attrs.layout), dtype)]


_MAX_POOL_DTYPES = (*_FLOATS, "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64")


def _infer_max_pool2d(types: Sequence[TensorType], attrs: MaxPool2DAttrs, data: Sequence[Any]
                      ) -> list[TensorType]:
    return _infer_pool(types, attrs, _MAX_POOL_DTYPES)


def _infer_avg_pool2d(types: Sequence[TensorType], attrs: AvgPool2DAttrs, data: Sequence[Any]
                      ) -> list[TensorType]:
    return _infer_pool(types, attrs, _FLOATS)


def pool2d_windows(attrs: MaxPool2DAttrs) -> list[AxisWindow]:
    """The (kernel, stride, dilation, pad_begin) of the H and W axes (separable pools)."""
    (kh, kw), (sh, sw) = attrs.pool_size, attrs.strides or attrs.pool_size
    pt, pl, _, _ = attrs.padding
    return [(kh, sh, 1, pt), (kw, sw, 1, pl)]


def _nchw_view(x: Any, layout: str) -> Any:
    """An image array in ``layout`` (``NCHW`` or ``NHWC``) seen as NCHW."""
    return x if layout == "NCHW" else x.transpose(0, 3, 1, 2)


def _max_pool2d(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                attrs: MaxPool2DAttrs) -> None:
    if attrs.layout == "NCHW8c":  # through NCHW copies (the cpu's compiled pool reads it)
        x, out = inputs[0], outputs[0]
        plain = xp.empty_like(x, shape=_nchw_shape(x.shape, "NCHW8c"))
        _to_nchw(x, "NCHW8c", plain)
        pooled = xp.empty_like(out, shape=_nchw_shape(out.shape, "NCHW8c"))
        window_reduce(xp, plain, pooled, pool2d_windows(attrs), "max")
        _from_nchw(pooled, "NCHW8c", out)
        return
    window_reduce(xp, _nchw_view(inputs[0], attrs.layout),
                  _nchw_view(outputs[0], attrs.layout), pool2d_windows(attrs), "max")


def _pool_counts(size: int, n_out: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                 include_pad: bool) -> np.ndarray[Any, Any]:
    start = np.arange(n_out) * stride - pad_begin
    if include_pad:  # the window clipped to the padded input
        return np.minimum(start + kernel, size + pad_end) - start
    return np.minimum(start + kernel, size) - np.maximum(start, 0)


def _avg_pool2d(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                attrs: AvgPool2DAttrs) -> None:
    x, out = _nchw_view(inputs[0], attrs.layout), _nchw_view(outputs[0], attrs.layout)
    _, _, h, w = x.shape
    _, _, oh, ow = out.shape
    work = accumulator(out.dtype)  # float16 sums in float32, rounded once
    acc = out if work == out.dtype else xp.empty_like(out, dtype=work)
    window_reduce(xp, x, acc, pool2d_windows(attrs), "sum")
    (kh, kw), (sh, sw) = attrs.pool_size, attrs.strides or attrs.pool_size
    pt, pl, pb, pr = attrs.padding
    rows = _pool_counts(h, oh, kh, sh, pt, pb, attrs.count_include_pad)
    cols = _pool_counts(w, ow, kw, sw, pl, pr, attrs.count_include_pad)
    counts = np.outer(rows, cols).astype(work)
    xp.divide(acc, _device_const(xp, acc, counts), out=acc)
    if acc is not out:
        out[...] = acc


def _infer_global_pool(types: Sequence[TensorType], layout: str, dtypes: Sequence[str]
                       ) -> list[TensorType]:
    _arity(types, 1, 1, "data")
    dtype = _float_dtypes(types, ["data"], dtypes)
    x = _nchw_type(types[0], layout, "data")
    _rank(x, "data", 4, " (NCHW)")
    _positive_shape(x, "data")
    return [TensorType((x.shape[0], x.shape[1], 1, 1), dtype)]


def _infer_global_avg_pool2d(types: Sequence[TensorType], attrs: GlobalPool2DAttrs,
                             data: Sequence[Any]) -> list[TensorType]:
    return _infer_global_pool(types, attrs.layout, _FLOATS)


def _infer_global_max_pool2d(types: Sequence[TensorType], attrs: GlobalPool2DAttrs,
                             data: Sequence[Any]) -> list[TensorType]:
    return _infer_global_pool(types, attrs.layout, _MAX_POOL_DTYPES)


def _global_pooled(x: Any, out: Any, layout: str) -> tuple[tuple[int, int], Any]:
    """The spatial axes of ``x`` and ``out`` as ``x``'s layout sees it (``[N, C, 1, 1]`` is
    ``[N, 1, 1, C]``'s and ``[N, C/8, 1, 1, 8]``'s bytes)."""
    n, c = out.shape[:2]
    if layout == "NHWC":
        return (1, 2), out.reshape(n, 1, 1, c)
    if layout == "NCHW8c":
        return (2, 3), out.reshape(n, c // 8, 1, 1, 8)
    return (2, 3), out


def _global_avg_pool2d(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                       attrs: GlobalPool2DAttrs) -> None:
    x = inputs[0]
    axes, out = _global_pooled(x, outputs[0], attrs.layout)
    work = accumulator(x.dtype)  # float16 sums in float32, rounded once
    if work == x.dtype:
        xp.mean(x, axis=axes, keepdims=True, out=out)
    else:
        out[...] = xp.mean(x, axis=axes, keepdims=True, dtype=work)


def _global_max_pool2d(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                       attrs: GlobalPool2DAttrs) -> None:
    axes, out = _global_pooled(inputs[0], outputs[0], attrs.layout)
    xp.max(inputs[0], axis=axes, keepdims=True, out=out)


# --------------------------------------------------------------------------------------------
# Normalization


def _infer_norm(types: Sequence[TensorType], axis: int, names: Sequence[str]
                ) -> list[TensorType]:
    _arity(types, len(names), len(names), ", ".join(names))
    dtype = _float_dtypes(types, names)
    x = types[0]
    if x.ndim < 1:
        raise OpError(f"data must be at least 1-D, given {_show(x)}")
    size = x.shape[normalize_axis(axis, x.ndim)]
    for t, name in zip(types[1:], names[1:], strict=True):
        if t.shape != (size,):
            raise OpError(f"{name} must be [{size}] (axis {axis} of data {_show(x)}), given "
                          f"{_show(t)}")
    return [TensorType(x.shape, dtype)]


def _infer_batch_norm(types: Sequence[TensorType], attrs: BatchNormAttrs, data: Sequence[Any]
                      ) -> list[TensorType]:
    return _infer_norm(types, attrs.axis,
                       ["data", "gamma", "beta", "moving_mean", "moving_var"])


def _infer_layer_norm(types: Sequence[TensorType], attrs: LayerNormAttrs, data: Sequence[Any]
                      ) -> list[TensorType]:
    return _infer_norm(types, attrs.axis, ["data", "gamma", "beta"])


def _along(vector: Any, axis: int, ndim: int) -> Any:
    """A 1-D vector shaped to broadcast along ``axis`` of an ``ndim``-D tensor."""
    return vector.reshape(vector.shape + (1,) * (ndim - 1 - axis))


def _batch_norm(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                attrs: BatchNormAttrs) -> None:
    x, gamma, beta, mean, var = inputs
    out = outputs[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    work = accumulator(x.dtype)  # float16: in float32 (epsilon too), rounded once
    if work != x.dtype:
        gamma, beta, mean, var = (v.astype(work) for v in (gamma, beta, mean, var))
    scale = xp.add(var, work.type(attrs.epsilon))  # gamma / sqrt(var + eps)
    xp.sqrt(scale, out=scale)
    xp.divide(gamma, scale, out=scale)
    shift = xp.multiply(mean, scale)  # beta - mean * scale
    xp.subtract(beta, shift, out=shift)
    if work == x.dtype:
        xp.multiply(x, _along(scale, axis, x.ndim), out=out)
        xp.add(out, _along(shift, axis, x.ndim), out=out)
        return
    result = xp.multiply(x.astype(work), _along(scale, axis, x.ndim))
    xp.add(result, _along(shift, axis, x.ndim), out=result)
    out[...] = result


def _layer_norm(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                attrs: LayerNormAttrs) -> None:
    x, gamma, beta = inputs
    axis = normalize_axis(attrs.axis, x.ndim)
    scale, shift = _along(gamma, axis, x.ndim), _along(beta, axis, x.ndim)
    normalize(xp, [x, scale, shift], outputs, _normalize_attrs(axis, attrs.epsilon))


@lru_cache(maxsize=256)
def _normalize_attrs(axis: int, epsilon: float) -> NormalizeAttrs:
    """``layer_norm`` as ``normalize`` over one axis (built once, not on every run)."""
    return NormalizeAttrs(axes=[axis], epsilon=epsilon)


# --------------------------------------------------------------------------------------------
# resize2d


def _infer_resize2d(types: Sequence[TensorType], attrs: Resize2DAttrs, data: Sequence[Any]
                    ) -> list[TensorType]:
    _arity(types, 1, 1, "data")
    x = types[0]
    dtype = _float_dtypes(types, ["data"])
    _rank(x, "data", 4, " (NCHW)")
    _positive_shape(x, "data")
    return [TensorType((x.shape[0], x.shape[1], *attrs.size), dtype)]


@lru_cache(maxsize=256)
def _as_resize(attrs: Resize2DAttrs, n: int, c: int) -> ResizeAttrs:
    """``resize2d`` as the N-d ``resize`` of an ``[n, c, H, W]`` input."""
    mode = attrs.coordinate_transformation_mode
    rounding = attrs.nearest_mode or ("floor" if mode == "asymmetric" else "round_prefer_floor")
    return ResizeAttrs(size=(n, c, *attrs.size),
                       mode="nearest" if attrs.method == "nearest" else "linear",
                       coordinate_transformation_mode=mode, nearest_mode=rounding)


def _resize2d(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
              attrs: Resize2DAttrs) -> None:
    # One implementation with ``resize``: exact rational source coordinates, so nearest never
    # picks the wrong pixel through an inexact float scale.
    n, c = inputs[0].shape[:2]
    resize(xp, inputs, outputs, _as_resize(attrs, n, c))


# --------------------------------------------------------------------------------------------
# Registration

register_op(OpDef(name="dense", attrs=NoAttrs, arity=None, infer=_infer_dense,
                  compute=_dense))
register_op(OpDef(name="matmul", attrs=MatmulAttrs, arity=2, infer=_infer_matmul,
                  compute=_matmul))
register_op(OpDef(name="batch_matmul", attrs=MatmulAttrs, arity=2, infer=_infer_batch_matmul,
                  compute=_matmul))
register_op(OpDef(name="det", attrs=NoAttrs, arity=1, infer=_infer_det, compute=_det))
register_op(OpDef(name="conv2d", attrs=Conv2DAttrs, arity=None, infer=_infer_conv2d,
                  compute=_conv2d, workspace=_conv2d_workspace))
register_op(OpDef(name="conv2d_transpose", attrs=Conv2DTransposeAttrs, arity=None,
                  infer=_infer_conv2d_transpose, compute=_conv2d_transpose))
register_op(OpDef(name="max_pool2d", attrs=MaxPool2DAttrs, arity=1, infer=_infer_max_pool2d,
                  compute=_max_pool2d))
register_op(OpDef(name="avg_pool2d", attrs=AvgPool2DAttrs, arity=1, infer=_infer_avg_pool2d,
                  compute=_avg_pool2d))
register_op(OpDef(name="global_avg_pool2d", attrs=GlobalPool2DAttrs, arity=1,
                  infer=_infer_global_avg_pool2d, compute=_global_avg_pool2d))
register_op(OpDef(name="global_max_pool2d", attrs=GlobalPool2DAttrs, arity=1,
                  infer=_infer_global_max_pool2d, compute=_global_max_pool2d))
register_op(OpDef(name="batch_norm", attrs=BatchNormAttrs, arity=5, infer=_infer_batch_norm,
                  compute=_batch_norm))
register_op(OpDef(name="layer_norm", attrs=LayerNormAttrs, arity=3, infer=_infer_layer_norm,
                  compute=_layer_norm))
register_op(OpDef(name="resize2d", attrs=Resize2DAttrs, arity=1, infer=_infer_resize2d,
                  compute=_resize2d))
