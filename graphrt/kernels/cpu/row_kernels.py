"""Compiled (numba) one-pass kernels over the rows of a contiguous 2-D array, for the host.

Imported only through :func:`graphrt.kernels.cpu.jit.row_kernels`, which falls back to the
numpy path where numba is missing. Each row is read from cache once per pass and nothing is
allocated; sums accumulate in float64 (for float32 data too), so no correction for data far
from zero is needed. Compiled for float32 and float64 when this module is first imported (at
``create()``), and cached on disk by numba.

* :func:`layer_norm_rows`: ``(x - mean) / sqrt(var + epsilon) * gamma + beta`` per row.
* :func:`softmax_rows`: ``exp(x - max) / sum``; float32 through :func:`exp32` (vectorized,
  within 1 ulp: 3x numpy's float32 exp, a libm call per element on AVX2 machines), float64
  through libm.
* :func:`layer_norm_jobs`, :func:`softmax_jobs`: the same as job functions
  (:mod:`graphrt.kernels.cpu.job_protocol`), a block of rows a job, for the helper threads.

Example:
    >>> import numpy as np
    >>> x = np.array([[0.0, 1.0]])
    >>> out = np.empty_like(x)
    >>> softmax_rows(x, out)
    >>> out.round(4).tolist()
    [[0.2689, 0.7311]]
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from .job_protocol import JOBS, claim, done, finish, ring

__all__ = ["exp32", "layer_norm_jobs", "layer_norm_rows", "softmax_jobs", "softmax_rows"]

_FAST = {"reassoc", "contract"}  # vectorized sums; NaN and inf keep their meaning

_FLOAT_TYPES = (types.float32, types.float64)


def _rows(dtype: types.Type, readonly: bool = False) -> types.Array:
    return types.Array(dtype, 2, "C", readonly=readonly)


def _vector(dtype: types.Type) -> types.Array:
    return types.Array(dtype, 1, "C", readonly=True)


@intrinsic
def _float32_from_bits(typingctx: Any, bits: Any) -> Any:
    """The float32 whose bit pattern is the int32 ``bits`` (vectorizes, unlike a view)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@numba.njit(inline="always", cache=True, fastmath=_FAST)
def exp32(x: float) -> float:
    """``exp(x)`` of a float32 to within 1 float32 ulp (0.97 measured over [-80, 0]), 0 below
    -87.3 (under float32's smallest normal): Cephes' ``expf``, range reduction by ``ln 2``
    and a degree-7 polynomial, the power of two built from its bits. Vectorizes, where
    numpy's and libm's float32 exp are a call per element on AVX2 machines."""
    small = x < np.float32(-87.3)
    if small:
        x = np.float32(-87.3)
    n = np.floor(x * np.float32(1.44269504088896341) + np.float32(0.5))
    r = x - n * np.float32(0.693359375) + n * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * (r * r) + r + np.float32(1.0)
    value = p * _float32_from_bits(  # type: ignore[call-arg]  # (typingctx: numba's)
        (np.int32(n) + np.int32(127)) << np.int32(23))
    return np.float32(0.0) if small else value


@numba.njit(inline="always", cache=True, fastmath=_FAST, error_model="numpy")
def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, out: np.ndarray,
                epsilon: float, lo: int, hi: int) -> None:
    n = x.shape[1]
    for r in range(lo, hi):
        row = x[r]
        total = 0.0
        for i in range(n):
            total += row[i]
        mean = total / n
        squares = 0.0
        for i in range(n):
            d = row[i] - mean
            squares += d * d
        inverse = 1.0 / math.sqrt(squares / n + epsilon)
        dest = out[r]
        for i in range(n):
            dest[i] = (row[i] - mean) * inverse * gamma[i] + beta[i]


@numba.njit([types.void(_rows(t, True), _vector(t), _vector(t), _rows(t), types.float64)
             for t in _FLOAT_TYPES], cache=True, nogil=True, fastmath=_FAST,
            error_model="numpy")
def layer_norm_rows(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, out: np.ndarray,
                    epsilon: float) -> None:
    """Per row of ``x`` ``[rows, n]``: ``(x - mean) / sqrt(var + epsilon) * gamma + beta``
    into ``out`` (``gamma``, ``beta``: ``[n]``)."""
    _layer_norm(x, gamma, beta, out, epsilon, 0, x.shape[0])


@numba.njit([types.boolean(_rows(t, True), _vector(t), _vector(t), _rows(t), types.float64,
                           types.int64, *JOBS) for t in _FLOAT_TYPES], cache=True, nogil=True,
            fastmath=_FAST, error_model="numpy")
def layer_norm_jobs(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, out: np.ndarray,
                    epsilon: float, block: int, counters: np.ndarray, grain: int,
                    bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """:func:`layer_norm_rows` as a job function (:mod:`graphrt.kernels.cpu.job_protocol`):
    ``block`` rows a job."""
    if caller:
        ring(bell)
    rows = x.shape[0]
    total = (rows + block - 1) // block
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        _layer_norm(x, gamma, beta, out, epsilon, first * block, min(rows, last * block))
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)


def _softmax_range(x: np.ndarray, out: np.ndarray, lo: int, hi: int) -> None:
    """Rows ``lo`` to ``hi`` of softmax, in compiled code only (:func:`_softmax_of` picks
    the float32 or the float64 loop from the dtype when a caller is compiled)."""
    raise NotImplementedError


@numba.njit(inline="always", cache=True, fastmath=_FAST)  # no no-NaN/no-inf assumption
def _row_max(row: np.ndarray) -> Any:
    top = row[0]
    for i in range(1, row.shape[0]):
        top = max(top, row[i])
    return top


@numba.njit(inline="always", cache=True, fastmath=_FAST)
def _scale(dest: np.ndarray, total: float) -> None:
    inverse = dest.dtype.type(1.0) / total
    for i in range(dest.shape[0]):
        dest[i] = dest[i] * inverse


@numba.njit(cache=True, nogil=True, fastmath=_FAST, error_model="numpy")
def _softmax32(x: np.ndarray, out: np.ndarray, lo: int, hi: int) -> None:
    for r in range(lo, hi):
        row, dest = x[r], out[r]
        top = _row_max(row)
        total = np.float32(0.0)  # in float32 as numpy's path (8 partial sums)
        for i in range(row.shape[0]):
            e = exp32(row[i] - top)
            dest[i] = e
            total += e
        _scale(dest, total)


@numba.njit(cache=True, nogil=True, fastmath=_FAST, error_model="numpy")
def _softmax64(x: np.ndarray, out: np.ndarray, lo: int, hi: int) -> None:
    for r in range(lo, hi):
        row, dest = x[r], out[r]
        top = _row_max(row)
        total = 0.0
        for i in range(row.shape[0]):
            e = math.exp(row[i] - top)
            dest[i] = e
            total += e
        _scale(dest, total)


@overload(_softmax_range)
def _softmax_of(x: Any, out: Any, lo: Any, hi: Any) -> Any:
    """float32 rows through :func:`exp32` and a float32 sum, float64 ones through libm."""
    rows = _softmax32 if x.dtype == types.float32 else _softmax64

    def run(x: Any, out: Any, lo: Any, hi: Any) -> None:  # (the typing's annotations)
        rows(x, out, lo, hi)

    return run


@numba.njit([types.void(_rows(t, True), _rows(t)) for t in _FLOAT_TYPES], cache=True,
            nogil=True)
def softmax_rows(x: np.ndarray, out: np.ndarray) -> None:
    """Per row of ``x`` ``[rows, n]`` (float32 or float64): ``exp(x - max) / sum`` into
    ``out`` (a NaN makes its row NaN, as numpy's path does)."""
    _softmax_range(x, out, 0, x.shape[0])


@numba.njit([types.boolean(_rows(t, True), _rows(t), types.int64, *JOBS) for t in _FLOAT_TYPES],
            cache=True, nogil=True)
def softmax_jobs(x: np.ndarray, out: np.ndarray, block: int, counters: np.ndarray, grain: int,
                 bell: np.ndarray, caller: bool, call: int, spins: int) -> bool:
    """:func:`softmax_rows` as a job function (:mod:`graphrt.kernels.cpu.job_protocol`):
    ``block`` rows a job."""
    if caller:
        ring(bell)
    count = x.shape[0]
    total = (count + block - 1) // block
    mine = 0
    while True:
        first, last = claim(counters, 0, grain, total, caller)
        if first >= last:
            break
        _softmax_range(x, out, first * block, min(count, last * block))
        mine += last - first
    done(counters, 0, mine)
    return finish(counters, total, bell, caller, call, spins)
