"""Compiled (numba) job protocol of the host kernels that run over every core: shared claim
counters, the bell that wakes busy-waiting helpers, and the end of a thread's part of a call.

A job function (:func:`graphrt.kernels.cpu.direct_conv.conv_jobs`,
:func:`~graphrt.kernels.cpu.direct_conv.pointwise_jobs`,
:func:`graphrt.kernels.cpu.pool_kernels.max_pool_jobs`) takes its own arguments, then
:data:`JOBS`: ``counters`` (jobs claimed and done per phase, ``[claimed, done, ...]``,
zeroed before the call and shared by every thread of it), ``grain`` (jobs claimed at a
time), ``bell``, ``caller``, ``call`` and ``spins``. The calling thread first rings the bell
(:func:`ring`: this is call number ``bell[0]``); every thread then claims jobs with
:func:`claim` and counts them done with :func:`done` until none is left (a phase before the
jobs, such as the convolution's padded copy, ends with :func:`wait`), and ends with
:func:`finish`: the caller waits for every job
to be done, a helper busy-waits up to ``spins`` looks for the next call's ring. So a helper
that starts late finds less work or none, and no thread waits for another in Python
(:mod:`graphrt.kernels.cpu.crew` runs the calls).

Imported only where numba is installed (through :mod:`graphrt.kernels.cpu.jit`'s modules).

Example:
    >>> import numpy as np
    >>> counters, bell = np.zeros(2, np.int64), np.zeros(1, np.int64)
    >>> claim(counters, 0, 4, 10), claim(counters, 0, 4, 10), claim(counters, 0, 4, 10)
    ((0, 4), (4, 8), (8, 10))
    >>> done(counters, 0, 10)
    >>> finish(counters, 10, bell, True, 0, 0)
    True
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

__all__ = ["COUNTERS", "JOBS", "claim", "done", "finish", "flat", "ring", "wait"]


@intrinsic
def fetch_add(typingctx: Any, counters: Any, index: Any, amount: Any) -> Any:
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


COUNTERS = types.Array(types.int64, 1, "C")
"""The numba type of the counters and the bell."""

JOBS = (COUNTERS, types.int64, COUNTERS, types.boolean, types.int64, types.int64)
"""The numba types of the arguments every job function ends with: counters, grain, bell,
caller, call, spins."""


def flat(dtype: types.Type, readonly: bool = False) -> types.Array:
    """The numba type of a C-contiguous 1-D array of ``dtype``."""
    return types.Array(dtype, 1, "C", readonly=readonly)


@numba.njit(types.int64(COUNTERS), cache=True, nogil=True)
def ring(bell: np.ndarray) -> int:
    """Ring ``bell``: a caller's start of a call, or, with no call queued, the signal for
    helpers busy-waiting on it to stop and block. Returns the rings before."""
    return fetch_add(bell, 0, 1)  # type: ignore[call-arg]  # (typingctx)


_PAIR = types.UniTuple(types.int64, 2)  # type: ignore[no-untyped-call]


@numba.njit(_PAIR(COUNTERS, types.int64, types.int64, types.int64), cache=True, nogil=True)
def claim(counters: np.ndarray, phase: int, grain: int, total: int) -> tuple[int, int]:
    """The next ``grain`` (or fewer) of the ``total`` jobs of ``phase`` for this thread,
    ``(first, last)`` (``first >= last`` when none is left)."""
    first: int = fetch_add(counters, 2 * phase, grain)  # type: ignore[call-arg]  # (typingctx)
    return first, min(first + grain, total)


@numba.njit(types.void(COUNTERS, types.int64, types.int64), cache=True, nogil=True)
def done(counters: np.ndarray, phase: int, count: int) -> None:
    """Count ``count`` claimed jobs of ``phase`` as done."""
    fetch_add(counters, 2 * phase + 1, count)  # type: ignore[call-arg]  # (typingctx)


@numba.njit(types.void(COUNTERS, types.int64, types.int64), cache=True, nogil=True)
def wait(counters: np.ndarray, phase: int, total: int) -> None:
    """Busy-wait until all ``total`` jobs of ``phase`` are done, by any thread: the end of a
    phase every thread must see before the next one."""
    while _read(counters, 2 * phase + 1) < total:  # type: ignore[call-arg]  # (typingctx)
        pass


@numba.njit(types.boolean(COUNTERS, types.int64, COUNTERS, types.boolean, types.int64,
                          types.int64), cache=True, nogil=True)
def finish(counters: np.ndarray, total: int, bell: np.ndarray, caller: bool, call: int,
           spins: int) -> bool:
    """The end of a thread's part of a call of ``total`` jobs: the caller waits for every job
    to be done (returns True); a helper of call number ``call`` busy-waits up to ``spins``
    looks for the next call's ring and returns whether it came."""
    if caller:
        wait(counters, 0, total)  # a helper finishes its last jobs
        return True
    for _ in range(spins):  # noqa: SIM110 (numba compiles no any() over a generator)
        if _read(bell, 0) > call:  # type: ignore[call-arg]
            return True
    return False
