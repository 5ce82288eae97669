"""Compiled (numba) integer direct convolution of 8-bit data on the host (AVX2): the
quantized convolution's (``qlinear_conv``) tiles in int32, requantized as they are stored.

Imported only through :func:`graphrt.kernels.cpu.jit.integer_conv`, which declines CPUs
without AVX2 (the quantized convolution then runs on the float kernels,
:mod:`graphrt.kernels.cpu.qconv`).

The data is first copied into a padded buffer of 32-bit words, ``[N, C/4, Hp, Wp]``: each
word holds 4 input channels of one pixel, their bytes minus nothing (8-bit unsigned; signed
data has its top bit flipped, which adds 128 to its values and its zero point), the border
and the channels past ``C`` filled with the zero point. The weight minus its zero points is
packed once per loaded weight as ``[ceil(O/P), T, P, 4]`` signed bytes (``P`` :data:`PACK`
output channels side by side, 8 or 16; ``T`` words of taps:
4 input channels at one kernel offset). The micro-kernel (:func:`_tile`, LLVM IR emitted
through a numba intrinsic) keeps 8 output channels x 8 output pixels in 8 int32 vectors:
per word of taps it loads the 8 channels' 32 weight bytes (a vector) and, per pixel,
broadcasts the pixel's word to every lane, then ``vpmaddubsw`` (unsigned data x signed
weight, adjacent products added in pairs into int16) and ``vpmaddwd`` by ones (pairs added
into int32) add 4 taps x 8 channels into the pixel's accumulator. The pair sums are exact
where every pair of adjacent weights has ``|w0| + |w1| <= 128`` (``255 * 128`` fits int16):
the caller checks that once per weight (ONNX Runtime's 7-bit ``reduce_range`` weights
always have it) and runs the float kernels where it fails.

The stores requantize as ONNX's reference does, in float64: ``clip(rint((acc + bias) *
multiplier + zero), low, high)``, ``bias`` per output channel with the data's zero point
folded in (``bias - x_zero * sum(w)``: the sums include the zero point's products), into
the NCHW 8-bit output: the 8 x 8 bytes transposed in registers, a channel's 8 pixels in one
store (a tile of 16 channels x 6 pixels stored a byte at a time took 17-32% of a 1x1 or a
stem convolution, the 8 x 8 tile 5-25%); the output's dtype only changes the bounds. A tile
short of pixels or channels goes through a scratch tile.

Example:
    >>> import numpy as np
    >>> x = np.array([1, 2, 3, 4], np.uint8)         # one 2x2 image, one channel
    >>> geometry = np.array([1, 1, 2, 2, 2, 2, 0, 0, 1, 0, 0, 1, 1], np.int64)
    >>> padded = np.empty(4, np.uint32)
    >>> weights = np.zeros(32, np.int8)
    >>> weights[0] = 3                               # output channel 0: 3 * x
    >>> pixels = np.array([0, 1, 2, 3, 3, 3, 3, 3], np.int64)
    >>> taps = np.array([0], np.int32)
    >>> scale = np.zeros(8), np.ones(8)              # bias, multiplier
    >>> levels = np.array([1.0, 0.0, 255.0])         # zero point, bounds
    >>> out = np.empty(4, np.uint8)
    >>> counters, bell = np.zeros(4, np.int64), np.zeros(1, np.int64)
    >>> no_sums = np.empty(0, np.int32)              # requantized into out
    >>> qconv_jobs(x, geometry, padded, 4, pixels, 4, taps, weights, *scale, levels, out,
    ...            no_sums, 1, 1, counters, 1, bell, True, 0, 0)
    True
    >>> out.tolist()
    [4, 7, 10, 13]
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .job_protocol import COUNTERS, GUIDED, JOBS, claim, done, finish, flat, ring, wait
from .kernel_parts import (
    I32,
    I64_IN,
    VNNI,
    WIDE,
    accumulate,
    array_data,
    c64,
    fill_at,
    next_tile,
    spill_tile,
    tile_at,
    transpose,
)

__all__ = ["CHANNELS", "GEOMETRY", "GUIDED", "JOB_CHANNELS", "PACK", "PIXELS", "QUAD",
           "qconv_jobs"]

CHANNELS = 8
"""Output channels of one tile (a vector of 8 int32 lanes)."""
PIXELS = 8
"""Output pixels of one tile: 8 accumulators, a weight vector, a broadcast and a product in
the 16 vector registers of AVX2; a channel's 8 results are 8 bytes of its plane."""
QUAD = 4
"""Input taps (channels) of one 32-bit word of the padded data."""
PACK = 2 * CHANNELS if VNNI else CHANNELS
"""Output channels the packed weight holds side by side (``[ceil(O/PACK), T, PACK, 4]``):
16 with AVX-512 VNNI, a 64-byte vector a word of taps for :data:`_wide_tile` (joined from
two 32-byte blocks of 8 it took a shuffle a vector), else 8; the AVX2 tile reads its 8 of
them."""
JOB_CHANNELS = 4 * CHANNELS if VNNI else CHANNELS
"""Output channels of one job of :func:`qconv_jobs`: with AVX-512 VNNI, 32 (a tile of four
blocks of 8, :data:`_wide_tile`), else one block of 8."""

GEOMETRY = 13
"""Entries of the padded copy's geometry (:func:`qconv_jobs`' ``geometry``): images,
channels, h, w, hp, wp, top, left, words of channels per job, the flip (128 for signed
data, else 0), the fill byte (the zero point, flipped), and the steps between the rows and
the columns it copies (1, or a strided 1x1 convolution's strides: then top and left are 0
and the copy holds just the pixels the windows read)."""

_I8 = ir.IntType(8)
_I16 = ir.IntType(16)
_BYTES = ir.VectorType(_I8, 32)
_SHORTS = ir.VectorType(_I16, 16)
_INTS = ir.VectorType(I32, 8)
_QUADS = ir.VectorType(I32, 4)
_F64 = ir.DoubleType()
_D4 = ir.VectorType(_F64, 4)

_U8, _U8_IN = flat(types.uint8), flat(types.uint8, True)
_U32 = flat(types.uint32)
_F64_IN = flat(types.float64, True)


def _function(builder: Any, name: str, result: Any, *args: Any) -> Any:
    return cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
        builder.module, ir.FunctionType(result, list(args)), name)


def _splat(builder: Any, value: Any, vector: Any) -> Any:
    undef = ir.Constant(vector, ir.Undefined)
    return builder.shuffle_vector(
        builder.insert_element(undef, value, ir.Constant(I32, 0)), undef,
        ir.Constant(ir.VectorType(I32, vector.count), [0] * vector.count))


def _at(builder: Any, pointer: Any, index: Any, vector: Any) -> Any:
    return builder.bitcast(builder.gep(pointer, [index]), vector.as_pointer())


def _store_sums(builder: Any, accs: list[Any], bias: Any, b0: Any, sums: Any, o0: Any,
                plane: Any) -> None:
    """The tile's int32 sums plus the bias (``bias[b0 ..]``, float64 holding integers) into
    ``sums`` from ``o0``: an 8 x 8 transpose, a channel's 8 pixels in one 32-byte store."""
    shift = [builder.fptosi(builder.load(
        _at(builder, bias, builder.add(b0, c64(4 * part)), _D4), align=8), _QUADS)
        for part in range(2)]
    offset = builder.shuffle_vector(shift[0], shift[1], ir.Constant(_INTS, list(range(8))))
    columns = transpose(builder, [builder.add(acc, offset) for acc in accs])
    for c in range(CHANNELS):
        at = builder.gep(sums, [builder.add(o0, builder.mul(plane, c64(c)))])
        builder.store(columns[c], builder.bitcast(at, _INTS.as_pointer()), align=4)


def _store_requantized(builder: Any, accs: list[Any], bias: Any, multiplier: Any, b0: Any,
                       levels: Any, out: Any, o0: Any, plane: Any) -> None:
    """The tile's sums requantized into the bytes of ``out`` from ``o0``: per 4 lanes (8 on
    AVX-512) in float64, ``clip(rint((acc + bias) * multiplier + zero), low, high)``
    (``levels``: zero, low, high), then the 8 x 8 bytes transposed, a channel's 8 pixels in
    one store."""
    width = 8 if WIDE else 4  # doubles a vector: a pixel's 8 channels at once on AVX-512
    doubles = ir.VectorType(_F64, width)
    lanes_of = ir.VectorType(I32, width)
    rint = _function(builder, f"llvm.rint.v{width}f64", doubles, doubles)
    larger = _function(builder, f"llvm.maxnum.v{width}f64", doubles, doubles, doubles)
    smaller = _function(builder, f"llvm.minnum.v{width}f64", doubles, doubles, doubles)
    zero, low, high = (_splat(builder, builder.load(builder.gep(levels, [c64(i)])), doubles)
                       for i in range(3))
    parts = CHANNELS // width
    b, m = ([builder.load(_at(builder, ptr, builder.add(b0, c64(width * part)), doubles),
                          align=8) for part in range(parts)] for ptr in (bias, multiplier))
    undef = ir.Constant(_INTS, ir.Undefined)
    level = []
    for acc in accs:  # a pixel's 8 channels
        pieces = []
        for part in range(parts):  # lanes 0-3, then 4-7 (or all 8)
            lanes = acc if parts == 1 else builder.shuffle_vector(acc, undef, ir.Constant(
                lanes_of, [width * part + i for i in range(width)]))
            value = builder.sitofp(lanes, doubles)
            value = builder.fadd(builder.fmul(builder.fadd(value, b[part]), m[part]), zero)
            value = builder.call(rint, [value])
            value = builder.call(smaller, [builder.call(larger, [value, low]), high])
            pieces.append(builder.fptosi(value, lanes_of))
        words = pieces[0] if parts == 1 else builder.shuffle_vector(
            pieces[0], pieces[1], ir.Constant(_INTS, list(range(8))))
        level.append(builder.trunc(words, ir.VectorType(_I8, 8)))
    while len(level) > 1:  # pixel-major bytes: 8 pixels x 8 channels
        width = 2 * level[0].type.count
        level = [builder.shuffle_vector(level[i], level[i + 1], ir.Constant(
            ir.VectorType(I32, width), list(range(width)))) for i in range(0, len(level), 2)]
    planes = builder.shuffle_vector(level[0], ir.Constant(level[0].type, ir.Undefined),
                                    ir.Constant(ir.VectorType(I32, 64), [
                                        p * 8 + c for c in range(8) for p in range(PIXELS)]))
    rows = builder.bitcast(planes, ir.VectorType(ir.IntType(64), 8))
    for c in range(CHANNELS):
        at = builder.gep(out, [builder.add(o0, builder.mul(plane, c64(c)))])
        builder.store(builder.extract_element(rows, ir.Constant(I32, c)),
                      builder.bitcast(at, ir.IntType(64).as_pointer()), align=1)


@intrinsic
def _tile(typingctx: Any, weights: Any, w0: Any, x: Any, x0: Any, pixels: Any, q0: Any,
          taps: Any, bias: Any, multiplier: Any, b0: Any, levels: Any, out: Any, sums: Any,
          o0: Any, plane: Any, scratch: Any, whole: Any) -> Any:
    """One tile: output channels ``b0 .. b0+7`` (weights from ``w0``) of pixels
    ``q0 .. q0+7`` of the image at word ``x0``, where ``whole`` requantized with ``bias``,
    ``multiplier`` (from ``b0``) and ``levels`` (zero point, low, high) into ``out`` at
    ``o0`` (channel stride ``plane``), or plus ``bias`` into ``sums`` where that is not
    empty; else its int32 sums into ``scratch[pixel * 8 + channel]``."""
    sig = types.void(weights, w0, x, x0, pixels, q0, taps, bias, multiplier, b0, levels, out,
                     sums, o0, plane, scratch, whole)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wp, xp, pp, tp, bp, mp, lp, op, rp, sp = (
            array_data(context, builder, signature, args, i).data
            for i in (0, 2, 4, 6, 7, 8, 10, 11, 12, 15))
        w0, x0, q0, b0, o0, plane, whole = (args[i] for i in (1, 3, 5, 9, 13, 14, 16))
        raw = builder.icmp_signed("!=", builder.extract_value(
            array_data(context, builder, signature, args, 12).shape, 0), c64(0))
        n_taps = builder.extract_value(
            array_data(context, builder, signature, args, 6).shape, 0)
        pairs = _function(builder, "llvm.x86.avx2.pmadd.ub.sw", _SHORTS, _BYTES, _BYTES)
        quads = _function(builder, "llvm.x86.avx2.pmadd.wd", _INTS, _SHORTS, _SHORTS)
        ones = ir.Constant(_SHORTS, [1] * 16)
        bases = [builder.add(x0, builder.load(builder.gep(pp, [builder.add(q0, c64(p))])))
                 for p in range(PIXELS)]

        def tap(t: Any, accs: list[Any]) -> list[Any]:
            wi = builder.add(w0, builder.mul(t, c64(PACK * QUAD)))
            w = builder.load(_at(builder, wp, wi, _BYTES), align=1)
            offset = builder.sext(builder.load(builder.gep(tp, [t])), ir.IntType(64))
            new: list[Any] = []
            for p in range(PIXELS):
                word = builder.load(builder.gep(xp, [builder.add(bases[p], offset)]))
                data = builder.bitcast(_splat(builder, word, _INTS), _BYTES)
                summed = builder.call(quads, [builder.call(pairs, [data, w]), ones])
                new.append(builder.add(accs[p], summed))
            return new

        accs = accumulate(builder, n_taps, [ir.Constant(_INTS, None)] * PIXELS, tap)
        stored, spill, end, summed, store = (
            builder.append_basic_block(f"tile.{part}")
            for part in ("stored", "spill", "end", "sums", "store"))
        builder.cbranch(builder.icmp_signed("!=", whole, ir.Constant(whole.type, 0)),
                        stored, spill)
        builder.position_at_end(stored)
        builder.cbranch(raw, summed, store)
        builder.position_at_end(summed)
        _store_sums(builder, accs, bp, b0, rp, o0, plane)
        builder.branch(end)
        builder.position_at_end(store)
        _store_requantized(builder, accs, bp, mp, b0, lp, op, o0, plane)
        builder.branch(end)
        builder.position_at_end(spill)
        spill_tile(builder, accs, 1, PIXELS, CHANNELS, sp)
        builder.branch(end)
        builder.position_at_end(end)
        return context.get_dummy_value()

    return sig, codegen


_WIDE_INTS = ir.VectorType(I32, 16)


def _wide_tile_of(blocks: int) -> Any:
    """The tile of ``blocks`` (2 or 4) blocks of 8 output channels x 8 pixels on AVX-512
    VNNI (:data:`~graphrt.kernels.cpu.kernel_parts.VNNI`): 16 channels' weights of a word of
    taps in a 64-byte vector (:data:`PACK`; the next 16 ``wblock`` bytes after), a pixel's
    word broadcast to its 16 lanes, and one ``vpdpbusd`` (4 products of
    unsigned data and signed weight bytes added into each int32 lane, exactly, with no int16
    step) per pixel and vector: per word, ``blocks / 2`` loads and 8 broadcasts for ``4 *
    blocks`` instructions, where the AVX2 tile takes one load, 8 broadcasts and 24
    instructions for one block. Stored a block of 8 channels at a time as :func:`_tile`
    stores where ``whole``, else spilled into ``scratch[pixel * 8 * blocks + channel]`` (with
    a 7x7 plane's last tile, of one pixel, on the AVX2 tiles, the int8 ResNet-18's
    512-channel layers took 0.53 ms, 0.48 so)."""
    vectors = blocks // 2

    @intrinsic
    def tile(typingctx: Any, weights: Any, w0: Any, wblock: Any, x: Any, x0: Any, pixels: Any,
             q0: Any, taps: Any, bias: Any, multiplier: Any, b0: Any, levels: Any, out: Any,
             sums: Any, o0: Any, plane: Any, scratch: Any, whole: Any) -> Any:
        sig = types.void(weights, w0, wblock, x, x0, pixels, q0, taps, bias, multiplier, b0,
                         levels, out, sums, o0, plane, scratch, whole)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            wp, xp, pp, tp, bp, mp, lp, op, rp, sp = (
                array_data(context, builder, signature, args, i).data
                for i in (0, 3, 5, 7, 8, 9, 11, 12, 13, 16))
            w0, wblock, x0, q0, b0, o0, plane, whole = (args[i]
                                                       for i in (1, 2, 4, 6, 10, 14, 15, 17))
            raw = builder.icmp_signed("!=", builder.extract_value(
                array_data(context, builder, signature, args, 13).shape, 0), c64(0))
            n_taps = builder.extract_value(
                array_data(context, builder, signature, args, 7).shape, 0)
            dot = _function(builder, "llvm.x86.avx512.vpdpbusd.512", _WIDE_INTS, _WIDE_INTS,
                            _WIDE_INTS, _WIDE_INTS)
            bases = [builder.add(x0, builder.load(builder.gep(pp, [builder.add(q0, c64(p))])))
                     for p in range(PIXELS)]
            starts = [builder.mul(wblock, c64(j)) for j in range(vectors)]

            def tap(t: Any, accs: list[Any]) -> list[Any]:
                wi = builder.add(w0, builder.mul(t, c64(PACK * QUAD)))
                w = [builder.load(_at(builder, wp, builder.add(wi, start), _WIDE_INTS), align=1)
                     for start in starts]
                offset = builder.sext(builder.load(builder.gep(tp, [t])), ir.IntType(64))
                new: list[Any] = []
                for p in range(PIXELS):
                    word = builder.load(builder.gep(xp, [builder.add(bases[p], offset)]))
                    data = _splat(builder, word, _WIDE_INTS)
                    new.extend(builder.call(dot, [accs[vectors * p + j], data, w[j]])
                               for j in range(vectors))
                return new

            accs = accumulate(builder, n_taps, [ir.Constant(_WIDE_INTS, None)] * (
                PIXELS * vectors), tap)
            undef = ir.Constant(_WIDE_INTS, ir.Undefined)

            def block(k: int) -> list[Any]:
                """Block ``k``'s 8 channels of each pixel's sums."""
                lanes = ir.Constant(ir.VectorType(I32, 8), [8 * (k % 2) + i for i in range(8)])
                return [builder.shuffle_vector(accs[vectors * p + k // 2], undef, lanes)
                        for p in range(PIXELS)]

            stored, spill, summed, store, end = (builder.append_basic_block(f"tile.{part}")
                                                 for part in ("stored", "spill", "sums", "store",
                                                              "end"))
            builder.cbranch(builder.icmp_signed("!=", whole, ir.Constant(whole.type, 0)),
                            stored, spill)
            builder.position_at_end(spill)
            spill_tile(builder, accs, vectors, PIXELS, CHANNELS * blocks, sp)
            builder.branch(end)
            builder.position_at_end(stored)
            builder.cbranch(raw, summed, store)
            builder.position_at_end(summed)
            for k in range(blocks):
                _store_sums(builder, block(k), bp, builder.add(b0, c64(CHANNELS * k)), rp,
                            builder.add(o0, builder.mul(plane, c64(CHANNELS * k))), plane)
            builder.branch(end)
            builder.position_at_end(store)
            for k in range(blocks):
                _store_requantized(builder, block(k), bp, mp, builder.add(
                    b0, c64(CHANNELS * k)), lp, op, builder.add(
                    o0, builder.mul(plane, c64(CHANNELS * k))), plane)
            builder.branch(end)
            builder.position_at_end(end)
            return context.get_dummy_value()

        return sig, codegen

    return tile


_wide_tile, _wide_pair = _wide_tile_of(4), _wide_tile_of(2)


_SPAN = 16
"""Pixels :func:`_words` interleaves at a time."""


def _masked(builder: Any, kind: str, vector: Any, pointer: Any, mask: Any, *value: Any) -> Any:
    """``llvm.masked.load`` (``value``: none) or ``llvm.masked.store`` (the vector) of
    ``vector`` at ``pointer``, the lanes of ``mask``: the others neither read nor written
    (AVX-512's masked moves; elsewhere one lane at a time)."""
    name = f"llvm.masked.{kind}.v{vector.count}i{vector.element.width}.p0"
    ptr = vector.as_pointer()
    align = ir.Constant(I32, 1)
    if kind == "load":
        load = _function(builder, name, vector, ptr, align.type, mask.type, vector)
        return builder.call(load, [pointer, align, mask, ir.Constant(vector, None)])
    store = _function(builder, name, ir.VoidType(), vector, ptr, align.type, mask.type)
    return builder.call(store, [value[0], pointer, align, mask])


def _words_of(step: int) -> Any:
    """The intrinsic that turns up to :data:`_SPAN` pixels (every ``step``-th) of 4 channels
    into their words."""

    @intrinsic
    def words(typingctx: Any, x: Any, at: Any, plane: Any, padded: Any, to: Any, flip: Any,
              count: Any) -> Any:
        """``count`` (at most :data:`_SPAN`) pixels of 4 channels, ``x[at + i * plane +
        j * step]``, into their words ``padded[to + j]`` (channel ``i`` in byte ``i``) xor
        ``flip``: 4 vector loads, one byte shuffle, one store, masked where ``count`` is
        short (a word a time, the copy of a 64-channel 56x56 image took 97 us, a sixth of
        the convolution that reads it; this way 19 us)."""
        sig = types.void(x, at, plane, padded, to, flip, count)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            xp, pp = (array_data(context, builder, signature, args, i).data for i in (0, 3))
            at, plane, to, flip, count = args[1], args[2], args[4], args[5], args[6]
            source = ir.VectorType(_I8, _SPAN * step)
            target = ir.VectorType(I32, _SPAN)
            starts = [_at(builder, xp, builder.add(at, builder.mul(plane, c64(i))), source)
                      for i in range(QUAD)]
            size = builder.extract_value(
                array_data(context, builder, signature, args, 0).shape, 0)
            last = builder.add(at, builder.mul(plane, c64(QUAD - 1)))  # the last line's start
            whole = builder.icmp_signed("==", count, c64(_SPAN))
            within = builder.icmp_signed("<=", builder.add(last, c64(_SPAN * step)), size)
            lanes = ir.Constant(ir.VectorType(ir.IntType(64), _SPAN * step),
                                list(range(_SPAN * step)))
            reach = _splat(builder, builder.sub(builder.mul(count, c64(step)), c64(step - 1)),
                           ir.VectorType(ir.IntType(64), _SPAN * step))
            read = builder.icmp_signed("<", lanes, reach)  # the bytes of count pixels
            with builder.if_else(builder.and_(whole, within)) as (plain, masked):
                with plain:
                    lines_a = [builder.load(start, align=1) for start in starts]
                    block_a = builder.basic_block
                with masked:
                    lines_b = [_masked(builder, "load", source, start, read)
                               for start in starts]
                    block_b = builder.basic_block
            lines = []
            for a, b in zip(lines_a, lines_b, strict=True):
                phi = builder.phi(source)
                phi.add_incoming(a, block_a)
                phi.add_incoming(b, block_b)
                lines.append(phi)
            width = _SPAN * step
            pairs = [builder.shuffle_vector(lines[i], lines[i + 1], ir.Constant(
                ir.VectorType(I32, 2 * width), list(range(2 * width)))) for i in (0, 2)]
            mask = [i * width + j * step for j in range(_SPAN) for i in range(QUAD)]
            data = builder.bitcast(builder.shuffle_vector(pairs[0], pairs[1], ir.Constant(
                ir.VectorType(I32, QUAD * _SPAN), mask)), target)
            data = builder.xor(data, _splat(builder, flip, target))
            at_out = _at(builder, pp, to, target)
            with builder.if_else(whole) as (plain, masked):
                with plain:
                    builder.store(data, at_out, align=4)
                with masked:
                    wrote = builder.icmp_signed("<", ir.Constant(
                        ir.VectorType(ir.IntType(64), _SPAN), list(range(_SPAN))),
                        _splat(builder, count, ir.VectorType(ir.IntType(64), _SPAN)))
                    _masked(builder, "store", target, at_out, wrote, data)
            return context.get_dummy_value()

        return sig, codegen

    return words


_words, _every_other = _words_of(1), _words_of(2)


@numba.njit(types.void(_U8_IN, _U32, I64_IN, types.int64, types.int64), cache=True,
            nogil=True)
def _interleave(x: np.ndarray, padded: np.ndarray, geometry: np.ndarray, first: int,
                last: int) -> None:
    """Words of channels ``first .. last - 1`` (over the batch) of ``x`` ``[N, C, h, w]``
    into ``padded`` ``[N, C/4, hp, wp]`` from row ``top`` and column ``left``, as
    :data:`GEOMETRY` says: 4 channels of a pixel to a word (channel ``4k + i`` in byte
    ``i``, flipped), the fill byte around them and past ``C``; every ``step``-th row and
    column of ``x``."""
    channels, h, w, hp, wp, top, left = (geometry[1], geometry[2], geometry[3], geometry[4],
                                         geometry[5], geometry[6], geometry[7])
    flip = np.uint32(geometry[9] * 0x01010101)
    fill = np.uint32(geometry[10] * 0x01010101)
    down, across = geometry[11], geometry[12]
    words = (channels + QUAD - 1) // QUAD
    lead = min(left, wp)
    rows = max(0, min((h + down - 1) // down, hp - top))
    cols = max(0, min((w + across - 1) // across, wp - lead))
    plane = h * w
    for job in range(first, last):  # (no slices: a view costs two atomic reference counts)
        n, k = divmod(job, words)
        c0 = n * channels + k * QUAD
        present = min(QUAD, channels - k * QUAD)
        for i in range(hp):
            start = (job * hp + i) * wp  # the line's first word
            r = i - top
            if r < 0 or r >= rows:
                fill_at(padded, start, wp, fill)
                continue
            fill_at(padded, start, lead, fill)
            fill_at(padded, start + lead + cols, wp - lead - cols, fill)
            start += lead
            at = c0 * plane + r * down * w
            if present == QUAD and across <= 2:
                for j in range(0, cols, _SPAN):
                    count = min(_SPAN, cols - j)
                    if across == 1:
                        _words(x, at + j, plane, padded, start + j, flip, count)
                    else:
                        _every_other(x, at + 2 * j, plane, padded, start + j, flip, count)
                continue
            for j in range(cols):
                value = fill
                for i_ in range(present):
                    byte = np.uint32(x[at + i_ * plane + j * across]) ^ (flip & np.uint32(0xFF))
                    shift = np.uint32(8 * i_)
                    value = (value & ~(np.uint32(0xFF) << shift)) | (byte << shift)
                padded[start + j] = value


@numba.njit(types.void(_U8_IN, _U32, I64_IN, COUNTERS, types.boolean), cache=True,
            nogil=True)
def _interleave_phase(x: np.ndarray, padded: np.ndarray, geometry: np.ndarray,
                      counters: np.ndarray, caller: bool) -> None:
    """This thread's share of the padded copy (phase 1 of ``counters``, jobs of
    ``geometry[8]`` words of channels); returns once the copy is whole."""
    total = geometry[0] * ((geometry[1] + QUAD - 1) // QUAD)
    chunk = geometry[8]
    jobs = (total + chunk - 1) // chunk
    mine = 0
    while True:
        job, end = claim(counters, 1, 1, jobs, caller)
        if job >= end:
            break
        _interleave(x, padded, geometry, job * chunk, min(total, (job + 1) * chunk))
        mine += 1
    done(counters, 1, mine)
    wait(counters, 1, jobs)


@numba.njit(cache=True, nogil=True)
def _from_scratch(out: np.ndarray, sums: np.ndarray, o0: int, plane: int,
                  scratch: np.ndarray, channels: int, pixels: int, bias: np.ndarray,
                  multiplier: np.ndarray, b0: int, levels: np.ndarray, stride: int) -> None:
    """The ``channels`` x ``pixels`` sums of a tile short of either (``scratch``, pixel-
    major, ``stride`` channels a pixel), requantized into ``out`` from ``o0``, or plus the
    bias into ``sums`` where it is given."""
    zero, low, high = levels[0], levels[1], levels[2]
    for c in range(channels):
        b, m = bias[b0 + c], multiplier[b0 + c]
        for p in range(pixels):
            if sums.shape[0]:
                sums[o0 + c * plane + p] = scratch[p * stride + c] + np.int32(b)
                continue
            value = np.rint((np.float64(scratch[p * stride + c]) + b) * m + zero)
            out[o0 + c * plane + p] = np.uint8(np.int32(min(max(value, low), high)) & 0xFF)


@numba.njit(types.boolean(_U8_IN, I64_IN, _U32, types.int64, I64_IN, types.int64,
                          flat(types.int32, True), flat(types.int8, True), _F64_IN, _F64_IN,
                          _F64_IN, _U8, flat(types.int32), types.int64, types.int64,
                          *JOBS), cache=True, nogil=True)
def qconv_jobs(data: np.ndarray, geometry: np.ndarray, padded: np.ndarray, image: int,
               pixels: np.ndarray, length: int, taps: np.ndarray, weights: np.ndarray,
               bias: np.ndarray, multiplier: np.ndarray, levels: np.ndarray, out: np.ndarray,
               sums: np.ndarray, channels: int, strip: int, counters: np.ndarray, grain: int,
               bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """A job function (:mod:`~graphrt.kernels.cpu.job_protocol`; ``counters`` has 2
    phases): the quantized convolution of ``data`` (8-bit, as bytes), on the calling thread
    (``caller``) or on a helper thread joining it.

    The threads first copy ``data`` into ``padded`` together (phase 1, :data:`GEOMETRY`),
    then run the tiles (phase 0), numbered as :func:`graphrt.kernels.cpu.direct_conv.
    conv_jobs` numbers its own: image-major, by strip of ``strip`` tiles, by block of
    :data:`JOB_CHANNELS` output channels, along the strip. ``image``: words per padded
    image; ``pixels``: per output pixel (padded to whole tiles) its window's word in an
    image; ``taps``: per word of taps its offset from the window's; ``weights``:
    ``[ceil(O/PACK), T, PACK, 4]``;
    ``bias`` and ``multiplier``: per output channel (whole blocks); ``levels``: the output's
    zero point, low and high bounds; ``out``: ``[N, channels, length]`` bytes. Where
    ``sums`` (``[N, channels, length]`` int32) is not empty, the int32 sums plus the bias
    (an integer) go there instead, not requantized (``conv_integer``)."""
    if caller:
        ring(bell)
    _interleave_phase(data, padded, geometry, counters, caller)
    n_taps = taps.shape[0]
    blocks = (channels + JOB_CHANNELS - 1) // JOB_CHANNELS
    tiles = (length + PIXELS - 1) // PIXELS
    total = geometry[0] * blocks * tiles
    scratch = np.empty(JOB_CHANNELS * PIXELS, np.int32)
    wblock = n_taps * PACK * QUAD  # bytes between two packed blocks' weights
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        img, band, block, tile, width = tile_at(first, tiles, blocks, strip)
        for _ in range(first, last):
            q0 = (band * strip + tile) * PIXELS
            count = min(PIXELS, length - q0)
            c = block * JOB_CHANNELS  # the job's first channel, then the next tile's
            end = min(channels, c + JOB_CHANNELS)
            while VNNI and end - c >= 2 * CHANNELS:
                kept = (4 if end - c >= 4 * CHANNELS else 2) * CHANNELS
                o0 = (img * channels + c) * length + q0
                w0 = (c // PACK) * wblock
                whole = count == PIXELS
                if kept == 4 * CHANNELS:
                    _wide_tile(weights, w0, wblock, padded, img * image, pixels, q0, taps,
                               bias, multiplier, c, levels, out, sums, o0, length, scratch,
                               whole)
                else:
                    _wide_pair(weights, w0, wblock, padded, img * image, pixels, q0, taps,
                               bias, multiplier, c, levels, out, sums, o0, length, scratch,
                               whole)
                if not whole:
                    _from_scratch(out, sums, o0, length, scratch, kept, count, bias,
                                  multiplier, c, levels, kept)
                c += kept
            while c < end:
                kept = min(CHANNELS, end - c)
                o0 = (img * channels + c) * length + q0
                w0 = (c // PACK) * wblock + (c % PACK) * QUAD  # its 8 of the packed block
                whole = count == PIXELS and kept == CHANNELS
                _tile(weights, w0, padded, img * image, pixels, q0, taps, bias, multiplier, c,
                      levels, out, sums, o0, length, scratch,
                      whole)  # type: ignore[call-arg]
                if not whole:
                    _from_scratch(out, sums, o0, length, scratch, kept, count, bias,
                                  multiplier, c, levels, CHANNELS)
                c += CHANNELS
            img, band, block, tile, width = next_tile(img, band, block, tile, width, tiles,
                                                      blocks, strip)
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)
