"""The cpu backend: numpy arrays in host memory."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import ALIGNMENT, Array, Backend

__all__ = ["CpuBackend", "aligned_zeros"]


def aligned_zeros(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A zero-filled uint8 host buffer whose first byte is :data:`ALIGNMENT`-aligned."""
    raw = np.zeros(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    # Not a slice: numpy gives an empty slice its base's address, unaligned.
    aligned: np.ndarray[Any, np.dtype[np.uint8]] = np.ndarray(
        (nbytes,), dtype=np.uint8, buffer=raw, offset=offset)
    return aligned


class CpuBackend(Backend):
    """Host memory, numpy kernels. Copies are ``numpy.copyto``."""

    xp = np

    def allocate(self, nbytes: int) -> Array:
        return aligned_zeros(nbytes)

    def native(self, value: object) -> Array | None:
        return value if isinstance(value, np.ndarray) else None

    def copy(self, src: Array, dst: Array) -> None:
        np.copyto(dst, src, casting="no")

    upload = copy
    download = copy
