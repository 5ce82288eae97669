"""How many threads numpy's BLAS runs, held down while something else needs the cores.

Three holders share one count, so that none undoes another: the executor's inter-op lanes
(while branches run at once, BLAS gets ``cores // lanes`` threads; :func:`lanes_running`
tells the kernels with helpers of their own), a module's thread cap (``create(threads=N)``,
:func:`~graphrt.kernels.cpu.crew.threads_held`) and the small GEMMs of a
graph whose convolutions run on the helper threads (:mod:`graphrt.kernels.cpu.provider`):
OpenBLAS's workers spin for about 0.1 s after each threaded call (its thread timeout), and a
spinning worker takes the core a convolution's helper needs (docs/performance.md gives what
it costs ResNet-18).

The limit is set through threadpoolctl's controllers of the loaded BLAS libraries (two
ctypes calls, a few microseconds); while several holders overlap, the lowest limit holds, and
the original count comes back when the last one leaves. The count is the process's (OpenBLAS
built on pthreads has one pool), set from whichever thread holds: threadpoolctl 3.8 lets only
the first thread that ever set it change it and silently ignores the others, which left every
run on a worker thread (a server's, a ThreadPoolExecutor's) with BLAS at full width, 1.7x
slower on ResNet-18; the holders here are counted under one lock instead.

Example:
    >>> with blas_held(1):
    ...     pass
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["blas_held", "lanes_running"]


class _Hold:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._lanes = 0
        self._libraries: list[Any] | None = None
        self._original: list[int] = []
        self._current: list[int] = []

    @property
    def lanes(self) -> int:
        return self._lanes

    def _blas(self) -> list[Any]:
        if self._libraries is None:
            try:
                from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]
            except ImportError:  # a dependency, but the runtime works without it
                self._libraries = []
            else:
                self._libraries = list(
                    ThreadpoolController().select(user_api="blas").lib_controllers)
        return self._libraries

    def enter(self, threads: int, lanes: bool) -> None:
        with self._lock:
            self._lanes += lanes
            libraries = self._blas()
            if self._holders == 0:
                self._original = [lib.get_num_threads() for lib in libraries]
                self._current = list(self._original)
            self._holders += 1
            for i, lib in enumerate(libraries):  # only where it lowers a count: the setter's
                if threads < self._current[i]:   # two calls were 3.5 us of a hold's 15
                    _set_threads(lib, threads)
                    self._current[i] = threads

    def exit(self, lanes: bool) -> None:
        with self._lock:
            self._lanes -= lanes
            self._holders -= 1
            if self._holders == 0:
                for lib, count, now in zip(self._blas(), self._original, self._current,
                                           strict=True):
                    if now != count:
                        _set_threads(lib, count)


def _set_threads(lib: Any, count: int) -> None:
    """Set a BLAS library's thread count from any thread (threadpoolctl's public setter obeys
    only the first thread that used it, where the pool is process-wide)."""
    setter = getattr(lib, "_real_set_num_threads", None) or lib.set_num_threads
    setter(count)


_HOLD = _Hold()


def lanes_running() -> int:
    """How many holds of the executor's inter-op lanes are in force now (0: none): while
    lanes run branches at once, a kernel with helper threads of its own runs on its caller
    alone. A thread cap (``create(threads=N)``, :func:`~graphrt.kernels.cpu.crew.threads_held`)
    holds BLAS down as well but is no lane: under it those kernels keep as many helpers as
    the cap allows (they ran on the caller alone before, a product of two 512 x 512
    matrices at half the speed under ``threads=2`` on a larger machine).

    Example:
        >>> with blas_held(1, lanes=True):
        ...     lanes_running()
        1
        >>> with blas_held(1):
        ...     lanes_running()
        0
    """
    return _HOLD.lanes


@contextmanager
def blas_held(threads: int, *, lanes: bool = False) -> Iterator[None]:
    """``with blas_held(n):`` BLAS runs at most ``n`` threads inside (the lowest limit of
    every holder at the time; the original count is restored when the last one leaves).
    ``lanes``: the hold is the executor's lanes' (:func:`lanes_running`)."""
    _HOLD.enter(threads, lanes)
    try:
        yield
    finally:
        _HOLD.exit(lanes)
