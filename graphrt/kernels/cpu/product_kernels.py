"""Compiled (numba) matrix products by a weight packed 16 columns at a time: the panel
micro-kernel (6 rows x 16 columns, :func:`panel`, which the pointwise convolution shares;
6 or 12 rows x 32 columns on AVX-512, :func:`wide_panel` and :func:`tall_panel`),
the job function of products of many rows (:func:`dense_jobs`), of few rows
(:func:`row_jobs`, a matrix-vector product per row) and of stacks of products of two
activations (:func:`batch_jobs`, attention's). :mod:`graphrt.kernels.cpu.dense` and
:mod:`graphrt.kernels.cpu.batch_product` run them; imported only where numba is installed.

Example:
    >>> import numpy as np
    >>> x = np.ones(4, np.float32)                  # one row of 4
    >>> columns = np.zeros(5 * 16, np.float32)      # 16 columns of 4 steps, then the bias
    >>> columns[:64:16] = 1.0                       # column 0 sums the row
    >>> columns[64 + 1] = 7.0                       # column 1 is its bias
    >>> out = np.empty(2, np.float32)
    >>> counters, bell = np.zeros(2, np.int64), np.zeros(1, np.int64)
    >>> row_jobs(x, 1, 4, columns, 2, out, out[:0], 0, out[:0], counters, 1, bell, True, 0, 0)
    True
    >>> out.tolist()
    [4.0, 7.0]
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .job_protocol import JOBS, claim, done, finish, ring
from .kernel_parts import (
    FLOATS,
    FLOATS_IN,
    RESIDUAL,
    V8,
    WIDE,
    accumulate,
    array_data,
    c64,
    clip_of,
    fma_of,
    from_scratch,
    prefetch,
    splat,
    store_vector,
    stores,
    vector_at,
)

__all__ = ["PAIR", "PANELS", "ROWS", "SPAN", "batch_jobs", "dense_jobs", "panel", "row_jobs",
           "strided_panel", "tall_panel", "wide_panel"]

ROWS = 6
"""Output channels of one pointwise tile (a broadcast weight each)."""
SPAN = 16
"""Pixels of one pointwise tile (two vectors of the data and of the output)."""
PAIR = 2 if WIDE else 1
"""Packed panels of 16 columns one tile of a product covers: two on AVX-512
(:func:`wide_panel`), one on AVX2 (:func:`strided_panel`)."""
def _tile_codegen(strided: bool, wide: bool = False, height: int = ROWS,
                  unit: bool = False) -> Any:
    """The code of :func:`panel`, with ``strided`` of :func:`strided_panel` (whose
    arguments 2 and 3 are the broadcast operand's step and row strides, and whose bias is
    a vector of 16 columns), with ``wide`` too of :func:`wide_panel` (two panels of 16
    columns, ``xpanel`` and ``bpanel`` apart, a sixteen-wide vector each), over ``height``
    rows, and with ``unit`` of :func:`tall_panel` (no ``wstep``: 1, and 4 steps a turn)."""
    names = ["weights", "w0", *(("wrow",) if unit else ("wstep", "wrow") if strided else ()),
             "depth", "x", "x0",
             "xplane", *(("xpanel",) if wide else ()), "bias", "b0",
             *(("bpanel",) if wide else ()), "out", "o0", "oplane", "residual", "flags",
             "bounds"]
    at = {name: i for i, name in enumerate(names)}
    lanes = 16 if wide else 8

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wp, xp, bp, op, rp, lp = (array_data(context, builder, signature, args, at[name]).data
                                  for name in ("weights", "x", "bias", "out", "residual",
                                               "bounds"))
        w0, depth, x0, xplane, b0, o0, oplane, flags = (
            args[at[name]] for name in ("w0", "depth", "x0", "xplane", "b0", "o0", "oplane",
                                        "flags"))
        wstep, wrow = ((c64(1), args[at["wrow"]]) if unit else
                       (args[at["wstep"]], args[at["wrow"]]) if strided else (c64(ROWS), c64(1)))
        # where the two vectors of a row's data, bias and output lie
        xs = [builder.mul(args[at["xpanel"]], c64(h)) if wide else c64(8 * h) for h in range(2)]
        bs = [builder.mul(args[at["bpanel"]], c64(h)) if wide else c64(8 * h) for h in range(2)]
        fma = fma_of(builder, lanes)
        if strided:  # a bias per column, the same for every row
            columns = [builder.load(vector_at(builder, bp, builder.add(b0, bs[h]), lanes),
                                    align=4) for h in range(2)]
            starts = [columns[h] for _ in range(height) for h in range(2)]
        else:  # a bias per row
            starts = [splat(builder, builder.load(builder.gep(bp, [builder.add(b0, c64(r))])))
                      for r in range(height) for _ in range(2)]
        rows = [builder.add(w0, builder.mul(wrow, c64(r))) for r in range(height)]

        def channel(t: Any, accs: list[Any]) -> list[Any]:
            xi = builder.add(x0, builder.mul(t, xplane))
            data = [builder.load(vector_at(builder, xp, builder.add(xi, xs[h]), lanes), align=4)
                    for h in range(2)]
            wi = builder.mul(t, wstep)
            new: list[Any] = []
            for r in range(height):
                weight = splat(builder, builder.load(builder.gep(wp, [builder.add(rows[r],
                                                                                   wi)])), lanes)
                new.extend(builder.call(fma, [weight, data[h], accs[2 * r + h]])
                           for h in range(2))
            return new

        accs = accumulate(builder, depth, starts, channel, 4 if unit else 1)
        clip, low, high = clip_of(builder, flags, lp, True, lanes)

        def store(residual: bool, relu: bool) -> None:
            for r in range(height):
                for h in range(2):
                    index = builder.add(o0, builder.add(builder.mul(oplane, c64(r)),
                                                        c64(lanes * h)))
                    store_vector(builder, accs[2 * r + h], op, rp, index, residual, relu, clip,
                                 low, high)

        stores(builder, flags, store)
        return context.get_dummy_value()

    return codegen


@intrinsic
def panel(typingctx: Any, weights: Any, w0: Any, depth: Any, x: Any, x0: Any, xplane: Any,
          bias: Any, b0: Any, out: Any, o0: Any, oplane: Any, residual: Any, flags: Any,
          bounds: Any) -> Any:
    """One pointwise tile: output channels ``b0 .. b0+5`` (weights ``[depth, 6]`` from
    ``w0``) of the 16 pixels from ``x0`` (``depth`` input channels ``xplane`` apart), stored
    as two vectors per channel into ``out`` from ``o0`` (channels ``oplane`` apart) with the
    epilogue of ``flags`` (+ ``residual`` at the same place, relu, clip to ``bounds``)."""
    return types.void(weights, w0, depth, x, x0, xplane, bias, b0, out, o0, oplane, residual,
                      flags, bounds), _tile_codegen(False)


@intrinsic
def strided_panel(typingctx: Any, weights: Any, w0: Any, wstep: Any, wrow: Any, depth: Any,
                  x: Any, x0: Any, xplane: Any, bias: Any, b0: Any, out: Any, o0: Any,
                  oplane: Any, residual: Any, flags: Any, bounds: Any) -> Any:
    """:func:`panel` with row ``r``'s weight of step ``t`` at
    ``weights[w0 + t * wstep + r * wrow]`` (6 rows of a matrix read in place: ``wstep`` 1,
    ``wrow`` its row length), and ``bias[b0 .. b0+15]`` a bias per column (of the 16)."""
    return types.void(weights, w0, wstep, wrow, depth, x, x0, xplane, bias, b0, out, o0,
                      oplane, residual, flags, bounds), _tile_codegen(True)


@intrinsic
def wide_panel(typingctx: Any, weights: Any, w0: Any, wstep: Any, wrow: Any, depth: Any,
               x: Any, x0: Any, xplane: Any, xpanel: Any, bias: Any, b0: Any, bpanel: Any,
               out: Any, o0: Any, oplane: Any, residual: Any, flags: Any, bounds: Any) -> Any:
    """:func:`strided_panel` over two panels of 16 columns at once, for AVX-512
    (:data:`~graphrt.kernels.cpu.kernel_parts.WIDE`): the second panel's steps ``xpanel``
    floats after the first's, its bias ``bpanel`` after, its 16 columns of ``out`` stored
    after the first's 16; a sixteen-wide vector a panel, so 12 accumulators hold 6 rows x
    32 columns."""
    return types.void(weights, w0, wstep, wrow, depth, x, x0, xplane, xpanel, bias, b0,
                      bpanel, out, o0, oplane, residual, flags, bounds), _tile_codegen(True, True)


@intrinsic
def tall_panel(typingctx: Any, weights: Any, w0: Any, wrow: Any, depth: Any, x: Any, x0: Any,
               xplane: Any, xpanel: Any, bias: Any, b0: Any, bpanel: Any, out: Any, o0: Any,
               oplane: Any, residual: Any, flags: Any, bounds: Any) -> Any:
    """:func:`wide_panel` over 12 rows read in place (``wstep`` 1): 24 accumulators hold
    12 rows x 32 columns, so the two vectors of packed columns a step loads serve twice the
    rows, and its loop takes 4 steps a turn, where each row's address is then one register
    plus a constant (without it, the 12 rows' addresses were summed anew each step, on
    the ports the multiply-adds need)."""
    return types.void(weights, w0, wrow, depth, x, x0, xplane, xpanel, bias, b0, bpanel, out,
                      o0, oplane, residual, flags, bounds), _tile_codegen(True, True,
                                                                           2 * ROWS, True)


@intrinsic
def _row_panel(typingctx: Any, x: Any, x0: Any, depth: Any, columns: Any, c0: Any, out: Any,
               o0: Any, residual: Any, flags: Any, bounds: Any) -> Any:
    """One row of a matrix-vector product by 16 packed columns: ``x[x0 .. x0+depth-1]``
    times the panel ``columns[c0 ..]`` (``[depth + 1, 16]``, its last step the bias), two
    steps at a time into four accumulators (two chains of fused multiply-adds each, so
    their latency overlaps), stored as two vectors into ``out`` from ``o0`` with the
    epilogue of ``flags`` (+ ``residual`` at the same place, relu, clip to ``bounds``)."""
    sig = types.void(x, x0, depth, columns, c0, out, o0, residual, flags, bounds)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        xp, cp, op, rp, lp = (array_data(context, builder, signature, args, i).data
                              for i in (0, 3, 5, 7, 9))
        x0, depth, c0, o0, flags = (args[i] for i in (1, 2, 4, 6, 8))
        fma = fma_of(builder)

        def column(t: Any, h: int) -> Any:
            at = builder.add(c0, builder.add(builder.mul(t, c64(SPAN)), c64(8 * h)))
            return builder.load(vector_at(builder, cp, at), align=4)

        def steps(first: Any, accs: list[Any]) -> list[Any]:
            new = list(accs)
            for s in range(len(accs) // 2):
                t = builder.add(first, c64(s))
                value = splat(builder, builder.load(builder.gep(xp, [builder.add(x0, t)])))
                for h in range(2):
                    new[2 * s + h] = builder.call(fma, [value, column(t, h), accs[2 * s + h]])
            return new

        zero = ir.Constant(V8, None)
        pairs = builder.sdiv(depth, c64(2))
        bias = [column(depth, h) for h in range(2)]
        accs = accumulate(builder, pairs, [*bias, zero, zero],
                           lambda i, a: steps(builder.mul(i, c64(2)), a))
        accs = accumulate(builder, builder.sub(depth, builder.mul(pairs, c64(2))),
                           [builder.fadd(accs[h], accs[2 + h]) for h in range(2)],
                           lambda i, a: steps(builder.add(builder.mul(pairs, c64(2)), i), a))
        clip, low, high = clip_of(builder, flags, lp, True)

        def store(residual: bool, relu: bool) -> None:
            for h in range(2):
                index = builder.add(o0, c64(8 * h))
                store_vector(builder, accs[h], op, rp, index, residual, relu, clip, low,
                             high)

        stores(builder, flags, store)
        return context.get_dummy_value()

    return sig, codegen


PANELS = 4
"""Packed panels of 16 columns one matrix-vector step runs side by side
(:func:`_row_panels`)."""


@intrinsic
def _row_panels(typingctx: Any, x: Any, x0: Any, depth: Any, columns: Any, c0: Any,
                stride: Any, out: Any, o0: Any, residual: Any, flags: Any, bounds: Any) -> Any:
    """:func:`_row_panel` over :data:`PANELS` whole panels at once (``columns[c0 ..]``,
    ``stride`` floats apart; their 64 columns stored from ``o0``): each step broadcasts the
    row's value once for 8 chains of fused multiply-adds, and reads 4 streams of the weight
    where one panel read one (one stream a thread held a 1024 x 1024 matrix-vector product
    to half of OpenBLAS's speed)."""
    sig = types.void(x, x0, depth, columns, c0, stride, out, o0, residual, flags, bounds)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        xp, cp, op, rp, lp = (array_data(context, builder, signature, args, i).data
                              for i in (0, 3, 6, 8, 10))
        x0, depth, c0, stride, o0, flags = (args[i] for i in (1, 2, 4, 5, 7, 9))
        fma = fma_of(builder)
        starts = [builder.add(c0, builder.mul(stride, c64(p))) for p in range(PANELS)]

        def column(t: Any, p: int, h: int) -> Any:
            at = builder.add(starts[p], builder.add(builder.mul(t, c64(SPAN)), c64(8 * h)))
            return builder.load(vector_at(builder, cp, at), align=4)

        def step(t: Any, accs: list[Any]) -> list[Any]:
            value = splat(builder, builder.load(builder.gep(xp, [builder.add(x0, t)])))
            return [builder.call(fma, [value, column(t, p, h), accs[2 * p + h]])
                    for p in range(PANELS) for h in range(2)]

        bias = [column(depth, p, h) for p in range(PANELS) for h in range(2)]
        accs = accumulate(builder, depth, bias, step)
        clip, low, high = clip_of(builder, flags, lp, True)

        def store(residual: bool, relu: bool) -> None:
            for i, acc in enumerate(accs):
                store_vector(builder, acc, op, rp, builder.add(o0, c64(8 * i)), residual,
                             relu, clip, low, high)

        stores(builder, flags, store)
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(types.boolean(FLOATS_IN, types.int64, types.int64, FLOATS_IN, types.int64,
                          FLOATS, FLOATS_IN, types.int64, FLOATS_IN, *JOBS), cache=True,
            nogil=True)
def row_jobs(x: np.ndarray, m: int, depth: int, columns: np.ndarray, n: int, out: np.ndarray,
             residual: np.ndarray, flags: int, bounds: np.ndarray, counters: np.ndarray,
             grain: int, bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """A product of few rows ``out`` ``[m, n]`` = ``x`` ``[m, depth]`` by columns packed 16
    at a time (``[ceil(n/16), depth + 1, 16]``, the bias the last step; as for
    :func:`dense_jobs`), flattened, a matrix-vector product per row: each job is
    :data:`PANELS` panels of 16 columns (:func:`_row_panels`; the last ones, fewer or
    short of columns, one at a time, :func:`_row_panel`), run for every row while they are
    in cache, so the weight is read once whatever ``m``; the data is read in place. Jobs
    are claimed as in :func:`~graphrt.kernels.cpu.direct_conv.conv_jobs` (whose last six
    arguments these are); the last panel, short of columns, is stored through a scratch
    row."""
    if caller:
        ring(bell)
    tiles = (n + SPAN - 1) // SPAN
    whole = n // SPAN  # panels of 16 columns
    groups = (tiles + PANELS - 1) // PANELS
    stride = (depth + 1) * SPAN
    scratch = np.empty(SPAN, np.float32)
    nothing = scratch[:0]
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, groups, caller)
        if first >= last:
            break
        for group in range(first, last):
            t0 = group * PANELS
            if t0 + PANELS <= whole:
                for r in range(m):
                    _row_panels(x, r * depth, depth, columns, t0 * stride, stride, out,
                                r * n + t0 * SPAN, residual, flags,
                                bounds)  # type: ignore[call-arg]  # (typingctx)
                continue
            for tile in range(t0, min(tiles, t0 + PANELS)):
                c0 = tile * stride
                count = min(SPAN, n - tile * SPAN)
                for r in range(m):
                    o0 = r * n + tile * SPAN
                    if count == SPAN:
                        _row_panel(x, r * depth, depth, columns, c0, out, o0, residual,
                                   flags, bounds)  # type: ignore[call-arg]
                        continue
                    _row_panel(x, r * depth, depth, columns, c0, scratch, 0, nothing, 0,
                               bounds)  # type: ignore[call-arg]
                    from_scratch(out, o0, n, scratch, 1, count, 0, 1, residual, flags,
                                 bounds)
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, groups, bell, caller, call, spins)


@numba.njit(cache=True, nogil=True)
def _short_tile(a: np.ndarray, w0: int, k: int, height: int, x: np.ndarray, x0: int,
                plane: int, bias: np.ndarray, b0: int, out: np.ndarray, o0: int, n: int,
                count: int, residual: np.ndarray, flags: int, bounds: np.ndarray,
                scratch: np.ndarray, lines: np.ndarray) -> None:
    """A tile short of rows or columns: ``height`` rows of ``a`` (``k`` long, from ``w0``)
    by the panel at ``x[x0]`` (steps ``plane`` apart) from the bias ``bias[b0]``, into
    ``scratch``, then its ``count`` columns stored into ``out`` from ``o0`` (rows ``n``
    apart) with the epilogue of ``flags``. Fewer than 6 rows run as the 6 that end with
    them, read in place (the first ones, before ``w0``, computed and dropped), or where
    ``a`` has fewer rows before them, copied into ``lines``, padded (zeroing and copying
    the lines for every panel took a tenth of a 64 x 1024 by 1024 x 1024 product). (The
    whole tiles call :func:`strided_panel` where they are: a helper on their path cost
    the stack of 32 128 x 64 x 128 products 40%.)"""
    nothing = scratch[:0]
    short = ROWS - height
    if short == 0 or w0 >= short * k:
        strided_panel(a, w0 - short * k, 1, k, k, x, x0, plane, bias, b0, scratch, 0, SPAN,
                      nothing, 0, bounds)  # type: ignore[call-arg]  # (typingctx)
        from_scratch(out, o0, n, scratch[short * SPAN:], height, count, SPAN, 1, residual,
                     flags, bounds)
        return
    lines[:] = 0.0
    lines[:height * k] = a[w0:w0 + height * k]
    strided_panel(lines, 0, 1, k, k, x, x0, plane, bias, b0, scratch, 0, SPAN, nothing, 0,
                  bounds)  # type: ignore[call-arg]
    from_scratch(out, o0, n, scratch, height, count, SPAN, 1, residual, flags, bounds)


TALL_DEPTH = 256
"""Depth above which a product's full rows run as :func:`tall_panel` tiles (12 rows) on
AVX-512: 4-12% faster from 384 steps (512 x 512 by 512: 0.88-0.96x the 6-row tiles' time),
level at 256, and 4-14% slower at 64, where the tile's start and stores weigh more."""


@numba.njit(types.boolean(FLOATS_IN, types.int64, FLOATS_IN, types.int64, types.int64,
                          FLOATS, FLOATS_IN, types.int64, FLOATS_IN, types.int64, *JOBS),
            cache=True, nogil=True)
def dense_jobs(x: np.ndarray, depth: int, columns: np.ndarray, m: int, n: int,
               out: np.ndarray, residual: np.ndarray, flags: int, bounds: np.ndarray,
               chunk: int, counters: np.ndarray, grain: int, bell: np.ndarray, caller: bool,
               call: int, spins: int) -> bool:
    """A matrix product ``out`` ``[m, n]`` = ``x`` ``[m, depth]`` @ the columns packed 16 at
    a time (``[ceil(n/16), depth + 1, 16]``, the bias the last step, zeros past ``n``), all
    flattened, on the micro-kernel (:func:`wide_panel` on AVX-512, else
    :func:`strided_panel`): ``x`` read in place, 6 rows at a time, on AVX-512 12 (pairs of
    a job's full blocks, :func:`tall_panel`) where ``depth`` passes :data:`TALL_DEPTH` (a
    last block short of rows copied out, padded with zeros, or on AVX-512 run as the 6 rows
    that end with it, through a scratch tile). Jobs are :data:`PAIR` 16-column panels by
    ``chunk`` blocks of 6 rows (the panels stay in cache over them),
    claimed as in :func:`~graphrt.kernels.cpu.direct_conv.conv_jobs` (whose last six
    arguments these are); a tile short of rows or columns is stored through a scratch
    tile. With a residual, each tile asks for the next one's lines of it
    (:func:`~graphrt.kernels.cpu.kernel_parts.prefetch`)."""
    if caller:
        ring(bell)
    blocks = (m + ROWS - 1) // ROWS
    chunks = (blocks + chunk - 1) // chunk
    tiles = (n + SPAN - 1) // SPAN
    groups = (tiles + PAIR - 1) // PAIR  # of PAIR panels, a job's columns
    total = groups * chunks
    stride = (depth + 1) * SPAN
    scratch = np.empty(ROWS * SPAN, np.float32)
    wide = np.empty(ROWS * SPAN * PAIR, np.float32)
    nothing = wide[:0]
    lines = np.empty(ROWS * depth, np.float32)
    summed = flags & RESIDUAL != 0
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        for job in range(first, last):
            group = job % groups
            part = job // groups
            left = group * PAIR * SPAN  # the job's first column
            width = min(PAIR * SPAN, n - left)
            c0 = group * PAIR * stride
            bottom = min(blocks, (part + 1) * chunk)
            start = part * chunk
            if PAIR == 2 and width == 2 * SPAN and depth > TALL_DEPTH:
                pairs = max(0, min(bottom, m // ROWS) - start) // 2  # of full blocks
                for pair in range(pairs):
                    top = (start + 2 * pair) * ROWS
                    tall_panel(x, top * depth, depth, depth, columns, c0, SPAN, stride,
                               columns, c0 + depth * SPAN, stride, out, top * n + left, n,
                               residual, flags, bounds)  # type: ignore[call-arg]
                start += 2 * pairs
            for block in range(start, bottom):
                if summed and block + 1 < bottom:  # the next tile's residual, while this sums
                    for row in range((block + 1) * ROWS, min(m, (block + 2) * ROWS)):
                        for column in range(left, left + width, SPAN):
                            prefetch(residual, row * n + column)  # type: ignore[call-arg]
                height = min(ROWS, m - block * ROWS)
                o0 = block * ROWS * n + left
                w0 = block * ROWS * depth
                short = ROWS - height
                if PAIR == 2 and width == 2 * SPAN and short == 0:
                    wide_panel(x, w0, 1, depth, depth, columns, c0, SPAN, stride, columns,
                               c0 + depth * SPAN, stride, out, o0, n, residual, flags,
                               bounds)  # type: ignore[call-arg]  # (typingctx)
                    continue
                if PAIR == 2 and width == 2 * SPAN and w0 >= short * depth:
                    # the 6 rows that end with the last ones, read in place, through a
                    # scratch tile (the first ones computed and dropped)
                    wide_panel(x, w0 - short * depth, 1, depth, depth, columns, c0, SPAN,
                               stride, columns, c0 + depth * SPAN, stride, wide, 0,
                               2 * SPAN, nothing, 0, bounds)  # type: ignore[call-arg]
                    from_scratch(out, o0, n, wide[short * 2 * SPAN:], height, 2 * SPAN,
                                 2 * SPAN, 1, residual, flags, bounds)
                    continue
                for tile in range(PAIR * group, min(tiles, PAIR * (group + 1))):
                    t0 = tile * stride
                    count = min(SPAN, n - tile * SPAN)
                    at = block * ROWS * n + tile * SPAN
                    if count == SPAN and height == ROWS:
                        strided_panel(x, w0, 1, depth, depth, columns, t0, SPAN, columns,
                                      t0 + depth * SPAN, out, at, n, residual, flags,
                                      bounds)  # type: ignore[call-arg]
                    else:
                        _short_tile(x, w0, depth, height, columns, t0, SPAN, columns,
                                    t0 + depth * SPAN, out, at, n, count, residual, flags,
                                    bounds, scratch, lines)
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)


@numba.njit(types.boolean(FLOATS_IN, FLOATS_IN, types.int64, types.int64, types.int64,
                          types.int64, FLOATS, FLOATS_IN, FLOATS_IN, types.int64, FLOATS_IN,
                          types.int64, *JOBS), cache=True, nogil=True)
def batch_jobs(a: np.ndarray, b: np.ndarray, batches: int, m: int, k: int, n: int,
               out: np.ndarray, zeros: np.ndarray, residual: np.ndarray, flags: int,
               bounds: np.ndarray, chunk: int, counters: np.ndarray, grain: int,
               bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """A stack of ``batches`` products ``out[i]`` ``[m, n]`` = ``a[i]`` ``[m, k]`` @ ``b[i]``
    ``[k, n]``, all C-contiguous and flattened, on the micro-kernel
    (:func:`strided_panel`), with the epilogue of ``flags`` (+ ``residual`` of ``out``'s
    shape, relu, clip to ``bounds``); ``zeros`` holds 16 zeros (the micro-kernel's bias).
    Both operands are read in place: 6 rows of ``a`` at a time by each 16-column panel of
    ``b`` (rows ``n`` apart); a last block short of rows and a last panel short of columns
    are copied out, padded with zeros, and stored through a scratch tile. A job is one
    matrix's ``chunk`` blocks of 6 rows, claimed as in
    :func:`~graphrt.kernels.cpu.direct_conv.conv_jobs` (whose last six arguments these
    are)."""
    if caller:
        ring(bell)
    blocks = (m + ROWS - 1) // ROWS
    chunks = (blocks + chunk - 1) // chunk
    tiles = (n + SPAN - 1) // SPAN
    total = batches * chunks
    scratch = np.empty(ROWS * SPAN, np.float32)
    columns = np.empty(k * SPAN, np.float32)
    lines = np.empty(ROWS * k, np.float32)
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        for job in range(first, last):
            matrix, part = job // chunks, job % chunks
            top, bottom = part * chunk, min(blocks, (part + 1) * chunk)
            for tile in range(tiles):
                count = min(SPAN, n - tile * SPAN)
                x, x0, plane = b, matrix * k * n + tile * SPAN, n
                if count < SPAN:  # a copy, padded: b's rows end here
                    columns[:] = 0.0
                    for t in range(k):
                        columns[t * SPAN:t * SPAN + count] = b[x0 + t * n:x0 + t * n + count]
                    x, x0, plane = columns, 0, SPAN
                for block in range(top, bottom):
                    height = min(ROWS, m - block * ROWS)
                    o0 = matrix * m * n + block * ROWS * n + tile * SPAN
                    w0 = matrix * m * k + block * ROWS * k
                    if count == SPAN and height == ROWS:
                        strided_panel(a, w0, 1, k, k, x, x0, plane, zeros, 0, out, o0, n,
                                      residual, flags,
                                      bounds)  # type: ignore[call-arg]  # (typingctx)
                    else:
                        _short_tile(a, w0, k, height, x, x0, plane, zeros, 0, out, o0, n,
                                    count, residual, flags, bounds, scratch, lines)
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)
