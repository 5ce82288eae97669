"""Softmax, layer norm and reductions (sum, mean) over the last axis as one CUDA kernel
each (``cupy.RawKernel``).

The reference runs each as five to ten CuPy calls (a max, a subtraction, an exponential, a
sum, a division; the mean, the variance, ...), each a kernel launch and a pass over memory,
with float16 rounded between them. Here one thread block takes one row: it reads the row,
reduces in float32 (warp shuffles, then shared memory), and writes the result once, rounded
to the output's dtype. layer_norm takes the mean first and then the squared deviations from
it (two passes, as the cpu's kernel). Rows are contiguous in every planned entry; a strided
operand (a zero-copy input) takes the reference.

float16 is read and written as its bits, converted with PTX's ``cvt`` (no CUDA headers
needed by NVRTC).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

from ...ops import TensorType

__all__ = ["conversions", "kernel_code", "rows_kernel"]

_TYPES = {"float32": ("float", "{}", "{}"), "float16": ("unsigned short", "h2f({})", "f2h({})")}

_CONVERT = r"""
__device__ __forceinline__ float h2f(unsigned short h) {
    float f; asm("{cvt.f32.f16 %0, %1;}" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short h; asm("{cvt.rn.f16.f32 %0, %1;}" : "=h"(h) : "f"(f)); return h;
}
"""

_COMMON = r"""
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// The block's sum (or max) of v, in every thread.
__device__ float block_reduce(float v, float* shared, bool is_max) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? shared[lane] : (is_max ? -3.402823466e38f : 0.0f);
        w = is_max ? warp_max(w) : warp_sum(w);
        if (lane == 0) shared[32] = w;
    }
    __syncthreads();
    v = shared[32];
    __syncthreads();
    return v;
}
"""

_SOFTMAX = r"""
extern "C" __global__ void graphrt_softmax(const T* x, T* y, int cols) {
    __shared__ float shared[33];
    const T* row = x + (size_t)blockIdx.x * cols;
    T* out = y + (size_t)blockIdx.x * cols;
    float m = -3.402823466e38f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, LOAD(row[c]));
    m = block_reduce(m, shared, true);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(LOAD(row[c]) - m);
    const float inv = 1.0f / block_reduce(s, shared, false);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        out[c] = STORE(expf(LOAD(row[c]) - m) * inv);
}
"""

_LAYER_NORM = r"""
extern "C" __global__ void graphrt_layer_norm(const T* x, const T* gamma, const T* beta, T* y,
                                              int cols, float epsilon) {
    __shared__ float shared[33];
    const T* row = x + (size_t)blockIdx.x * cols;
    T* out = y + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += LOAD(row[c]);
    const float mean = block_reduce(s, shared, false) / cols;
    float q = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = LOAD(row[c]) - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(block_reduce(q, shared, false) / cols + epsilon);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        out[c] = STORE((LOAD(row[c]) - mean) * rstd * LOAD(gamma[c]) + LOAD(beta[c]));
}
"""

_REDUCE = r"""
extern "C" __global__ void graphrt_NAME(const T* x, T* y, int cols) {
    __shared__ float shared[33];
    const T* row = x + (size_t)blockIdx.x * cols;
    float v = IS_MAX ? -3.402823466e38f : 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        v = IS_MAX ? fmaxf(v, LOAD(row[c])) : v + LOAD(row[c]);
    v = block_reduce(v, shared, IS_MAX);
    if (threadIdx.x == 0) y[blockIdx.x] = STORE(IS_MEAN ? v / cols : v);
}
"""

_SOURCES = {
    "softmax": _SOFTMAX, "layer_norm": _LAYER_NORM,
    **{f"reduce_{kind}": _REDUCE.replace("NAME", f"reduce_{kind}")
       .replace("IS_MAX", "true" if kind == "max" else "false")
       .replace("IS_MEAN", "true" if kind == "mean" else "false")
       for kind in ("sum", "mean")},
}
_KERNELS: dict[tuple[str, str], Any] = {}


def conversions(dtype: str) -> str:
    """CUDA source defining ``T`` (the element as stored), ``LOAD`` (to float) and ``STORE``
    (from float) for ``dtype`` (float32 or float16).

    Example:
        >>> print(conversions("float32").splitlines()[0])
        #define T float
    """
    c_type, load, store = _TYPES[dtype]
    return (f"#define T {c_type}\n#define LOAD(v) {load.format('(v)')}\n"
            f"#define STORE(v) {store.format('(v)')}\n{_CONVERT}")


def kernel_code(name: str, dtype: str) -> str:
    """The CUDA source of ``name`` (``softmax``, ``layer_norm``, ``reduce_sum``,
    ``reduce_mean``) for ``dtype``.

    Example:
        >>> "unsigned short" in kernel_code("softmax", "float16")
        True
    """
    return conversions(dtype) + _COMMON + _SOURCES[name]


def _threads(cols: int) -> int:
    """Threads per row: a multiple of 32, about four columns each, at most 1024.

    Example:
        >>> _threads(128), _threads(256), _threads(30522), _threads(3)
        (32, 64, 1024, 32)
    """
    warps = -(-cols // (4 * 32))
    return max(32, min(1024, warps * 32))


def rows_kernel(name: str, epsilon: float, inputs: Sequence[TensorType], out: TensorType,
                fallback: Callable[..., None], *, dynamic: bool, xp: Any
                ) -> Callable[..., None] | None:
    """``call(x[, gamma, beta], out)`` for softmax, layer_norm (``gamma`` and ``beta`` 1-D
    over the row) or ``reduce_sum``/``reduce_mean`` (one value per row) over the rows of
    ``x`` (its last axis: the caller gives ``x`` as rows), or None (a dtype other than
    float32/float16, an empty or dynamic tensor, rows longer than an int holds). A strided
    operand runs ``fallback`` (the reference)."""
    x = inputs[0]
    vectors = 2 if name == "layer_norm" else 0
    if (name not in _SOURCES or dynamic or x.dtype not in _TYPES or not x.shape
            or 0 in x.shape or x.shape[-1] >= 2**31
            or any(t.dtype != x.dtype for t in (*inputs, out)) or len(inputs) != 1 + vectors
            or any(t.shape != x.shape[-1:] for t in inputs[1:])):
        return None
    if name.startswith("reduce_"):  # every row to one value: out holds the leading dims
        if prod(out.shape) != prod(x.shape[:-1]):
            return None
    elif out.shape != x.shape:
        return None
    key = (name, x.dtype)
    if key not in _KERNELS:
        _KERNELS[key] = xp.RawKernel(kernel_code(name, x.dtype), f"graphrt_{name}")
    kernel, cols = _KERNELS[key], x.shape[-1]
    rows, threads = prod(x.shape[:-1]), _threads(cols)
    extra = (xp.float32(epsilon),) if name == "layer_norm" else ()
    count = xp.int32(cols)

    def call(*arrays: Any) -> None:
        if not all(a.flags.c_contiguous for a in arrays):
            fallback(*arrays)
            return
        kernel((rows,), (threads,), (*arrays, count, *extra))

    return call
