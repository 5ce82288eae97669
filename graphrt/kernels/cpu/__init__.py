"""How the cpu runs ops: compiled numba kernels (the direct convolution, the max pool, row
kernels, fused elementwise loops), the helper threads they share and the BLAS thread policy,
behind :class:`CpuProvider`. numba is imported only when a kernel is first prepared."""

from .provider import CpuProvider

__all__ = ["CpuProvider"]
