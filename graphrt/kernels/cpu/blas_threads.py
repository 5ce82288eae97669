"""How many threads numpy's BLAS runs, held down while something else needs the cores.

Two holders share one count, so that neither undoes the other: the executor's inter-op lanes
(while branches run at once, BLAS gets ``cores // lanes`` threads) and the small GEMMs of a
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

__all__ = ["blas_held", "blas_holders"]


class _Hold:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._libraries: list[Any] | None = None
        self._original: list[int] = []
        self._limit = 0

    @property
    def holders(self) -> int:
        return self._holders

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

    def enter(self, threads: int) -> None:
        with self._lock:
            libraries = self._blas()
            if self._holders == 0:
                self._original = [lib.get_num_threads() for lib in libraries]
                self._limit = threads + 1  # set below
            self._holders += 1
            if threads < self._limit:
                self._limit = threads
                for lib in libraries:
                    _set_threads(lib, threads)

    def exit(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                for lib, count in zip(self._blas(), self._original, strict=True):
                    _set_threads(lib, count)


def _set_threads(lib: Any, count: int) -> None:
    """Set a BLAS library's thread count from any thread (threadpoolctl's public setter obeys
    only the first thread that used it, where the pool is process-wide)."""
    setter = getattr(lib, "_real_set_num_threads", None) or lib.set_num_threads
    setter(count)


_HOLD = _Hold()


def blas_holders() -> int:
    """How many holders keep BLAS's threads down now (0: none): while the executor's lanes
    run branches at once, a kernel with helper threads of its own runs on its caller alone."""
    return _HOLD.holders


@contextmanager
def blas_held(threads: int) -> Iterator[None]:
    """``with blas_held(n):`` BLAS runs at most ``n`` threads inside (the lowest limit of
    every holder at the time; the original count is restored when the last one leaves)."""
    _HOLD.enter(threads)
    try:
        yield
    finally:
        _HOLD.exit()
