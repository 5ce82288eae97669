"""Compiled (numba) direct 2-D convolution of float32 on the host: no im2col, no GEMM.

Imported only through :func:`graphrt.kernels.cpu.jit.direct_conv`, which falls back to the
im2col + GEMM path where numba is missing. The micro-kernel (:func:`_tile`, LLVM IR emitted
through a numba intrinsic) keeps 16 output channels x 6 output pixels in 12 eight-wide
accumulators: per tap (input channel and kernel offset) it loads 16 weights (two vectors of
the packed weight) and broadcasts the input value of each of the 6 pixels, 12 fused
multiply-adds, with the bias as the accumulators' start. The 6 pixels run along the output
in row-major order across row ends (each has its own base address into the padded input), so
no lanes are wasted at the end of a row; tiles at the end of the image or the channels go
through a scratch tile. A 1x1 convolution without padding runs a second micro-kernel
(:func:`~graphrt.kernels.cpu.product_kernels.panel`, :func:`pointwise_jobs`): 6 output
channels x 16 contiguous pixels, two vectors of the data and a broadcast weight per input
channel. Both apply the epilogue (:data:`RESIDUAL`: add a residual shaped as the output;
:data:`RELU`; :data:`CLIP`) to the accumulators as they store them, into NCHW or, where
the flags say :data:`BLOCKED`, into ``[N, O/8, OH, OW, 8]`` (a vector per pixel and 8
channels). This module is the one :mod:`~graphrt.kernels.cpu.jit` loads: it also holds the
depthwise convolution's and the matrix products' job functions, from
:mod:`~graphrt.kernels.cpu.depthwise_kernels` and :mod:`~graphrt.kernels.cpu.product_kernels`.

Shapes: the kernel reads the padded data ``[N, C, Hp, Wp]`` (or ``[N, C/8, Hp, Wp, 8]``:
:data:`PADDING`) flattened (or the data itself where no padding is needed); ``pixels[q]`` is
the offset in one padded image of output pixel
``q``'s window corner (padded to whole tiles); ``taps[t]`` the offset of tap ``t`` (channel,
kernel row, kernel column) from it; ``weights`` ``[ceil(O/16), T, 16]`` the weight packed 16
output channels at a time (zeros past ``O``); ``bias`` ``[ceil(O/16) * 16]``; ``out`` the
NCHW output flattened.

Example:
    >>> import numpy as np
    >>> x = np.arange(9, dtype=np.float32)             # one 3x3 image, one channel
    >>> w = pack_weights(np.ones((1, 1, 2, 2), np.float32))
    >>> bias = np.zeros(16, np.float32)
    >>> pixels = np.array([0, 1, 3, 4, 4, 4], np.int64)  # the 2x2 output, then padding
    >>> taps = np.array([0, 1, 3, 4], np.int32)
    >>> out = np.empty(4, np.float32)
    >>> in_place = np.zeros(PADDING, np.int64)        # no padding: read x itself
    >>> counters, bell = np.zeros(4, np.int64), np.zeros(1, np.int64)
    >>> conv_jobs(x, in_place, out[:0], 9, pixels, 4, taps, w, bias, out, 1, out[:0], 0,
    ...           out[:0], 1, 4, counters, 1, bell, True, 0, 0)
    True
    >>> out.tolist()
    [8.0, 12.0, 20.0, 24.0]
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .depthwise_kernels import DEPTHWISE_GEOMETRY, depthwise_jobs
from .job_protocol import COUNTERS, GUIDED, JOBS, claim, done, finish, flat, ring, wait
from .kernel_parts import (
    BLOCKED,
    CLIP,
    FLOATS,
    FLOATS_IN,
    GROUPED,
    I32,
    I64,
    I64_IN,
    LANES,
    RELU,
    RESIDUAL,
    WIDE,
    accumulate,
    array_data,
    c64,
    clip_of,
    copy_at,
    fill_at,
    finished,
    fma_of,
    from_scratch,
    interleave8,
    layouts,
    next_tile,
    spill_tile,
    splat,
    store_vector,
    tile_at,
    vector_at,
)
from .product_kernels import PAIR, ROWS, SPAN, batch_jobs, dense_jobs, panel, row_jobs

__all__ = ["BLOCKED", "CHANNELS", "CLIP", "DEPTHWISE_GEOMETRY", "GROUPED", "GUIDED",
           "JOB_CHANNELS", "LANES", "PADDING", "PAIR", "PIXELS", "RELU", "RESIDUAL", "ROWS", "SPAN",
           "batch_jobs", "conv_jobs", "dense_jobs", "depthwise_jobs", "pack_weights",
           "pointwise_jobs", "row_jobs"]

CHANNELS = 16
"""Output channels of one tile (two AVX vectors of float32)."""
JOB_CHANNELS = CHANNELS * (4 if WIDE else 1)
"""Output channels of one job of :func:`conv_jobs`: 64 on AVX-512 (a tile of four blocks of
16, :data:`_wide_tile4`, where the weight has them, as MLAS's AVX-512 kernel holds 4 filter
blocks: 24 accumulators; then a tile of two, :data:`_wide_tile`), else one block of 16. Tiles
of four against tiles of two, two processes alternating: ResNet-50 at batch 1 0.94-0.97x as
long, MobileNetV2 0.95x, ResNet-18 level. Only where the taps are grouped (a blocked plan's):
a tap at a time, as a stem's 3 input channels run, the tile of four took ResNet's 7x7 stem
2.25 ms, the tile of two 1.69 ms (ONNX Runtime: 1.25 ms; ResNet-18 at batch 1 new / old
0.994, old / new 1.039)."""
PIXELS = 6
"""Output pixels of one tile: 6 x 2 accumulators + 2 weight vectors + 1 broadcast fit the 16
vector registers of AVX2."""
def pack_weights(weight: np.ndarray, block: int = CHANNELS) -> np.ndarray:
    """``weight`` ``[O, ...]`` (``[O, C, kh, kw]``, or its taps in another order) as
    ``[ceil(O/block), taps, block]`` float32 (zeros past ``O``), flattened: for
    :func:`conv_jobs` (``block`` :data:`CHANNELS`) or :func:`pointwise_jobs`
    (:data:`ROWS`)."""
    o = weight.shape[0]
    blocks = -(-o // block)
    rows = np.zeros((blocks * block, weight[0].size), np.float32)
    rows[:o] = weight.reshape(o, -1)
    packed: np.ndarray = rows.reshape(blocks, block, -1).transpose(0, 2, 1).ravel()
    return packed


def _tile_of(vectors: int, grouped: bool = False, width: int = PIXELS, wide: bool = False
             ) -> Any:
    """The direct tile of ``vectors`` (2, or 1 for the last 8 channels of a weight) vectors
    of 8 output channels x ``width`` pixels (see :data:`_tile`); ``grouped``: its taps run
    in groups of 8 offsets one apart (:data:`GROUPED`; their count a multiple of 8);
    ``wide``: two blocks of 16 channels in two sixteen-wide vectors, for AVX-512 (see
    :data:`_wide_tile`)."""
    lanes = 16 if wide else 8

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wp, xp, pp, tp, bp, op, sp, rp, lp = (
            array_data(context, builder, signature, args, i).data
            for i in (0, 2, 4, 6, 7, 9, 12, 14, 16))
        w0, x0, q0, b0, o0, plane, halves, flags = (args[i]
                                                    for i in (1, 3, 5, 8, 10, 11, 13, 15))
        # where a tap's vector h of weights lies: the next 8 of 16, or the next block's 16
        ws = [builder.mul(args[17], c64(h)) if wide else c64(8 * h) for h in range(vectors)]
        n_taps = builder.extract_value(
            array_data(context, builder, signature, args, 6).shape, 0)
        fma = fma_of(builder, lanes)
        bases = [builder.add(x0, builder.load(builder.gep(pp, [builder.add(q0, c64(p))])))
                 for p in range(width)]
        start = [builder.load(vector_at(builder, bp, builder.add(b0, c64(lanes * h)), lanes),
                              align=4) for h in range(vectors)]

        def tap(t: Any, at: list[Any], lane: int, accs: list[Any]) -> list[Any]:
            """Tap ``t``, its pixels' data at ``at`` plus ``lane``."""
            wi = builder.add(w0, builder.mul(t, c64(CHANNELS)))
            w = [builder.load(vector_at(builder, wp, builder.add(wi, ws[h]), lanes), align=4)
                 for h in range(vectors)]
            new: list[Any] = []
            for p in range(width):
                value = builder.load(builder.gep(xp, [builder.add(at[p], c64(lane))]))
                broadcast = splat(builder, value, lanes)
                new.extend(builder.call(fma, [broadcast, w[h], accs[vectors * p + h]])
                           for h in range(vectors))
            return new

        def offsets(t: Any) -> list[Any]:
            offset = builder.sext(builder.load(builder.gep(tp, [t])), I64)
            return [builder.add(base, offset) for base in bases]

        def group(g: Any, accs: list[Any]) -> list[Any]:
            first = builder.mul(g, c64(LANES))
            at = offsets(first)
            for lane in range(LANES):
                accs = tap(builder.add(first, c64(lane)), at, lane, accs)
            return accs

        if grouped:
            accs = accumulate(builder, builder.sdiv(n_taps, c64(LANES)), start * width,
                              group)
        else:
            accs = accumulate(builder, n_taps, start * width,
                              lambda t, accs: tap(t, offsets(t), 0, accs))
        scatter, spill, end = (builder.append_basic_block(f"tile.{part}")
                               for part in ("scatter", "spill", "end"))
        builder.cbranch(builder.icmp_signed("!=", halves, ir.Constant(halves.type, 0)),
                        scatter, spill)
        builder.position_at_end(scatter)
        clip, low, high = clip_of(builder, flags, lp, False)
        vclip, vlow, vhigh = clip_of(builder, flags, lp, True, lanes)
        # the bounds in 8 lanes, for the blocked layout's groups of 8 channels
        low8, high8 = clip_of(builder, flags, lp, True)[1:] if wide else (vlow, vhigh)

        def store(residual: bool, relu: bool) -> None:  # NCHW: scalar stores
            # without a residual the epilogue runs on the vectors, before they are
            # taken apart
            values = accs if residual else [finished(builder, acc, relu, vclip, vlow,
                                                     vhigh) for acc in accs]
            for p in range(width):
                for h in range(vectors):
                    for lane in range(lanes):
                        index = builder.add(o0, builder.add(
                            builder.mul(plane, c64(lanes * h + lane)), c64(p)))
                        value = builder.extract_element(values[vectors * p + h],
                                                        ir.Constant(I32, lane))
                        if residual:
                            value = finished(builder, builder.fadd(value, builder.load(
                                builder.gep(rp, [index]))), relu, clip, low, high)
                        builder.store(value, builder.gep(op, [index]))

        def eight(p: int, g: int) -> Any:
            """Pixel ``p``'s channels ``8 g .. 8 g + 7`` of the tile, a vector of 8."""
            acc = accs[vectors * p + g * LANES // lanes]
            if not wide:
                return acc
            half = ir.Constant(ir.VectorType(I32, LANES), [8 * (g % 2) + i for i in range(8)])
            return builder.shuffle_vector(acc, acc, half)

        def blocked(residual: bool, relu: bool) -> None:  # a vector per pixel, 8 channels
            def group_of(g: int) -> None:
                for p in range(width):
                    index = builder.add(o0, builder.add(builder.mul(plane, c64(8 * g)),
                                                        c64(8 * p)))
                    store_vector(builder, eight(p, g), op, rp, index, residual, relu, vclip,
                                 low8, high8)

            group_of(0)
            for g in range(1, vectors * lanes // LANES):  # where ``halves`` says
                more, stored = (builder.append_basic_block(f"tile.{part}")
                                for part in ("more", "stored"))
                builder.cbranch(builder.icmp_signed(">", halves, ir.Constant(halves.type, g)),
                                more, stored)
                builder.position_at_end(more)
                group_of(g)
                builder.branch(stored)
                builder.position_at_end(stored)

        layouts(builder, flags, store, blocked)
        builder.branch(end)
        builder.position_at_end(spill)
        spill_tile(builder, accs, vectors, width, 16 * vectors if wide else CHANNELS, sp)
        builder.branch(end)
        builder.position_at_end(end)
        return context.get_dummy_value()

    if wide:
        @intrinsic
        def wide_tile(typingctx: Any, weights: Any, w0: Any, x: Any, x0: Any, pixels: Any,
                      q0: Any, taps: Any, bias: Any, b0: Any, out: Any, o0: Any, plane: Any,
                      scratch: Any, halves: Any, residual: Any, flags: Any, bounds: Any,
                      wpanel: Any) -> Any:
            return types.void(weights, w0, x, x0, pixels, q0, taps, bias, b0, out, o0, plane,
                              scratch, halves, residual, flags, bounds, wpanel), codegen

        return wide_tile

    @intrinsic
    def tile(typingctx: Any, weights: Any, w0: Any, x: Any, x0: Any, pixels: Any, q0: Any,
             taps: Any, bias: Any, b0: Any, out: Any, o0: Any, plane: Any, scratch: Any,
             halves: Any, residual: Any, flags: Any, bounds: Any) -> Any:
        return types.void(weights, w0, x, x0, pixels, q0, taps, bias, b0, out, o0, plane,
                          scratch, halves, residual, flags, bounds), codegen

    return tile


_tile = _tile_of(2)
"""One tile: output channels ``b0 .. b0+15`` (weights from ``w0``) of pixels ``q0 .. q0+5``
of the image at ``x0``; stored into ``out`` at ``o0`` (channel stride ``plane``, with the
epilogue of ``flags`` applied: + ``residual`` at the same place, relu, clip to ``bounds``),
the first 8 channels only where ``halves`` is 1 (a blocked output's last block of a multiple
of 8 channels), all 16 where it is 2; where it is 0, into ``scratch[pixel * 16 + channel]``
as summed."""

_half_tile = _tile_of(1)
""":data:`_tile` of the first 8 channels only (``halves`` 1 stores them, 0 spills them):
the last block of a weight of 8 or fewer more channels (24-channel projections computed a
third more than they kept)."""

_tile8, _half_tile8 = _tile_of(2, True), _tile_of(1, True)
""":data:`_tile` and :data:`_half_tile` of a plan whose taps run in groups of 8
(:data:`GROUPED`)."""

_pixel8 = _tile_of(2, True, 1)
""":data:`_tile8` of one pixel (spilled, ``halves`` 0): the last tile of a 7x7 plane, whose
49 pixels leave one past 8 tiles of 6, computed 6 before. (A last block of 8 or fewer
channels keeps :data:`_half_tile8`: no model here has one at 7x7.)"""

_wide_tile, _wide_tile8 = _tile_of(2, wide=True), _tile_of(2, True, wide=True)
""":data:`_tile` and :data:`_tile8` of two blocks of 16 output channels at once, on AVX-512
(:data:`~graphrt.kernels.cpu.kernel_parts.WIDE`): a sixteen-wide vector a block, its taps'
weights the last argument's floats after the first block's, 32 channels x 6 pixels in 12
accumulators; ``halves`` counts the blocked output's groups of 8 channels to store (4, or
0 to spill all 32 channels of each pixel into ``scratch``, pixel after pixel)."""

_wide_tile4, _wide_tile48 = _tile_of(4, wide=True), _tile_of(4, True, wide=True)
""":data:`_wide_tile` and :data:`_wide_tile8` of four blocks (64 channels x 6 pixels in 24
accumulators; ``halves`` 8 or 0)."""

_wide_tile1, _wide_tile18 = _tile_of(1, wide=True), _tile_of(1, True, wide=True)
""":data:`_wide_tile` and :data:`_wide_tile8` of one block (16 channels x 6 pixels in 6
accumulators; ``halves`` 2 or 0): a last block of 16 (MobileNetV2's projections to 16 and
24 channels), where the eight-wide tile takes twice the instructions."""


PADDING = 11
"""Entries of a convolution's padding geometry (:func:`conv_jobs`' ``padding``): planes, h,
w, hp, wp, top, left, blocks per job, channels per block (``planes`` 0: the data is read in
place), whether the data itself is blocked (``[N, C/8, H, W, 8]``), and 0 (a padded copy).
With 1 channel per block the copy is ``[N, C, Hp, Wp]``; with 8 it is blocked, ``[N, C/8,
Hp, Wp, 8]``: the 8 channels of a pixel side by side, so that the taps of one tile read a
quarter as many cache lines (9% faster on a 64-channel 56x56 layer).

Where the last entry is 1 the copy is a 1x1 convolution's *panels* (:func:`_pack`), and the
entries are: planes, h, w, channels, output width, output pixels, row stride, tiles per job,
column stride, 1, 1."""


@numba.njit(types.void(FLOATS_IN, FLOATS, I64_IN, types.int64, types.int64), cache=True,
            nogil=True)
def _pad(x: np.ndarray, padded: np.ndarray, padding: np.ndarray, first: int, last: int
         ) -> None:
    """Blocks ``first .. last - 1`` of ``x`` (``[planes, h, w]``, or ``[planes/8, h, w, 8]``
    where it is blocked) into ``padded`` from row ``top`` and column ``left``, as
    :data:`PADDING` says, zeros around them (data past ``hp`` or ``wp`` left out): every
    element written once, by loops that vectorize (8 planes into a blocked copy go through
    8x8 transposes)."""
    h, w, hp, wp, top, left, block = padding[1], padding[2], padding[3], padding[4], \
        padding[5], padding[6], padding[8]
    source_blocked = padding[9] != 0
    lead = min(left, wp)  # a pad wider than the row leaves nothing of the data in it
    rows, cols = max(0, min(h, hp - top)), max(0, min(w, wp - lead))
    width = wp * block  # one padded row of a block
    whole = cols - cols % LANES  # columns the transposes copy
    for b in range(first, last):  # (no slices: a view costs two atomic reference counts)
        src = b * block * h * w  # the block's first element in x
        for i in range(hp):
            line = (b * hp + i) * width  # the padded row's first element
            r = i - top
            if r < 0 or r >= rows:
                fill_at(padded, line, width, 0.0)
                continue
            fill_at(padded, line, lead * block, 0.0)
            body = line + lead * block
            if block == 1 or source_blocked:  # (blocked: the channels side by side already)
                copy_at(padded, body, x, src + r * w * block, cols * block)
            else:
                base = src + r * w
                for j in range(0, whole, LANES):
                    interleave8(x, base + j, h * w, padded,
                                body + j * block)  # type: ignore[call-arg]  # (typingctx)
                for c in range(block):
                    at = src + (c * h + r) * w
                    for j in range(whole, cols):
                        padded[body + j * block + c] = x[at + j]
            fill_at(padded, body + cols * block, (wp - lead - cols) * block, 0.0)


@numba.njit(types.void(FLOATS_IN, FLOATS, I64_IN, types.int64, types.int64), cache=True,
            nogil=True)
def _pack(x: np.ndarray, panels: np.ndarray, padding: np.ndarray, first: int, last: int
          ) -> None:
    """Tiles ``first .. last - 1`` (numbered over the batch) of a 1x1 convolution of blocked
    data ``x`` (``[N, C/8, H, W, 8]``) into ``panels`` ``[N, tiles, C/8, 6, 8]``: per tile
    and block of 8 channels, its 6 output pixels' data side by side (the pixels at the
    strides, those past the image repeating the tile's first), so that a tile reads one
    stream where it read one per block. Entries of ``padding``: :data:`PADDING`'s panels."""
    h, w, c, ow, length, sh, sw = (padding[1], padding[2], padding[3], padding[4],
                                   padding[5], padding[6], padding[8])
    blocks, plane = c // LANES, h * w * LANES
    tiles = (length + PIXELS - 1) // PIXELS
    at = np.empty(PIXELS, np.int64)
    for job in range(first, last):
        img, tile = job // tiles, job % tiles
        for p in range(PIXELS):
            q = tile * PIXELS + p
            q = q if q < length else tile * PIXELS
            at[p] = img * blocks * plane + ((q // ow) * sh * w + (q % ow) * sw) * LANES
        to = job * blocks * PIXELS * LANES
        for b in range(blocks):
            for p in range(PIXELS):
                source = at[p] + b * plane
                target = to + (b * PIXELS + p) * LANES
                for k in range(LANES):
                    panels[target + k] = x[source + k]


@numba.njit(types.void(FLOATS_IN, FLOATS, I64_IN, COUNTERS, types.boolean), cache=True,
            nogil=True)
def _pad_phase(x: np.ndarray, padded: np.ndarray, padding: np.ndarray, counters: np.ndarray,
               caller: bool) -> None:
    """This thread's share of the padded copy (or the panels) of a call, phase 1 of its
    ``counters`` (jobs of ``padding[7]`` blocks, or tiles); returns once every one is copied,
    by any thread."""
    panels = padding[10] != 0
    units = (padding[0] // padding[3] * ((padding[5] + PIXELS - 1) // PIXELS) if panels
             else padding[0] // padding[8])
    chunk = padding[7]
    jobs = (units + chunk - 1) // chunk
    mine = 0
    while True:
        job, end = claim(counters, 1, 1, jobs, caller)
        if job >= end:
            break
        if panels:
            _pack(x, padded, padding, job * chunk, min(units, (job + 1) * chunk))
        else:
            _pad(x, padded, padding, job * chunk, min(units, (job + 1) * chunk))
        mine += 1
    done(counters, 1, mine)
    wait(counters, 1, jobs)


@numba.njit(types.boolean(FLOATS_IN, I64_IN, FLOATS, types.int64, I64_IN, types.int64,
                          flat(types.int32, True), FLOATS_IN, FLOATS_IN, FLOATS, types.int64,
                          FLOATS_IN, types.int64, FLOATS_IN, types.int64, types.int64, *JOBS),
            cache=True, nogil=True)
def conv_jobs(data: np.ndarray, padding: np.ndarray, padded: np.ndarray, image: int,
              pixels: np.ndarray, length: int, taps: np.ndarray, weights: np.ndarray,
              bias: np.ndarray, out: np.ndarray, channels: int, residual: np.ndarray,
              flags: int, bounds: np.ndarray, strip: int, span: int, counters: np.ndarray,
              grain: int, bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """A job function (:mod:`~graphrt.kernels.cpu.job_protocol`; ``counters`` has 2 phases):
    the convolution of ``data``, on the calling thread (``caller``) or on a helper thread
    joining it.

    First, where ``padding[0]`` (see :data:`PADDING`), the threads copy ``data`` into
    ``padded`` with its zero border, a few planes at a time (phase 1), and each waits until
    the copy is whole; the tiles (phase 0) then read ``padded``, else ``data``
    itself. Tiles are numbered image-major, then by strip of ``strip`` tiles along the output
    (whose data stays in cache over every block), then by block of :data:`JOB_CHANNELS`
    output channels (on AVX-512 run as tiles of 64 where the taps are grouped, of 32, then
    16; a blocked output's last 24 as a tile of 32 that stores 24),
    then along the strip (so one block's packed weights stay in cache over its tiles), and
    claimed ``grain`` at a time. A thread runs its claimed tiles over ``span`` taps at a
    time (all of them where ``span`` is their count): the later passes start from zero and
    add into the sums the earlier ones stored, which are still in cache, the bias and the
    residual on the first, relu and the clip on the last. ``image``: elements per
    padded image; ``length``: output pixels per image; ``channels``: output channels;
    ``flags``: the epilogue (:data:`RESIDUAL`: add ``residual``, shaped as the output;
    :data:`RELU`; :data:`CLIP` to ``bounds``) and the output's layout (:data:`BLOCKED`)."""
    if caller:
        ring(bell)
    if padding[0]:
        _pad_phase(data, padded, padding, counters, caller)
    x = padded if padding[0] else data
    n_taps = taps.shape[0]
    step = JOB_CHANNELS
    blocks = (channels + step - 1) // step
    tiles = (length + PIXELS - 1) // PIXELS
    total = (out.shape[0] // (channels * length)) * blocks * tiles
    scratch = np.empty(step * PIXELS, np.float32)
    zeros = np.zeros(bias.shape[0] if span < n_taps else 0, np.float32)
    layout = flags & BLOCKED
    grouped = flags & GROUPED
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        start = tile_at(first, tiles, blocks, strip)
        for t0 in range(0, max(n_taps, 1), span):  # each pass adds into the earlier sums
            t1 = min(n_taps, t0 + span)
            part = taps[t0:t1]
            summed = bias if t0 == 0 else zeros
            so_far = residual if t0 == 0 else out
            kept_flags = layout | (flags & RESIDUAL if t0 == 0 else RESIDUAL)
            if t1 == n_taps:
                kept_flags |= flags & (RELU | CLIP)
            img, band, block, tile, width = start
            for _ in range(first, last):
                q0 = (band * strip + tile) * PIXELS
                count = min(PIXELS, length - q0)
                c = block * step  # the block's first channel, then the next tile's
                end = min(channels, c + step)
                while WIDE and count > 1 and end - c >= CHANNELS:
                    kept = min(4 if grouped else 2, (end - c) // CHANNELS)
                    kept = (kept if kept != 3 else 2) * CHANNELS
                    stored = kept
                    if kept < end - c < 2 * CHANNELS and layout and count == PIXELS:
                        # 24 channels: one tile of 32 (the weight's zeros past them), whose
                        # last 8 are not stored, in one pass over the data, not two
                        kept, stored = 2 * CHANNELS, end - c
                    quads = kept == 4 * CHANNELS
                    halves = stored // LANES if count == PIXELS else 0
                    at = (img * channels + c) * length + (q0 * LANES if layout else q0)
                    w0 = ((c // CHANNELS) * n_taps + t0) * CHANNELS
                    if kept == CHANNELS and grouped:
                        _wide_tile18(weights, w0, x, img * image, pixels, q0, part, summed,
                                     c, out, at, length, scratch, halves, so_far,
                                     kept_flags, bounds, n_taps * CHANNELS)
                    elif kept == CHANNELS:
                        _wide_tile1(weights, w0, x, img * image, pixels, q0, part, summed,
                                    c, out, at, length, scratch, halves, so_far,
                                    kept_flags, bounds, n_taps * CHANNELS)
                    elif quads and grouped:
                        _wide_tile48(weights, w0, x, img * image, pixels, q0, part, summed,
                                     c, out, at, length, scratch, halves, so_far,
                                     kept_flags, bounds, n_taps * CHANNELS)
                    elif quads:
                        _wide_tile4(weights, w0, x, img * image, pixels, q0, part, summed,
                                    c, out, at, length, scratch, halves, so_far,
                                    kept_flags, bounds, n_taps * CHANNELS)
                    elif grouped:
                        _wide_tile8(weights, w0, x, img * image, pixels, q0, part, summed,
                                    c, out, at, length, scratch, halves, so_far,
                                    kept_flags, bounds, n_taps * CHANNELS)
                    else:
                        _wide_tile(weights, w0, x, img * image, pixels, q0, part, summed,
                                   c, out, at, length, scratch, halves, so_far,
                                   kept_flags, bounds, n_taps * CHANNELS)
                    if not halves:
                        from_scratch(out, at, length, scratch, kept, count, 1, kept, so_far,
                                     kept_flags, bounds)
                    c += stored
                for sub in range(-(-c // CHANNELS), (end + CHANNELS - 1) // CHANNELS):
                    kept = min(CHANNELS, channels - sub * CHANNELS)
                    at = (img * channels + sub * CHANNELS) * length + (
                        q0 * LANES if layout else q0)
                    w0 = (sub * n_taps + t0) * CHANNELS
                    if kept <= LANES:
                        halves = 1 if count == PIXELS and kept == LANES else 0
                        if grouped:
                            _half_tile8(weights, w0, x, img * image, pixels, q0, part, summed,
                                        sub * CHANNELS, out, at, length, scratch, halves,
                                        so_far, kept_flags, bounds)
                        else:
                            _half_tile(weights, w0, x, img * image, pixels, q0, part, summed,
                                       sub * CHANNELS, out, at, length, scratch, halves,
                                       so_far, kept_flags, bounds)
                    else:
                        halves = 2 if count == PIXELS and kept == CHANNELS else 0
                        if grouped and count == 1:
                            _pixel8(weights, w0, x, img * image, pixels, q0, part, summed,
                                    sub * CHANNELS, out, at, length, scratch, halves, so_far,
                                    kept_flags, bounds)
                        elif grouped:
                            _tile8(weights, w0, x, img * image, pixels, q0, part, summed,
                                   sub * CHANNELS, out, at, length, scratch, halves, so_far,
                                   kept_flags, bounds)
                        else:
                            _tile(weights, w0, x, img * image, pixels, q0, part, summed,
                                  sub * CHANNELS, out, at, length, scratch, halves, so_far,
                                  kept_flags, bounds)
                    if not halves:
                        from_scratch(out, at, length, scratch, kept, count, 1, CHANNELS,
                                     so_far, kept_flags, bounds)
                img, band, block, tile, width = next_tile(img, band, block, tile, width,
                                                          tiles, blocks, strip)
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)


@numba.njit(types.boolean(FLOATS_IN, types.int64, types.int64, FLOATS_IN, FLOATS_IN,
                          FLOATS, types.int64, FLOATS_IN, types.int64, FLOATS_IN,
                          types.int64, *JOBS), cache=True, nogil=True)
def pointwise_jobs(x: np.ndarray, length: int, depth: int, weights: np.ndarray,
                   bias: np.ndarray, out: np.ndarray, channels: int, residual: np.ndarray,
                   flags: int, bounds: np.ndarray, chunk: int, counters: np.ndarray,
                   grain: int, bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """A pointwise (1x1) convolution, ``x`` ``[N, depth, length]`` into ``out``
    ``[N, channels, length]`` (flattened): tiles of 16 pixels by 6 output channels, as
    jobs of one 16-pixel stretch by ``chunk`` blocks of 6 channels (whose packed weights stay
    in cache over the stretches that follow), numbered image-major, then by chunk, then
    along the pixels, and claimed as in :func:`conv_jobs` (whose last six arguments these
    are). A stretch short of 16 pixels (the end of an image) is first copied into a zeroed
    panel; a tile short of pixels or channels is stored through a scratch tile."""
    if caller:
        ring(bell)
    blocks = (channels + ROWS - 1) // ROWS
    chunks = (blocks + chunk - 1) // chunk
    tiles = (length + SPAN - 1) // SPAN
    total = (out.shape[0] // (channels * length)) * chunks * tiles
    stretch = np.zeros(depth * SPAN, np.float32)  # columns past an image's end stay zero
    scratch = np.empty(ROWS * SPAN, np.float32)
    nothing = scratch[:0]
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        for job in range(first, last):
            tile = job % tiles
            k = (job // tiles) % chunks
            img = job // (tiles * chunks)
            p0 = tile * SPAN
            count = min(SPAN, length - p0)
            x0 = img * depth * length + p0
            if count < SPAN:
                for c in range(depth):
                    for p in range(count):
                        stretch[c * SPAN + p] = x[x0 + c * length + p]
            for block in range(k * chunk, min(blocks, (k + 1) * chunk)):
                rows = min(ROWS, channels - block * ROWS)
                o0 = (img * channels + block * ROWS) * length + p0
                w0 = block * depth * ROWS
                if count == SPAN and rows == ROWS:
                    panel(weights, w0, depth, x, x0, length, bias, block * ROWS, out, o0,
                           length, residual, flags,
                           bounds)  # type: ignore[call-arg]  # (typingctx)
                    continue
                if count == SPAN:
                    panel(weights, w0, depth, x, x0, length, bias, block * ROWS, scratch, 0,
                           SPAN, nothing, 0, bounds)  # type: ignore[call-arg]
                else:
                    panel(weights, w0, depth, stretch, 0, SPAN, bias, block * ROWS, scratch,
                           0, SPAN, nothing, 0, bounds)  # type: ignore[call-arg]
                from_scratch(out, o0, length, scratch, rows, count, SPAN, 1, residual, flags,
                              bounds)
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)
