"""How cuda runs ops: fused CuPy elementwise kernels, behind :class:`CudaProvider` (cupy is
imported by the cuda device backend, lazily). The vendor libraries (cuDNN's frontend for
convolutions, nvmath-python's cuBLASLt GEMMs) come here, each in its own file."""

from .provider import CudaProvider

__all__ = ["CudaProvider"]
