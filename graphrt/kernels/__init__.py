"""How each device runs the standard ops (:mod:`graphrt.ops` says what they mean).

One package per device kind behind one small interface (:mod:`graphrt.kernels.base`):
a :class:`Provider` prepares a kernel for an op at given types, once, at ``create()``; the
chain of providers of a device kind (:mod:`graphrt.kernels.registry`) ends with the reference
(:mod:`graphrt.kernels.reference`), and placement asks it which ops a kind runs.

Example:
    >>> import numpy as np
    >>> from graphrt.ops import TensorType, get_op
    >>> f32 = TensorType((2, 8), "float32")
    >>> op = get_op("softmax")
    >>> prepared = chain("cpu", np).prepare(op, op.attrs(), [f32], [f32])
    >>> prepared.provider in ("cpu", "reference")  # "reference" without numba
    True
"""

from .base import (
    NO_EPILOGUE,
    BindsArrays,
    ElementwiseStep,
    Epilogue,
    FusedRun,
    Prepared,
    Provider,
    bind_call,
)
from .reference import ReferenceProvider
from .registry import KernelChain, chain, supports

__all__ = [
    "NO_EPILOGUE",
    "BindsArrays",
    "ElementwiseStep",
    "Epilogue",
    "FusedRun",
    "KernelChain",
    "Prepared",
    "Provider",
    "ReferenceProvider",
    "bind_call",
    "chain",
    "supports",
]
