"""Compiled (numba) direct 2-D convolution of float32 on the host: no im2col, no GEMM.

Imported only through :func:`graphrt.lib.ops.host_jit.direct_conv`, which falls back to the
im2col + GEMM path where numba is missing. The micro-kernel (:func:`_tile`, LLVM IR emitted
through a numba intrinsic) keeps 16 output channels x 6 output pixels in 12 eight-wide
accumulators: per tap (input channel and kernel offset) it loads 16 weights (two vectors of
the packed weight) and broadcasts the input value of each of the 6 pixels, 12 fused
multiply-adds, with the bias as the accumulators' start. The 6 pixels run along the output
in row-major order across row ends (each has its own base address into the padded input), so
no lanes are wasted at the end of a row; tiles at the end of the image or the channels go
through a scratch tile.

Shapes: the input ``x`` is the padded data ``[N, C, Hp, Wp]`` flattened (or the data itself
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
    >>> counters, bell = np.zeros(2, np.int64), np.zeros(1, np.int64)
    >>> conv_jobs(x, 9, pixels, 4, taps, w, bias, out, 1, counters, 1, bell, True, 0, 0)
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
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["CHANNELS", "PIXELS", "conv_jobs", "pack_weights", "ring"]

CHANNELS = 16
"""Output channels of one tile (two AVX vectors of float32)."""
PIXELS = 6
"""Output pixels of one tile: 6 x 2 accumulators + 2 weight vectors + 1 broadcast fit the 16
vector registers of AVX2."""

_F32 = ir.FloatType()
_V8 = ir.VectorType(_F32, 8)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def pack_weights(weight: np.ndarray) -> np.ndarray:
    """``weight`` ``[O, C, kh, kw]`` as ``[ceil(O/16), C*kh*kw, 16]`` float32 (zeros past
    ``O``), flattened."""
    o = weight.shape[0]
    blocks = -(-o // CHANNELS)
    rows = np.zeros((blocks * CHANNELS, weight[0].size), np.float32)
    rows[:o] = weight.reshape(o, -1)
    packed: np.ndarray = rows.reshape(blocks, CHANNELS, -1).transpose(0, 2, 1).ravel()
    return packed


def _c64(value: int) -> ir.Constant:
    return ir.Constant(_I64, value)


@intrinsic
def _tile(typingctx: Any, weights: Any, w0: Any, x: Any, x0: Any, pixels: Any, q0: Any,
          taps: Any, bias: Any, b0: Any, out: Any, o0: Any, plane: Any, scratch: Any,
          full: Any) -> Any:
    """One tile: output channels ``b0 .. b0+15`` (weights from ``w0``) of pixels
    ``q0 .. q0+5`` of the image at ``x0``; stored into ``out`` at ``o0`` (channel stride
    ``plane``) when ``full``, else into ``scratch[pixel * 16 + channel]``."""
    sig = types.void(weights, w0, x, x0, pixels, q0, taps, bias, b0, out, o0, plane, scratch,
                     full)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        def data(i: int) -> Any:
            return context.make_array(signature.args[i])(context, builder, args[i]).data

        wp, xp, pp, tp, bp, op, sp = (data(i) for i in (0, 2, 4, 6, 7, 9, 12))
        w0, x0, q0, b0, o0, plane, full = (args[i] for i in (1, 3, 5, 8, 10, 11, 13))
        n_taps = context.make_array(signature.args[6])(context, builder, args[6]).shape
        n_taps = builder.extract_value(n_taps, 0)
        fma = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module, ir.FunctionType(_V8, [_V8, _V8, _V8]), "llvm.fma.v8f32")

        def vector(ptr: Any, index: Any) -> Any:
            return builder.bitcast(builder.gep(ptr, [index]), _V8.as_pointer())

        bases = [builder.add(x0, builder.load(builder.gep(pp, [builder.add(q0, _c64(p))])))
                 for p in range(PIXELS)]
        start = [builder.load(vector(bp, builder.add(b0, _c64(8 * h))), align=4)
                 for h in range(2)]
        entry = builder.basic_block
        loop = builder.append_basic_block("tile.loop")
        body = builder.append_basic_block("tile.body")
        done = builder.append_basic_block("tile.done")
        builder.branch(loop)
        builder.position_at_end(loop)
        t = builder.phi(_I64)
        t.add_incoming(_c64(0), entry)
        accs = []
        for _ in range(PIXELS):
            for h in range(2):
                acc = builder.phi(_V8)
                acc.add_incoming(start[h], entry)
                accs.append(acc)
        builder.cbranch(builder.icmp_signed("<", t, n_taps), body, done)
        builder.position_at_end(body)
        wi = builder.add(w0, builder.mul(t, _c64(CHANNELS)))
        w = [builder.load(vector(wp, builder.add(wi, _c64(8 * h))), align=4) for h in range(2)]
        offset = builder.sext(builder.load(builder.gep(tp, [t])), _I64)
        undef = ir.Constant(_V8, ir.Undefined)
        splat = ir.Constant(ir.VectorType(_I32, 8), [0] * 8)
        new: list[Any] = []
        for p in range(PIXELS):
            value = builder.load(builder.gep(xp, [builder.add(bases[p], offset)]))
            broadcast = builder.shuffle_vector(
                builder.insert_element(undef, value, ir.Constant(_I32, 0)), undef, splat)
            new.extend(builder.call(fma, [broadcast, w[h], accs[2 * p + h]]) for h in range(2))
        t.add_incoming(builder.add(t, _c64(1)), builder.basic_block)
        for acc, value in zip(accs, new, strict=True):
            acc.add_incoming(value, builder.basic_block)
        builder.branch(loop)
        builder.position_at_end(done)
        scatter = builder.append_basic_block("tile.scatter")
        spill = builder.append_basic_block("tile.spill")
        end = builder.append_basic_block("tile.end")
        builder.cbranch(builder.icmp_signed("!=", full, ir.Constant(full.type, 0)), scatter,
                        spill)
        builder.position_at_end(scatter)
        for p in range(PIXELS):
            for h in range(2):
                for lane in range(8):
                    index = builder.add(o0, builder.add(
                        builder.mul(plane, _c64(8 * h + lane)), _c64(p)))
                    builder.store(builder.extract_element(accs[2 * p + h],
                                                          ir.Constant(_I32, lane)),
                                  builder.gep(op, [index]))
        builder.branch(end)
        builder.position_at_end(spill)
        for p in range(PIXELS):
            for h in range(2):
                builder.store(accs[2 * p + h], vector(sp, _c64(CHANNELS * p + 8 * h)), align=4)
        builder.branch(end)
        builder.position_at_end(end)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _fetch_add(typingctx: Any, counters: Any, index: Any, amount: Any) -> Any:
    """``counters[index] += amount`` as one atomic step; returns the value before."""
    sig = types.int64(counters, index, amount)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.atomic_rmw("add", builder.gep(data, [args[1]]), args[2], "seq_cst")

    return sig, codegen


@intrinsic
def _read(typingctx: Any, counters: Any, index: Any) -> Any:
    """``counters[index]`` as written by another thread (an atomic load, never hoisted out of
    a loop)."""
    sig = types.int64(counters, index)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.load_atomic(builder.gep(data, [args[1]]), "acquire", 8)

    return sig, codegen


_COUNTERS = types.Array(types.int64, 1, "C")


@numba.njit(types.int64(_COUNTERS), cache=True, nogil=True)
def ring(bell: np.ndarray) -> int:
    """Ring ``bell`` with no call queued: helpers busy-waiting on it stop and block."""
    return _fetch_add(bell, 0, 1)  # type: ignore[call-arg]  # (typingctx)


def _flat(dtype: types.Type, readonly: bool = False) -> types.Array:
    return types.Array(dtype, 1, "C", readonly=readonly)


_SIGNATURE = types.boolean(
    _flat(types.float32, True), types.int64, _flat(types.int64, True), types.int64,
    _flat(types.int32, True), _flat(types.float32, True), _flat(types.float32, True),
    _flat(types.float32), types.int64, _COUNTERS, types.int64, _COUNTERS, types.boolean,
    types.int64, types.int64)


@numba.njit(_SIGNATURE, cache=True, nogil=True)
def conv_jobs(x: np.ndarray, image: int, pixels: np.ndarray, length: int, taps: np.ndarray,
              weights: np.ndarray, bias: np.ndarray, out: np.ndarray, channels: int,
              counters: np.ndarray, grain: int, bell: np.ndarray, caller: bool, call: int,
              spins: int) -> bool:
    """Run tiles of the convolution until none is left, on the calling thread (``caller``)
    or on a helper thread joining it.

    Tiles are numbered image-major, then by block of 16 output channels, then along the
    output (so one block's packed weights stay in cache over its tiles), and claimed
    ``grain`` at a time from ``counters[0]`` (every thread of one call shares ``counters``,
    zeroed before), so a helper that starts late finds less or nothing left;
    ``counters[1]`` counts the tiles done. The caller first rings ``bell`` (adds 1: this is
    call number ``bell[0]``, whose helpers are waiting), and returns once every tile is
    done, by any thread. A helper of call number ``call``, when out of tiles, busy-waits up
    to ``spins`` looks for the next call's ring and returns whether it came. ``image``:
    elements per padded image of ``x``; ``length``: output pixels per image; ``channels``:
    output channels."""
    if caller:
        _fetch_add(bell, 0, 1)  # type: ignore[call-arg]  # (typingctx: numba's)
    n_taps = taps.shape[0]
    blocks = (channels + CHANNELS - 1) // CHANNELS
    tiles = (length + PIXELS - 1) // PIXELS
    total = (out.shape[0] // (channels * length)) * blocks * tiles
    scratch = np.empty(CHANNELS * PIXELS, np.float32)
    while True:
        first: int = _fetch_add(counters, 0, grain)  # type: ignore[call-arg]  # (typingctx)
        if first >= total:
            break
        last = min(first + grain, total)
        for job in range(first, last):
            tile = job % tiles
            block = (job // tiles) % blocks
            img = job // (tiles * blocks)
            q0 = tile * PIXELS
            count = min(PIXELS, length - q0)
            kept = min(CHANNELS, channels - block * CHANNELS)
            o0 = (img * channels + block * CHANNELS) * length + q0
            full = count == PIXELS and kept == CHANNELS
            _tile(weights, block * n_taps * CHANNELS, x, img * image, pixels, q0, taps, bias,
                  block * CHANNELS, out, o0, length, scratch, full)
            if not full:
                for p in range(count):
                    for c in range(kept):
                        out[o0 + c * length + p] = scratch[p * CHANNELS + c]
        _fetch_add(counters, 1, last - first)
    if caller:
        while _read(counters, 1) < total:
            pass  # a helper finishes its last tiles
        return True
    for _ in range(spins):  # noqa: SIM110 (numba compiles no any() over a generator)
        if _read(bell, 0) > call:
            return True
    return False
