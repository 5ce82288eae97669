"""Compiled (numba) 2-D max pooling of float32 and 8-bit integers on the host, over every
core.

Imported only through :func:`graphrt.kernels.cpu.jit.pool_kernels`, which falls back to the
numpy path (:func:`graphrt.ops.pooling.window_reduce`) where numba is missing.
:func:`max_pool_jobs` is a job function (:mod:`graphrt.kernels.cpu.job_protocol`): a job is one
band of output rows of one plane. Each output row reduces the window's input rows into one
padded line (the dtype's lowest value in the padding: ``-inf``, 0 or -128), then the
window's columns of that line into the output row. Every step is a vectorized maximum of
two arrays into a third (a loop that reads the array it writes does not vectorize), so a
window of k rows or columns folds through two spare lines in turn; stride 2 reads the line
as interleaved pairs, still vectorized. A window of 3 rows, and of 3 columns at stride 2
(ResNet's stem pool), runs in one pass each: ResNet's 64 x 112 x 112 pool on one thread took
0.33-0.55x as long as folded (float32, two runs), 0.30x (uint8). Blocked data (``[N, C/8, H,
W, 8]``, the layout of :mod:`graphrt.onnx.layout`) pools the same way, a row being 8 elements
a pixel, its columns 8 lanes at a time. The maximum is numpy's: a NaN anywhere in a window
makes it NaN. docs/performance.md gives its speed against the
separable numpy passes.

:func:`plane_means` is the global average pool: a plane's sum by vector lanes, on the
calling thread (the whole pool of MobileNetV2 takes microseconds; numpy's mean over the two
last axes took 70).

Example:
    >>> import numpy as np
    >>> x = np.arange(16, dtype=np.float32)             # one 4x4 plane
    >>> out = np.empty(4, np.float32)                   # its 2x2 pool (kernel 2, stride 2)
    >>> max_pool_jobs(x, out, np.float32(-np.inf), 1, 4, 4, 2, 2, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1,
    ...               np.zeros(2, np.int64), 1, np.zeros(1, np.int64), True, 0, 0)
    True
    >>> out.tolist()
    [5.0, 7.0, 13.0, 15.0]
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .job_protocol import JOBS, claim, done, finish, flat, ring
from .kernel_parts import LANES, accumulate, array_data, c64, fill_at, splat, vector_at

__all__ = ["POOLED", "block_means", "max_pool_jobs", "plane_means"]


@numba.njit(inline="always", cache=True)
def _max(a: float, b: float) -> float:
    """``np.maximum(a, b)``: NaN if either is (two selects, which vectorize)."""
    larger = b if b > a else a
    return b if b != b else larger


@numba.njit(inline="always", cache=True)
def _max2(dst: np.ndarray, d0: int, a: np.ndarray, a0: int, sa: int, b: np.ndarray, b0: int,
          sb: int, n: int) -> None:
    """``dst[d0 + j] = max(a[a0 + j * sa], b[b0 + j * sb])`` for ``j < n`` (``dst`` neither
    ``a`` nor ``b`` there: a loop that reads what it writes does not vectorize); strides 1
    and 2 spelled out so that the loops vectorize. Offsets, not views (a view costs two
    atomic reference counts), unsigned (no wraparound check, which kept loops scalar)."""
    d, p, q = np.uint64(d0), np.uint64(a0), np.uint64(b0)
    if sa == 1 and sb == 1:
        for j in range(np.uint64(n)):
            dst[d + j] = _max(a[p + j], b[q + j])
    elif sa == 1 and sb == 2:
        for j in range(np.uint64(n)):
            dst[d + j] = _max(a[p + j], b[q + np.uint64(2) * j])
    elif sa == 2 and sb == 2:
        for j in range(np.uint64(n)):
            dst[d + j] = _max(a[p + np.uint64(2) * j], b[q + np.uint64(2) * j])
    else:
        for j in range(np.uint64(n)):
            dst[d + j] = _max(a[p + j * np.uint64(sa)], b[q + j * np.uint64(sb)])


@numba.njit(inline="always", cache=True)
def _max3(dst: np.ndarray, d0: int, x: np.ndarray, a0: int, b0: int, c0: int, n: int) -> None:
    """``dst[d0 + j] = max(x[a0 + j], x[b0 + j], x[c0 + j])`` for ``j < n``: a 3-row window
    in one pass, where folding it through a spare line took two."""
    d, p, q, r = np.uint64(d0), np.uint64(a0), np.uint64(b0), np.uint64(c0)
    for j in range(np.uint64(n)):
        dst[d + j] = _max(_max(x[p + j], x[q + j]), x[r + j])


@numba.njit(inline="always", cache=True)
def _copy(dst: np.ndarray, d0: int, a: np.ndarray, a0: int, sa: int, n: int) -> None:
    """``dst[d0 + j] = a[a0 + j * sa]`` for ``j < n``."""
    d, p = np.uint64(d0), np.uint64(a0)
    if sa == 1:
        for j in range(np.uint64(n)):
            dst[d + j] = a[p + j]
    elif sa == 2:
        for j in range(np.uint64(n)):
            dst[d + j] = a[p + np.uint64(2) * j]
    else:
        for j in range(np.uint64(n)):
            dst[d + j] = a[p + j * np.uint64(sa)]


@intrinsic
def _block_columns(typingctx: Any, dst: Any, d0: Any, line: Any, ow: Any, kw: Any, sw: Any,
                   dw: Any) -> Any:
    """``dst[d0 + 8 j + c] = max(line[8 (j sw + kx dw) + c] for kx < kw)``: the columns of
    a blocked line (8 channels a pixel), the 8 lanes of a pixel a vector (a scalar loop
    over the lanes took 340 of ResNet's stem pool's 500 us on one thread), the maximum
    numpy's (NaN if either is; else the larger, the first of two equal)."""
    sig = types.void(dst, d0, line, ow, kw, sw, dw)
    dtype = line.dtype

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        dp, lp = (array_data(context, builder, signature, args, i).data for i in (0, 2))
        d0, ow, kw, sw, dw = args[1], args[3], args[4], args[5], args[6]
        vector = ir.VectorType(context.get_value_type(dtype), LANES)

        def at(pointer: Any, index: Any) -> Any:
            return builder.bitcast(builder.gep(pointer, [index]), vector.as_pointer())

        def larger(a: Any, b: Any) -> Any:
            if isinstance(dtype, types.Float):
                bigger = builder.select(builder.fcmp_ordered(">", b, a), b, a)
                return builder.select(builder.fcmp_unordered("uno", b, b), b, bigger)
            compare = builder.icmp_signed if dtype.signed else builder.icmp_unsigned
            return builder.select(compare(">", b, a), b, a)

        def pixel(j: Any, _: list[Any]) -> list[Any]:
            start = builder.mul(builder.mul(j, sw), c64(LANES))

            def column(kx: Any, best: list[Any]) -> list[Any]:
                where = builder.add(start, builder.mul(builder.mul(kx, dw), c64(LANES)))
                return [larger(best[0], builder.load(at(lp, where), align=1))]

            first = builder.load(at(lp, start), align=1)
            best = accumulate(builder, builder.sub(kw, c64(1)), [first],
                              lambda kx, best: column(builder.add(kx, c64(1)), best))[0]
            builder.store(best, at(dp, builder.add(d0, builder.mul(j, c64(LANES)))), align=1)
            return []

        accumulate(builder, ow, [], pixel)
        return context.get_dummy_value()

    return sig, codegen


_I64 = types.int64


POOLED = (types.float32, types.uint8, types.int8)
"""The dtypes :func:`max_pool_jobs` takes."""


@numba.njit([types.boolean(flat(t, True), flat(t), t, *(_I64,) * 15, *JOBS) for t in POOLED],
            cache=True, nogil=True)
def max_pool_jobs(x: np.ndarray, out: np.ndarray, lowest: float, planes: int, h: int, w: int,
                  oh: int, ow: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
                  top: int, left: int, rows: int, lanes: int, counters: np.ndarray,
                  grain: int, bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """Max pool ``x`` ``[planes, h, w, lanes]`` into ``out`` ``[planes, oh, ow, lanes]``
    (flattened; ``lanes`` 1: NCHW planes, 8: a blocked layout's blocks of 8 channels) with
    a ``kh`` x ``kw`` window, strides ``sh``, ``sw``, dilation ``dh``, ``dw`` and ``top``,
    ``left`` padding (the end padding follows from the output size); jobs of ``rows`` output
    rows of one plane, claimed as :mod:`~graphrt.kernels.cpu.job_protocol` says. A window with no
    input position gives ``lowest`` (the dtype's lowest value). The rows of a window are
    folded first, element by element along whole lines, then the columns."""
    if caller:
        ring(bell)
    bands = (oh + rows - 1) // rows
    total = planes * bands
    width = max((ow - 1) * sw + (kw - 1) * dw + 1, left + w)  # the padded line windows read
    line = np.empty(width * lanes, x.dtype)
    line[:] = lowest
    wl = w * lanes  # elements of a row
    lead = left * lanes  # the row's data in line from here
    spare = np.empty(2 * wl, x.dtype)  # partial maxima of rows, then of columns
    pairs = np.empty(2 * ow, x.dtype)
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        for job in range(first, last):
            plane, band = divmod(job, bands)
            src = plane * h * wl  # the plane's first element
            for oy in range(band * rows, min(oh, (band + 1) * rows)):
                # The window's rows: y0 + ky * dh for ky in [k0, k1), those inside the plane.
                y0 = oy * sh - top
                k0 = 0 if y0 >= 0 else (dh - 1 - y0) // dh
                k1 = min(kh, (h - 1 - y0) // dh + 1) if y0 < h else 0
                count = k1 - k0
                if count <= 0:
                    fill_at(line, lead, wl, lowest)
                elif count == 1:
                    _copy(line, lead, x, src + (y0 + k0 * dh) * wl, 1, wl)
                elif count == 3:  # ResNet's 3x3 window: the three rows in one pass
                    _max3(line, lead, x, src + (y0 + k0 * dh) * wl,
                          src + (y0 + (k0 + 1) * dh) * wl, src + (y0 + (k0 + 2) * dh) * wl, wl)
                    count = 0
                for i in range(1, count):  # each fold into the line, or a spare line before
                    y = y0 + (k0 + i) * dh
                    into, at = (line, lead) if i == count - 1 else (spare, i % 2 * wl)
                    if i == 1:
                        _max2(into, at, x, src + (y - dh) * wl, 1, x, src + y * wl, 1, wl)
                    else:
                        _max2(into, at, spare, (i - 1) % 2 * wl, 1, x, src + y * wl, 1, wl)
                d0 = (plane * oh + oy) * ow * lanes  # the output row's first element
                if lanes == 8:
                    _block_columns(out, d0, line, ow, kw, sw, dw)  # type: ignore[call-arg]
                    continue
                if kw == 1:
                    _copy(out, d0, line, 0, sw, ow)
                elif kw == 3 and sw == 2 and dw == 1:  # ResNet's, in one pass
                    d = np.uint64(d0)
                    for j in range(np.uint64(ow)):
                        at2 = np.uint64(2) * j
                        out[d + j] = _max(_max(line[at2], line[at2 + np.uint64(1)]),
                                          line[at2 + np.uint64(2)])
                    continue
                for kx in range(1, kw):  # the same along the line, into the output row
                    into, at = (out, d0) if kx == kw - 1 else (pairs, kx % 2 * ow)
                    if kx == 1:
                        _max2(into, at, line, 0, sw, line, dw, sw, ow)
                    else:
                        _max2(into, at, pairs, (kx - 1) % 2 * ow, 1, line, kx * dw, sw, ow)
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)


@numba.njit(types.void(flat(types.float32, True), types.int64, flat(types.float32)),
            cache=True, nogil=True, fastmath={"reassoc"})
def plane_means(x: np.ndarray, length: int, out: np.ndarray) -> None:
    """``out[p]`` = the mean of ``x[p * length:(p + 1) * length]`` (a global average pool of
    planes of ``length`` pixels), summed in float32 by vector lanes (as numpy's pairwise sum,
    in another order), then divided once. (No view a plane: a view costs two atomic
    reference counts; unsigned indices skip the wraparound check.)"""
    for p in range(out.shape[0]):
        start = np.uint64(p * length)
        total = np.float32(0.0)
        for i in range(np.uint64(length)):
            total += x[start + i]
        out[p] = total / np.float32(length)


@intrinsic
def _lane_means(typingctx: Any, x: Any, at: Any, length: Any, out: Any, to: Any) -> Any:
    """``out[to + c]`` = the mean of ``x[at + 8 i + c]`` over ``i < length``, for the 8
    lanes ``c``: one vector of sums, a load and an add a pixel."""
    sig = types.void(x, at, length, out, to)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        xp, op = (array_data(context, builder, signature, args, i).data for i in (0, 3))
        at, length, to = args[1], args[2], args[4]
        vector = ir.VectorType(ir.FloatType(), LANES)

        def step(i: Any, sums: list[Any]) -> list[Any]:
            where = builder.add(at, builder.mul(i, c64(LANES)))
            return [builder.fadd(sums[0], builder.load(vector_at(builder, xp, where),
                                                        align=4))]

        total = accumulate(builder, length, [ir.Constant(vector, None)], step)[0]
        mean = builder.fdiv(total, splat(builder, builder.sitofp(length, vector.element)))
        builder.store(mean, vector_at(builder, op, to), align=4)
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(types.void(flat(types.float32, True), types.int64, flat(types.float32)),
            cache=True, nogil=True)
def block_means(x: np.ndarray, length: int, out: np.ndarray) -> None:
    """The global average pool of blocked data (``[N, C/8, H, W, 8]``, flat): ``out[8 * p +
    c]`` = the mean over the ``length`` pixels of block ``p`` of its lane ``c``, summed in
    float32 a pixel at a time (the lanes side by side, one vector of sums:
    :func:`_lane_means`), then divided once. (Before, a view and an 8-float array a block:
    MobileNetV2's 1280 channels at 7x7 took 52-57 us.)"""
    for p in range(out.shape[0] // 8):
        _lane_means(x, p * length * 8, length, out, p * 8)  # type: ignore[call-arg]  # (typingctx)
