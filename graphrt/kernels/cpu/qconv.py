"""The quantized convolution (``qlinear_conv``) on the host: in integers where it can, else
on the float32 direct kernels.

In integers: a 2-D convolution of one group whose weight minus its zero points fits the
AVX2 kernel's exact range (every pair of adjacent taps ``|w0| + |w1| <= 128``: ONNX
Runtime's ``reduce_range`` weights always do) runs
:mod:`graphrt.kernels.cpu.integer_plan`'s kernel: int32 sums of 8-bit products,
requantized as they are stored. ResNet-18 quantized by ONNX Runtime (QDQ) ran 0.74x
graphrt's own float32 model this way, where the float path below ran 1.6x it.

On the float kernels: 8-bit integers minus their zero points lie in [-255, 255], so every
partial sum of their products is an integer, and float32 holds integers exactly up to
2**24. Where the weights guarantee that bound, the fused multiply-adds of the float32
micro-kernels (:mod:`graphrt.kernels.cpu.direct_conv`) compute the int32 sum exactly. This
takes the weights the integer kernel declines, depthwise convolutions, and CPUs without
AVX2.

How a call on the float kernels runs:

1. The weight minus its zero point, as float32, is split into chunks of input channels such
   that for every output channel ``sum(|w - w_zero|) * max|x - x_zero|`` stays below 2**24
   over a chunk (so every partial sum of the chunk is exact whatever the data), and packed
   for the direct kernel: once per loaded weight, zero points and data range
   (:func:`graphrt.devices.frozen.derived`). ResNet-18 quantized by ONNX Runtime needs one
   chunk in its first layers and two or three in its 256- and 512-channel ones.
2. Per chunk, the data's channels minus ``x_zero_point`` are written as float32 (every
   stride-th pixel for a strided 1x1 convolution), the float32 kernel sums them into the
   float workspace, and with several chunks each chunk's sums are added into int32.
3. The int32 sums plus the bias are requantized as ONNX's reference does (float64,
   round half to even, saturate) into the 8-bit output.

Where no chunking keeps the bound (a kernel of more than 258 taps per channel with extreme
weights), the call runs the op's exact reference (float GEMMs over 258-term slices).

Example:
    >>> import numpy as np
    >>> from graphrt.ops import TensorType, get_op
    >>> op = get_op("qlinear_conv")
    >>> attrs = op.attrs(padding=[1, 1, 1, 1])
    >>> one = lambda dtype: TensorType((), dtype)
    >>> types = [TensorType((1, 8, 6, 6), "uint8"), one("float32"), one("uint8"),
    ...          TensorType((16, 8, 3, 3), "int8"), one("float32"), one("int8"),
    ...          one("float32"), one("uint8")]
    >>> out = TensorType((1, 16, 6, 6), "uint8")
    >>> call = qconv_call(attrs, types, out, op.positional(np, attrs, 8))
    >>> call is None or [t.dtype for t in call.workspace]
    ['float32', 'float32', 'float32', 'int32', 'uint32']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from types import ModuleType
from typing import Any

import numpy as np

from ...devices.frozen import derived
from ...ops import TensorType
from ...ops.convolution import ConvAttrs, per_axis
from ...ops.quantize import int_range
from .conv import (
    DepthwisePlan,
    DirectPlan,
    PointwisePlan,
    conv_plan,
    pack_unbiased,
    run_plan,
)
from .crew import run_jobs
from .integer_plan import IntegerCall, IntegerWeight, integer_plan, pack_integer
from .jit import direct_conv, integer_conv, quantized_kernels

__all__ = ["EXACT", "QConvCall", "conv_integer_call", "qconv_call", "span"]

EXACT = 1 << 24
"""Integers float32 holds exactly: a bound on every partial sum of one chunk."""

_TAPS = 258
"""Taps per output channel up to which no weight can break the bound (``258 * 255**2``)."""

Geometry = DirectPlan | PointwisePlan | DepthwisePlan


@dataclass(frozen=True)
class _Shape:
    """One call's shapes and window: data ``[n, c, h, w]``, weight ``[o, c / groups, kh,
    kw]``, output ``[n, o, oh, ow]``."""

    x: tuple[int, ...]
    w: tuple[int, ...]
    out: tuple[int, ...]
    depthwise: bool
    strides: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: tuple[int, ...]  # begins, then ends

    @property
    def begin(self) -> tuple[int, ...]:
        return self.padding[:2]

    @property
    def pointwise(self) -> bool:
        """A 1x1 convolution without pads whose output is every stride-th pixel of the
        data: it reads just those."""
        h, w = self.x[2:]
        return (not self.depthwise and self.w[2:] == (1, 1) and not any(self.padding)
                and self.out[2:] == ((h - 1) // self.strides[0] + 1,
                                     (w - 1) // self.strides[1] + 1))

    def chunk_geometry(self, count: int) -> Geometry | None:
        """The float kernel's plan for a chunk of ``count`` input channels (the strided
        pixels of a 1x1 convolution already taken)."""
        n, _, h, w = self.x
        o, oh, ow = self.out[1], *self.out[2:]
        if self.pointwise:
            return conv_plan((n, count, oh, ow), (o, count, 1, 1), self.out, "float32",
                             "float32", True, 1, (1, 1), (1, 1), (0, 0), True).direct
        groups = count if self.depthwise else 1
        weight = (count, 1, *self.w[2:]) if self.depthwise else (o, count, *self.w[2:])
        return conv_plan((n, count, h, w), weight, self.out, "float32", "float32", True,
                         groups, self.strides, self.dilation, self.begin, True).direct


@dataclass(frozen=True)
class _Chunks:
    """The weight minus its zero points, as float32, split into chunks of input channels of
    exact sums, each with the float kernel's plan and packed weight."""

    count: int  # input channels per chunk
    floats: tuple[np.ndarray[Any, Any], ...]
    geometry: Geometry
    packed: tuple[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None, ...]


def _chunk_size(magnitudes: np.ndarray[Any, Any], reach: int) -> int | None:
    """The most input channels per chunk (a divisor of all of them) for which every output
    channel's ``sum(|w - w_zero|)`` over a chunk times ``reach`` stays below :data:`EXACT`;
    None if even one channel breaks it. ``magnitudes``: ``[O, C]`` sums over the taps."""
    channels = magnitudes.shape[1]
    for count in sorted((d for d in range(1, channels + 1) if channels % d == 0),
                        reverse=True):
        sums = magnitudes.reshape(magnitudes.shape[0], channels // count, count).sum(axis=2)
        if int(sums.max(initial=0)) * reach < EXACT:
            return count
    return None


def _chunks(kernels: ModuleType, shape: _Shape, weight: np.ndarray[Any, Any],
            zero: np.ndarray[Any, Any], reach: int) -> _Chunks | None:
    """The chunks of ``weight`` (an 8-bit ``[O, C/G, kh, kw]``) for data whose values lie
    within ``reach`` of their zero point; None where no chunking keeps the sums exact."""
    o = weight.shape[0]
    centered = weight.astype(np.int32) - zero.astype(np.int32).reshape(-1, 1, 1, 1)
    magnitudes = np.abs(centered).reshape(o, weight.shape[1], -1).sum(axis=2, dtype=np.int64)
    if shape.depthwise:
        count = shape.x[1] if int(magnitudes.max(initial=0)) * reach < EXACT else None
    else:
        count = _chunk_size(magnitudes, reach)
    if count is None:
        return None
    geometry = shape.chunk_geometry(count)
    if geometry is None:
        return None
    floats = centered.astype(np.float32)
    if shape.depthwise:
        return _Chunks(count, (floats,), geometry, (None,))
    parts = tuple(np.ascontiguousarray(floats[:, c:c + count])
                  for c in range(0, weight.shape[1], count))
    assert not isinstance(geometry, DepthwisePlan)
    return _Chunks(count, parts, geometry,
                   tuple(pack_unbiased(kernels, geometry, part) for part in parts))


@dataclass(frozen=True)
class QConvCall:
    """A prepared quantized convolution: ``run(*inputs, out, *workspace)`` and the
    workspace it takes (the float data of a chunk, the float kernel's padded copy, the
    float sums, the int32 sums; the integer kernel's padded copy)."""

    run: Callable[..., None]
    workspace: tuple[TensorType, ...]


def qconv_call(attrs: ConvAttrs, inputs: Sequence[TensorType], out: TensorType,
               reference: Callable[..., None]) -> QConvCall | None:
    """The compiled quantized convolution of these static types, or None where it does not
    apply: numba missing, not 2-D, grouped but not depthwise, an empty output. ``reference``
    (the op's own kernel) runs the calls whose weights no chunking keeps exact."""
    kernels, passes = direct_conv(), quantized_kernels()
    x, w = inputs[0], inputs[3]
    if kernels is None or passes is None or len(x.shape) != 4 or 0 in out.shape:
        return None
    groups = attrs.groups
    depthwise = groups > 1 and groups == x.shape[1] == w.shape[0] and w.shape[1] == 1
    if groups > 1 and not depthwise:
        return None
    shape = _Shape(x.shape, w.shape, out.shape, depthwise,
                   tuple(per_axis(attrs.strides, 2, 1, "strides")),
                   tuple(per_axis(attrs.dilation, 2, 1, "dilation")),
                   tuple(per_axis(attrs.padding, 4, 0, "padding")))
    whole = shape.chunk_geometry(x.shape[1])
    if whole is None:
        return None
    taps = prod(w.shape[1:])
    sums = prod(out.shape)
    integer = None if depthwise else integer_conv()
    in_integers = None if integer is None else IntegerCall(
        integer, integer_plan(x.shape, w.shape, out.shape, shape.strides, shape.dilation,
                              shape.begin), x.dtype == "int8", int_range(out.dtype))
    workspace = (TensorType((prod(x.shape),), "float32"),
                 TensorType(whole.workspace or (0,), "float32"),
                 TensorType((sums,), "float32"),
                 TensorType((sums if taps > _TAPS and not depthwise else 0,), "int32"),
                 TensorType((0 if in_integers is None else in_integers.plan.workspace,),
                            "uint32"))
    n_in = len(inputs)
    low, high = (float(v) for v in int_range(out.dtype))

    def run(*arrays: Any) -> None:
        xq, xs, xz, wq, ws, wz, ys, yz = arrays[:8]
        bias = arrays[8] if n_in == 9 else None
        target, data, padded, part, acc, words = arrays[n_in:]
        if in_integers is not None:
            packed = _integer_weight(wq, wz, in_integers.kernels.PACK)
            if packed is not None:
                in_integers(packed, arrays[:n_in], target, words)
                return
        zero, reach = int(xz.reshape(-1)[0]), span(xz)
        multiplier = np.asarray(np.divide(np.multiply(xs.reshape(()), ws), ys.reshape(())),
                                np.float64).reshape(-1)
        chunks = derived(wq, ("qlinear_conv", wz.tobytes(), wz.shape, reach),
                         lambda: _chunks(kernels, shape, np.asarray(wq),
                                         np.asarray(wz).reshape(-1), reach))
        if chunks is None or (len(chunks.floats) > 1 and acc.size == 0):
            reference(*arrays[:n_in], target)
            return
        _sum_chunks(kernels, passes, shape, chunks, xq, np.float32(zero), data, padded, part,
                    acc)
        summed = part if len(chunks.floats) == 1 else acc
        length = shape.out[2] * shape.out[3]
        run_jobs(passes.requantize, _parallel(summed.size), (
            summed, _empty_bias if bias is None else bias.reshape(-1), multiplier,
            float(yz.reshape(-1)[0]), low, high, shape.out[1], length, target.reshape(-1),
            np.zeros(2, np.int64), _grain(summed.size // length)))

    return QConvCall(run, workspace)


def conv_integer_call(attrs: ConvAttrs, inputs: Sequence[TensorType], out: TensorType,
                      reference: Callable[..., None]) -> QConvCall | None:
    """``conv_integer`` (``x, w, x_zero, w_zero`` into int32 sums) on the integer kernel at
    these static types, or None where it does not apply: no AVX2 kernel, not 2-D, grouped,
    an empty output. ``reference`` (the op's own kernel) runs the calls whose weights the
    kernel declines (:func:`~graphrt.kernels.cpu.integer_plan.pack_integer`).

    Example:
        >>> from graphrt.ops import get_op
        >>> op = get_op("conv_integer")
        >>> types = [TensorType((1, 8, 6, 6), "uint8"), TensorType((16, 8, 3, 3), "int8"),
        ...          TensorType((), "uint8"), TensorType((), "int8")]
        >>> out = TensorType((1, 16, 4, 4), "int32")
        >>> call = conv_integer_call(op.attrs(), types, out, op.positional(np, op.attrs(), 4))
        >>> call is None or [t.dtype for t in call.workspace]
        ['uint32']
    """
    integer = integer_conv()
    x, w = inputs[0], inputs[1]
    if integer is None or len(x.shape) != 4 or attrs.groups != 1 or 0 in out.shape:
        return None
    plan = integer_plan(x.shape, w.shape, out.shape,
                        tuple(per_axis(attrs.strides, 2, 1, "strides")),
                        tuple(per_axis(attrs.dilation, 2, 1, "dilation")),
                        tuple(per_axis(attrs.padding, 4, 0, "padding"))[:2])
    in_integers = IntegerCall(integer, plan, x.dtype == "int8", (0, 0), sums=True)

    def run(*arrays: Any) -> None:
        xq, wq, xz, wz, target, words = arrays
        packed = _integer_weight(wq, wz, integer.PACK)
        if packed is None:
            reference(xq, wq, xz, wz, target)
        else:
            in_integers(packed, (xq, wq, xz, wz), target, words)

    return QConvCall(run, (TensorType((plan.workspace,), "uint32"),))


def _integer_weight(weight: Any, zero: Any, block: int) -> IntegerWeight | None:
    """``weight`` minus ``zero`` packed for the integer kernel (``block`` output channels side
    by side), once per loaded weight and zero points (both ops share it), or None where the
    kernel declines it."""
    packed: IntegerWeight | None = derived(
        weight, ("integer conv", zero.tobytes(), zero.shape, block),
        lambda: pack_integer(np.asarray(weight), np.asarray(zero).reshape(-1), block))
    return packed


_empty_bias = np.zeros(0, np.int32)

_PARALLEL = 1 << 15
"""Elements from which a pass over them runs on every core (the helpers cost tens of µs)."""


def _parallel(size: int) -> bool:
    return size >= _PARALLEL


def _grain(planes: int) -> int:
    """Planes a thread claims at a time: a few claims per thread."""
    return max(1, min(16, planes // 16))


def span(zero: np.ndarray[Any, Any]) -> int:
    """The largest ``|x - zero|`` over the 8-bit dtype of the zero points ``zero`` (one, or
    one per channel: the largest over them)."""
    low, high = int_range(str(zero.dtype))
    zeros = zero.reshape(-1).astype(np.int64)
    return max(int(zeros.max(initial=low)) - low, high - int(zeros.min(initial=high)))


def _sum_chunks(kernels: ModuleType, passes: ModuleType, shape: _Shape, chunks: _Chunks,
                x: np.ndarray[Any, Any], zero: np.float32, data: np.ndarray[Any, Any],
                padded: np.ndarray[Any, Any], part: np.ndarray[Any, Any],
                acc: np.ndarray[Any, Any]) -> None:
    """The exact sums of every chunk: into ``part`` (float32) for one chunk, else added
    into ``acc`` (int32)."""
    n, c, h, w = shape.x
    count = chunks.count
    (sh, sw), (oh, ow) = (shape.strides, shape.out[2:]) if shape.pointwise else ((1, 1), (h, w))
    flat = np.ascontiguousarray(x).reshape(-1)
    chunk = data[:n * count * oh * ow]
    out = part.reshape(shape.out)
    buffer = padded if padded.size else None
    several = len(chunks.floats) > 1
    for k, (weights, packed) in enumerate(zip(chunks.floats, chunks.packed, strict=True)):
        run_jobs(passes.shifted, _parallel(chunk.size), (
            flat, zero, n, c, k * count, count, h, w, sh, sw, oh, ow, chunk,
            np.zeros(2, np.int64), _grain(n * count)))
        # (a chunk's data is strided already; only a direct plan may pad it into buffer)
        run_plan(kernels, chunks.geometry, chunk, weights, None, out, buffer, packed=packed)
        if several:
            passes.add_exact(part, acc, k == 0)
