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
(:func:`_panel`, :func:`pointwise_jobs`): 6 output channels x 16 contiguous pixels, two
vectors of the data and a broadcast weight per input channel. Both apply the epilogue
(:data:`RESIDUAL`: add a residual shaped as the output; :data:`RELU`) to the accumulators
before they store them.

Shapes: the kernel reads the padded data ``[N, C, Hp, Wp]`` flattened (or the data itself
where no padding is needed); ``pixels[q]`` is the offset in one padded image of output pixel
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
    ...           out[:0], 1, counters, 1, bell, True, 0, 0)
    True
    >>> out.tolist()
    [8.0, 12.0, 20.0, 24.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .job_protocol import COUNTERS, JOBS, claim, done, finish, flat, ring, wait

__all__ = ["CHANNELS", "CLIP", "DEPTHWISE_GEOMETRY", "PADDING", "PIXELS", "RELU", "RESIDUAL",
           "ROWS", "SPAN", "conv_jobs", "dense_jobs", "depthwise_jobs", "pack_rows",
           "pack_weights", "pointwise_jobs"]

CHANNELS = 16
"""Output channels of one tile (two AVX vectors of float32)."""
PIXELS = 6
"""Output pixels of one tile: 6 x 2 accumulators + 2 weight vectors + 1 broadcast fit the 16
vector registers of AVX2."""
ROWS = 6
"""Output channels of one pointwise tile (a broadcast weight each)."""
SPAN = 16
"""Pixels of one pointwise tile (two vectors of the data and of the output)."""
RESIDUAL = 1
"""Epilogue flag: add the residual (shaped as the output) to the result."""
RELU = 2
"""Epilogue flag: ``max(result, 0)`` (NaN stays NaN)."""
CLIP = 4
"""Epilogue flag: ``min(max(result, low), high)`` with the job's ``bounds`` (NaN stays NaN;
ReLU6 is ``bounds`` (0, 6)). The micro-kernels store first; the job clamps the stored tile
while it is in cache."""

_F32 = ir.FloatType()
_V8 = ir.VectorType(_F32, 8)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


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


def _c64(value: int) -> ir.Constant:
    return ir.Constant(_I64, value)


def _splat(builder: Any, value: Any) -> Any:
    """``value`` (float) in every lane of an eight-wide vector."""
    undef = ir.Constant(_V8, ir.Undefined)
    return builder.shuffle_vector(builder.insert_element(undef, value, ir.Constant(_I32, 0)),
                                  undef, ir.Constant(ir.VectorType(_I32, 8), [0] * 8))


def _fma(builder: Any) -> Any:
    return cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
        builder.module, ir.FunctionType(_V8, [_V8, _V8, _V8]), "llvm.fma.v8f32")


def _array(context: Any, builder: Any, signature: Any, args: Any, i: int) -> Any:
    return context.make_array(signature.args[i])(context, builder, args[i])


def _vector(builder: Any, ptr: Any, index: Any) -> Any:
    return builder.bitcast(builder.gep(ptr, [index]), _V8.as_pointer())


def _accumulate(builder: Any, count: Any, starts: list[Any],
                step: Callable[[Any, list[Any]], list[Any]]) -> list[Any]:
    """Emit ``for t in range(count): accs = step(t, accs)`` over vector accumulators that
    start at ``starts`` (each ``step`` emits one iteration's body); returns their final
    values."""
    entry = builder.basic_block
    loop, body, done = (builder.append_basic_block(f"accumulate.{part}")
                        for part in ("loop", "body", "done"))
    builder.branch(loop)
    builder.position_at_end(loop)
    t = builder.phi(_I64)
    t.add_incoming(_c64(0), entry)
    accs = []
    for start in starts:
        acc = builder.phi(_V8)
        acc.add_incoming(start, entry)
        accs.append(acc)
    builder.cbranch(builder.icmp_signed("<", t, count), body, done)
    builder.position_at_end(body)
    new = step(t, accs)
    t.add_incoming(builder.add(t, _c64(1)), builder.basic_block)
    for acc, value in zip(accs, new, strict=True):
        acc.add_incoming(value, builder.basic_block)
    builder.branch(loop)
    builder.position_at_end(done)
    return accs


def _stores(builder: Any, flags: Any, store: Any) -> None:
    """Emit ``store(add_residual: bool, relu: i1)`` twice, behind a branch on the
    :data:`RESIDUAL` bit of ``flags`` (the residual is only read where it is given)."""
    relu = builder.icmp_signed("!=", builder.and_(flags, _c64(RELU)), _c64(0))
    plain = builder.append_basic_block("store.plain")
    summed = builder.append_basic_block("store.residual")
    end = builder.append_basic_block("store.end")
    has = builder.icmp_signed("!=", builder.and_(flags, _c64(RESIDUAL)), _c64(0))
    builder.cbranch(has, summed, plain)
    for block, residual in ((plain, False), (summed, True)):
        builder.position_at_end(block)
        store(residual, relu)
        builder.branch(end)
    builder.position_at_end(end)


def _rectified(builder: Any, value: Any, relu: Any) -> Any:
    """``value < 0 ? 0 : value`` where ``relu`` (NaN stays NaN, as the relu op), else
    ``value``."""
    zero = ir.Constant(value.type, None)
    below = builder.fcmp_ordered("<", value, zero)
    if isinstance(value.type, ir.VectorType):
        relu = builder.shuffle_vector(
            builder.insert_element(ir.Constant(ir.VectorType(ir.IntType(1), 8), ir.Undefined),
                                   relu, ir.Constant(_I32, 0)),
            ir.Constant(ir.VectorType(ir.IntType(1), 8), ir.Undefined),
            ir.Constant(ir.VectorType(_I32, 8), [0] * 8))
    return builder.select(builder.and_(below, relu), zero, value)


@intrinsic
def _tile(typingctx: Any, weights: Any, w0: Any, x: Any, x0: Any, pixels: Any, q0: Any,
          taps: Any, bias: Any, b0: Any, out: Any, o0: Any, plane: Any, scratch: Any,
          full: Any, residual: Any, flags: Any) -> Any:
    """One tile: output channels ``b0 .. b0+15`` (weights from ``w0``) of pixels
    ``q0 .. q0+5`` of the image at ``x0``; stored into ``out`` at ``o0`` (channel stride
    ``plane``, with the epilogue of ``flags`` applied: + ``residual`` at the same place,
    relu) when ``full``, else into ``scratch[pixel * 16 + channel]`` as summed."""
    sig = types.void(weights, w0, x, x0, pixels, q0, taps, bias, b0, out, o0, plane, scratch,
                     full, residual, flags)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wp, xp, pp, tp, bp, op, sp, rp = (_array(context, builder, signature, args, i).data
                                          for i in (0, 2, 4, 6, 7, 9, 12, 14))
        w0, x0, q0, b0, o0, plane, full, flags = (args[i] for i in (1, 3, 5, 8, 10, 11, 13, 15))
        n_taps = builder.extract_value(_array(context, builder, signature, args, 6).shape, 0)
        fma = _fma(builder)
        bases = [builder.add(x0, builder.load(builder.gep(pp, [builder.add(q0, _c64(p))])))
                 for p in range(PIXELS)]
        start = [builder.load(_vector(builder, bp, builder.add(b0, _c64(8 * h))), align=4)
                 for h in range(2)]

        def tap(t: Any, accs: list[Any]) -> list[Any]:
            wi = builder.add(w0, builder.mul(t, _c64(CHANNELS)))
            w = [builder.load(_vector(builder, wp, builder.add(wi, _c64(8 * h))), align=4)
                 for h in range(2)]
            offset = builder.sext(builder.load(builder.gep(tp, [t])), _I64)
            new: list[Any] = []
            for p in range(PIXELS):
                value = builder.load(builder.gep(xp, [builder.add(bases[p], offset)]))
                broadcast = _splat(builder, value)
                new.extend(builder.call(fma, [broadcast, w[h], accs[2 * p + h]])
                           for h in range(2))
            return new

        accs = _accumulate(builder, n_taps, start * PIXELS, tap)
        scatter = builder.append_basic_block("tile.scatter")
        spill = builder.append_basic_block("tile.spill")
        end = builder.append_basic_block("tile.end")
        builder.cbranch(builder.icmp_signed("!=", full, ir.Constant(full.type, 0)), scatter,
                        spill)
        builder.position_at_end(scatter)

        def store(residual: bool, relu: Any) -> None:
            for p in range(PIXELS):
                for h in range(2):
                    for lane in range(8):
                        index = builder.add(o0, builder.add(
                            builder.mul(plane, _c64(8 * h + lane)), _c64(p)))
                        value = builder.extract_element(accs[2 * p + h],
                                                        ir.Constant(_I32, lane))
                        if residual:
                            value = builder.fadd(value, builder.load(builder.gep(rp, [index])))
                        builder.store(_rectified(builder, value, relu),
                                      builder.gep(op, [index]))

        _stores(builder, flags, store)
        builder.branch(end)
        builder.position_at_end(spill)
        for p in range(PIXELS):
            for h in range(2):
                builder.store(accs[2 * p + h], _vector(builder, sp, _c64(CHANNELS * p + 8 * h)),
                              align=4)
        builder.branch(end)
        builder.position_at_end(end)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _panel(typingctx: Any, weights: Any, w0: Any, depth: Any, x: Any, x0: Any, xplane: Any,
           bias: Any, b0: Any, out: Any, o0: Any, oplane: Any, residual: Any, flags: Any
           ) -> Any:
    """One pointwise tile: output channels ``b0 .. b0+5`` (weights ``[depth, 6]`` from
    ``w0``) of the 16 pixels from ``x0`` (``depth`` input channels ``xplane`` apart), stored
    as two vectors per channel into ``out`` from ``o0`` (channels ``oplane`` apart) with the
    epilogue of ``flags`` (+ ``residual`` at the same place, relu)."""
    sig = types.void(weights, w0, depth, x, x0, xplane, bias, b0, out, o0, oplane, residual,
                     flags)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wp, xp, bp, op, rp = (_array(context, builder, signature, args, i).data
                              for i in (0, 3, 6, 8, 11))
        w0, depth, x0, xplane, b0, o0, oplane, flags = (args[i]
                                                        for i in (1, 2, 4, 5, 7, 9, 10, 12))
        fma = _fma(builder)
        start = [_splat(builder, builder.load(builder.gep(bp, [builder.add(b0, _c64(r))])))
                 for r in range(ROWS)]

        def channel(t: Any, accs: list[Any]) -> list[Any]:
            xi = builder.add(x0, builder.mul(t, xplane))
            data = [builder.load(_vector(builder, xp, builder.add(xi, _c64(8 * h))), align=4)
                    for h in range(2)]
            wi = builder.add(w0, builder.mul(t, _c64(ROWS)))
            new: list[Any] = []
            for r in range(ROWS):
                weight = _splat(builder, builder.load(builder.gep(wp, [builder.add(wi,
                                                                                   _c64(r))])))
                new.extend(builder.call(fma, [weight, data[h], accs[2 * r + h]])
                           for h in range(2))
            return new

        accs = _accumulate(builder, depth, [s for s in start for _ in range(2)], channel)

        def store(residual: bool, relu: Any) -> None:
            for r in range(ROWS):
                for h in range(2):
                    index = builder.add(o0, builder.add(builder.mul(oplane, _c64(r)),
                                                        _c64(8 * h)))
                    value = accs[2 * r + h]
                    if residual:
                        value = builder.fadd(value, builder.load(_vector(builder, rp, index),
                                                                 align=4))
                    builder.store(_rectified(builder, value, relu), _vector(builder, op, index),
                                  align=4)

        _stores(builder, flags, store)
        return context.get_dummy_value()

    return sig, codegen


_FLOATS, _FLOATS_IN = flat(types.float32), flat(types.float32, True)
_I64_IN = flat(types.int64, True)


PADDING = 9
"""Entries of a convolution's padding geometry (:func:`conv_jobs`' ``padding``): planes, h,
w, hp, wp, top, left, blocks per job, channels per block (``planes`` 0: the data is read in
place). With 1 channel per block the copy is ``[N, C, Hp, Wp]``; with 8 it is blocked,
``[N, C/8, Hp, Wp, 8]``: the 8 channels of a pixel side by side, so that the taps of one
tile read a quarter as many cache lines (9% faster on a 64-channel 56x56 layer)."""


@numba.njit(types.void(_FLOATS_IN, _FLOATS, _I64_IN, types.int64, types.int64), cache=True,
            nogil=True)
def _pad(x: np.ndarray, padded: np.ndarray, padding: np.ndarray, first: int, last: int
         ) -> None:
    """Blocks ``first .. last - 1`` of ``x`` ``[planes, h, w]`` into ``padded`` from row
    ``top`` and column ``left``, as :data:`PADDING` says, zeros around them (data past ``hp``
    or ``wp`` left out): every element written once, by loops that vectorize (the blocked
    copy's stores are strided)."""
    h, w, hp, wp, top, left, block = padding[1], padding[2], padding[3], padding[4], \
        padding[5], padding[6], padding[8]
    lead = min(left, wp)  # a pad wider than the row leaves nothing of the data in it
    rows, cols = max(0, min(h, hp - top)), max(0, min(w, wp - lead))
    width = wp * block  # one padded row of a block
    for b in range(first, last):
        src = x[b * block * h * w:(b + 1) * block * h * w]
        dst = padded[b * hp * width:(b + 1) * hp * width]
        for i in range(hp):
            line = dst[i * width:(i + 1) * width]
            r = i - top
            if r < 0 or r >= rows:
                for j in range(width):
                    line[j] = 0.0
                continue
            for j in range(lead * block):
                line[j] = 0.0
            body = line[lead * block:(lead + cols) * block]
            if block == 1:
                data = src[r * w:r * w + cols]
                for j in range(cols):
                    body[j] = data[j]
            else:
                for c in range(block):
                    data = src[(c * h + r) * w:(c * h + r) * w + cols]
                    for j in range(cols):
                        body[j * block + c] = data[j]
            rest = line[(lead + cols) * block:]
            for j in range(rest.shape[0]):
                rest[j] = 0.0


@numba.njit(types.void(_FLOATS_IN, _FLOATS, _I64_IN, COUNTERS), cache=True, nogil=True)
def _pad_phase(x: np.ndarray, padded: np.ndarray, padding: np.ndarray, counters: np.ndarray
               ) -> None:
    """This thread's share of the padded copy of a call, phase 1 of its ``counters`` (jobs of
    ``padding[7]`` blocks); returns once every block is copied, by any thread."""
    blocks, chunk = padding[0] // padding[8], padding[7]
    jobs = (blocks + chunk - 1) // chunk
    while True:
        job, end = claim(counters, 1, 1, jobs)
        if job >= end:
            break
        _pad(x, padded, padding, job * chunk, min(blocks, (job + 1) * chunk))
        done(counters, 1, 1)
    wait(counters, 1, jobs)


@numba.njit(cache=True, nogil=True)
def _epilogue(value: float, residual: np.ndarray, at: int, flags: int, bounds: np.ndarray
              ) -> float:
    """``value`` after the epilogue of ``flags`` (the residual read at ``at``)."""
    if flags & RESIDUAL:
        value += residual[at]
    if flags & RELU and value < 0:
        return 0.0
    if flags & CLIP:
        clipped: float = min(max(value, bounds[0]), bounds[1])  # NaN stays NaN
        return clipped
    return value


@numba.njit(cache=True, nogil=True)
def _clamp(out: np.ndarray, o0: int, plane: int, channels: int, pixels: int,
           bounds: np.ndarray) -> None:
    """Clip a stored tile (``channels`` rows ``plane`` apart, ``pixels`` long) to
    ``bounds``, in cache."""
    low, high = bounds[0], bounds[1]
    for c in range(channels):
        row = out[o0 + c * plane:o0 + c * plane + pixels]
        for p in range(pixels):
            row[p] = min(max(row[p], low), high)


@numba.njit(cache=True, nogil=True)
def _from_scratch(out: np.ndarray, o0: int, plane: int, scratch: np.ndarray, channels: int,
                  pixels: int, channel_step: int, pixel_step: int, residual: np.ndarray,
                  flags: int, bounds: np.ndarray) -> None:
    """The ``channels`` x ``pixels`` results of a tile short of either, summed into
    ``scratch`` (channel ``c``, pixel ``p`` at ``c * channel_step + p * pixel_step``), stored
    into ``out`` from ``o0`` (channels ``plane`` apart) with the epilogue of ``flags``."""
    for c in range(channels):
        for p in range(pixels):
            at = o0 + c * plane + p
            out[at] = _epilogue(scratch[c * channel_step + p * pixel_step], residual, at, flags,
                                bounds)


@numba.njit(types.boolean(_FLOATS_IN, _I64_IN, _FLOATS, types.int64, _I64_IN, types.int64,
                          flat(types.int32, True), _FLOATS_IN, _FLOATS_IN, _FLOATS, types.int64,
                          _FLOATS_IN, types.int64, _FLOATS_IN, types.int64, *JOBS), cache=True,
            nogil=True)
def conv_jobs(data: np.ndarray, padding: np.ndarray, padded: np.ndarray, image: int,
              pixels: np.ndarray, length: int, taps: np.ndarray, weights: np.ndarray,
              bias: np.ndarray, out: np.ndarray, channels: int, residual: np.ndarray,
              flags: int, bounds: np.ndarray, strip: int, counters: np.ndarray, grain: int,
              bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """A job function (:mod:`~graphrt.kernels.cpu.job_protocol`; ``counters`` has 2 phases):
    the convolution of ``data``, on the calling thread (``caller``) or on a helper thread
    joining it.

    First, where ``padding[0]`` (see :data:`PADDING`), the threads copy ``data`` into
    ``padded`` with its zero border, a few planes at a time (phase 1), and each waits until
    the copy is whole; the tiles (phase 0) then read ``padded``, else ``data``
    itself. Tiles are numbered image-major, then by strip of ``strip`` tiles along the output
    (whose data stays in cache over every block), then by block of 16 output channels, then
    along the strip (so one block's packed weights stay in cache over its tiles), and
    claimed ``grain`` at a time. ``image``: elements per
    padded image; ``length``: output pixels per image; ``channels``: output channels;
    ``flags``: the epilogue (:data:`RESIDUAL`: add ``residual``, shaped as the output;
    :data:`RELU`; :data:`CLIP` to ``bounds``)."""
    if caller:
        ring(bell)
    if padding[0]:
        _pad_phase(data, padded, padding, counters)
    x = padded if padding[0] else data
    n_taps = taps.shape[0]
    blocks = (channels + CHANNELS - 1) // CHANNELS
    tiles = (length + PIXELS - 1) // PIXELS
    total = (out.shape[0] // (channels * length)) * blocks * tiles
    scratch = np.empty(CHANNELS * PIXELS, np.float32)
    while True:
        first, last = claim(counters, 0, grain, total)
        if first >= last:
            break
        for job in range(first, last):
            img, rest = divmod(job, tiles * blocks)
            band, rest = divmod(rest, strip * blocks)
            width = min(strip, tiles - band * strip)  # the last strip may be shorter
            block, tile = divmod(rest, width)
            q0 = (band * strip + tile) * PIXELS
            count = min(PIXELS, length - q0)
            kept = min(CHANNELS, channels - block * CHANNELS)
            o0 = (img * channels + block * CHANNELS) * length + q0
            full = count == PIXELS and kept == CHANNELS
            _tile(weights, block * n_taps * CHANNELS, x, img * image, pixels, q0, taps, bias,
                  block * CHANNELS, out, o0, length, scratch, full, residual,
                  flags)  # type: ignore[call-arg]  # (typingctx)
            if not full:
                _from_scratch(out, o0, length, scratch, kept, count, 1, CHANNELS, residual,
                              flags, bounds)
            elif flags & CLIP:
                _clamp(out, o0, length, CHANNELS, PIXELS, bounds)
        done(counters, 0, last - first)
    return finish(counters, total, bell, caller, call, spins)


@numba.njit(types.boolean(_FLOATS_IN, types.int64, types.int64, _FLOATS_IN, _FLOATS_IN,
                          _FLOATS, types.int64, _FLOATS_IN, types.int64, _FLOATS_IN,
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
    panel = np.zeros(depth * SPAN, np.float32)  # columns past an image's end stay zero
    scratch = np.empty(ROWS * SPAN, np.float32)
    nothing = scratch[:0]
    while True:
        first, last = claim(counters, 0, grain, total)
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
                        panel[c * SPAN + p] = x[x0 + c * length + p]
            for block in range(k * chunk, min(blocks, (k + 1) * chunk)):
                rows = min(ROWS, channels - block * ROWS)
                o0 = (img * channels + block * ROWS) * length + p0
                w0 = block * depth * ROWS
                if count == SPAN and rows == ROWS:
                    _panel(weights, w0, depth, x, x0, length, bias, block * ROWS, out, o0,
                           length, residual, flags)  # type: ignore[call-arg]  # (typingctx)
                    if flags & CLIP:
                        _clamp(out, o0, length, ROWS, SPAN, bounds)
                    continue
                if count == SPAN:
                    _panel(weights, w0, depth, x, x0, length, bias, block * ROWS, scratch, 0,
                           SPAN, nothing, 0)  # type: ignore[call-arg]
                else:
                    _panel(weights, w0, depth, panel, 0, SPAN, bias, block * ROWS, scratch,
                           0, SPAN, nothing, 0)  # type: ignore[call-arg]
                _from_scratch(out, o0, length, scratch, rows, count, SPAN, 1, residual, flags,
                              bounds)
        done(counters, 0, last - first)
    return finish(counters, total, bell, caller, call, spins)


@numba.njit(types.void(types.Array(types.float32, 2, "A", readonly=True), _FLOATS),
            cache=True, nogil=True)
def pack_rows(data: np.ndarray, packed: np.ndarray) -> None:
    """``data`` ``[m, k]`` into ``packed`` ``[ceil(m/6), k + 1, 6]`` (flattened): 6 rows at a
    time, a one as step ``k``, zeros past ``m`` (:func:`dense_jobs`' left operand)."""
    m, k = data.shape
    for block in range((m + ROWS - 1) // ROWS):
        base, first = block * (k + 1) * ROWS, block * ROWS
        height = min(ROWS, m - first)
        if height == ROWS:
            for t in range(k):
                for r in range(ROWS):
                    packed[base + t * ROWS + r] = data[first + r, t]
        else:
            packed[base:base + (k + 1) * ROWS] = 0.0
            for t in range(k):
                for r in range(height):
                    packed[base + t * ROWS + r] = data[first + r, t]
        for r in range(height):
            packed[base + k * ROWS + r] = 1.0


@numba.njit(types.boolean(_FLOATS_IN, types.int64, _FLOATS_IN, types.int64, types.int64,
                          _FLOATS_IN, _FLOATS, _FLOATS_IN, types.int64, _FLOATS_IN, types.int64,
                          *JOBS), cache=True, nogil=True)
def dense_jobs(rows: np.ndarray, depth: int, columns: np.ndarray, m: int, n: int,
               zeros: np.ndarray, out: np.ndarray, residual: np.ndarray, flags: int,
               bounds: np.ndarray, chunk: int, counters: np.ndarray, grain: int,
               bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """A matrix product ``out`` ``[m, n]`` (flattened) of packed operands, on the pointwise
    micro-kernel (:func:`_panel`): ``rows`` the left operand packed 6 rows at a time
    (``[ceil(m/6), depth, 6]``), ``columns`` the right one packed 16 columns at a time
    (``[ceil(n/16), depth, 16]``), both zero past ``m`` and ``n``; ``zeros`` 6 zeros (the
    micro-kernel's row bias: a column bias is the packing's last step of ``depth``, times a
    row of ones). Jobs are one 16-column panel by ``chunk`` blocks of 6 rows (the panel stays
    in cache over them), claimed as in :func:`conv_jobs` (whose last six arguments these
    are); a tile short of rows or columns is stored through a scratch tile."""
    if caller:
        ring(bell)
    blocks = (m + ROWS - 1) // ROWS
    chunks = (blocks + chunk - 1) // chunk
    tiles = (n + SPAN - 1) // SPAN
    total = tiles * chunks
    scratch = np.empty(ROWS * SPAN, np.float32)
    nothing = scratch[:0]
    while True:
        first, last = claim(counters, 0, grain, total)
        if first >= last:
            break
        for job in range(first, last):
            tile = job % tiles
            k = job // tiles
            x0 = tile * depth * SPAN
            count = min(SPAN, n - tile * SPAN)
            for block in range(k * chunk, min(blocks, (k + 1) * chunk)):
                height = min(ROWS, m - block * ROWS)
                o0 = block * ROWS * n + tile * SPAN
                w0 = block * depth * ROWS
                if count == SPAN and height == ROWS:
                    _panel(rows, w0, depth, columns, x0, SPAN, zeros, 0, out, o0, n,
                           residual, flags)  # type: ignore[call-arg]  # (typingctx)
                    if flags & CLIP:
                        _clamp(out, o0, n, ROWS, SPAN, bounds)
                    continue
                _panel(rows, w0, depth, columns, x0, SPAN, zeros, 0, scratch, 0, SPAN,
                       nothing, 0)  # type: ignore[call-arg]
                _from_scratch(out, o0, n, scratch, height, count, SPAN, 1, residual, flags,
                              bounds)
        done(counters, 0, last - first)
    return finish(counters, total, bell, caller, call, spins)


@numba.njit(cache=True, nogil=True)
def _columns(shift_x: int, width: int, ow: int, sw: int) -> tuple[int, int]:
    """The output columns ``[lo, hi)`` whose input column ``ox * sw + shift_x`` is inside."""
    lo = (-shift_x + sw - 1) // sw if shift_x < 0 else 0
    hi = min(ow, (width - 1 - shift_x) // sw + 1) if width > shift_x else 0
    return lo, max(lo, hi)


@numba.njit(cache=True, nogil=True)
def _tap(acc: np.ndarray, x: np.ndarray, tap: float, x0: int, y0: int, y1: int,
         shift_y: int, shift_x: int, lo: int, hi: int, width: int, ow: int, sh: int,
         sw: int) -> None:
    """``acc += tap * x`` over output rows ``[y0, y1)`` and columns ``[lo, hi)`` (through
    slices, not index arithmetic: LLVM vectorizes the loop over them)."""
    count = hi - lo
    for oy in range(y0, y1):
        start = x0 + (oy * sh + shift_y) * width + shift_x + lo * sw
        into = acc[oy * ow + lo:oy * ow + hi]
        if sw == 1:  # a unit-stride slice: contiguous loads
            row = x[start:start + count]
            for ox in range(count):
                into[ox] += tap * row[ox]
        else:
            strided = x[start:start + (count - 1) * sw + 1:sw]
            for ox in range(count):
                into[ox] += tap * strided[ox]


@numba.njit(cache=True, nogil=True)
def _row_of_three(acc: np.ndarray, x: np.ndarray, weights: np.ndarray, w0: int, x0: int,
                  y0: int, y1: int, shift_y: int, width: int, ow: int, sh: int, sw: int,
                  dw: int, pw: int) -> None:
    """One kernel row of three taps at column stride 1: the columns all three read inside
    the image in one loop over contiguous slices (three products per stored sum), the edge
    columns tap by tap."""
    s0, s1, s2 = -pw, dw - pw, 2 * dw - pw
    lo0, hi0 = _columns(s0, width, ow, sw)
    lo1, hi1 = _columns(s1, width, ow, sw)
    lo2, hi2 = _columns(s2, width, ow, sw)
    lo, hi = max(lo0, lo1, lo2), min(hi0, hi1, hi2)
    if lo >= hi:  # no column reads all three: tap by tap
        for k, (a, b) in enumerate(((lo0, hi0), (lo1, hi1), (lo2, hi2))):
            if a < b:
                _tap(acc, x, weights[w0 + k], x0, y0, y1, shift_y, k * dw - pw, a, b, width,
                     ow, sh, sw)
        return
    t0, t1, t2 = weights[w0], weights[w0 + 1], weights[w0 + 2]
    count = hi - lo
    for oy in range(y0, y1):
        base = x0 + (oy * sh + shift_y) * width + lo
        into = acc[oy * ow + lo:oy * ow + hi]
        c0, c1, c2 = (x[base + s0:base + s0 + count], x[base + s1:base + s1 + count],
                      x[base + s2:base + s2 + count])
        for ox in range(count):
            into[ox] += t0 * c0[ox] + t1 * c1[ox] + t2 * c2[ox]
    for k, (a, b) in enumerate(((lo0, hi0), (lo1, hi1), (lo2, hi2))):
        shift = k * dw - pw
        if a < lo:
            _tap(acc, x, weights[w0 + k], x0, y0, y1, shift_y, shift, a, min(b, lo), width,
                 ow, sh, sw)
        if b > hi:
            _tap(acc, x, weights[w0 + k], x0, y0, y1, shift_y, shift, max(a, hi), b, width,
                 ow, sh, sw)


@numba.njit(cache=True, nogil=True)
def _plane_epilogue(acc: np.ndarray, residual: np.ndarray, flags: int, bounds: np.ndarray
                    ) -> None:
    """The epilogue of ``flags`` on a whole output plane in place (``residual``: the
    plane's own residual)."""
    if flags & RESIDUAL:
        for p in range(acc.shape[0]):
            acc[p] += residual[p]
    if flags & RELU:
        for p in range(acc.shape[0]):
            acc[p] = 0.0 if acc[p] < 0 else acc[p]  # NaN stays NaN
    if flags & CLIP:
        low, high = bounds[0], bounds[1]
        for p in range(acc.shape[0]):
            acc[p] = min(max(acc[p], low), high)


@numba.njit(cache=True, nogil=True)
def _small_plane(acc: np.ndarray, x: np.ndarray, x0: int, weights: np.ndarray, w0: int,
                 start: float, height: int, width: int, oh: int, ow: int, kh: int, kw: int,
                 ph: int, pw: int, padded: np.ndarray, wide: np.ndarray) -> None:
    """One channel's plane at stride and dilation 1 through a zero-padded copy: each tap is
    one loop over the whole plane at the padded width (``oh * (ow + kw - 1)`` sums, the
    columns past ``ow`` thrown away), long enough to vectorize where the rows are short
    (7 or 14 pixels: one tap per row cost more than its arithmetic), then compacted into
    ``acc``. ``padded`` holds ``(oh + kh - 1) * (ow + kw - 1) + kw`` floats, ``wide``
    ``oh * (ow + kw - 1)``."""
    span = ow + kw - 1
    for p in range(padded.shape[0]):
        padded[p] = 0.0
    for iy in range(min(height, oh + kh - 1 - ph)):  # rows and columns the outputs read
        row, at = (iy + ph) * span + pw, x0 + iy * width
        for ix in range(min(width, span - pw)):
            padded[row + ix] = x[at + ix]
    count = oh * span
    for p in range(count):
        wide[p] = start
    for ky in range(kh):
        for kx in range(kw):
            tap = weights[w0 + ky * kw + kx]
            shifted = padded[ky * span + kx:ky * span + kx + count]
            for p in range(count):
                wide[p] += tap * shifted[p]
    for oy in range(oh):
        for ox in range(ow):
            acc[oy * ow + ox] = wide[oy * span + ox]


@numba.njit(cache=True, nogil=True)
def _taps_by_row(acc: np.ndarray, x: np.ndarray, x0: int, weights: np.ndarray, c: int,
                 start: float, geometry: np.ndarray) -> None:
    """One channel's plane, tap by tap over the output rows and columns whose window reads
    inside the image (no padded copy, no bounds test in the inner loop)."""
    height, width, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw = geometry[:12]
    acc[:] = start
    for ky in range(kh):
        shift_y = ky * dh - ph  # input row of output row oy: oy * sh + shift_y
        y0 = (-shift_y + sh - 1) // sh if shift_y < 0 else 0
        y1 = min(oh, (height - 1 - shift_y) // sh + 1) if height > shift_y else 0
        w0 = (c * kh + ky) * kw
        if kw == 3 and sw == 1:  # a kernel row's three taps in one pass
            _row_of_three(acc, x, weights, w0, x0, y0, y1, shift_y, width, ow, sh, sw,
                          dw, pw)
            continue
        for kx in range(kw):
            shift_x = kx * dw - pw
            x_lo, x_hi = _columns(shift_x, width, ow, sw)
            if x_lo < x_hi:
                _tap(acc, x, weights[w0 + kx], x0, y0, y1, shift_y, shift_x, x_lo,
                     x_hi, width, ow, sh, sw)



SMALL_PLANE = 32
"""Output width up to which a stride-1 depthwise plane goes through a padded copy
(:func:`_small_plane`) instead of tap by tap over its rows."""


DEPTHWISE_GEOMETRY = 12
"""Entries of a depthwise job's geometry: height, width, out height, out width, kernel
height, width, strides, dilations and begin pads (each per axis)."""


@numba.njit(types.boolean(_FLOATS_IN, _FLOATS_IN, _FLOATS_IN, _FLOATS, types.int64, _I64_IN,
                          _FLOATS_IN, types.int64, _FLOATS_IN, *JOBS), cache=True, nogil=True)
def depthwise_jobs(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, out: np.ndarray,
                   channels: int, geometry: np.ndarray, residual: np.ndarray, flags: int,
                   bounds: np.ndarray, counters: np.ndarray, grain: int, bell: np.ndarray,
                   caller: bool, call: int, spins: int) -> bool:
    """A depthwise convolution (one input channel per output channel), ``x`` ``[N, C, H, W]``
    by ``weights`` ``[C, KH, KW]`` (+ ``bias`` ``[C]``) into ``out`` ``[N, C, OH, OW]``, all
    flattened; ``geometry`` as :data:`DEPTHWISE_GEOMETRY`. One job is one channel of one
    image: its output plane (in cache) starts at the bias, then each tap adds its weight times
    the input over the output rows and columns whose window reads inside the image (no
    padded copy, no bounds test in the inner loop, which numba vectorizes where the stride is
    1), then the epilogue of ``flags`` as the plane is stored. Jobs are claimed as in
    :func:`conv_jobs` (whose last six arguments these are)."""
    if caller:
        ring(bell)
    height, width, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw = geometry[:12]
    plane_in, plane_out = height * width, oh * ow
    total = out.shape[0] // plane_out
    acc = np.empty(plane_out, np.float32)
    small = sh == 1 and sw == 1 and dh == 1 and dw == 1 and ow <= SMALL_PLANE
    padded = np.empty((oh + kh - 1) * (ow + kw - 1) + kw if small else 0, np.float32)
    wide = np.empty(oh * (ow + kw - 1) if small else 0, np.float32)
    while True:
        first, last = claim(counters, 0, grain, total)
        if first >= last:
            break
        for job in range(first, last):
            c = job % channels
            x0, o0 = job * plane_in, job * plane_out
            if small:
                _small_plane(acc, x, x0, weights, c * kh * kw, bias[c], height, width, oh, ow,
                             kh, kw, ph, pw, padded, wide)
            else:
                _taps_by_row(acc, x, x0, weights, c, bias[c], geometry)
            if flags:  # loops over slices, one per part of the epilogue: they vectorize
                _plane_epilogue(acc, residual[o0:o0 + plane_out] if flags & RESIDUAL
                                else residual, flags, bounds)
            out[o0:o0 + plane_out] = acc
        done(counters, 0, last - first)
    return finish(counters, total, bell, caller, call, spins)
