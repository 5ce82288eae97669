"""Compiled (numba) job protocol of the host kernels that run over every core: shared claim
counters, the bell that wakes busy-waiting helpers, and the end of a thread's part of a call.

A job function (:func:`graphrt.kernels.cpu.direct_conv.conv_jobs`,
:func:`~graphrt.kernels.cpu.direct_conv.pointwise_jobs`,
:func:`graphrt.kernels.cpu.pool_kernels.max_pool_jobs`) takes its own arguments, then
:data:`JOBS`: ``counters`` (jobs claimed and done per phase, ``[claimed, done, ...]``,
zeroed before the call and shared by every thread of it), ``grain`` (jobs claimed at a
time), ``bell``, ``caller``, ``call`` and ``spins``. The calling thread first rings the bell
(:func:`ring`: this is call number ``bell[0]``); every thread then claims jobs with
:func:`claim` (the caller from the front, helpers from the back) until none is left and
counts the ones it ran done with one :func:`done` (a phase before the jobs, such as the
convolution's padded copy, ends with :func:`wait`), and ends with :func:`finish`: the
caller waits for every job to be done, a helper busy-waits up to ``spins`` looks for the
next call's ring. So a helper that starts late finds less work or none, and no thread waits
for another in Python (:mod:`graphrt.kernels.cpu.crew` runs the calls). Every shared
counter is a cache line two cores pass back and forth: one atomic step a claim, one for
all of a thread's jobs done, and busy waits that pause between looks.

Imported only where numba is installed (through :mod:`graphrt.kernels.cpu.jit`'s modules).

Example:
    >>> import numpy as np
    >>> counters, bell = np.zeros(2, np.int64), np.zeros(1, np.int64)
    >>> claim(counters, 0, 4, 10, True), claim(counters, 0, 4, 10, False)  # front, back
    ((0, 4), (6, 10))
    >>> claim(counters, 0, 4, 10, True), claim(counters, 0, 4, 10, True)
    ((4, 6), (10, 10))
    >>> done(counters, 0, 10)
    >>> finish(counters, 10, bell, True, 0, 0)
    True
"""

from __future__ import annotations

import platform
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["COUNTERS", "GUIDED", "JOBS", "claim", "done", "finish", "flat", "ring", "wait"]


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


_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def _pause(typingctx: Any) -> Any:
    """A spin-wait hint (x86 ``pause``; nothing elsewhere): a busy-waiting thread leaves the
    core's issue slots to the other hardware thread on it and draws less power."""
    sig = types.void()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        if _X86:
            builder.call(cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause"), [])
        return context.get_dummy_value()

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


@intrinsic
def _swap(typingctx: Any, counters: Any, index: Any, expected: Any, new: Any) -> Any:
    """``counters[index] = new`` as one atomic step if it still holds ``expected``; returns
    whether it did."""
    sig = types.boolean(counters, index, expected, new)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        pair = builder.cmpxchg(builder.gep(data, [args[1]]), args[2], args[3], "seq_cst",
                               "seq_cst")
        return builder.extract_value(pair, 1)

    return sig, codegen


_HALF = 32  # claimed from the back: the high 32 bits of a phase's claim word
_LOW = (1 << _HALF) - 1
GUIDED = 1 << 30
"""A flag of a call's grain: where helpers join, each claim takes at least a share of the
jobs left, ``left // (2 * threads)`` (the threads of the call: the crew puts their count in
the grain's high 32 bits), so a call of many small jobs makes a few dozen claims, not one
per job, and still ends on small ones."""


@numba.njit(_PAIR(COUNTERS, types.int64, types.int64, types.int64, types.boolean), cache=True,
            nogil=True)
def claim(counters: np.ndarray, phase: int, grain: int, total: int, caller: bool
          ) -> tuple[int, int]:
    """The next ``grain`` (or fewer) of the ``total`` jobs of ``phase`` for this thread,
    ``(first, last)`` (``first >= last`` when none is left): the calling thread takes them
    from the front, helpers from the back, so each thread keeps to one end of the data from
    call to call (and reads back what it wrote, where the next call's jobs are numbered as
    this one's; on a virtual machine whose two cores were far apart, a line written by the
    other one took 500-800 ns to reach). One word holds both ends, 32 bits each (so fewer
    than 2**31 jobs a phase), claimed in one atomic step. Where ``grain`` has the
    :data:`GUIDED` flag and the call's threads, a claim takes at least its share of the jobs
    left: MobileNetV2's depthwise convolutions of 7x7 and 14x14 are 72-120 jobs of under a
    microsecond, and a claim per job, its line passing between the cores each time, cost
    them more than the second thread saved."""
    at = 2 * phase
    least, threads = grain & (GUIDED - 1), grain >> _HALF
    guided = grain & GUIDED and threads > 1
    while True:
        word: int = _read(counters, at)  # type: ignore[call-arg]  # (typingctx)
        front, back = word & _LOW, word >> _HALF
        left = total - front - back
        take = min(max(least, left // (2 * threads)) if guided else least, left)
        if take <= 0:
            return total, total
        if caller:
            if _swap(counters, at, word, word + take):
                return front, front + take
        elif _swap(counters, at, word, word + (take << _HALF)):
            return total - back - take, total - back


@numba.njit(types.void(COUNTERS, types.int64, types.int64), cache=True, nogil=True)
def done(counters: np.ndarray, phase: int, count: int) -> None:
    """Count ``count`` claimed jobs of ``phase`` as done (a thread's all at once, after its
    last: the caller's wait then sees the line change once per thread)."""
    fetch_add(counters, 2 * phase + 1, count)  # type: ignore[call-arg]  # (typingctx)


@numba.njit(types.void(COUNTERS, types.int64, types.int64), cache=True, nogil=True)
def wait(counters: np.ndarray, phase: int, total: int) -> None:
    """Busy-wait until all ``total`` jobs of ``phase`` are done, by any thread: the end of a
    phase every thread must see before the next one."""
    while _read(counters, 2 * phase + 1) < total:  # type: ignore[call-arg]  # (typingctx)
        _pause()


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
    for _ in range(spins):
        if _read(bell, 0) > call:  # type: ignore[call-arg]
            return True
        _pause()
    return False
