"""2-D max pooling over NCHW or NHWC as one CUDA kernel (``cupy.RawKernel``): a thread per
output element walks its window, skipping the padding, and keeps the largest value (NaN wins,
as the reference's ``maximum`` propagates it). Over NHWC, neighbouring threads take
neighbouring channels of a pixel, so their loads coalesce. The reference takes one strided
CuPy ``maximum`` per window tap (nine launches for ResNet's 3x3 stem pool, each a pass over
memory).

float16 is read and written as its bits through PTX's ``cvt``, as in
:mod:`graphrt.kernels.cuda.row_kernels`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

from ...ops import TensorType
from .row_kernels import conversions

__all__ = ["kernel_source", "max_pool2d_kernel"]

AxisWindow = tuple[int, int, int, int]
"""``(kernel, stride, dilation, pad_begin)`` of one spatial axis."""

_MAX_POOL = r"""
extern "C" __global__ void graphrt_max_pool2d(
        const T* x, T* y, long long total, int height, int width, int channels, int out_h,
        int out_w, int kh, int kw, int sh, int sw, int dh, int dw, int ph, int pw) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
#ifdef CHANNELS_LAST
    const int c = (int)(i % channels);  // y[image, oh, ow, c]
    const long long pixel = i / channels;
#else
    const long long pixel = i;  // y[plane, oh, ow], a plane being an image's channel
#endif
    const int ow = (int)(pixel % out_w);
    const int oh = (int)((pixel / out_w) % out_h);
    const long long plane = pixel / ((long long)out_w * out_h);
#ifdef CHANNELS_LAST
    const T* p = x + plane * height * width * channels + c;
    const int step = channels;
#else
    const T* p = x + plane * height * width;
    const int step = 1;
#endif
    float best = -__int_as_float(0x7f800000);
    for (int a = 0; a < kh; ++a) {
        const int h = oh * sh - ph + a * dh;
        if (h < 0 || h >= height) continue;
        for (int b = 0; b < kw; ++b) {
            const int w = ow * sw - pw + b * dw;
            if (w < 0 || w >= width) continue;
            const float v = LOAD(p[((long long)h * width + w) * step]);
            if (v > best || v != v) best = v;
            if (best != best) break;
        }
    }
    y[i] = STORE(best);
}
"""

_KERNELS: dict[tuple[str, bool], Any] = {}
_THREADS = 256


def kernel_source(dtype: str, channels_last: bool) -> str:
    """The CUDA source of the max pool over ``dtype`` (float32 or float16), NHWC where
    ``channels_last``.

    Example:
        >>> kernel_source("float16", True).startswith("#define CHANNELS_LAST")
        True
    """
    return ("#define CHANNELS_LAST\n" if channels_last else "") + conversions(dtype) + _MAX_POOL


def max_pool2d_kernel(x: TensorType, out: TensorType, windows: Sequence[AxisWindow],
                      fallback: Callable[..., None], *, dynamic: bool, xp: Any,
                      channels_last: bool = False) -> Callable[..., None] | None:
    """``call(x, out)`` for a 2-D max pool of NCHW ``x`` (NHWC where ``channels_last``) with
    ``windows`` (H's, W's), or None (not 4-D, not float32/float16, empty, dynamic). A
    strided operand runs ``fallback`` (the reference)."""
    if (dynamic or len(x.shape) != 4 or len(windows) != 2 or x.dtype not in ("float32",
                                                                             "float16")
            or out.dtype != x.dtype or 0 in out.shape or 0 in x.shape
            or prod(out.shape) >= 2**62 or max(x.shape[1:]) >= 2**31):
        return None
    key = (x.dtype, channels_last)
    if key not in _KERNELS:
        _KERNELS[key] = xp.RawKernel(kernel_source(x.dtype, channels_last),
                                     "graphrt_max_pool2d")
    kernel = _KERNELS[key]
    total = prod(out.shape)
    blocks = -(-total // _THREADS)
    (kh, sh, dh, ph), (kw, sw, dw, pw) = windows
    i32 = xp.int32
    if channels_last:
        (_, height, width, channels), (_, out_h, out_w, _) = x.shape, out.shape
    else:
        (_, channels, height, width), (_, _, out_h, out_w) = x.shape, out.shape
    scalars = (xp.int64(total), *map(i32, (height, width, channels, out_h, out_w, kh, kw, sh,
                                           sw, dh, dw, ph, pw)))

    def call(data: Any, result: Any) -> None:
        if not (data.flags.c_contiguous and result.flags.c_contiguous):
            fallback(data, result)
            return
        kernel((blocks,), (_THREADS,), (data, result, *scalars))

    return call
