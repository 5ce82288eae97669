"""The helper threads that run the compiled host kernels over every core: one per other core,
joining the job functions (:mod:`graphrt.kernels.cpu.job_protocol`) of one calling thread at a
time.

:func:`run_jobs` runs a job function on the calling thread and on the helpers; the direct
convolution and the max pool use it. Safe to call from several threads at once: one caller
at a time has the helpers, the others run alone. :func:`quiet` stops the helpers'
busy wait before work that runs threads of its own (OpenBLAS). :func:`threads_held` caps,
for the calling thread, how many threads its kernels use, helpers and BLAS together (a
module's ``create(threads=N)``); :func:`default_threads` is the count without a cap.

Example:
    >>> import numpy as np
    >>> def jobs(seen, counters, grain, bell, caller, call, spins):  # all on its own
    ...     seen.append("caller" if caller else "helper")
    ...     return True
    >>> seen = []
    >>> run_jobs(jobs, False, (seen, np.zeros(2, np.int64), 1))  # not parallel: no helper
    >>> seen
    ['caller']
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from operator import is_
from typing import Any

import numpy as np

from .blas_threads import blas_held

__all__ = ["THREADS_VARIABLE", "JobCall", "Jobs", "LastArrays", "available_cores",
           "default_threads", "environment_threads", "quiet", "run_jobs", "threads_held",
           "threads_now"]

THREADS_VARIABLE = "GRAPHRT_THREADS"
"""The environment variable that sets the default of ``create(threads=...)``."""

Jobs = Callable[..., bool]
"""A job function (:mod:`graphrt.kernels.cpu.job_protocol`): its arguments, then counters,
grain, bell, caller, call, spins."""
Task = tuple[int, Jobs, tuple[Any, ...]]
"""What a helper is queued: the call number, the job function, its leading arguments."""

_SPIN_LOOKS = 32_000
"""How many times (about 1 ms: a look pauses 30 ns on this Zen 3, 10-140 cycles elsewhere) a
helper thread looks for the next call before it blocks: the ops between two convolutions of
a model take less, and a thread woken from a block (or a caller that waits for the GIL) can
start milliseconds late on a virtual machine, longer than a whole convolution of one
image."""


class _Crew:
    """Helper threads, one per other core, that join the job functions of one calling
    thread at a time.

    Neither side ever waits for the other in Python: the caller queues the call's arguments
    for each helper and rings a bell from compiled code (without the GIL); a helper that is
    busy-waiting there (after its last call) sees it, takes the queued arguments (the GIL is
    free: the caller is computing) and joins; one that started late finds no jobs left. A
    helper blocks on its queue only after :data:`_SPIN_LOOKS` looks without a call.
    """

    def __init__(self, ring: Callable[[np.ndarray[Any, Any]], int], helpers: int) -> None:
        self.ring = ring
        self.bell = np.zeros(1, np.int64)  # rings so far (calls, and quiet())
        self.lock = threading.Lock()  # one calling thread at a time
        self.tasks: list[queue.SimpleQueue[Task]] = []
        for k in range(helpers):
            tasks: queue.SimpleQueue[Task] = queue.SimpleQueue()
            self.tasks.append(tasks)
            threading.Thread(target=self._serve, args=(tasks,), name=f"graphrt-crew-{k}",
                             daemon=True).start()

    def run(self, jobs: Jobs, args: tuple[Any, ...], helpers: int) -> None:
        """``jobs(*args, ...)`` on the calling thread, with up to ``helpers`` helpers if they
        are free (another thread's call holds them: alone); the threads of the call go to
        the job function in the grain's high 32 bits (for :data:`~.job_protocol.GUIDED`
        claims)."""
        if not self.lock.acquire(blocking=False):
            jobs(*args, np.zeros(1, np.int64), True, 0, 0)
            return
        try:
            call = int(self.bell[0]) + 1  # the caller's ring makes it so (rings hold the lock)
            crew = self.tasks[:helpers]
            args = (*args[:-1], args[-1] | (len(crew) + 1) << 32)  # grain, and the threads
            for tasks in crew:  # the others see the ring, find none, block
                tasks.put((call, jobs, args))
            jobs(*args, self.bell, True, 0, 0)
        finally:
            self.lock.release()

    def quiet(self) -> None:
        """Stop the helpers' busy wait (they block until the next call)."""
        if self.lock.acquire(blocking=False):
            try:
                self.ring(self.bell)
            finally:
                self.lock.release()

    def _serve(self, tasks: queue.SimpleQueue[Task]) -> None:
        call, jobs, args = tasks.get()
        while True:
            if jobs(*args, self.bell, False, call, _SPIN_LOOKS):
                try:
                    call, jobs, args = tasks.get_nowait()  # queued before the ring
                    continue
                except queue.Empty:
                    pass
            call, jobs, args = tasks.get()


_crew_lock = threading.Lock()
_crew: _Crew | None = None


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def environment_threads() -> int | None:
    """The :data:`THREADS_VARIABLE` environment variable's thread count (at most the cores
    this process may run on), or None where it is not set.

    Raises:
        ValueError: it is set but not a whole number of 1 or more.
    """
    text = os.environ.get(THREADS_VARIABLE, "").strip()
    if not text:
        return None
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"{THREADS_VARIABLE}={text!r} is not a number of threads (a whole "
                         f"number of 1 or more)")
    return min(count, available_cores())


def default_threads() -> int:
    """The threads a module's run uses on the cpu when ``create()`` is not told: the
    :data:`THREADS_VARIABLE` environment variable where set (:func:`environment_threads`),
    else every core this process may run on.

    Example:
        >>> 1 <= default_threads() <= available_cores()
        True
    """
    return environment_threads() or available_cores()


def _helpers() -> _Crew:
    global _crew
    with _crew_lock:
        if _crew is None:
            from .job_protocol import ring  # numba: only once a job function exists

            _crew = _Crew(ring, available_cores() - 1)
        return _crew


_held = threading.local()  # .helpers: the calling thread's cap on helpers, while it holds one


def run_jobs(jobs: Jobs, parallel: bool, args: tuple[Any, ...]) -> None:
    """``jobs(*args, counters..., spins)``: on the calling thread and the helpers where
    ``parallel`` (with no helper on one core, and no more than :func:`threads_held` allows
    the calling thread), else on the calling thread alone. ``args`` end with the call's
    zeroed counters and its grain."""
    helpers = getattr(_held, "helpers", _ALL)
    if parallel and helpers:
        _helpers().run(jobs, args, helpers)
    else:
        jobs(*args, np.zeros(1, np.int64), True, 0, 0)


_ALL = 1 << 30


def threads_now() -> int:
    """The threads a job function called now from this thread may run on: this thread and
    the helpers its cap (:class:`threads_held`) allows, one per core.

    Example:
        >>> with threads_held(1):
        ...     threads_now()
        1
    """
    return 1 + min(getattr(_held, "helpers", _ALL), _cores() - 1)


@functools.cache
def _cores() -> int:
    """:func:`available_cores`, asked once (the helpers' count is fixed as the crew starts)."""
    return available_cores()


class threads_held:
    """``with threads_held(n):`` the calling thread's kernels use at most ``n`` threads: the
    caller and ``n - 1`` helpers, and BLAS held to ``n`` (see
    :func:`graphrt.kernels.cpu.blas_threads.blas_held`). Reusable, and nestable (the lower
    cap holds): a run context enters the same one on every run.

    Example:
        >>> with threads_held(1):  # the caller alone: no helper, one BLAS thread
        ...     pass
    """

    def __init__(self, count: int) -> None:
        self.count = max(1, count)

    def __enter__(self) -> None:
        before = getattr(_held, "helpers", _ALL)
        saved = getattr(_held, "saved", None)
        if saved is None:
            saved = _held.saved = []
        blas = blas_held(self.count)
        blas.__enter__()
        saved.append((before, blas))
        _held.helpers = min(before, self.count - 1)

    def __exit__(self, *exc: object) -> None:
        before, blas = _held.saved.pop()
        _held.helpers = before
        blas.__exit__(None, None, None)


@dataclass(frozen=True)
class JobCall:
    """A call of a job function prepared once, to be made many times: its leading arguments,
    then ``counters`` fresh zeroed counters and ``grain`` (a kernel whose arrays are the same
    on every run keeps one and skips rebuilding the arguments: about 10 us a call)."""

    jobs: Jobs
    parallel: bool
    args: tuple[Any, ...]
    counters: int
    grain: int

    def __call__(self) -> None:
        run_jobs(self.jobs, self.parallel,
                 (*self.args, np.zeros(self.counters, np.int64), self.grain))


class LastArrays:
    """The call a prepared kernel made for the arrays it was last handed, to make again: a
    graph hands a kernel the same arrays (its storage views, its frozen params) on every run,
    and rebuilding a call's arguments (views, packed weights, two dozen job arguments) took
    10 us of a 15 us convolution. Kept only where every array is C-contiguous (a call made
    on them reads and writes them in place, never a copy that would go stale). One tuple,
    replaced whole: threads may share it.

    Example:
        >>> last, x = LastArrays(), np.zeros(3)
        >>> last.keep((x,), "policy", print)
        >>> last.get((x,), "policy") is print, last.get((x.copy(),), "policy")
        (True, None)
    """

    def __init__(self) -> None:
        self._last: tuple[tuple[Any, ...], Hashable, Callable[[], None] | None] = ((), None,
                                                                                  None)

    def get(self, arrays: tuple[Any, ...], key: Hashable = None) -> Callable[[], None] | None:
        """The call kept for these very arrays (and ``key``), else None."""
        seen, seen_key, call = self._last
        if (call is None or seen_key != key or len(seen) != len(arrays)
                or not all(map(is_, seen, arrays))):
            return None
        return call

    def keep(self, arrays: tuple[Any, ...], key: Hashable, call: Callable[[], None]) -> None:
        """Keep ``call`` for ``arrays`` and ``key`` where the arrays allow it (see above)."""
        if all(a.flags.c_contiguous for a in arrays if isinstance(a, np.ndarray)):
            self._last = (arrays, key, call)


def quiet() -> None:
    """Stop the helper threads from busy-waiting, if there are any: a GEMM on OpenBLAS's
    threads is next."""
    if _crew is not None:
        _crew.quiet()


def _forget_crew() -> None:
    """In a forked child, whose helper threads did not survive the fork: start new ones."""
    global _crew, _crew_lock
    _crew, _crew_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_crew)
