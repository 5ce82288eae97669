"""The parts the compiled (numba) micro-kernels of the host are built of: the epilogue flags
their job functions take, LLVM IR helpers for eight-wide float32 vectors (AVX2) emitted
through numba intrinsics (:func:`accumulate` emits a reduction loop over vector
accumulators, :func:`stores` the epilogue's store variants, :func:`transpose` an 8x8
transpose), the 8x8 interleave of 8 channel planes (:func:`interleave8`), and the scalar
store of a tile short of pixels or channels (:func:`from_scratch`).

Imported only where numba is installed (through :mod:`graphrt.kernels.cpu.direct_conv`,
which :mod:`graphrt.kernels.cpu.jit` loads).

Example:
    >>> import numpy as np
    >>> tile = np.array([1, -2, 3, -4], np.float32)  # 2 pixels of 2 channels, pixel-major
    >>> out = np.empty(4, np.float32)                # 2 channel planes of 2 pixels (NCHW)
    >>> from_scratch(out, 0, 2, tile, 2, 2, 1, 2, out[:0], RELU, out[:0])
    >>> out.tolist()
    [1.0, 3.0, 0.0, 0.0]
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

from .job_protocol import flat

__all__ = [
    "BLOCKED",
    "CLIP",
    "F32",
    "FLOATS",
    "FLOATS_IN",
    "GROUPED",
    "I32",
    "I64",
    "I64_IN",
    "LANES",
    "RELU",
    "RESIDUAL",
    "V8",
    "VNNI",
    "WIDE",
    "accumulate",
    "array_data",
    "c64",
    "clip_of",
    "epilogue",
    "finished",
    "fma_of",
    "from_scratch",
    "interleave8",
    "layouts",
    "next_tile",
    "prefetch",
    "rectified",
    "spill_tile",
    "splat",
    "store_vector",
    "stores",
    "tile_at",
    "transpose",
    "vector_at",
]

LANES = 8
"""Channels of one depthwise group and of a block of a blocked layout (a vector, a channel per
lane), and pixels of a depthwise tile."""
RESIDUAL = 1
"""Epilogue flag: add the residual (shaped as the output) to the result."""
RELU = 2
"""Epilogue flag: ``max(result, 0)`` (NaN stays NaN)."""
BLOCKED = 8
"""Epilogue flag: the output is blocked, ``[N, O/8, OH, OW, 8]`` (the 8 channels of a pixel
side by side, MLAS's NCHWc): stored a vector per pixel and 8 channels, as the micro-kernels
hold them (O a multiple of 8)."""
GROUPED = 16
"""Job flag of the direct convolution: its taps run in groups of 8 offsets one apart (a
blocked plan's: the 8 channels of a block at one kernel offset), so that a tile loads one
offset per group and reads the 8 channels at fixed displacements from it."""
CLIP = 4
"""Epilogue flag: ``min(max(result, low), high)`` with the job's ``bounds`` (NaN stays NaN;
ReLU6 is ``bounds`` (0, 6)), applied in registers as the micro-kernels store (a pass over
the stored tile of its own cost the 16-channel expansions of MobileNetV2 up to 50%)."""

F32 = ir.FloatType()
V8 = ir.VectorType(F32, 8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)


FLOATS, FLOATS_IN = flat(types.float32), flat(types.float32, True)


def _target_features() -> str:
    """The CPU features numba compiles for (``+avx2,-avx512f,...``): ``NUMBA_CPU_FEATURES``
    where set, else the host's. The same string is part of the key of numba's disk cache, so
    a kernel shaped by it is never loaded on a target it was not shaped for."""
    from numba.core import codegen, config
    chosen = getattr(config, "CPU_FEATURES", None)
    features: str = (chosen if chosen is not None
                     else codegen.get_host_cpu_features())  # type: ignore[no-untyped-call]
    return features


_FEATURES = _target_features().split(",")
WIDE = "+avx512f" in _FEATURES
"""Whether the target's vectors hold 16 float32 (AVX-512F): the matrix products' tiles then
hold 6 rows x 32 columns in 12 sixteen-wide accumulators (two packed panels of 16 columns
side by side), where AVX2's hold 6 x 16 in 12 eight-wide ones. On an AVX-512 Xeon the
eight-wide tile ran a 504 x 512 by 512 x 512 product at 1.69x ONNX Runtime's time (one
thread), the sixteen-wide one at 0.94x."""
VNNI = WIDE and "+avx512vnni" in _FEATURES and "+avx512bw" in _FEATURES
"""Whether the target has AVX-512 VNNI (``vpdpbusd``: 4 products of unsigned and signed
bytes added into each of 16 int32 lanes): the quantized convolution's tiles then hold 32
output channels (:mod:`graphrt.kernels.cpu.integer_conv`)."""
I64_IN = flat(types.int64, True)


def c64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def splat(builder: Any, value: Any, lanes: int = LANES) -> Any:
    """``value`` (float) in every lane of a ``lanes``-wide vector."""
    undef = ir.Constant(ir.VectorType(value.type, lanes), ir.Undefined)
    return builder.shuffle_vector(builder.insert_element(undef, value, ir.Constant(I32, 0)),
                                  undef, ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


def fma_of(builder: Any, lanes: int = LANES) -> Any:
    """The ``llvm.fma.v<lanes>f32`` intrinsic of ``builder``'s module."""
    vector = ir.VectorType(F32, lanes)
    return cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
        builder.module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.v{lanes}f32")


def array_data(context: Any, builder: Any, signature: Any, args: Any, i: int) -> Any:
    return context.make_array(signature.args[i])(context, builder, args[i])


def vector_at(builder: Any, ptr: Any, index: Any, lanes: int = LANES) -> Any:
    """A pointer to the ``lanes``-wide vector of float32 at ``ptr[index]``."""
    return builder.bitcast(builder.gep(ptr, [index]), ir.VectorType(F32, lanes).as_pointer())


def accumulate(builder: Any, count: Any, starts: list[Any],
               step: Callable[[Any, list[Any]], list[Any]], unroll: int = 1) -> list[Any]:
    """Emit ``for t in range(count): accs = step(t, accs)`` over vector accumulators that
    start at ``starts`` (each ``step`` emits one iteration's body); returns their final
    values. With ``unroll`` > 1, a loop of ``unroll`` steps a turn (their indices ``t + i``,
    constant offsets from one ``t``) runs first, then the rest one at a time."""
    if unroll > 1:
        turns = builder.sdiv(count, c64(unroll))

        def turn(u: Any, accs: list[Any]) -> list[Any]:
            t = builder.mul(u, c64(unroll))
            for i in range(unroll):
                accs = step(builder.add(t, c64(i)), accs)
            return accs

        accs = _loop(builder, turns, starts, turn)
        done = builder.mul(turns, c64(unroll))
        return _loop(builder, builder.sub(count, done), accs,
                     lambda t, accs: step(builder.add(done, t), accs))
    return _loop(builder, count, starts, step)


def _loop(builder: Any, count: Any, starts: list[Any],
          step: Callable[[Any, list[Any]], list[Any]]) -> list[Any]:
    """:func:`accumulate`'s loop of one step a turn."""
    entry = builder.basic_block
    loop, body, done = (builder.append_basic_block(f"accumulate.{part}")
                        for part in ("loop", "body", "done"))
    builder.branch(loop)
    builder.position_at_end(loop)
    t = builder.phi(I64)
    t.add_incoming(c64(0), entry)
    accs = []
    for start in starts:
        acc = builder.phi(start.type)
        acc.add_incoming(start, entry)
        accs.append(acc)
    builder.cbranch(builder.icmp_signed("<", t, count), body, done)
    builder.position_at_end(body)
    new = step(t, accs)
    t.add_incoming(builder.add(t, c64(1)), builder.basic_block)
    for acc, value in zip(accs, new, strict=True):
        acc.add_incoming(value, builder.basic_block)
    builder.branch(loop)
    builder.position_at_end(done)
    return accs


def stores(builder: Any, flags: Any, store: Any) -> None:
    """Emit ``store(add_residual: bool, relu: bool)`` four times, behind branches on the
    :data:`RESIDUAL` and :data:`RELU` bits of ``flags`` (the residual is only read where it
    is given; a relu decided per store took 9 instructions a vector, a mask broadcast)."""
    end = builder.append_basic_block("store.end")
    has = builder.icmp_signed("!=", builder.and_(flags, c64(RESIDUAL)), c64(0))
    relu = builder.icmp_signed("!=", builder.and_(flags, c64(RELU)), c64(0))
    plain, summed = (builder.append_basic_block(f"store.{part}")
                     for part in ("plain", "residual"))
    builder.cbranch(has, summed, plain)
    for block, residual in ((plain, False), (summed, True)):
        builder.position_at_end(block)
        kept, rectify = (builder.append_basic_block(f"store.{part}")
                         for part in ("kept", "relu"))
        builder.cbranch(relu, rectify, kept)
        for part, rectified_ in ((kept, False), (rectify, True)):
            builder.position_at_end(part)
            store(residual, rectified_)
            builder.branch(end)
    builder.position_at_end(end)


def layouts(builder: Any, flags: Any, store: Any, blocked: Any) -> None:
    """Emit :func:`stores` of ``store`` (an NCHW output) and of ``blocked`` (a blocked one),
    behind a branch on the :data:`BLOCKED` bit of ``flags``."""
    plain, packed, end = (builder.append_basic_block(f"layout.{part}")
                          for part in ("plain", "blocked", "end"))
    builder.cbranch(builder.icmp_signed("!=", builder.and_(flags, c64(BLOCKED)), c64(0)),
                    packed, plain)
    for block, emit in ((plain, store), (packed, blocked)):
        builder.position_at_end(block)
        stores(builder, flags, emit)
        builder.branch(end)
    builder.position_at_end(end)


def rectified(builder: Any, value: Any, relu: bool) -> Any:
    """``value < 0 ? 0 : value`` where ``relu`` (NaN stays NaN, as the relu op), else
    ``value``."""
    if not relu:
        return value
    zero = ir.Constant(value.type, None)
    return builder.select(builder.fcmp_ordered("<", value, zero), zero, value)


def clip_of(builder: Any, flags: Any, bounds: Any, vector: bool, lanes: int = LANES
            ) -> tuple[Any, Any, Any]:
    """Whether ``flags`` has :data:`CLIP` (i1), and the low and high bounds (from the
    ``bounds`` pointer; in every one of ``lanes`` lanes where ``vector``)."""
    clip = builder.icmp_signed("!=", builder.and_(flags, c64(CLIP)), c64(0))
    low, high = (builder.load(builder.gep(bounds, [c64(i)])) for i in (0, 1))
    if vector:
        low, high = splat(builder, low, lanes), splat(builder, high, lanes)
    return clip, low, high


def finished(builder: Any, value: Any, relu: bool, clip: Any, low: Any, high: Any) -> Any:
    """``value`` after relu (where ``relu``) and the clip to ``low .. high`` (where
    ``clip``), NaN staying NaN: the epilogue applied in registers as the results are
    stored."""
    value = rectified(builder, value, relu)
    clipped = builder.select(builder.fcmp_ordered("<", value, low), low, value)
    clipped = builder.select(builder.fcmp_ordered(">", clipped, high), high, clipped)
    return builder.select(clip, clipped, value)


def store_vector(builder: Any, value: Any, out: Any, residual: Any, index: Any,
                 add_residual: bool, relu: bool, clip: Any, low: Any, high: Any) -> None:
    """Store the vector ``value`` at ``out[index]`` after the epilogue: ``+ residual[index]``
    where ``add_residual``, then :func:`finished`'s relu and clip."""
    lanes = value.type.count
    if add_residual:
        value = builder.fadd(value, builder.load(vector_at(builder, residual, index, lanes),
                                                 align=4))
    builder.store(finished(builder, value, relu, clip, low, high),
                  vector_at(builder, out, index, lanes), align=4)


def spill_tile(builder: Any, accs: list[Any], vectors: int, pixels: int, channels: int,
          scratch: Any) -> None:
    """Store a tile's accumulators (``vectors`` per pixel, pixel-major) into ``scratch`` (a
    pointer to their lane type), ``channels`` lanes per pixel."""
    for p in range(pixels):
        for h in range(vectors):
            acc = accs[vectors * p + h]
            at = builder.gep(scratch, [c64(channels * p + acc.type.count * h)])
            builder.store(acc, builder.bitcast(at, acc.type.as_pointer()), align=4)


def transpose(builder: Any, rows: list[Any]) -> list[Any]:
    """The 8x8 transpose of eight vectors (``rows[i][j]`` becomes ``result[j][i]``): three
    rounds of shuffles, as AVX's unpack, shuffle and 128-bit permute."""
    def pairs(vectors: list[Any], low: list[int], high: list[int], order: list[tuple[int, int]]
              ) -> list[Any]:
        mask = [ir.Constant(ir.VectorType(I32, 8), m) for m in (low, high)]
        return [builder.shuffle_vector(vectors[a], vectors[b], m) for a, b in order
                for m in mask]

    t = pairs(rows, [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15],
              [(0, 1), (2, 3), (4, 5), (6, 7)])  # t0, t1 from rows 0-1; t2, t3 from 2-3 ...
    s = pairs(t, [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15],
              [(0, 2), (1, 3), (4, 6), (5, 7)])  # s0, s1 | s2, s3 | s4, s5 | s6, s7
    low, high = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
    columns = pairs(s, low, high, [(0, 4), (1, 5), (2, 6), (3, 7)])  # 0, 4, 1, 5, 2, 6, 3, 7
    return [columns[i] for i in (0, 2, 4, 6, 1, 3, 5, 7)]


@intrinsic
def interleave8(typingctx: Any, x: Any, at: Any, stride: Any, lanes: Any, to: Any) -> Any:
    """Eight pixels of eight channels (``x[at + c * stride + j]``, ``c``, ``j`` < 8) into
    ``lanes`` from ``to``, the channels of each pixel side by side (``lanes[to + 8 j + c]``):
    eight loads, a transpose, eight stores."""
    sig = types.void(x, at, stride, lanes, to)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        xp, lp = (array_data(context, builder, signature, args, i).data for i in (0, 3))
        at, stride, to = args[1], args[2], args[4]
        rows = [builder.load(vector_at(builder, xp, builder.add(at, builder.mul(stride, c64(c)))),
                             align=4) for c in range(LANES)]
        for j, column in enumerate(transpose(builder, rows)):
            builder.store(column, vector_at(builder, lp, builder.add(to, c64(LANES * j))),
                          align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch(typingctx: Any, x: Any, at: Any) -> Any:
    """Ask for the cache line of ``x[at]`` in the level-2 cache, to be read soon
    (``llvm.prefetch``, locality 2: x86 ``prefetcht1``): a hint, which neither faults nor
    waits. A tile's residual, fetched a tile ahead this way, arrives while the tile is
    summed; asked for at the tile itself it stalls the store, and a line fetched into the
    level-1 cache a whole tile early is evicted by the tile's own reads."""
    sig = types.void(x, at)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        byte = ir.IntType(8).as_pointer()
        line = builder.bitcast(builder.gep(array_data(context, builder, signature, args, 0).data,
                                           [args[1]]), byte)
        hint = builder.module.declare_intrinsic("llvm.prefetch", [byte], ir.FunctionType(
            ir.VoidType(), [byte, I32, I32, I32]))
        builder.call(hint, [line, ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(nogil=True)
def fill_at(out: np.ndarray, at: int, count: int, value: Any) -> None:
    """``out[at:at + count] = value`` without a view (a view costs two atomic reference
    counts), by unsigned indices (no wraparound check, so the loop vectorizes)."""
    start = np.uint64(at)
    for j in range(np.uint64(count)):
        out[start + j] = value


@numba.njit(nogil=True)
def copy_at(out: np.ndarray, to: int, x: np.ndarray, at: int, count: int) -> None:
    """``out[to:to + count] = x[at:at + count]``, as :func:`fill_at` writes."""
    start, source = np.uint64(to), np.uint64(at)
    for j in range(np.uint64(count)):
        out[start + j] = x[source + j]


@numba.njit(cache=True, nogil=True)
def epilogue(value: float, residual: np.ndarray, at: int, flags: int, bounds: np.ndarray
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
def from_scratch(out: np.ndarray, o0: int, plane: int, scratch: np.ndarray, channels: int,
                  pixels: int, channel_step: int, pixel_step: int, residual: np.ndarray,
                  flags: int, bounds: np.ndarray) -> None:
    """The ``channels`` x ``pixels`` results of a tile short of either, summed into
    ``scratch`` (channel ``c``, pixel ``p`` at ``c * channel_step + p * pixel_step``), stored
    into ``out`` from ``o0`` with the epilogue of ``flags``: channels ``plane`` apart, or
    where ``flags`` has :data:`BLOCKED`, channel ``c`` of pixel ``p`` at
    ``o0 + (c // 8) * 8 * plane + 8 * p + c % 8``."""
    blocked = flags & BLOCKED
    for c in range(channels):
        for p in range(pixels):
            at = (o0 + (c // LANES) * LANES * plane + LANES * p + c % LANES if blocked
                  else o0 + c * plane + p)
            out[at] = epilogue(scratch[c * channel_step + p * pixel_step], residual, at, flags,
                                bounds)


@numba.njit(cache=True, nogil=True)
def tile_at(job: int, tiles: int, blocks: int, strip: int) -> tuple[int, int, int, int, int]:
    """Where tile job ``job`` of a direct convolution lies: ``(image, strip, block, tile,
    width)`` (its strip's number, its block of output channels, its place along the strip,
    and the strip's tiles: the last strip may be shorter). Jobs are numbered image-major,
    then by strip of ``strip`` of an image's ``tiles`` tiles, then by block (of ``blocks``),
    then along the strip."""
    img, rest = divmod(job, tiles * blocks)
    band, rest = divmod(rest, strip * blocks)
    width = min(strip, tiles - band * strip)
    block, tile = divmod(rest, width)
    return img, band, block, tile, width


@numba.njit(cache=True, nogil=True)
def next_tile(img: int, band: int, block: int, tile: int, width: int, tiles: int,
              blocks: int, strip: int) -> tuple[int, int, int, int, int]:
    """:func:`tile_at` of the job after the one at ``(img, band, block, tile, width)``, by
    counting on (a 64-bit division costs tens of cycles: a short reduction's whole tile,
    three times over)."""
    tile += 1
    if tile == width:
        tile, block = 0, block + 1
        if block == blocks:
            block, band = 0, band + 1
            if band * strip >= tiles:
                band, img = 0, img + 1
            width = min(strip, tiles - band * strip)
    return img, band, block, tile, width
