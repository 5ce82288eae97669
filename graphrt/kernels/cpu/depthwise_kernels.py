"""The compiled (numba) depthwise convolution: 8 channels at a time, a channel per vector
lane, as MLAS runs it in its NCHWc layout (:func:`depthwise_jobs`). Planned and run by
:mod:`graphrt.kernels.cpu.conv`; imported only where numba is installed.

Example:
    >>> import numpy as np
    >>> x = np.ones(2 * 3 * 3, np.float32)          # 2 channels, 3x3, NCHW
    >>> weights = np.ones(9 * 8, np.float32)        # 3x3 taps of 8 channels, all ones
    >>> bias = np.zeros(8, np.float32)
    >>> out = np.empty(2, np.float32)               # a 1x1 output per channel
    >>> geometry = np.array([3, 3, 1, 1, 1, 0, 0, 3, 1, 3, 0, 1], np.int64)
    >>> pixels = np.zeros(8, np.int64)
    >>> taps = np.array([(r * 3 + c) * 8 for r in range(3) for c in range(3)], np.int32)
    >>> counters, bell = np.zeros(2, np.int64), np.zeros(1, np.int64)
    >>> depthwise_jobs(x, weights, bias, out, 2, geometry, pixels, taps, out[:0], 0, out[:0],
    ...                counters, 1, bell, True, 0, 0)
    True
    >>> out.tolist()
    [9.0, 9.0]
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .job_protocol import JOBS, claim, done, finish, flat, ring
from .kernel_parts import (
    BLOCKED,
    FLOATS,
    FLOATS_IN,
    I64,
    I64_IN,
    LANES,
    accumulate,
    array_data,
    c64,
    clip_of,
    fma_of,
    from_scratch,
    interleave8,
    layouts,
    store_vector,
    transpose,
    vector_at,
)

__all__ = ["DEPTHWISE_GEOMETRY", "depthwise_jobs"]

@intrinsic
def _depthwise_tile(typingctx: Any, weights: Any, w0: Any, data: Any, pixels: Any, q0: Any,
                    taps: Any, bias: Any, b0: Any, out: Any, o0: Any, plane: Any, full: Any,
                    scratch: Any, residual: Any, flags: Any, bounds: Any) -> Any:
    """One depthwise tile: 8 output pixels of 8 channels, a vector (the 8 channels) per
    pixel. Per tap ``t`` it loads the channels' weights at ``w0 + 8 t`` and, for each pixel
    ``p``, their data at ``pixels[q0 + p] + taps[t]`` in the interleaved ``data``: one fused
    multiply-add, with the bias (``b0``) as the accumulators' start. When ``full``, they are
    stored into ``out`` from ``o0`` with the epilogue of ``flags`` (+ ``residual`` at the
    same place, relu, clip to ``bounds``): transposed, as 8 pixels of each channel (channels
    ``plane`` apart), or where ``flags`` has :data:`BLOCKED` as they are, a vector per
    pixel; else into ``scratch[8 p + c]`` as summed."""
    sig = types.void(weights, w0, data, pixels, q0, taps, bias, b0, out, o0, plane, full,
                     scratch, residual, flags, bounds)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wp, xp, pp, tp, bp, op, sp, rp, lp = (array_data(context, builder, signature, args, i).data
                                              for i in (0, 2, 3, 5, 6, 8, 12, 13, 15))
        w0, q0, b0, o0, plane, full, flags = (args[i] for i in (1, 4, 7, 9, 10, 11, 14))
        n_taps = builder.extract_value(array_data(context, builder, signature, args, 5).shape, 0)
        fma = fma_of(builder)
        bases = [builder.load(builder.gep(pp, [builder.add(q0, c64(p))]))
                 for p in range(LANES)]
        start = builder.load(vector_at(builder, bp, b0), align=4)

        def tap(t: Any, accs: list[Any]) -> list[Any]:
            weight = builder.load(vector_at(builder, wp, builder.add(w0, builder.mul(t, c64(8)))),
                                  align=4)
            offset = builder.sext(builder.load(builder.gep(tp, [t])), I64)
            return [builder.call(fma, [builder.load(vector_at(
                builder, xp, builder.add(bases[p], offset)), align=4), weight, accs[p]])
                for p in range(LANES)]

        accs = accumulate(builder, n_taps, [start] * LANES, tap)
        _store_tile(builder, accs, op, o0, plane, full, sp, rp, flags, lp)
        return context.get_dummy_value()

    return sig, codegen


def _store_tile(builder: Any, accs: list[Any], op: Any, o0: Any, plane: Any, full: Any, sp: Any,
                rp: Any, flags: Any, lp: Any) -> None:
    """Emit the store of a depthwise tile's 8 pixel vectors ``accs``: into ``out`` (``op``)
    from ``o0`` with the epilogue of ``flags`` where ``full`` (transposed into channel planes
    ``plane`` apart, or a vector per pixel where the output is blocked), else into
    ``scratch`` (``sp``) as summed."""
    scatter = builder.append_basic_block("depthwise.scatter")
    spill = builder.append_basic_block("depthwise.spill")
    end = builder.append_basic_block("depthwise.end")
    builder.cbranch(builder.icmp_signed("!=", full, ir.Constant(full.type, 0)), scatter,
                    spill)
    builder.position_at_end(scatter)
    clip, low, high = clip_of(builder, flags, lp, True)

    def store(residual: bool, relu: bool) -> None:
        for c, value in enumerate(transpose(builder, accs)):
            store_vector(builder, value, op, rp, builder.add(o0, builder.mul(plane, c64(c))),
                         residual, relu, clip, low, high)

    def blocked(residual: bool, relu: bool) -> None:
        for p, value in enumerate(accs):
            store_vector(builder, value, op, rp, builder.add(o0, c64(LANES * p)), residual,
                         relu, clip, low, high)

    layouts(builder, flags, store, blocked)
    builder.branch(end)
    builder.position_at_end(spill)
    for p in range(LANES):
        builder.store(accs[p], vector_at(builder, sp, c64(LANES * p)), align=4)
    builder.branch(end)
    builder.position_at_end(end)


def _row_tile(stride: int) -> Any:
    """The depthwise tile of 8 pixels side by side in one output row, ``stride`` columns
    apart, of a kernel 3 taps wide (dilation 1): :func:`_depthwise_tile`'s arguments and
    results, but per kernel row it loads the ``7 * stride + 3`` input vectors the 24
    multiply-adds share once each, where the general tile loads one per multiply-add (the
    loads, two per vector on a 128-bit load port, bounded it)."""
    reads = (LANES - 1) * stride + 3

    @intrinsic
    def row_tile(typingctx: Any, weights: Any, w0: Any, data: Any, pixels: Any, q0: Any,
                 taps: Any, bias: Any, b0: Any, out: Any, o0: Any, plane: Any, full: Any,
                 scratch: Any, residual: Any, flags: Any, bounds: Any) -> Any:
        sig = types.void(weights, w0, data, pixels, q0, taps, bias, b0, out, o0, plane, full,
                         scratch, residual, flags, bounds)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            wp, xp, pp, tp, bp, op, sp, rp, lp = (
                array_data(context, builder, signature, args, i).data
                for i in (0, 2, 3, 5, 6, 8, 12, 13, 15))
            w0, q0, b0, o0, plane, full, flags = (args[i] for i in (1, 4, 7, 9, 10, 11, 14))
            n_taps = builder.extract_value(
                array_data(context, builder, signature, args, 5).shape, 0)
            fma = fma_of(builder)
            corner = builder.load(builder.gep(pp, [q0]))
            start = builder.load(vector_at(builder, bp, b0), align=4)

            def kernel_row(i: Any, accs: list[Any]) -> list[Any]:
                first = builder.mul(i, c64(3))  # the row's first tap
                base = builder.add(corner, builder.sext(builder.load(builder.gep(tp, [first])),
                                                        I64))
                weight = [builder.load(vector_at(builder, wp, builder.add(
                    w0, builder.mul(builder.add(first, c64(j)), c64(LANES)))), align=4)
                    for j in range(3)]
                data = [builder.load(vector_at(builder, xp, builder.add(base, c64(LANES * m))),
                                     align=4) for m in range(reads)]
                new = list(accs)
                for j in range(3):
                    for p in range(LANES):
                        new[p] = builder.call(fma, [data[p * stride + j], weight[j], new[p]])
                return new

            rows = builder.sdiv(n_taps, c64(3))
            accs = accumulate(builder, rows, [start] * LANES, kernel_row)
            _store_tile(builder, accs, op, o0, plane, full, sp, rp, flags, lp)
            return context.get_dummy_value()

        return sig, codegen

    return row_tile


_row_tile_1, _row_tile_2 = _row_tile(1), _row_tile(2)


DEPTHWISE_GEOMETRY = 12
"""Entries of a depthwise job's geometry: height, width, out height, out width, row stride,
begin pads (per axis), padded width, output rows per band, input rows of a whole band,
whether the data is blocked (``[N, C/8, H, W, 8]``), and the column stride where the kernel
is 3 taps wide with dilation 1 and that stride is 1 or 2 (the tiles of 8 pixels in one row
then run :func:`_row_tile`), else 0."""


@numba.njit(cache=True, nogil=True)
def _interleave(x: np.ndarray, x0: int, channels: int, group: int, height: int, width: int,
                top: int, rows: int, left: int, wp: int, lanes: np.ndarray, blocked: bool
                ) -> None:
    """Input rows ``top .. top + rows - 1`` of the 8 channels of ``group`` (of the image at
    ``x0``) into ``lanes`` ``[rows, wp, 8]``: each pixel's channels side by side (as they
    are where ``x`` is ``blocked``), the data from column ``left``, zeros around it (rows
    and channels outside the image too)."""
    lead = min(left, wp)
    cols = max(0, min(width, wp - lead))
    span = wp * LANES
    kept = min(LANES, channels - group * LANES)
    plane = height * width
    for r in range(rows):
        line = lanes[r * span:(r + 1) * span]
        iy = top + r
        if iy < 0 or iy >= height:
            for j in range(span):
                line[j] = 0.0
            continue
        for j in range(lead * LANES):
            line[j] = 0.0
        for j in range((lead + cols) * LANES, span):
            line[j] = 0.0
        if blocked:  # a plain copy of the row
            at = x0 + (group * plane + iy * width) * LANES
            src = x[at:at + cols * LANES]
            body = line[lead * LANES:(lead + cols) * LANES]
            for j in range(cols * LANES):
                body[j] = src[j]
            continue
        at = x0 + group * LANES * plane + iy * width
        done_ = 0
        if kept == LANES:  # whole blocks of 8 pixels through the transpose
            done_ = cols - cols % LANES
            for j in range(0, done_, LANES):
                interleave8(x, at + j, plane, lanes, r * span + (lead + j) * LANES
                             )  # type: ignore[call-arg]  # (typingctx)
        body = line[(lead + done_) * LANES:(lead + cols) * LANES]
        for c in range(LANES):
            if c < kept:
                src = x[at + c * plane + done_:at + c * plane + cols]
                for j in range(cols - done_):
                    body[j * LANES + c] = src[j]
            else:
                for j in range(cols - done_):
                    body[j * LANES + c] = 0.0


@numba.njit(types.boolean(FLOATS_IN, FLOATS_IN, FLOATS_IN, FLOATS, types.int64, I64_IN,
                          I64_IN, flat(types.int32, True), FLOATS_IN, types.int64,
                          FLOATS_IN, *JOBS), cache=True, nogil=True)
def depthwise_jobs(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, out: np.ndarray,
                   channels: int, geometry: np.ndarray, pixels: np.ndarray, taps: np.ndarray,
                   residual: np.ndarray, flags: int, bounds: np.ndarray, counters: np.ndarray,
                   grain: int, bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """A depthwise convolution (one input channel per output channel), ``x`` ``[N, C, H, W]``
    (or blocked, ``[N, C/8, H, W, 8]``, as ``geometry`` says) into ``out`` ``[N, C, OH, OW]``
    (or blocked, as ``flags`` says: :data:`BLOCKED`), flattened, 8 channels at a time as MLAS
    runs it in its NCHWc layout: ``weights`` ``[ceil(C/8), taps, 8]`` (:func:`pack_weights`
    with block 8), ``bias`` ``[ceil(C/8) * 8]``; ``geometry`` as :data:`DEPTHWISE_GEOMETRY`.
    One job is a band of output rows of one group of 8 channels of one image (numbered
    image-major, then by band, so each thread keeps to rows of the image, see
    :func:`~graphrt.kernels.cpu.job_protocol.claim`): its input rows
    are first interleaved (8x8 transposes; a plain copy of blocked data) into a zero-padded
    buffer ``[rows, wp, 8]`` in cache, then the tiles of :func:`_depthwise_tile` run along
    the band (``pixels[q]``: offset in that buffer of output pixel ``q``'s window corner,
    padded to whole tiles; ``taps[t]``: tap ``t``'s offset from it) and store the 8
    channels' planes (or blocks) with the epilogue of ``flags``. Jobs are claimed as in
    :func:`~graphrt.kernels.cpu.direct_conv.conv_jobs` (whose last six arguments these are)."""
    if caller:
        ring(bell)
    height, width, oh, ow, sh, ph, pw, wp, band, band_in, blocked_in, row = \
        geometry[:DEPTHWISE_GEOMETRY]
    blocked = flags & BLOCKED
    groups = (channels + LANES - 1) // LANES
    bands = (oh + band - 1) // band
    total = out.shape[0] // (channels * oh * ow) * groups * bands
    n_taps = taps.shape[0]
    lanes = np.zeros(band_in * wp * LANES, np.float32)
    scratch = np.empty(LANES * LANES, np.float32)
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        for job in range(first, last):
            img, rest = divmod(job, groups * bands)
            b, group = divmod(rest, groups)
            rows = min(band, oh - b * band)
            count = rows * ow
            kept = min(LANES, channels - group * LANES)
            _interleave(x, img * channels * height * width, channels, group, height, width,
                        b * band * sh - ph, band_in - (band - rows) * sh, pw, wp, lanes,
                        blocked_in != 0)
            step = LANES if blocked else 1  # an output pixel's stride
            o0 = (img * channels + group * LANES) * oh * ow + b * band * ow * step
            column = 0  # of pixel q in its output row
            for q in range(0, count, LANES):
                full = kept == LANES and q + LANES <= count
                if full and row == 1 and column + LANES <= ow:
                    _row_tile_1(weights, group * n_taps * LANES, lanes, pixels, q, taps, bias,
                                group * LANES, out, o0 + q * step, oh * ow, full, scratch,
                                residual, flags, bounds)
                elif full and row == 2 and column + LANES <= ow:
                    _row_tile_2(weights, group * n_taps * LANES, lanes, pixels, q, taps, bias,
                                group * LANES, out, o0 + q * step, oh * ow, full, scratch,
                                residual, flags, bounds)
                else:
                    _depthwise_tile(weights, group * n_taps * LANES, lanes, pixels, q, taps,
                                    bias, group * LANES, out, o0 + q * step, oh * ow, full,
                                    scratch, residual, flags, bounds)  # type: ignore[call-arg]
                column += LANES
                while column >= ow:
                    column -= ow
                if not full:
                    from_scratch(out, o0 + q * step, oh * ow, scratch, kept,
                                  min(LANES, count - q), 1, LANES, residual, flags, bounds)
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)
