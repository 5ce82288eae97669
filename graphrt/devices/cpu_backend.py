"""The cpu backend: numpy arrays in host memory."""

from __future__ import annotations

import numpy as np

from .base import Array, Backend, aligned_zeros

__all__ = ["CpuBackend"]


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
