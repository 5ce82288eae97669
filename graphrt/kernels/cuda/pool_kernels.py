"""2-D max pooling over NCHW as one CUDA kernel (``cupy.RawKernel``): a thread per output
element walks its window, skipping the padding, and keeps the largest value (NaN wins, as
the reference's ``maximum`` propagates it). The reference takes one strided CuPy ``maximum``
per window tap (nine launches for ResNet's 3x3 stem pool, each a pass over memory).

float16 is read and written as its bits through PTX's ``cvt``, as in
:mod:`graphrt.kernels.cuda.row_kernels`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

from ...ops import TensorType
from .row_kernels import conversions

__all__ = ["max_pool2d_kernel"]

AxisWindow = tuple[int, int, int, int]
"""``(kernel, stride, dilation, pad_begin)`` of one spatial axis."""

_MAX_POOL = r"""
extern "C" __global__ void graphrt_max_pool2d(
        const T* x, T* y, long long total, int height, int width, int out_h, int out_w,
        int kh, int kw, int sh, int sw, int dh, int dw, int ph, int pw) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int ow = (int)(i % out_w);
    const int oh = (int)((i / out_w) % out_h);
    const long long plane = i / ((long long)out_w * out_h);
    const T* p = x + plane * height * width;
    float best = -__int_as_float(0x7f800000);
    for (int a = 0; a < kh; ++a) {
        const int h = oh * sh - ph + a * dh;
        if (h < 0 || h >= height) continue;
        for (int b = 0; b < kw; ++b) {
            const int w = ow * sw - pw + b * dw;
            if (w < 0 || w >= width) continue;
            const float v = LOAD(p[(long long)h * width + w]);
            if (v > best || v != v) best = v;
            if (best != best) break;
        }
    }
    y[i] = STORE(best);
}
"""

_KERNELS: dict[str, Any] = {}
_THREADS = 256


def max_pool2d_kernel(x: TensorType, out: TensorType, windows: Sequence[AxisWindow],
                      fallback: Callable[..., None], *, dynamic: bool, xp: Any
                      ) -> Callable[..., None] | None:
    """``call(x, out)`` for a 2-D max pool of NCHW ``x`` with ``windows`` (H's, W's), or
    None (not 4-D, not float32/float16, empty, dynamic). A strided operand runs
    ``fallback`` (the reference)."""
    if (dynamic or len(x.shape) != 4 or len(windows) != 2 or x.dtype not in ("float32",
                                                                             "float16")
            or out.dtype != x.dtype or 0 in out.shape or 0 in x.shape
            or prod(out.shape) >= 2**62 or max(x.shape[2:]) >= 2**31):
        return None
    if x.dtype not in _KERNELS:
        _KERNELS[x.dtype] = xp.RawKernel(conversions(x.dtype) + _MAX_POOL,
                                         "graphrt_max_pool2d")
    kernel = _KERNELS[x.dtype]
    total = prod(out.shape)
    blocks = -(-total // _THREADS)
    (kh, sh, dh, ph), (kw, sw, dw, pw) = windows
    i32 = xp.int32
    scalars = (xp.int64(total), i32(x.shape[2]), i32(x.shape[3]), i32(out.shape[2]),
               i32(out.shape[3]), i32(kh), i32(kw), i32(sh), i32(sw), i32(dh), i32(dw),
               i32(ph), i32(pw))

    def call(data: Any, result: Any) -> None:
        if not (data.flags.c_contiguous and result.flags.c_contiguous):
            fallback(data, result)
            return
        kernel((blocks,), (_THREADS,), (data, result, *scalars))

    return call
