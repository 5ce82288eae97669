"""The compiled max pool on the host: float32 and 8-bit 2-D windows over every core
(:mod:`graphrt.kernels.cpu.pool_kernels`), its windows decided at ``create()``; and the
compiled global average pool.

Example:
    >>> import numpy as np
    >>> x = np.arange(16.0, dtype=np.float32).reshape(1, 1, 4, 4)
    >>> out = np.empty((1, 1, 2, 2), dtype=np.float32)
    >>> window_max(np, x, out, [(3, 2, 1, 1), (3, 2, 1, 1)])
    >>> out[0, 0].tolist()
    [[5.0, 7.0], [13.0, 15.0]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from types import ModuleType
from typing import Any

import numpy as np

from ...ops import TensorType
from ...ops.pooling import AxisWindow, window_reduce
from . import jit
from .crew import run_jobs

__all__ = ["max_pool_call", "mean_pool_call", "window_max"]


_POOL_JOBS = 64
"""Jobs (bands of output rows) a compiled max pool is cut into, at least: enough for the
threads to share them evenly."""

_LOWEST = {"float32": np.float32(-np.inf), "uint8": np.uint8(0), "int8": np.int8(-128)}
"""The dtypes the compiled max pool takes, and the value of their padding (the lowest)."""

_MIN_POOL_WORK = 100_000
"""Window positions (outputs x kernel size) below which a compiled max pool runs on the
calling thread alone: bringing in the helpers costs tens of microseconds."""


def window_max(xp: Any, x: Any, out: Any, windows: Sequence[AxisWindow]) -> None:
    """``out`` = the max of ``x`` over each pool window (padding skipped): through the
    compiled kernel over every core for host float32 or 8-bit data with 2-D windows where
    numba is installed, else :func:`~graphrt.ops.pooling.window_reduce` (checked on every
    call: the prepared kernel of :func:`max_pool_call` decides once)."""
    if not _compiled_max(jit.pool_kernels(), x, out, windows):
        window_reduce(xp, x, out, windows, "max")


def max_pool_call(x: TensorType, out: TensorType, windows: Sequence[AxisWindow], *,
                  dynamic: bool) -> Callable[..., None] | None:
    """A max pool ``kernel(x, out)`` over ``windows`` through the compiled kernel (compiled,
    or loaded from numba's cache, now), or None where it does not apply (numba missing, not
    float32, uint8 or int8, not 2-D, an empty output). A static node's kernel pools with no
    check; a dynamic node's checks each call's shapes."""
    kernels = jit.pool_kernels()
    if not (kernels is not None and len(windows) == 2 and x.dtype == out.dtype
            and x.dtype in _LOWEST and 0 not in out.shape):
        return None
    if dynamic:
        def checked(x: Any, out: Any) -> None:
            if out.size and not _compiled_max(kernels, x, out, windows):
                window_reduce(np, x, out, windows, "max")

        return checked

    geometry = _max_geometry(x.shape, out.shape, windows)  # once, at create()
    lowest = _LOWEST[x.dtype]

    def kernel(x: Any, out: Any) -> None:
        _run_max(kernels, x, out, lowest, geometry)

    return kernel


def _compiled_max(kernels: ModuleType | None, x: Any, out: Any,
                  windows: Sequence[AxisWindow]) -> bool:
    """:func:`window_max` through the compiled ``kernels`` (None: numba is missing or the
    data is off the host); False (nothing done) where they do not apply."""
    if not (kernels is not None and len(windows) == 2 and isinstance(x, np.ndarray)
            and x.dtype.name in _LOWEST and out.dtype == x.dtype
            and out.flags.c_contiguous and out.size > 0):
        return False
    _run_max(kernels, x, out, _LOWEST[x.dtype.name],
             _max_geometry(x.shape, out.shape, windows))
    return True


def _max_geometry(x: Sequence[int], out: Sequence[int], windows: Sequence[AxisWindow]
                  ) -> tuple[tuple[int, ...], bool, int]:
    """What :func:`_run_max` passes the compiled pool for data of shape ``x`` (NCHW, or
    blocked: ``[N, C/8, H, W, 8]``) pooled into ``out``: its geometry (planes, h, w, oh, ow,
    the windows, rows per job, lanes), whether the helpers join, and the grain."""
    (kh, sh, dh, top), (kw, sw, dw, left) = windows
    planes, (h, w), (oh, ow) = x[0] * x[1], x[2:4], out[2:4]
    lanes = x[4] if len(x) == 5 else 1
    bands = min(oh, -(-_POOL_JOBS // planes))
    rows = -(-oh // bands)
    jobs = planes * -(-oh // rows)
    return ((planes, h, w, oh, ow, kh, kw, sh, sw, dh, dw, top, left, rows, lanes),
            prod(out) * kh * kw >= _MIN_POOL_WORK, max(1, jobs // _POOL_JOBS))


def _run_max(kernels: ModuleType, x: Any, out: Any, lowest: Any,
             geometry: tuple[tuple[int, ...], bool, int]) -> None:
    """The compiled max pool of ``x`` into a C-contiguous ``out`` of its dtype, with the
    padding value ``lowest`` and :func:`_max_geometry`'s ``geometry``."""
    shape, parallel, grain = geometry
    run_jobs(kernels.max_pool_jobs, parallel, (
        np.ascontiguousarray(x).reshape(-1), out.reshape(-1), lowest, *shape,
        np.zeros(2, np.int64), grain))


def mean_pool_call(x: TensorType, out: TensorType, *, dynamic: bool, blocked: bool = False
                   ) -> Callable[..., None] | None:
    """A global average pool ``kernel(x, out)`` of float32 ``[N, C, H, W]`` data through the
    compiled kernel, or of ``[N, C/8, H, W, 8]`` where ``blocked`` (the eight lanes of a block
    summed side by side); None where it does not apply (numba missing, another dtype, dynamic
    shapes, an empty input)."""
    kernels = jit.pool_kernels()
    if kernels is None or dynamic or x.dtype != "float32" or len(x.shape) != 4 + blocked or (
            not all(x.shape)):
        return None
    length = x.shape[2] * x.shape[3]
    means = kernels.block_means if blocked else kernels.plane_means

    def kernel(x: Any, out: Any) -> None:
        into = out if out.flags.c_contiguous else np.empty(out.shape, np.float32)
        means(np.ascontiguousarray(x).reshape(-1), length, into.reshape(-1))
        if into is not out:
            out[...] = into

    return kernel
