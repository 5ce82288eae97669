"""Timing whole runs: repeats of ``number`` calls, with the devices synchronized."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import fmean, median, pstdev

from ..errors import InputError, argument_error, describe

__all__ = ["BenchmarkResult", "check_count", "time_calls"]


def check_count(name: str, value: object, minimum: int) -> int:
    """``value`` as a count: an int (a bool is not one) of at least ``minimum``.

    Raises:
        ArgumentError: not an int.
        InputError: below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        argument_error(name, f"an int >= {minimum}", value)
    if value < minimum:
        raise InputError(f"{name} must be an int >= {minimum}, given {describe(value)}")
    return value


def _check_milliseconds(value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        argument_error("min_repeat_ms", "None or a number of milliseconds >= 0", value)
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"min_repeat_ms must be a finite number >= 0, given {value!r}")


@dataclass(frozen=True)
class BenchmarkResult:
    """Seconds per call, one sample per repeat (each the mean of ``number`` calls).

    Example:
        >>> result = mod.benchmark(repeat=10, number=20)  # doctest: +SKIP
        >>> print(result)  # doctest: +SKIP
    """

    results: tuple[float, ...]
    number: int

    @property
    def mean(self) -> float:
        return fmean(self.results)

    @property
    def median(self) -> float:
        return median(self.results)

    @property
    def std(self) -> float:
        return pstdev(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    def __str__(self) -> str:
        ms = {name: getattr(self, name) * 1e3 for name in ("mean", "median", "max", "min", "std")}
        return ("Execution time summary (ms):\n"
                + " ".join(f"{name:>10}" for name in ms) + "\n"
                + " ".join(f"{value:>10.4f}" for value in ms.values())
                + f"\n({len(self.results)} repeats of {self.number} calls)")


def time_calls(call: Callable[[], None], synchronize: Callable[[], None], *, repeat: int,
               number: int, min_repeat_ms: float | None) -> BenchmarkResult:
    """Time ``repeat`` batches of ``number`` calls, synchronizing before and after each batch.

    With ``min_repeat_ms``, ``number`` is first doubled until one batch takes at least that long
    (TVM's rule), so very fast graphs are timed over enough calls.

    Raises:
        ArgumentError: a count that is not an int, ``min_repeat_ms`` that is not a number.
        InputError: a count below 1, ``min_repeat_ms`` below 0 or not finite.
    """
    for name, value in (("repeat", repeat), ("number", number)):
        if isinstance(value, bool) or not isinstance(value, int):
            argument_error(name, "an int >= 1", value)
    if repeat < 1 or number < 1:
        raise InputError(f"repeat and number must be >= 1, given {repeat} and {number}")
    _check_milliseconds(min_repeat_ms)

    def batch(count: int) -> float:
        synchronize()
        start = time.perf_counter()
        for _ in range(count):
            call()
        synchronize()
        return time.perf_counter() - start

    if min_repeat_ms is not None:
        while batch(number) * 1e3 < min_repeat_ms and number < 1 << 30:
            number *= 2
    return BenchmarkResult(tuple(batch(number) / number for _ in range(repeat)), number)
