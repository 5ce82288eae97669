"""The standard op set: what each op means (attributes, arity, type inference, data
dependence, fusion patterns, the scalar expression of elementwise ops) and one reference
implementation written against the device's array namespace ``xp``.

How a device runs an op faster is :mod:`graphrt.kernels`' business; this package imports no
kernel code, no numba and no cupy. Importing it registers every op in :data:`OPS`.

Example:
    >>> from graphrt.ops import TensorType, get_op
    >>> relu = get_op("relu")
    >>> relu.infer([TensorType((2, 3), "float32")], relu.attrs(), [None])
    [TensorType(shape=(2, 3), dtype='float32')]
"""

from . import (  # noqa: F401  (registration)
    activations,
    attention,
    classical_ml,
    control_flow,
    convolution,
    data_shapes,
    elementwise,
    indexing,
    integer_linear,
    linear_attention,
    nn,
    normalization,
    pooling,
    quantize,
    random,
    recurrent,
    reductions,
    resize,
    shape_vars,
    signal,
    transform,
    vision,
)
from .base import (
    OPS,
    Attrs,
    Direct,
    OpDef,
    OpError,
    TensorType,
    broadcast,
    get_op,
    normalize_axis,
    register_op,
    result_dtype,
)
from .patterns import ElementwiseRun, EpilogueRun, elementwise_runs, epilogue_runs

__all__ = [
    "OPS",
    "Attrs",
    "Direct",
    "ElementwiseRun",
    "EpilogueRun",
    "OpDef",
    "OpError",
    "TensorType",
    "broadcast",
    "elementwise_runs",
    "epilogue_runs",
    "get_op",
    "normalize_axis",
    "register_op",
    "result_dtype",
]
