"""Compiled (numba) passes around the quantized convolution and matrix product on the host
(:mod:`graphrt.kernels.cpu.qconv`, :mod:`graphrt.kernels.cpu.qmatmul`): the data's 8-bit
integers minus their zero point as float32, the exact float32 sums of a chunk of input
channels added into int32, and the requantization of the sums into 8-bit integers (per
output channel of a convolution, per column of a product).

Imported only through :func:`graphrt.kernels.cpu.jit.quantized_kernels` (None without numba).

The two passes over every element are job functions
(:mod:`~graphrt.kernels.cpu.job_protocol`: one job per plane), run on every core by
:func:`graphrt.kernels.cpu.crew.run_jobs`.

Example:
    >>> import numpy as np
    >>> x = np.array([0, 3, 255, 7], np.uint8)     # one image, one channel, 2x2
    >>> out = np.empty(4, np.float32)
    >>> alone = lambda: (np.zeros(2, np.int64), 1, np.zeros(1, np.int64), True, 0, 0)
    >>> shifted(x, np.float32(3), 1, 1, 0, 1, 2, 2, 1, 1, 2, 2, out, *alone())
    True
    >>> out.tolist()
    [-3.0, 0.0, 252.0, 4.0]
    >>> y = np.empty(4, np.uint8)
    >>> requantize(out, np.zeros(0, np.int32), np.array([0.5]), 10.0, 0.0, 255.0, 1, 4, y,
    ...            *alone())
    True
    >>> y.tolist()                                 # rint(-1.5) = -2, rint(126.0), rint(2.0)
    [8, 10, 136, 12]
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types

from .job_protocol import JOBS, claim, done, finish, ring

__all__ = ["add_exact", "requantize", "requantize_columns", "shifted"]

_INTS = (types.uint8, types.int8)
_I64 = types.int64


def _flat(dtype: types.Type, readonly: bool = False) -> types.Array:
    return types.Array(dtype, 1, "C", readonly=readonly)


@numba.njit(cache=True, nogil=True)
def _shift_plane(x: np.ndarray, zero: float, base: int, sh: int, sw: int, w: int, oh: int,
                 ow: int, out: np.ndarray) -> None:
    """One plane of :func:`shifted`: the data plane from ``x[base]`` (rows ``w`` long) into
    ``out``."""
    for i in range(oh):
        start = base + i * sh * w
        if sw == 1:
            row = x[start:start + ow]
            dest = out[i * ow:(i + 1) * ow]
            for j in range(ow):
                dest[j] = np.float32(row[j]) - zero
        else:
            for j in range(ow):
                out[i * ow + j] = np.float32(x[start + j * sw]) - zero


@numba.njit([types.boolean(_flat(t, True), types.float32, *(_I64,) * 10, _flat(types.float32),
                           *JOBS) for t in _INTS], cache=True, nogil=True)
def shifted(x: np.ndarray, zero: float, images: int, channels: int, first: int, count: int,
            h: int, w: int, sh: int, sw: int, oh: int, ow: int, out: np.ndarray,
            counters: np.ndarray, grain: int, bell: np.ndarray, caller: bool, call: int,
            spins: int) -> bool:
    """A job function (:mod:`~graphrt.kernels.cpu.job_protocol`), one job per output plane:
    ``out[n, c, i, j] = x[n, first + c, i * sh, j * sw] - zero`` in float32 (exact: 8-bit
    integers), ``x`` ``[images, channels, h, w]`` and ``out`` ``[images, count, oh, ow]``
    flattened."""
    if caller:
        ring(bell)
    total = images * count
    mine = 0
    while True:
        begin, end = claim(counters, 0, grain, total, caller)
        if begin >= end:
            break
        for job in range(begin, end):
            n, c = divmod(job, count)
            _shift_plane(x, zero, (n * channels + first + c) * h * w, sh, sw, w, oh, ow,
                         out[job * oh * ow:(job + 1) * oh * ow])
        mine += end - begin
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)


@numba.njit(types.void(_flat(types.float32, True), _flat(types.int32), types.boolean),
            cache=True, nogil=True)
def add_exact(part: np.ndarray, acc: np.ndarray, first: bool) -> None:
    """``acc (+)= part``: float32 sums that are exact integers, into int32 (which wraps, as
    ONNX's int32 accumulator does)."""
    if first:
        for i in range(acc.shape[0]):
            acc[i] = np.int32(part[i])
    else:
        for i in range(acc.shape[0]):
            acc[i] += np.int32(part[i])


@numba.njit([types.boolean(_flat(a, True), _flat(types.int32, True),
                           _flat(types.float64, True), types.float64, types.float64,
                           types.float64, _I64, _I64, _flat(t), *JOBS)
             for a in (types.float32, types.int32) for t in _INTS], cache=True, nogil=True)
def requantize(acc: np.ndarray, bias: np.ndarray, multiplier: np.ndarray, zero: float,
               low: float, high: float, channels: int, length: int, out: np.ndarray,
               counters: np.ndarray, grain: int, bell: np.ndarray, caller: bool, call: int,
               spins: int) -> bool:
    """A job function, one job per output plane: ``out = clip(rint((acc + bias) *
    multiplier + zero), low, high)`` computed in float64 (as ONNX's reference does), ``acc``
    and ``out`` ``[N, channels, length]`` flattened, ``bias`` per channel (empty: none),
    ``multiplier`` per channel or one value."""
    if caller:
        ring(bell)
    total = acc.shape[0] // length if length else 0
    mine = 0
    while True:
        begin, end = claim(counters, 0, grain, total, caller)
        if begin >= end:
            break
        for job in range(begin, end):
            o = job % channels
            m = multiplier[o] if multiplier.shape[0] > 1 else multiplier[0]
            b = np.float64(bias[o]) if bias.shape[0] else 0.0
            src = acc[job * length:(job + 1) * length]
            dest = out[job * length:(job + 1) * length]
            for p in range(length):
                v = np.rint((np.float64(src[p]) + b) * m + zero)
                dest[p] = min(max(v, low), high)
        mine += end - begin
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)


@numba.njit([types.boolean(_flat(types.float32, True), _flat(types.float64, True),
                           types.float64, types.float64, types.float64, _I64, _flat(t), *JOBS)
             for t in _INTS], cache=True, nogil=True)
def requantize_columns(acc: np.ndarray, multiplier: np.ndarray, zero: float, low: float,
                       high: float, columns: int, out: np.ndarray, counters: np.ndarray,
                       grain: int, bell: np.ndarray, caller: bool, call: int, spins: int
                       ) -> bool:
    """A job function, one job per row: ``out = clip(rint(acc * multiplier + zero), low,
    high)`` in float64, ``acc`` and ``out`` ``[rows, columns]`` flattened, ``multiplier``
    per column or one value (a quantized matrix product's requantization)."""
    if caller:
        ring(bell)
    total = acc.shape[0] // columns if columns else 0
    per_column = multiplier.shape[0] > 1
    mine = 0
    while True:
        begin, end = claim(counters, 0, grain, total, caller)
        if begin >= end:
            break
        for row in range(begin, end):
            src = acc[row * columns:(row + 1) * columns]
            dest = out[row * columns:(row + 1) * columns]
            for n in range(columns):
                m = multiplier[n] if per_column else multiplier[0]
                v = np.rint(np.float64(src[n]) * m + zero)
                dest[n] = min(max(v, low), high)
        mine += end - begin
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)
